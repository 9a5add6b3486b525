use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "envelope")]
struct Envelope<T> {
    body: T,
}

fn main() {}
