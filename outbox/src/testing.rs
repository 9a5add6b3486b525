//! Helpers for testing an application's jobs and handlers (feature `testing`).
//!
//! - [`enqueued`], [`assert_enqueued`] and [`refute_enqueued`] look at what a connection or a transaction
//!   enqueued: inside a transaction they see its own uncommitted jobs, so a test can assert before it
//!   commits or rolls back, and again after on the pool.
//! - [`run_job`] runs one enqueued job through the handler a [`Worker`] registered for its kind, on the test's
//!   runtime, and returns what the worker would have recorded ([`Ran`]), without changing the job's row.
//!   [`perform`] and [`perform_attempt`] do the same for a payload that was never enqueued.
//! - [`drain`] runs a worker until nothing it can claim is due and returns each job it claimed, as it ended.
//! - [`TempSqlite`] is a migrated SQLite database in a file of its own, removed when dropped (it needs the
//!   `sqlite` feature, on by default).
//!
//! ```
//! use outbox::prelude::*;
//! use outbox::testing::{self, Ran};
//!
//! #[derive(Job, serde::Serialize, serde::Deserialize, JsonSchema)]
//! #[job(kind = "welcome")]
//! struct Welcome { user_id: i64 }
//!
//! async fn welcome(job: Welcome, _ctx: JobContext) -> Result<serde_json::Value, JobError> {
//!     Ok(serde_json::json!({ "sent_to": job.user_id }))
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), outbox::Error> {
//! let temp = testing::TempSqlite::new().await?;
//! let db = &temp.db;
//! let worker = Worker::builder(db).register(welcome).build().await?;
//!
//! let txn = outbox::begin(db).await?;
//! outbox::enqueue(&txn, &Welcome { user_id: 7 }, EnqueueOpts::new()).await?;
//! let job = testing::assert_enqueued::<Welcome, _>(&txn, |w| w.user_id == 7).await;
//! let ran = testing::run_job(&worker, &txn, job.id()).await?;
//! assert_eq!(ran, Ran::Completed { output: Some(serde_json::json!({ "sent_to": 7 })) });
//! txn.rollback().await?;
//! testing::refute_enqueued::<Welcome, _>(db, |_| true).await;
//! # Ok(()) }
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::job::Job;
use crate::ops;
use crate::record::{JobFilter, JobRecord, JobStatus};
use crate::storage::Outcome;
use crate::worker::{JobContext, JobError, Worker};

/// A pending job of kind `J` and its payload, decoded.
#[derive(Debug, Clone)]
pub struct EnqueuedJob<J> {
    /// The job's row as stored.
    pub record: JobRecord,
    /// Its payload as the kind's type.
    pub payload: J,
}

impl<J> EnqueuedJob<J> {
    /// The job's id.
    pub fn id(&self) -> &str {
        &self.record.id
    }
}

/// Every pending job of any kind that `conn` sees, oldest first. On a transaction this includes the jobs it
/// enqueued and has not committed.
pub async fn all_enqueued<C: ConnectionTrait>(conn: &C) -> Result<Vec<JobRecord>> {
    pending(conn, None).await
}

/// The pending jobs of kind `J` that `conn` sees, oldest first, their payloads decoded as `J`.
pub async fn enqueued<J: Job, C: ConnectionTrait>(conn: &C) -> Result<Vec<EnqueuedJob<J>>> {
    pending(conn, Some(J::KIND))
        .await?
        .into_iter()
        .map(|record| {
            let payload = serde_json::from_value(record.payload.clone())
                .map_err(|source| Error::Serde { kind: record.kind.clone(), source })?;
            Ok(EnqueuedJob { record, payload })
        })
        .collect()
}

/// The oldest pending job of kind `J` whose payload `matches`, as `conn` sees it. Jobs whose payload does not
/// decode as `J` (enqueued under an older schema, say) match nothing; the panic message lists them apart.
///
/// # Panics
/// When no pending job of the kind matches (the message lists the payloads there are), or when the jobs
/// cannot be read.
pub async fn assert_enqueued<J: Job, C: ConnectionTrait>(conn: &C, matches: impl Fn(&J) -> bool) -> EnqueuedJob<J> {
    let (jobs, undecodable) = read_or_panic::<J, C>(conn).await;
    let shown = payloads(&jobs, &undecodable);
    match jobs.into_iter().find(|job| matches(&job.payload)) {
        Some(job) => job,
        None => panic!("expected a pending job of kind `{}` matching the predicate; pending: {shown}", J::KIND),
    }
}

/// Asserts that no pending job of kind `J` whose payload `matches` is seen by `conn`.
///
/// # Panics
/// When one is (the message names it), or when the jobs cannot be read.
pub async fn refute_enqueued<J: Job, C: ConnectionTrait>(conn: &C, matches: impl Fn(&J) -> bool) {
    let (jobs, _) = read_or_panic::<J, C>(conn).await;
    if let Some(job) = jobs.iter().find(|job| matches(&job.payload)) {
        panic!(
            "expected no pending job of kind `{}` matching the predicate; found job {} with payload {}",
            J::KIND,
            job.record.id,
            job.record.payload
        );
    }
}

/// The oldest pending job of kind `kind` whose payload contains `subset` (every field of `subset` present with
/// an equal value, recursively into objects), for kinds whose Rust type is not at hand (`create_file`).
///
/// # Panics
/// When there is none (the message lists the payloads there are), or when the jobs cannot be read.
pub async fn assert_enqueued_json<C: ConnectionTrait>(conn: &C, kind: &str, subset: &Value) -> JobRecord {
    let jobs = match pending(conn, Some(kind)).await {
        Ok(jobs) => jobs,
        Err(e) => panic!("reading the pending jobs of kind `{kind}`: {e}"),
    };
    let shown = jobs.iter().map(|j| j.payload.to_string()).collect::<Vec<_>>().join(", ");
    match jobs.into_iter().find(|job| contains(&job.payload, subset)) {
        Some(job) => job,
        None => panic!("expected a pending job of kind `{kind}` with payload containing {subset}; pending: [{shown}]"),
    }
}

/// What running a job would record: the outcome a worker writes for the same handler result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Ran {
    /// The handler succeeded; `output` is what it recorded on the job.
    Completed {
        /// The job's output.
        output: Option<Value>,
    },
    /// The attempt failed with attempts left: the job would run again after about `after`.
    Retried {
        /// The attempt's error.
        error: String,
        /// The kind's retry policy's backoff for this attempt before its jitter, so that a test can compare it:
        /// a worker waits this long give or take the policy's jitter.
        after: Duration,
    },
    /// The job would fail for good: a permanent error, its last attempt failed, or its payload is invalid.
    Failed {
        /// The error.
        error: String,
    },
    /// The handler asked to run again after `after`, giving the attempt back.
    Snoozed {
        /// How long from now.
        after: Duration,
    },
    /// The handler said it was rate limited upstream for `after`: the attempt is given back and a worker would
    /// hold the kind (or its key) fleet-wide until then.
    RateLimited {
        /// How long from now.
        after: Duration,
    },
}

impl Ran {
    /// The output of a completed run.
    pub fn output(&self) -> Option<&Value> {
        match self {
            Ran::Completed { output } => output.as_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for Ran {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ran::Completed { output: Some(v) } => write!(f, "completed with output {v}"),
            Ran::Completed { output: None } => f.write_str("completed"),
            Ran::Retried { error, after } => write!(f, "retried in {after:?}: {error}"),
            Ran::Failed { error } => write!(f, "failed: {error}"),
            Ran::Snoozed { after } => write!(f, "snoozed for {after:?}"),
            Ran::RateLimited { after } => write!(f, "rate limited for {after:?}"),
        }
    }
}

/// Runs the pending job `id`, as `conn` sees it (a transaction's own uncommitted job included), through the
/// handler `worker` registered for its kind, on this runtime: its payload decoded and validated against the
/// kind's schema as a worker does, its handler given a [`JobContext`] for the next attempt, its timeout (with
/// the worker's cancel grace) and a panic answered as a worker answers them. Returns what the worker would
/// record; the job's row is left as it was (run [`drain`] to execute jobs for real).
///
/// It runs the job whatever its `run_at`, its queue or its sequence say. The handler works on the worker's own
/// connections, not on `conn`: a handler that writes to the database while `conn` is an open SQLite
/// transaction waits for that transaction.
pub async fn run_job<C: ConnectionTrait>(worker: &Worker, conn: &C, id: &str) -> Result<Ran> {
    let job = ops::get(conn, id).await?;
    if job.status != JobStatus::Pending {
        return Err(Error::Invalid(format!(
            "job {id} of kind `{}` is {}: only a pending job runs inline",
            job.kind, job.status
        )));
    }
    let attempt = Attempt {
        id: job.id,
        kind: job.kind,
        queue: job.queue,
        attempt: job.attempts + 1,
        max_attempts: job.max_attempts,
        run: job.runs + 1,
        trace: job.trace,
    };
    run(worker, attempt, job.payload.to_string(), job.schema_hash).await
}

/// Runs `payload` through the handler `worker` registered for kind `J`, as [`run_job`] runs an enqueued job
/// on its first attempt, without enqueueing it. The job id its handler sees is a fresh one.
pub async fn perform<J: Job>(worker: &Worker, payload: &J) -> Result<Ran> {
    perform_attempt(worker, payload, 1, J::OPTS.max_attempts).await
}

/// [`perform`] as attempt `attempt` of `max_attempts`: what the handler does on a later attempt, and what a
/// failure on the last one records.
pub async fn perform_attempt<J: Job>(worker: &Worker, payload: &J, attempt: i32, max_attempts: i32) -> Result<Ran> {
    if attempt < 1 || max_attempts < attempt {
        return Err(Error::Invalid(format!(
            "attempt {attempt} of {max_attempts}: an attempt runs from 1 to max_attempts (kind `{}`)",
            J::KIND
        )));
    }
    let registered = registered(worker, J::KIND)?;
    let text = serde_json::to_string(payload).map_err(|source| Error::Serde { kind: J::KIND.into(), source })?;
    let attempt = Attempt {
        id: crate::new_job_id(),
        kind: J::KIND.into(),
        queue: J::OPTS.queue.into(),
        attempt,
        max_attempts,
        run: attempt,
        trace: None,
    };
    let hash = registered.kind.schema_hash().to_owned();
    run(worker, attempt, text, hash).await
}

/// The attempt a handler is given.
struct Attempt {
    id: String,
    kind: String,
    queue: String,
    attempt: i32,
    max_attempts: i32,
    run: i32,
    /// The trace context the job was enqueued in, which its span continues.
    trace: Option<String>,
}

fn registered<'w>(worker: &'w Worker, kind: &str) -> Result<&'w crate::worker::Registered> {
    worker.handlers.get(kind).ok_or_else(|| {
        let mut known: Vec<&str> = worker.handlers.keys().map(String::as_str).collect();
        known.sort_unstable();
        Error::Invalid(format!(
            "no handler for kind `{kind}` is registered on worker {} (registered: {})",
            worker.id(),
            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
        ))
    })
}

async fn run(worker: &Worker, attempt: Attempt, payload: String, schema_hash: String) -> Result<Ran> {
    let registered = registered(worker, &attempt.kind)?;
    let cancel = CancellationToken::new();
    let ctx = JobContext {
        id: attempt.id.clone(),
        kind: attempt.kind.clone(),
        queue: attempt.queue.clone(),
        attempt: attempt.attempt,
        max_attempts: attempt.max_attempts,
        run: attempt.run,
        cancel: cancel.clone(),
        store: worker.store.clone(),
        db: worker.db.clone(),
    };
    let trace = attempt.trace.as_deref();
    let span = crate::trace::job_span(&attempt.id, &attempt.kind, &attempt.queue, attempt.attempt, attempt.run, trace);
    let mut task = tokio::spawn(crate::worker::in_span((registered.handler)(payload, schema_hash, ctx), span));
    let mut timed_out = None;
    let result = match registered.timeout {
        None => task.await,
        Some(limit) => match tokio::time::timeout(limit, &mut task).await {
            Ok(joined) => joined,
            Err(_) => {
                // As a worker does: ask the handler to stop, and drop it after the cancel grace.
                cancel.cancel();
                let grace = worker.config.cancel_grace;
                match tokio::time::timeout(grace, &mut task).await {
                    Ok(joined) => {
                        timed_out = Some(format!("timed out after {}", crate::time::short_duration(limit)));
                        joined
                    }
                    Err(_) => {
                        task.abort();
                        let error = crate::worker::timeout_message(limit, grace);
                        return Ok(failure(registered, &attempt, error));
                    }
                }
            }
        },
    };
    Ok(match result {
        Ok(Ok(output)) => Ran::Completed { output },
        Ok(Err(JobError::Snooze(after))) => Ran::Snoozed { after },
        Ok(Err(JobError::RateLimited(after))) => Ran::RateLimited { after },
        Ok(Err(_)) if let Some(error) = timed_out => failure(registered, &attempt, error),
        Ok(Err(JobError::Permanent(error))) => Ran::Failed { error },
        Ok(Err(JobError::Retry(error))) => failure(registered, &attempt, error),
        Err(e) => failure(registered, &attempt, format!("handler panicked: {}", crate::worker::panic_message(e))),
    })
}

/// A failed attempt, worded as a worker records it: retried while attempts are left, failed for good on the last.
fn failure(registered: &crate::worker::Registered, attempt: &Attempt, error: String) -> Ran {
    let after = registered.retry.nominal(attempt.attempt);
    match crate::worker::failed_attempt(attempt.attempt, attempt.max_attempts, error, after) {
        Outcome::Failed { error } => Ran::Failed { error },
        Outcome::Retry { error, .. } => Ran::Retried { error, after },
        other => Ran::Failed { error: format!("unexpected outcome of a failed attempt: {other:?}") },
    }
}

/// The jobs a [`drain`] claimed, each as it was when the drain ended, oldest first.
#[derive(Debug, Clone)]
pub struct Drained {
    /// Every job the drain's worker claimed.
    pub jobs: Vec<JobRecord>,
}

impl Drained {
    /// The jobs that ended completed.
    pub fn completed(&self) -> Vec<&JobRecord> {
        self.with(JobStatus::Completed)
    }

    /// The jobs that ended failed.
    pub fn failed(&self) -> Vec<&JobRecord> {
        self.with(JobStatus::Failed)
    }

    /// The jobs it claimed that were left pending: retried or snoozed to a time not yet due.
    pub fn pending(&self) -> Vec<&JobRecord> {
        self.with(JobStatus::Pending)
    }

    fn with(&self, status: JobStatus) -> Vec<&JobRecord> {
        self.jobs.iter().filter(|j| j.status == status).collect()
    }
}

/// Runs `worker` on this runtime until no job it can claim is due and none is in flight ([`Worker::drain`]),
/// then reads every job it claimed: the jobs changed since it started whose last claim is its own (worker ids
/// are unique), so jobs of other workers sharing the database are not counted.
pub async fn drain(worker: Worker) -> Result<Drained> {
    let db = worker.db.clone();
    let id = worker.id().to_owned();
    // A second back, for a database clock a little behind this process's.
    let since = chrono::Utc::now() - chrono::Duration::seconds(1);
    worker.drain().await?;
    let changed = every_page(&db, JobFilter { since: Some(since), ..JobFilter::default() }).await?;
    let jobs = changed.into_iter().filter(|j| j.locked_by.as_deref() == Some(id.as_str())).collect();
    Ok(Drained { jobs })
}

/// A migrated SQLite database in a directory of its own under the system's temp directory, removed with the
/// directory when dropped. It needs the `sqlite` feature (on by default): without it, [`TempSqlite::new`]
/// fails with the error of [`crate::connect`], which names the features.
#[derive(Debug)]
pub struct TempSqlite {
    /// A pool on it.
    pub db: DatabaseConnection,
    path: PathBuf,
}

impl TempSqlite {
    /// Creates and migrates the database.
    pub async fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("outbox-test-{}", crate::new_job_id().to_lowercase()));
        std::fs::create_dir(&dir)
            .map_err(|e| Error::Invalid(format!("creating the test database's directory {}: {e}", dir.display())))?;
        let path = dir.join("outbox.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let temp = TempSqlite { db: crate::connect(&url).await?, path };
        crate::migrate(&temp.db).await?;
        Ok(temp)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempSqlite {
    fn drop(&mut self) {
        // The database, its WAL and shared-memory files, and any journal: the directory holds nothing else.
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn pending<C: ConnectionTrait>(conn: &C, kind: Option<&str>) -> Result<Vec<JobRecord>> {
    every_page(
        conn,
        JobFilter { status: Some(JobStatus::Pending), kind: kind.map(str::to_owned), ..JobFilter::default() },
    )
    .await
}

/// Every job `filter` matches, oldest first, read a page at a time.
async fn every_page<C: ConnectionTrait>(conn: &C, mut filter: JobFilter) -> Result<Vec<JobRecord>> {
    filter.limit = 500;
    let mut jobs = Vec::new();
    loop {
        let page = ops::list(conn, &filter).await?;
        let full = page.len() as u64 == filter.limit;
        filter.before = page.last().map(|j| j.id.clone());
        jobs.extend(page);
        if !full {
            break;
        }
    }
    jobs.reverse();
    Ok(jobs)
}

/// The pending jobs of kind `J` whose payloads decode, and the records of those that do not.
async fn read_or_panic<J: Job, C: ConnectionTrait>(conn: &C) -> (Vec<EnqueuedJob<J>>, Vec<JobRecord>) {
    let records = match pending(conn, Some(J::KIND)).await {
        Ok(records) => records,
        Err(e) => panic!("reading the pending jobs of kind `{}`: {e}", J::KIND),
    };
    let (mut jobs, mut undecodable) = (Vec::new(), Vec::new());
    for record in records {
        match serde_json::from_value::<J>(record.payload.clone()) {
            Ok(payload) => jobs.push(EnqueuedJob { record, payload }),
            Err(_) => undecodable.push(record),
        }
    }
    (jobs, undecodable)
}

fn payloads<J>(jobs: &[EnqueuedJob<J>], undecodable: &[JobRecord]) -> String {
    let shown: Vec<String> = jobs.iter().map(|j| format!("{} {}", j.record.id, j.record.payload)).collect();
    let mut text = if shown.is_empty() { "none".to_owned() } else { format!("[{}]", shown.join(", ")) };
    if !undecodable.is_empty() {
        let ids: Vec<&str> = undecodable.iter().map(|r| r.id.as_str()).collect();
        text.push_str(&format!("; not decodable as the kind's type: {}", ids.join(", ")));
    }
    text
}

/// Whether `value` has every field of `subset` with an equal value (objects compared recursively).
fn contains(value: &Value, subset: &Value) -> bool {
    match (value, subset) {
        (Value::Object(have), Value::Object(want)) => {
            want.iter().all(|(k, w)| have.get(k).is_some_and(|h| contains(h, w)))
        }
        _ => value == subset,
    }
}
