use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "touch_user")]
struct TouchUser(#[job(key)] i64, String);

fn assert_job<J: Job>() {}

fn main() {
    assert_job::<TouchUser>();
}
