//! The database seam. Each backend keeps its own SQL in its own module; the rest of the crate is
//! backend-agnostic and reaches storage only through these functions and types.

pub(crate) mod sqlite;
pub(crate) mod sqlite_worker;

use sea_orm::{ConnectionTrait, DbBackend};

use crate::error::{Error, Result};

/// A job row about to be written by enqueue.
#[derive(Debug, Clone)]
pub(crate) struct NewJob {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) payload: String,
    pub(crate) priority: i32,
    pub(crate) max_attempts: i32,
    pub(crate) run_at: i64,
    pub(crate) key: Option<String>,
    pub(crate) schema_hash: String,
    pub(crate) created_at: i64,
}

/// A job just claimed by a worker.
#[derive(Debug, Clone)]
pub(crate) struct ClaimedJob {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) payload: String,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) schema_hash: String,
    /// How many times the job has been claimed, this claim included; never given back.
    pub(crate) run: i32,
}

/// How a claimed job ends its attempt.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// Handler succeeded.
    Completed { output: Option<String> },
    /// Back to pending after `run_at`, the attempt used.
    Retry { run_at: i64, error: String },
    /// Terminal failure.
    Failed { error: String },
    /// Back to pending after `run_at`, the attempt given back.
    Snoozed { run_at: i64 },
    /// Back to pending now, the attempt given back (shutdown).
    Released,
}

impl Outcome {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Retry { .. } => "retried",
            Outcome::Failed { .. } => "failed",
            Outcome::Snoozed { .. } => "snoozed",
            Outcome::Released => "released",
        }
    }
}

/// The end of one attempt, fenced by the claim it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) attempt: i32,
    pub(crate) outcome: Outcome,
}

/// A claim returned to pending or failed by the rescuer.
#[derive(Debug, Clone)]
pub(crate) struct Rescued {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) attempt: i32,
    pub(crate) status: String,
    pub(crate) previous_owner: Option<String>,
}

/// The backend of a connection, when the framework supports it.
pub(crate) fn backend<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<DbBackend> {
    match conn.get_database_backend() {
        DbBackend::Sqlite => Ok(DbBackend::Sqlite),
        other => Err(Error::Unsupported(format!("{other:?} is not supported yet; use SQLite"))),
    }
}

/// Milliseconds since the Unix epoch, the unit of every stored timestamp.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
