//! What operators see of jobs and kinds: records, statuses, history events, and the filter that lists them.

use chrono::{DateTime, Utc};

/// Where a job is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum JobStatus {
    /// Waiting to be claimed once `run_at` has passed.
    Pending,
    /// Owned by a worker whose lease has not run out.
    Claimed,
    /// Done; terminal.
    Completed,
    /// Out of attempts, or failed permanently; terminal until an operator retries it.
    Failed,
    /// Cancelled before it ran; terminal until an operator retries it.
    Cancelled,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 5] =
        [JobStatus::Pending, JobStatus::Claimed, JobStatus::Completed, JobStatus::Failed, JobStatus::Cancelled];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Claimed => "claimed",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// Whether no worker will touch the job again without an operator.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Completed | JobStatus::Failed | JobStatus::Cancelled)
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobStatus::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| {
            format!("unknown job status `{s}` (expected pending, claimed, completed, failed or cancelled)")
        })
    }
}

/// One job row as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct JobRecord {
    /// Time-ordered id: 26 characters, a ULID (jobs enqueued before ULIDs have UUIDs).
    pub id: String,
    /// Kind name.
    pub kind: String,
    /// Queue name.
    pub queue: String,
    /// The payload. A stored payload that is not JSON at all (written by another tool) is shown as a JSON
    /// string holding its text.
    pub payload: serde_json::Value,
    /// Lifecycle status.
    pub status: JobStatus,
    /// Higher runs first.
    pub priority: i32,
    /// Attempts used so far.
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Earliest time it may be claimed.
    pub run_at: DateTime<Utc>,
    /// Worker holding (or that last held) the claim.
    pub locked_by: Option<String>,
    /// When the current claim was taken.
    pub locked_at: Option<DateTime<Utc>>,
    /// When the current claim's lease runs out.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Error of the latest failed attempt.
    pub last_error: Option<String>,
    /// Deduplication key.
    pub idempotency_key: Option<String>,
    /// sha256 of the kind's schema at enqueue.
    pub schema_hash: String,
    /// What the handler recorded on success.
    pub output: Option<serde_json::Value>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it was last claimed.
    pub claimed_at: Option<DateTime<Utc>>,
    /// When it completed.
    pub completed_at: Option<DateTime<Utc>>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
    /// How many times a worker started the job, including runs whose attempt was given back (snooze,
    /// shutdown); never reset.
    pub runs: i32,
    /// The sequence it runs in: jobs sharing it run one at a time, in `sequence_no` order.
    pub sequence_key: Option<String>,
    /// Its place in its sequence, assigned by the database in commit order.
    pub sequence_no: Option<i64>,
    /// The job its sequence waits for (pending, running, or failed or cancelled and holding the sequence),
    /// while this one may not start.
    pub waiting_for: Option<String>,
    /// Whether this job, failed or cancelled, holds its sequence: the jobs behind it wait until an operator
    /// retries it or cancels it (again).
    pub holds_sequence: bool,
    /// The domain row it is about (`order:42`), if its enqueue or kind named one. Not kept in the archive.
    pub subject: Option<String>,
    /// The W3C trace context it was enqueued in: a `traceparent`, then a space and the `tracestate` when there is
    /// one. Not kept in the archive.
    pub trace: Option<String>,
}

/// Which jobs [`crate::ops::list`] returns.
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
    /// Only jobs of this sequence: the latest `limit` of them, listed in sequence order.
    pub sequence: Option<String>,
    /// Only jobs carrying this idempotency key.
    pub key: Option<String>,
    /// Only jobs about this subject (`order:42`), through its index. The archive keeps no subject: completed
    /// jobs of kinds that archive are not found by it once archived.
    pub subject: Option<String>,
    /// Only jobs with an id below this one: the next page after a page that ended with it. Ids grow with
    /// enqueue time, so pages stay correct while jobs are inserted (new ones land before the first page).
    /// Ignored with [`JobFilter::sequence`].
    pub before: Option<String>,
    /// At most this many (default 100).
    pub limit: u64,
}

impl Default for JobFilter {
    fn default() -> Self {
        JobFilter {
            status: None,
            kind: None,
            queue: None,
            since: None,
            sequence: None,
            key: None,
            subject: None,
            before: None,
            limit: 100,
        }
    }
}

/// What happened to a job at one point of its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JobEventKind {
    /// Written by enqueue.
    Enqueued,
    /// Claimed by a worker (the current or last claim).
    Claimed,
    /// Its handler succeeded.
    Completed,
    /// An attempt failed; it runs again after a backoff.
    Retried,
    /// Failed for good: attempts used up, a permanent error, or an invalid payload.
    Failed,
    /// Its handler asked to run later, giving the attempt back.
    Snoozed,
    /// Given back at shutdown without using the attempt.
    Released,
    /// Its claim's lease expired and a rescuer returned it to pending.
    Rescued,
    /// Its claim's lease expired with no attempts left; failed.
    RescuedFailed,
    /// Cancelled before it ran.
    Cancelled,
    /// Put back to pending by an operator.
    RetriedByOperator,
    /// A workflow step whose last parent finished: it may run now.
    Ready,
}

impl JobEventKind {
    /// Every event kind.
    pub const ALL: &'static [JobEventKind] = &[
        JobEventKind::Enqueued,
        JobEventKind::Claimed,
        JobEventKind::Completed,
        JobEventKind::Retried,
        JobEventKind::Failed,
        JobEventKind::Snoozed,
        JobEventKind::Released,
        JobEventKind::Rescued,
        JobEventKind::RescuedFailed,
        JobEventKind::Cancelled,
        JobEventKind::RetriedByOperator,
        JobEventKind::Ready,
    ];

    /// The stored name (`retried_by_operator`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobEventKind::Enqueued => "enqueued",
            JobEventKind::Claimed => "claimed",
            JobEventKind::Completed => "completed",
            JobEventKind::Retried => "retried",
            JobEventKind::Failed => "failed",
            JobEventKind::Snoozed => "snoozed",
            JobEventKind::Released => "released",
            JobEventKind::Rescued => "rescued",
            JobEventKind::RescuedFailed => "rescued_failed",
            JobEventKind::Cancelled => "cancelled",
            JobEventKind::RetriedByOperator => "retried_by_operator",
            JobEventKind::Ready => "ready",
        }
    }
}

impl std::fmt::Display for JobEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobEventKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobEventKind::ALL.iter().copied().find(|k| k.as_str() == s).ok_or_else(|| format!("unknown job event `{s}`"))
    }
}

/// One lifecycle transition of a job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct JobEvent {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// What happened.
    pub event: JobEventKind,
    /// The attempt the transition ended (or, for an operator retry, the count it reset to).
    pub attempt: i32,
    /// The worker that held (or last held) the claim.
    pub worker: Option<String>,
    /// The error of a failed attempt.
    pub error: Option<String>,
}

/// A kind as a worker recorded it when it started: what tools without the Rust type need to validate and
/// show its jobs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct KindRecord {
    /// Kind name.
    pub name: String,
    /// The payload's JSON Schema.
    pub schema: serde_json::Value,
    /// The first 16 hex digits of the sha256 of the canonical schema, as stored on each job.
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
    /// The template of its sequence keys (`fs:{path:path}`), if it is sequenced.
    pub sequence: Option<String>,
    /// What a failed or cancelled job of the kind does to the jobs behind it in its sequence.
    pub on_sequence_failure: crate::job::SequenceFailure,
    /// The most jobs of the kind that may run at once across every worker.
    pub concurrency: Option<u32>,
    /// Its fleet-wide rate limit (`50/1m burst 5`).
    pub rate: Option<String>,
    /// The template of its rate limit's key, when the rate applies per key.
    pub rate_key: Option<String>,
    /// The template of its fair-share key.
    pub fair: Option<String>,
    /// What one job costs against the rate: a whole number or a `{field}` of the payload.
    pub cost: Option<String>,
    /// The template of its jobs' subjects (`order:{orderId}`).
    pub subject: Option<String>,
    /// The worker that last recorded it.
    pub recorded_by: Option<String>,
    /// When a worker first recorded it.
    pub first_seen_at: DateTime<Utc>,
    /// When a worker last recorded it.
    pub updated_at: DateTime<Utc>,
}

/// One entry of the event feed: a lifecycle transition of any job, written by whichever process made it, in
/// the order the database committed them (see [`crate::ops::feed`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct FeedEvent {
    /// Its place in the feed: pass it back to [`crate::ops::feed`] to read what came after. Opaque; its form
    /// depends on the backend.
    pub id: String,
    /// The job.
    pub job_id: String,
    /// The job's kind.
    pub kind: String,
    /// The job's queue.
    pub queue: String,
    /// What happened.
    pub event: JobEventKind,
    /// The attempt the transition belongs to (see [`JobEvent::attempt`]).
    pub attempt: i32,
    /// The worker that held (or last held) the claim.
    pub worker: Option<String>,
    /// The error of a failed attempt.
    pub error: Option<String>,
    /// When it happened.
    pub at: DateTime<Utc>,
}

/// A worker process (or a remote worker over HTTP) that announced itself and is still heartbeating.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct WorkerRecord {
    /// The worker's id, as recorded in `locked_by` of the jobs it claims.
    pub id: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id, when it gave one.
    pub pid: Option<i64>,
    /// The queues it serves; `None` for all.
    pub queues: Option<Vec<String>>,
    /// The kinds it runs.
    pub kinds: Vec<String>,
    /// How many jobs it runs at once at most, when it said.
    pub concurrency: Option<i64>,
    /// How many it was running at its last heartbeat.
    pub running: i64,
    /// Whether it works over the HTTP API rather than in a process with its own database connection.
    pub remote: bool,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub last_seen_at: DateTime<Utc>,
    /// When it counts as gone unless it heartbeats again.
    pub expires_at: DateTime<Utc>,
}

/// A periodic schedule as registered by the workers that run it (see [`crate::Schedule`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct ScheduleRecord {
    /// The schedule's name, unique across the fleet.
    pub name: String,
    /// The kind of job each tick enqueues.
    pub kind: String,
    /// When it ticks: `cron <expression>` or `every <duration>`.
    pub spec: String,
    /// The time zone its cron expression is read in.
    pub time_zone: String,
    /// What happens to ticks missed while nothing ran: `skip` or `catch_up`.
    pub missed: String,
    /// The last tick a job was enqueued for.
    pub last_tick: Option<DateTime<Utc>>,
    /// That job's id.
    pub last_job_id: Option<String>,
    /// The next tick from now (filled by [`crate::ops::schedules`]).
    pub next_tick: Option<DateTime<Utc>>,
    /// When a worker last registered the schedule or enqueued one of its ticks.
    pub updated_at: DateTime<Utc>,
}

/// The latest report of one reconciler (run at a worker's start or by hand).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct ReconciliationRecord {
    /// Which reconciler: `fs` or `aws`.
    pub reconciler: String,
    /// When it finished.
    pub at: DateTime<Utc>,
    /// The worker whose start ran it, if one did.
    pub worker: Option<String>,
    /// Its counts (discrepancies by type, what it checked, temp files removed), as JSON.
    pub report: serde_json::Value,
}

impl ReconciliationRecord {
    /// The report of `reconciler` finished now, run at the start of `worker` if one did.
    pub fn new(reconciler: impl Into<String>, worker: Option<String>, report: serde_json::Value) -> Self {
        ReconciliationRecord { reconciler: reconciler.into(), at: Utc::now(), worker, report }
    }
}
