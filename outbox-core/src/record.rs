//! What operators see of a job.

use chrono::{DateTime, Utc};

/// Where a job is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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
pub struct JobRecord {
    /// Time-ordered id (UUIDv7).
    pub id: String,
    /// Kind name.
    pub kind: String,
    /// Queue name.
    pub queue: String,
    /// Payload as compact JSON text (keys sorted; PostgreSQL stores it as `jsonb` and it is printed back so).
    pub payload: String,
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
    /// What the handler recorded on success (JSON text).
    pub output: Option<String>,
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
}

pub(crate) fn from_ms(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::UNIX_EPOCH)
}
