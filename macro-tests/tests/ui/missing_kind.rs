use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(queue = "mail")]
struct SendWelcome {
    user_id: i64,
}

fn assert_job<J: Job>() {}

fn main() {
    assert_job::<SendWelcome>();
}
