//! Job kinds: the `Job` trait implemented by `#[derive(Job)]`, the per-kind options, and what a payload that
//! breaks its kind's schema is told (`Violation`).

use schemars::JsonSchema;
use std::fmt;

use serde::{Serialize, de::DeserializeOwned};

/// A typed job kind: the payload struct of one kind of side effect.
///
/// Implement it with `#[derive(Job)]`:
///
/// ```
/// use outbox::Job;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Job, Serialize, Deserialize, JsonSchema)]
/// #[job(kind = "send_welcome", queue = "mail", priority = 5, max_attempts = 10)]
/// struct SendWelcome {
///     #[job(key)]
///     user_id: i64,
///     template: String,
/// }
/// # assert_eq!(<SendWelcome as outbox::Job>::KIND, "send_welcome");
/// ```
///
/// The `kind` string is stored with every job and used to dispatch it to a handler, so it must stay the same
/// when the Rust type is renamed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an outbox job kind",
    label = "not a job kind",
    note = "add `#[derive(outbox::Job)]` and `#[job(kind = \"...\")]` to `{Self}`"
)]
pub trait Job: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static {
    /// The stable name of this kind, stored in each job row.
    const KIND: &'static str;
    /// Defaults for jobs of this kind; each can be overridden per enqueue through `EnqueueOpts`.
    const OPTS: KindOpts = KindOpts::DEFAULT;

    /// Rules the JSON Schema cannot express (a field that must be the hash of another, say), checked after
    /// the schema at enqueue and again before the handler runs. Each problem names its JSON path.
    fn validate(&self) -> Result<(), Vec<Violation>> {
        Ok(())
    }

    /// The JSON Schema of what the kind's handler completes with, set by `#[job(output = T)]`: an output that breaks
    /// it fails the job for good, naming each JSON path, before it is written (a workflow's children never read
    /// it). `None` (the default) checks nothing.
    fn output_schema() -> Option<serde_json::Value> {
        None
    }
}

/// Per-kind defaults, set with `#[job(...)]` on the payload type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindOpts {
    /// Queue the kind's jobs go to (`default` unless set).
    pub queue: &'static str,
    /// Higher runs first; 0 unless set.
    pub priority: i32,
    /// Attempts before a job fails for good (3 unless set).
    pub max_attempts: i32,
    /// Whether enqueues collapse onto an active job with the same idempotency key (true unless set).
    pub unique: bool,
    /// Serialized names of the payload fields that form the idempotency key. Empty: the key is the sha256
    /// of the kind and the canonical payload.
    pub key_fields: &'static [&'static str],
    /// How a job's sequence key is built from its payload, e.g. `"fs:{path:path}"`: text with `{field}`
    /// placeholders naming top-level payload fields (`{field:path}` normalizes a relative path first). Jobs
    /// sharing a sequence key, of any kind, run one at a time in the order they were enqueued. `None`: jobs
    /// of this kind are not sequenced unless an enqueue names a key.
    pub sequence: Option<&'static str>,
    /// What a job of this kind that fails for good or is cancelled does to the jobs behind it in its sequence.
    pub on_sequence_failure: SequenceFailure,
    /// At most this many jobs of the kind run at once across every worker and process sharing the database
    /// (the database enforces it at claim time). `None`: no limit beyond the workers' own concurrency.
    pub concurrency: Option<u32>,
    /// How long a handler of the kind may run (`#[job(timeout = "30s")]`): past it the handler is cancelled
    /// through its context, dropped after the worker's cancel grace, and the attempt counts as a retryable
    /// failure. `None`: the worker's own timeout, if it has one.
    pub timeout: Option<std::time::Duration>,
    /// A fleet-wide rate limit on the kind's claims (`#[job(rate = "50/1m")]`), counted in cost units: the kind's
    /// as a whole, or each key's apart when [`KindOpts::rate_key`] is set. `None`: no rate limit.
    pub rate: Option<crate::flow::Rate>,
    /// The template of the key each job is rate limited under (`"{tenant}"`), like a sequence template: each key
    /// gets the whole [`KindOpts::rate`]. Keys can also be paused and held one by one.
    pub rate_key: Option<&'static str>,
    /// The template of the key claims share out by (`"{tenant}"`): while several keys have jobs ready, claims
    /// alternate between them in proportion to their weights ([`crate::flow::set_weight`]). When both this and
    /// [`KindOpts::rate_key`] are set they must be the same template: a job has one flow key.
    pub fair: Option<&'static str>,
    /// What one job counts against the kind's rate: a whole number (`"10"`) or a payload field holding one
    /// (`"{estimatedTokens}"`). `None`: 1. An enqueue can set its own ([`crate::EnqueueOpts::cost`]).
    pub cost: Option<&'static str>,
    /// The template of the domain row each job is about (`"order:{orderId}"`), like a sequence template: stored
    /// with the job and indexed, so the jobs of one order can be listed, cancelled and retried together
    /// ([`crate::JobFilter::subject`]). An enqueue can name its own ([`crate::EnqueueOpts::subject`]).
    pub subject: Option<&'static str>,
}

/// What the jobs behind a job that failed for good (or was cancelled) in its sequence do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SequenceFailure {
    /// They wait until an operator retries the failed job (and it completes) or cancels it; the safe default
    /// when later jobs build on earlier ones (a delete after a create of the same file).
    #[default]
    Hold,
    /// They run as if the failed job had completed.
    Continue,
}

impl SequenceFailure {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            SequenceFailure::Hold => "hold",
            SequenceFailure::Continue => "continue",
        }
    }
}

impl KindOpts {
    /// The options of a kind that sets none.
    pub const DEFAULT: KindOpts = KindOpts {
        queue: "default",
        priority: 0,
        max_attempts: 3,
        unique: true,
        key_fields: &[],
        sequence: None,
        on_sequence_failure: SequenceFailure::Hold,
        concurrency: None,
        timeout: None,
        rate: None,
        rate_key: None,
        fair: None,
        cost: None,
        subject: None,
    };
}

impl Default for KindOpts {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One violation of a kind's JSON Schema: where in the payload, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON pointer into the payload (`/items/0/name`); empty for the payload as a whole.
    pub path: String,
    /// What the schema requires there.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() { "/" } else { &self.path };
        write!(f, "at {path}: {}", self.message)
    }
}
