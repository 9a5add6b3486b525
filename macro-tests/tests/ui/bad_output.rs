use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

struct NotASchema;

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "extract", output = 42)]
struct Extract {
    path: String,
}

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "summarize", output = NotASchema)]
struct Summarize {
    path: String,
}

fn main() {}
