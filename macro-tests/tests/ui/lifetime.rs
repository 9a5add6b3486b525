use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "greet")]
struct Greet<'a> {
    name: &'a str,
}

fn main() {}
