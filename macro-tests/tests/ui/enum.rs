use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "notify")]
enum Notify {
    Email { address: String },
    Sms { number: String },
}

fn main() {}
