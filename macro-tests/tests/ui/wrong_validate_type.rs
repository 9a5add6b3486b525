use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "checked", validate = 5)]
struct Checked {
    n: i64,
}

fn main() {}
