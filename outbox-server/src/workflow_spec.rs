//! Workflows as JSON, for producers without the Rust types: the body of `POST /api/workflows` and the file of
//! `outbox workflow create`, resolved against the known kinds into a [`Workflow`].

use outbox::{EnqueueOpts, ParentFailure, Workflow};
use sea_orm::ConnectionTrait;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::duration;
use crate::error::{Error, Result};
use crate::kinds::KnownKinds;

/// One step of a [`WorkflowSpec`].
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// The step's name, unique in the workflow; its children name it in `after`.
    pub name: String,
    /// A kind built into the server or recorded by a worker.
    pub kind: String,
    /// Validated against the kind's JSON Schema.
    pub payload: Value,
    /// The steps of this workflow it waits for.
    #[serde(default)]
    pub after: Vec<String>,
    /// Jobs already enqueued it waits for (steps of other workflows): each must exist and not have finished.
    #[serde(default)]
    pub after_jobs: Vec<String>,
    /// What it does when a parent fails for good or is cancelled: `cancel` (the default), `run`, or
    /// `run_on_first_failure`.
    pub on_parent_failure: Option<String>,
    /// The kind's queue unless given.
    pub queue: Option<String>,
    /// Higher runs first; the kind's unless given.
    pub priority: Option<i32>,
    /// Attempts before the step fails for good; the kind's unless given.
    pub max_attempts: Option<i32>,
    /// Run no earlier than this long after it may (`30s`).
    pub delay: Option<String>,
    /// The domain row the step is about (`order:42`).
    pub subject: Option<String>,
}

/// A workflow as JSON, as `POST /api/workflows` and `outbox workflow create` take it: steps of known kinds (built
/// in or recorded by a worker) and what each waits for.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowSpec {
    /// For people; need not be unique.
    pub name: String,
    /// At least one.
    pub steps: Vec<StepSpec>,
}

impl WorkflowSpec {
    /// The workflow, its kinds resolved through `kinds` and each step's payload limited to `max_payload_bytes`. A
    /// field that cannot be read is named (`steps[2].delay`); what the workflow itself breaks (names, edges, cycles,
    /// payloads) is reported by [`outbox::enqueue_workflow`], all at once.
    pub async fn build<C: ConnectionTrait>(
        self,
        conn: &C,
        kinds: &KnownKinds,
        max_payload_bytes: usize,
    ) -> Result<Workflow> {
        let mut wf = Workflow::new(self.name);
        for (i, s) in self.steps.into_iter().enumerate() {
            let field =
                |name: &str, reason: String| Error::InvalidField { field: format!("steps[{i}].{name}"), reason };
            let known = kinds.resolve(conn, &s.kind).await?;
            let mut opts = EnqueueOpts::new().max_payload_bytes(max_payload_bytes);
            opts.queue = s.queue;
            opts.priority = s.priority;
            opts.max_attempts = s.max_attempts;
            opts.subject = s.subject;
            if let Some(delay) = s.delay {
                opts.delay = Some(duration::forward(&delay).map_err(|e| field("delay", e))?);
            }
            let policy = match s.on_parent_failure {
                Some(text) => text.parse::<ParentFailure>().map_err(|e| field("on_parent_failure", e))?,
                None => ParentFailure::default(),
            };
            let step = wf.step_raw(s.name, &known.kind, s.payload);
            step.after(s.after).on_parent_failure(policy).opts(opts);
            for id in s.after_jobs {
                step.after_job(id);
            }
        }
        Ok(wf)
    }
}
