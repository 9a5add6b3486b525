//! The answers of the operator queries: counts, durations, duplicate keys, queue states.

use chrono::{DateTime, Utc};

use crate::record::{JobRecord, JobStatus};

/// How many jobs of one kind are in one status.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct DuplicateKey {
    /// Kind name.
    pub kind: String,
    /// The key.
    pub key: String,
    /// Jobs with this key, in any status.
    pub jobs: u64,
    /// Of those, pending or claimed: at most one takes duplicates; more when later jobs of its sequence were
    /// enqueued behind one and a duplicate went to the tail.
    pub active: u64,
    /// Of those, completed.
    pub completed: u64,
}

/// Jobs that completed and failed in one stretch of time (see [`crate::ops::activity`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct ActivityPoint {
    /// Start of the stretch.
    pub at: DateTime<Utc>,
    /// Jobs whose last change in the stretch completed them.
    pub completed: u64,
    /// Jobs whose last change in the stretch failed them for good.
    pub failed: u64,
}

/// Failed jobs of one kind sharing one last error (see [`crate::ops::failure_groups`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct FailureGroup {
    /// Kind name.
    pub kind: String,
    /// The error every job of the group failed with last (`None` for jobs failed without one).
    pub error: Option<String>,
    /// Failed jobs in the group.
    pub count: u64,
    /// The group's most recent failure.
    pub latest_at: DateTime<Utc>,
    /// The newest job of the group.
    pub latest_id: String,
}

/// All six answers at once.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
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
    /// How many sequences a failed or cancelled job holds.
    pub blocked_sequences: u64,
    /// The first of them (longest held first), with their heads.
    pub blocked: Vec<BlockedSequence>,
    /// The window of `durations` and `recent`.
    pub window_secs: u64,
    /// The latest report of each reconciler (at a worker's start or by hand).
    pub reconciliations: Vec<crate::record::ReconciliationRecord>,
}

/// Jobs of one queue by state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct QueueCounts {
    /// Queue name.
    pub queue: String,
    /// Pending and due now.
    pub available: u64,
    /// Pending, due later (delayed, or waiting for a retry).
    pub scheduled: u64,
    /// Pending behind an earlier job of their sequence.
    pub waiting: u64,
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

/// A sequence held by a job that failed for good or was cancelled: the jobs behind it wait until an operator
/// retries the head (and it completes) or cancels it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct BlockedSequence {
    /// The sequence key.
    pub sequence_key: String,
    /// The job holding it.
    pub head: JobRecord,
    /// Jobs waiting behind it.
    pub waiting: u64,
}
