use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[job(kind = "llm_call", rate = "0/1m", rate_key = "{tenant}", fair = "{tenantId}", cost = "{tokens}")]
struct LlmCall {
    tenant_id: String,
    estimated_tokens: u32,
}

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "mail", rate = "50/0s", cost = -1)]
struct Mail {
    to: String,
}

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "hook", rate_key = "{to}")]
struct Hook {
    to: String,
}

fn main() {}
