use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[job(kind = "agent_message", sequence = "agent:{agent_id}", on_sequence_failure = "skip", concurrency = 0)]
struct AgentMessage {
    agent_id: u64,
    text: String,
}

fn main() {}
