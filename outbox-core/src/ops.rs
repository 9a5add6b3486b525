//! Operator functions: the six questions (what is outstanding, what failed and why, what is stuck, how long
//! jobs take, which keys were enqueued more than once, what ran lately) and the actions that follow.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;

use crate::error::{Error, Result};
use crate::record::{JobRecord, JobStatus};
use crate::storage::{self, dispatch, now_ms};

/// Which jobs [`list`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFilter {
    /// Only this status.
    pub status: Option<JobStatus>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only jobs changed at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// At most this many (default 100).
    pub limit: u64,
}

impl Default for JobFilter {
    fn default() -> Self {
        JobFilter { status: None, kind: None, queue: None, since: None, limit: 100 }
    }
}

/// How many jobs of one kind are in one status.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StatusCount {
    /// Kind name.
    pub kind: String,
    /// Status.
    pub status: JobStatus,
    /// Number of jobs.
    pub count: u64,
    /// Oldest enqueue time in the group.
    pub oldest: DateTime<Utc>,
}

/// Run and wait times of completed jobs of one kind.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KindDurations {
    /// Kind name.
    pub kind: String,
    /// Completed jobs measured.
    pub completed: u64,
    /// Mean time from claim to completion of the last attempt, ms.
    pub avg_run_ms: f64,
    /// Longest such time, ms.
    pub max_run_ms: i64,
    /// Mean time from enqueue to the last claim, ms.
    pub avg_wait_ms: f64,
}

/// An idempotency key carried by more than one job over time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DuplicateKey {
    /// Kind name.
    pub kind: String,
    /// The key.
    pub key: String,
    /// Jobs with this key, in any status.
    pub jobs: u64,
    /// Of those, pending or claimed (at most one).
    pub active: u64,
    /// Of those, completed.
    pub completed: u64,
}

/// One lifecycle transition of a job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobEvent {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// `enqueued`, `retried`, `failed`, `snoozed`, `released`, `rescued`, `rescued_failed`, `cancelled`,
    /// `retried_by_operator`, `claimed` (the current claim) or `completed`.
    pub event: String,
    /// The attempt the transition ended (or, for an operator retry, the count it reset to).
    pub attempt: i32,
    /// The worker that held (or last held) the claim.
    pub worker: Option<String>,
    /// The error of a failed attempt.
    pub error: Option<String>,
}

/// All six answers at once.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stats {
    /// Counts of every kind and status (pending and claimed are what is outstanding).
    pub counts: Vec<StatusCount>,
    /// The most recent failed jobs with their errors.
    pub failed: Vec<JobRecord>,
    /// Claimed jobs whose lease has expired.
    pub stuck: Vec<JobRecord>,
    /// Durations of jobs completed in the window.
    pub durations: Vec<KindDurations>,
    /// Keys enqueued more than once.
    pub duplicates: Vec<DuplicateKey>,
    /// What finished in the window, by kind and status.
    pub recent: Vec<StatusCount>,
    /// The window of `durations` and `recent`.
    pub window_secs: u64,
}

/// A kind as a worker recorded it when it started: what tools without the Rust type need to validate and
/// show its jobs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KindRecord {
    /// Kind name.
    pub name: String,
    /// The payload's JSON Schema.
    pub schema: serde_json::Value,
    /// sha256 (hex) of the canonical schema, as stored on each job.
    pub schema_hash: String,
    /// Default queue.
    pub queue: String,
    /// Default priority.
    pub priority: i32,
    /// Default attempts.
    pub max_attempts: i32,
    /// Whether duplicate intents collapse onto one active job.
    pub unique: bool,
    /// Fields forming the idempotency key (empty: a hash of the whole payload).
    pub key_fields: Vec<String>,
    /// The worker that last recorded it.
    pub recorded_by: Option<String>,
    /// When a worker first recorded it.
    pub first_seen_at: DateTime<Utc>,
    /// When a worker last recorded it.
    pub updated_at: DateTime<Utc>,
}

/// Jobs of one queue by state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueCounts {
    /// Queue name.
    pub queue: String,
    /// Pending and due now.
    pub available: u64,
    /// Pending, due later (delayed, or waiting for a retry).
    pub scheduled: u64,
    /// Claimed by a worker (stuck ones included).
    pub claimed: u64,
    /// Claimed, with an expired lease.
    pub stuck: u64,
    /// Completed.
    pub completed: u64,
    /// Failed for good.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// When the oldest available job became due.
    pub oldest_available: Option<DateTime<Utc>>,
}

/// Records each kind's JSON Schema and options in the kinds table (workers do this when they are built).
pub async fn record_kinds<C: ConnectionTrait>(conn: &C, kinds: &[&crate::kind::Kind], recorded_by: &str) -> Result<()> {
    dispatch!(conn, record_kinds(conn, kinds, recorded_by, now_ms()))
}

/// Every kind a worker has recorded, by name.
pub async fn kinds<C: ConnectionTrait>(conn: &C) -> Result<Vec<KindRecord>> {
    dispatch!(conn, kinds(conn, None))
}

/// The recorded kind `name`, if a worker has recorded it.
pub async fn kind<C: ConnectionTrait>(conn: &C, name: &str) -> Result<Option<KindRecord>> {
    Ok(dispatch!(conn, kinds(conn, Some(name)))?.pop())
}

/// Job counts of every queue: available, scheduled, claimed, stuck, completed, failed, cancelled.
pub async fn queues<C: ConnectionTrait>(conn: &C) -> Result<Vec<QueueCounts>> {
    dispatch!(conn, queues(conn, now_ms()))
}

fn since(window: Duration) -> i64 {
    now_ms().saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX))
}

/// Job counts by kind and status.
pub async fn counts<C: ConnectionTrait>(conn: &C) -> Result<Vec<StatusCount>> {
    dispatch!(conn, counts(conn))
}

/// Jobs matching `filter`, newest first.
pub async fn list<C: ConnectionTrait>(conn: &C, filter: &JobFilter) -> Result<Vec<JobRecord>> {
    dispatch!(conn, list(conn, filter))
}

/// One job by id.
pub async fn get<C: ConnectionTrait>(conn: &C, id: &str) -> Result<JobRecord> {
    dispatch!(conn, get(conn, id))?.ok_or_else(|| Error::NotFound { id: id.to_owned() })
}

/// The lifecycle of one job, oldest first: when it was enqueued, every retry (with its error), failure,
/// rescue, snooze, release, cancel and operator retry, then its current claim and completion.
pub async fn history<C: ConnectionTrait>(conn: &C, id: &str) -> Result<Vec<JobEvent>> {
    let job = get(conn, id).await?;
    let stored = dispatch!(conn, history(conn, id))?;
    let mut events = Vec::with_capacity(stored.len() + 3);
    let milestone = |event: &str, at, attempt, worker: Option<&String>| JobEvent {
        at,
        event: event.to_owned(),
        attempt,
        worker: worker.cloned(),
        error: None,
    };
    events.push(milestone("enqueued", job.created_at, 0, None));
    events.extend(stored);
    // The latest claim is on the row while it holds or ended in completion.
    if let (Some(at), JobStatus::Claimed | JobStatus::Completed) = (job.claimed_at, job.status) {
        events.push(milestone("claimed", at, job.attempts, job.locked_by.as_ref()));
    }
    if let Some(at) = job.completed_at.filter(|_| job.status == JobStatus::Completed) {
        events.push(milestone("completed", at, job.attempts, job.locked_by.as_ref()));
    }
    Ok(events)
}

/// Claimed jobs whose lease has expired: their worker died or hangs, and no rescuer has run since.
pub async fn stuck<C: ConnectionTrait>(conn: &C) -> Result<Vec<JobRecord>> {
    dispatch!(conn, stuck(conn, now_ms()))
}

/// The most recent failed jobs, each with its last error.
pub async fn failed<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<JobRecord>> {
    list(conn, &JobFilter { status: Some(JobStatus::Failed), limit, ..JobFilter::default() }).await
}

/// Run and wait times of jobs completed within `window`, by kind.
pub async fn durations<C: ConnectionTrait>(conn: &C, window: Duration) -> Result<Vec<KindDurations>> {
    dispatch!(conn, durations(conn, since(window)))
}

/// Idempotency keys carried by more than one job, most repeated first.
pub async fn duplicates<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<DuplicateKey>> {
    dispatch!(conn, duplicates(conn, limit))
}

/// What finished (completed, failed, cancelled) within `window`, by kind and status.
pub async fn recent<C: ConnectionTrait>(conn: &C, window: Duration) -> Result<Vec<StatusCount>> {
    dispatch!(conn, finished_since(conn, since(window)))
}

/// The six answers at once; `window` bounds durations and recent activity (an hour is typical).
pub async fn stats<C: ConnectionTrait>(conn: &C, window: Duration) -> Result<Stats> {
    Ok(Stats {
        counts: counts(conn).await?,
        failed: failed(conn, 20).await?,
        stuck: stuck(conn).await?,
        durations: durations(conn, window).await?,
        duplicates: duplicates(conn, 20).await?,
        recent: recent(conn, window).await?,
        window_secs: window.as_secs(),
    })
}

async fn transition_error<C: ConnectionTrait>(conn: &C, id: &str, action: &'static str, hint: &'static str) -> Error {
    match get(conn, id).await {
        Ok(job) => Error::InvalidTransition { id: id.to_owned(), action, status: job.status.to_string(), hint },
        Err(e) => e,
    }
}

/// Puts a failed or cancelled job back to pending with its attempts reset.
pub async fn retry<C: ConnectionTrait>(conn: &C, id: &str) -> Result<()> {
    if dispatch!(conn, retry(conn, id, now_ms()))? {
        tracing::info!(job_id = id, "job retried by operator");
        crate::wake::wake();
        return Ok(());
    }
    Err(transition_error(conn, id, "retry", "only failed or cancelled jobs can be retried").await)
}

/// Puts every failed job (of `kind`, when given) back to pending; returns how many. A job whose key is held
/// by an active job stays failed.
pub async fn retry_failed<C: ConnectionTrait>(conn: &C, kind: Option<&str>) -> Result<u64> {
    let n = dispatch!(conn, retry_failed(conn, kind, now_ms()))?;
    tracing::info!(jobs = n, kind = kind.unwrap_or("*"), "failed jobs retried by operator");
    if n > 0 {
        crate::wake::wake();
    }
    Ok(n)
}

/// Cancels a pending job.
pub async fn cancel<C: ConnectionTrait>(conn: &C, id: &str) -> Result<()> {
    if dispatch!(conn, cancel(conn, id, now_ms()))? {
        tracing::info!(job_id = id, "job cancelled");
        return Ok(());
    }
    Err(transition_error(conn, id, "cancel", "only pending jobs can be cancelled").await)
}

/// Deletes jobs in the given terminal statuses last changed more than `older_than` ago; returns how many.
pub async fn purge<C: ConnectionTrait>(conn: &C, statuses: &[JobStatus], older_than: Duration) -> Result<u64> {
    storage::backend(conn)?;
    if let Some(active) = statuses.iter().find(|s| !s.is_terminal()) {
        return Err(Error::Invalid(format!(
            "cannot purge {active} jobs: only completed, failed and cancelled jobs can be purged"
        )));
    }
    let n = dispatch!(conn, purge(conn, statuses, since(older_than)))?;
    tracing::info!(jobs = n, "finished jobs purged");
    Ok(n)
}

/// Where jobs of one kind name the file (or other resource) they touch: the kind, and the JSON path of the
/// payload field holding the path (`$.path`, `$.targetPath`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathField<'a> {
    /// Kind name.
    pub kind: &'a str,
    /// JSON path into the payload, starting with `$`.
    pub json_path: &'a str,
}

/// The latest completed job that touched one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathJob {
    /// The path as stored in the payload; `None` when the payload has no string at the field's JSON path
    /// (all such jobs share one entry).
    pub path: Option<String>,
    /// Id of the latest completed job for the path (by completion time, then id).
    pub job_id: String,
    /// Its kind.
    pub kind: String,
    /// Its recorded output (JSON text).
    pub output: Option<String>,
    /// When it completed.
    pub completed_at: Option<DateTime<Utc>>,
    /// How many completed jobs touched the path, the latest included.
    pub jobs: u64,
}

/// A scan over the latest completed job of every path, opened by [`latest_completed_by_path`].
///
/// The scan reads one snapshot of the database (a read transaction) and hands out its paths a page at a
/// time, so the caller's memory does not grow with the number of jobs. It holds one pooled connection until
/// [`PathScan::close`] or drop; while it is open, SQLite cannot checkpoint the WAL past its snapshot.
pub struct PathScan {
    txn: sea_orm::DatabaseTransaction,
    after: i64,
    jobs_total: u64,
    paths_total: u64,
}

impl std::fmt::Debug for PathScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathScan")
            .field("after", &self.after)
            .field("jobs_total", &self.jobs_total)
            .field("paths_total", &self.paths_total)
            .finish_non_exhaustive()
    }
}

impl PathScan {
    /// Completed jobs of the scanned kinds in the snapshot.
    pub fn jobs_total(&self) -> u64 {
        self.jobs_total
    }

    /// Distinct paths in the snapshot (the entries the scan will hand out).
    pub fn paths_total(&self) -> u64 {
        self.paths_total
    }

    /// The next at most `limit` paths, ordered by path; empty when the scan is done.
    pub async fn next_page(&mut self, limit: u64) -> Result<Vec<PathJob>> {
        let page = dispatch!(&self.txn, path_scan_page(&self.txn, self.after, limit.max(1)))?;
        if let Some((seq, _)) = page.last() {
            self.after = *seq;
        }
        Ok(page.into_iter().map(|(_, job)| job).collect())
    }

    /// Ends the scan and releases its connection. Dropping the scan does the same, without reporting errors.
    pub async fn close(self) -> Result<()> {
        // Read-only work: rolling back discards the scratch table with the snapshot.
        self.txn.rollback().await.map_err(Error::db("closing a path scan"))
    }
}

/// For every path named by a completed job of the given kinds, the latest such job (by completion time,
/// then id). The "latest completed per path" decision is made by the database in one pass over the jobs;
/// the result is paged out of a scratch table, so neither side holds all jobs in memory.
///
/// ```
/// # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), outbox_core::Error> {
/// use outbox_core::ops::{self, PathField};
/// let fields = [PathField { kind: "create_file", json_path: "$.path" }];
/// let mut scan = ops::latest_completed_by_path(db, &fields).await?;
/// loop {
///     let page = scan.next_page(1_000).await?;
///     if page.is_empty() {
///         break;
///     }
///     for job in page {
///         println!("{:?} was last written by job {}", job.path, job.job_id);
///     }
/// }
/// scan.close().await?;
/// # Ok(()) }
/// ```
pub async fn latest_completed_by_path(db: &sea_orm::DatabaseConnection, fields: &[PathField<'_>]) -> Result<PathScan> {
    storage::backend(db)?;
    if fields.is_empty() {
        return Err(Error::Invalid("a path scan needs at least one kind and path field".into()));
    }
    if let Some(bad) = fields.iter().find(|f| !f.json_path.starts_with('$') || f.kind.is_empty()) {
        return Err(Error::Invalid(format!(
            "invalid path field `{}` of kind `{}`: the kind must be named and the JSON path start with `$`",
            bad.json_path, bad.kind
        )));
    }
    let txn = begin_scan(db).await?;
    let (jobs_total, paths_total) = dispatch!(&txn, open_path_scan(&txn, fields))?;
    Ok(PathScan { txn, after: 0, jobs_total, paths_total })
}

/// For every resource named by a completed job of `kind`, the latest such job (by completion time, then
/// id), where a job's resource is the combination of the payload values at `json_paths` (for example
/// `["$.resourceType", "$.resourceId"]`). Each [`PathJob::path`] holds that combination as a JSON array
/// (`["s3_bucket","invoices"]`). Same snapshot and paging as [`latest_completed_by_path`].
pub async fn latest_completed_by_key(
    db: &sea_orm::DatabaseConnection,
    kind: &str,
    json_paths: &[&str],
) -> Result<PathScan> {
    storage::backend(db)?;
    if kind.is_empty() || json_paths.is_empty() {
        return Err(Error::Invalid("a key scan needs a kind and at least one JSON path".into()));
    }
    if let Some(bad) = json_paths.iter().find(|p| !p.starts_with('$')) {
        return Err(Error::Invalid(format!(
            "invalid JSON path `{bad}` for kind `{kind}`: a JSON path starts with `$`"
        )));
    }
    let txn = begin_scan(db).await?;
    let (jobs_total, paths_total) = dispatch!(&txn, open_key_scan(&txn, kind, json_paths))?;
    Ok(PathScan { txn, after: 0, jobs_total, paths_total })
}

/// The read transaction a scan lives in: deferred, since it only reads the jobs; its scratch table lives
/// in the connection's temp schema.
async fn begin_scan(db: &sea_orm::DatabaseConnection) -> Result<sea_orm::DatabaseTransaction> {
    use sea_orm::{SqliteTransactionMode, TransactionOptions, TransactionTrait};

    let opts = TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Deferred),
        ..TransactionOptions::default()
    };
    db.begin_with_options(opts).await.map_err(Error::db("beginning a path scan"))
}
