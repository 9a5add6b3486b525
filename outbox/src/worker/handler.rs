//! What handlers receive (`JobContext`) and what they say about a job (`JobError`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{Result, join_violations};
use crate::job::Job;
use crate::kind::Kind;
use crate::storage::Store;
use crate::storage::now_ms;

/// What a handler says about a job that did not succeed. Distinct from the framework's [`crate::Error`].
///
/// `?` on any `std::error::Error` gives a retryable error.
#[derive(Debug)]
pub enum JobError {
    /// A transient failure: retry with backoff, until `max_attempts` is used up.
    Retry(String),
    /// Retrying cannot help: fail the job now.
    Permanent(String),
    /// Not now: run again after this long, without using an attempt.
    Snooze(Duration),
    /// The service the job calls said to wait this long (an HTTP 429 or 529 with `retry-after`, a throttling
    /// error): the attempt is given back and the job's kind (or its key, for a rate per key) is held for every
    /// worker in the fleet until then.
    RateLimited(Duration),
}

impl JobError {
    /// A transient failure.
    pub fn retry(err: impl fmt::Display) -> Self {
        JobError::Retry(err.to_string())
    }
    /// A failure retrying cannot fix.
    pub fn permanent(err: impl fmt::Display) -> Self {
        JobError::Permanent(err.to_string())
    }
    /// Run again later without using an attempt.
    pub fn snooze(after: Duration) -> Self {
        JobError::Snooze(after)
    }
    /// Rate limited upstream for `retry_after`: the attempt is given back, and no worker in the fleet claims
    /// another job of the kind (or of its key, when its rate is per key) until then. See [`crate::flow`].
    pub fn rate_limited(retry_after: Duration) -> Self {
        JobError::RateLimited(retry_after)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Retry(e) => write!(f, "{e}"),
            JobError::Permanent(e) => write!(f, "permanent: {e}"),
            JobError::Snooze(d) => write!(f, "snoozed for {d:?}"),
            JobError::RateLimited(d) => write!(f, "rate limited for {d:?}"),
        }
    }
}

impl<E: std::error::Error> From<E> for JobError {
    fn from(err: E) -> Self {
        JobError::Retry(err.to_string())
    }
}

/// What a successful handler may record on the job (`output` column).
pub trait IntoOutput {
    /// The JSON to store, if any.
    fn into_output(self) -> Option<Value>;
}

impl IntoOutput for () {
    fn into_output(self) -> Option<Value> {
        None
    }
}

impl IntoOutput for Value {
    fn into_output(self) -> Option<Value> {
        Some(self)
    }
}

impl IntoOutput for Option<Value> {
    fn into_output(self) -> Option<Value> {
        self
    }
}

/// The running job as its handler sees it.
#[derive(Clone)]
pub struct JobContext {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) run: i32,
    pub(crate) cancel: CancellationToken,
    pub(crate) store: Store,
    pub(crate) db: sea_orm::DatabaseConnection,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    /// The job's id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The job's kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }
    /// The job's queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }
    /// This attempt's number, from 1.
    pub fn attempt(&self) -> i32 {
        self.attempt
    }
    /// Attempts allowed.
    pub fn max_attempts(&self) -> i32 {
        self.max_attempts
    }
    /// How many times this job has been started, this run included (from 1). Unlike [`JobContext::attempt`]
    /// it is never given back (snooze, shutdown) nor reset (operator retry): `run() > 1` means an earlier run
    /// may already have had side effects.
    pub fn run(&self) -> i32 {
        self.run
    }
    /// Whether the worker asked this job to stop; see [`JobContext::cancelled`].
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    /// Resolves when the worker asks this job to stop (shutdown past its grace period). Whatever the handler
    /// returns after that decides the job: `Ok` completes it, [`JobError::snooze`] snoozes it, and any error
    /// ([`JobError::retry`], [`JobError::permanent`]) or a panic gives the job back without using its attempt,
    /// since the failure may be the interruption itself. A handler that ignores the request is dropped after
    /// the cancel grace, with the same result.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }
    /// Keeps the claim for at least `by` from now. Leases are also renewed automatically while the handler
    /// runs (until its timeout and cancel grace are spent); this is for handlers that know they will take longer
    /// than one lease.
    pub async fn extend_lease(&self, by: Duration) -> Result<()> {
        let until = crate::time::ms_after(now_ms(), by);
        self.store.extend(vec![self.id.clone()], until).await.map(|_| ())
    }
    /// The job's parents, when it is a step of a workflow that waits for others (none otherwise): each one's step
    /// name, status and output. Read [`Parents::output`](crate::Parents::output) for a parent's output as its type,
    /// and [`Parents::summary`](crate::Parents::summary) for how a batch ended.
    pub async fn parents(&self) -> Result<crate::Parents> {
        crate::workflow::parents_of(&self.db, &self.id).await
    }
}

pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = std::result::Result<Option<Value>, JobError>> + Send>>;

/// A handler with its payload type erased: decodes, validates and deserializes the stored payload.
pub(crate) type ErasedHandler = Arc<dyn Fn(String, String, JobContext) -> HandlerFuture + Send + Sync>;

pub(crate) fn erase<J, F, Fut, O>(kind: Arc<Kind>, handler: F) -> ErasedHandler
where
    J: Job,
    F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<O, JobError>> + Send + 'static,
    O: IntoOutput,
{
    let handler = Arc::new(handler);
    Arc::new(move |payload: String, schema_hash: String, ctx: JobContext| {
        let decoded = decode::<J>(&kind, &payload, &schema_hash);
        let handler = Arc::clone(&handler);
        let kind = Arc::clone(&kind);
        Box::pin(async move {
            let job = decoded.map_err(JobError::Permanent)?;
            let output = handler(job, ctx).await.map(IntoOutput::into_output)?;
            checked_output(&kind, output)
        })
    })
}

/// The handler's output when it fits the kind's output schema; otherwise a permanent failure naming each JSON path.
/// No output is checked as `null`.
fn checked_output(kind: &Kind, output: Option<Value>) -> std::result::Result<Option<Value>, JobError> {
    if kind.output_schema().is_none() {
        return Ok(output);
    }
    let violations = kind.output_violations(output.as_ref().unwrap_or(&Value::Null));
    if violations.is_empty() {
        return Ok(output);
    }
    Err(JobError::Permanent(format!("invalid output for kind `{}`: {}", kind.name(), join_violations(&violations))))
}

/// The payload as `J`, or why it can never be: a payload that fails here fails permanently.
fn decode<J: Job>(kind: &Kind, payload: &str, schema_hash: &str) -> std::result::Result<J, String> {
    let changed = if kind.matches_schema_hash(schema_hash) {
        String::new()
    } else {
        format!(
            " (the kind's schema changed since enqueue: {} then, {} now)",
            short(schema_hash),
            short(kind.schema_hash())
        )
    };
    let value: Value = serde_json::from_str(payload).map_err(|e| format!("invalid payload: not json: {e}{changed}"))?;
    let violations = kind.violations(&value);
    if !violations.is_empty() {
        return Err(format!("invalid payload: {}{changed}", join_violations(&violations)));
    }
    serde_json::from_value(value).map_err(|e| format!("invalid payload: {e}{changed}"))
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}
