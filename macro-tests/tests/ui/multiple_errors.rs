use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "send welcome", queue = 1, max_attempts = 0)]
#[job(priority = "high", retries = 3)]
struct SendWelcome {
    #[job(key, foo)]
    user_id: i64,
}

fn assert_job<J: Job>() {}

fn main() {
    assert_job::<SendWelcome>();
}
