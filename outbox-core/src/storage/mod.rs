//! The database seam. Each backend keeps its own SQL in its own module; the rest of the crate is
//! backend-agnostic and reaches storage only through these functions and types.

pub(crate) mod postgres;
mod postgres_worker;
mod rows;
pub(crate) mod sqlite;
pub(crate) mod sqlite_worker;

use sea_orm::{ConnectionTrait, DbBackend, Value};

pub(crate) use postgres_worker::{PgStore, PgStoreConfig};
pub(crate) use sqlite_worker::{SqliteStore, StoreConfig};

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

impl NewJob {
    /// The row's eleven values in the order of the backends' insert columns: id, kind, queue, payload,
    /// priority, max attempts, run at, key, schema hash, created at, updated at.
    pub(crate) fn push_values(&self, values: &mut Vec<Value>) {
        values.extend([
            self.id.clone().into(),
            self.kind.clone().into(),
            self.queue.clone().into(),
            self.payload.clone().into(),
            self.priority.into(),
            self.max_attempts.into(),
            self.run_at.into(),
            self.key.clone().into(),
            self.schema_hash.clone().into(),
            self.created_at.into(),
            self.created_at.into(),
        ]);
    }
}

/// The columns enqueue writes; each backend supplies the placeholders of one row.
const INSERT_COLUMNS: &str = "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, \
     max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at) VALUES ";
/// Values per row ([`NewJob::push_values`]).
const VALUES_PER_ROW: usize = 11;
/// Rows per batch statement: 22,000 values, under SQLite's 32,766 and PostgreSQL's 65,535.
const ROWS_PER_INSERT: usize = 2_000;

/// Writes one row's placeholders, numbered from `first` where the backend numbers them.
pub(crate) type PushRow = fn(&mut String, usize);

/// The enqueue INSERT of `jobs`, skipping any whose key an active job holds, with its values.
fn insert_statement(backend: DbBackend, jobs: &[NewJob], push_row: PushRow, returning: &str) -> sea_orm::Statement {
    let mut sql = String::with_capacity(INSERT_COLUMNS.len() + jobs.len() * 96 + 64);
    sql.push_str(INSERT_COLUMNS);
    let mut values = Vec::with_capacity(jobs.len() * VALUES_PER_ROW);
    for (i, job) in jobs.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        push_row(&mut sql, values.len() + 1);
        job.push_values(&mut values);
    }
    sql.push_str(" ON CONFLICT DO NOTHING");
    sql.push_str(returning);
    sea_orm::Statement::from_sql_and_values(backend, sql, values)
}

/// Inserts one job unless an active job of its kind holds its key. True when the row was written.
pub(crate) async fn insert_job<C: ConnectionTrait + ?Sized>(
    conn: &C,
    backend: DbBackend,
    job: &NewJob,
    push_row: PushRow,
) -> Result<bool> {
    let res = conn
        .execute_raw(insert_statement(backend, std::slice::from_ref(job), push_row, ""))
        .await
        .map_err(Error::db(format!("enqueuing a job of kind `{}`", job.kind)))?;
    Ok(res.rows_affected() == 1)
}

/// Inserts many jobs in as few statements as the parameter limit allows; returns the ids written.
pub(crate) async fn insert_jobs<C: ConnectionTrait + ?Sized>(
    conn: &C,
    backend: DbBackend,
    jobs: &[NewJob],
    push_row: PushRow,
) -> Result<Vec<String>> {
    let mut written = Vec::with_capacity(jobs.len());
    for chunk in jobs.chunks(ROWS_PER_INSERT) {
        let statement = insert_statement(backend, chunk, push_row, " RETURNING id");
        let rows = conn.query_all_raw(statement).await.map_err(Error::db("enqueuing a batch of jobs"))?;
        for row in rows {
            written.push(row.try_get_by_index::<String>(0).map_err(Error::db("reading enqueued job ids"))?);
        }
    }
    Ok(written)
}

/// The values of a kind's row in the kinds table: name, schema, schema hash, queue, priority, max attempts,
/// uniqueness, key fields (JSON), recording worker, then `now` once per time column the statement binds.
pub(crate) fn kind_values(kind: &crate::kind::Kind, worker: &str, now: i64, times: usize) -> Result<Vec<Value>> {
    let key_fields = serde_json::to_string(kind.key_fields())
        .map_err(|e| Error::Internal(format!("encoding the key fields of kind `{}`: {e}", kind.name())))?;
    let mut values: Vec<Value> = vec![
        kind.name().into(),
        kind.schema().to_string().into(),
        kind.schema_hash().into(),
        kind.queue().into(),
        kind.priority().into(),
        kind.max_attempts().into(),
        kind.is_unique().into(),
        key_fields.into(),
        worker.into(),
    ];
    values.extend(std::iter::repeat_n(Value::from(now), times));
    Ok(values)
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

/// The database engines the framework runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// The backend of a connection, when the framework supports it.
pub(crate) fn backend<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Backend> {
    match conn.get_database_backend() {
        DbBackend::Sqlite => Ok(Backend::Sqlite),
        DbBackend::Postgres => Ok(Backend::Postgres),
        other => Err(Error::Unsupported(format!("{other:?} is not supported; use SQLite or PostgreSQL"))),
    }
}

/// Runs the storage function `f` of the connection's backend: `dispatch!(conn, get(conn, id))`.
macro_rules! dispatch {
    ($conn:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $crate::storage::backend($conn)? {
            $crate::storage::Backend::Sqlite => $crate::storage::sqlite::$f($($arg),*).await,
            $crate::storage::Backend::Postgres => $crate::storage::postgres::$f($($arg),*).await,
        }
    };
}
pub(crate) use dispatch;

/// The worker's own connection to the database: claims, completions, renewals, rescues.
#[derive(Clone)]
pub(crate) enum WorkerStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl WorkerStore {
    pub(crate) async fn claim(&self, limit: usize, now: i64, lease_until: i64) -> Result<Vec<ClaimedJob>> {
        match self {
            WorkerStore::Sqlite(s) => s.claim(limit, now, lease_until).await,
            WorkerStore::Postgres(s) => s.claim(limit, now, lease_until).await,
        }
    }

    /// Queues a finished attempt; it is written with whatever else finished meanwhile.
    pub(crate) fn finish(&self, finished: Finished) -> Result<()> {
        match self {
            WorkerStore::Sqlite(s) => s.finish(finished),
            WorkerStore::Postgres(s) => s.finish(finished),
        }
    }

    /// Jobs whose attempt has finished but whose outcome is not written yet: they still hold their claim and
    /// keep their leases renewed, and past one batch of them they count against the worker's concurrency.
    /// Always empty on SQLite, whose connection writes queued outcomes before it claims.
    pub(crate) fn unwritten(&self) -> Vec<String> {
        match self {
            WorkerStore::Sqlite(_) => Vec::new(),
            WorkerStore::Postgres(s) => s.unwritten(),
        }
    }

    /// How many of [`WorkerStore::unwritten`] there are.
    pub(crate) fn unwritten_count(&self) -> usize {
        match self {
            WorkerStore::Sqlite(_) => 0,
            WorkerStore::Postgres(s) => s.unwritten_count(),
        }
    }

    pub(crate) async fn extend(&self, ids: Vec<String>, until: i64) -> Result<u64> {
        match self {
            WorkerStore::Sqlite(s) => s.extend(ids, until).await,
            WorkerStore::Postgres(s) => s.extend(ids, until).await,
        }
    }

    pub(crate) async fn rescue(&self, now: i64) -> Result<Vec<Rescued>> {
        match self {
            WorkerStore::Sqlite(s) => s.rescue(now).await,
            WorkerStore::Postgres(s) => s.rescue(now).await,
        }
    }

    /// Resolves once every finish queued before it has been written (or given up on).
    pub(crate) async fn flush(&self) -> Result<()> {
        match self {
            WorkerStore::Sqlite(s) => s.flush().await,
            WorkerStore::Postgres(s) => s.flush().await,
        }
    }
}

/// Milliseconds since the Unix epoch, the unit of every stored timestamp.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub(crate) fn log_finished(f: &Finished, applied: bool, worker: &str) {
    let (job_id, kind, queue, attempt) = (f.id.as_str(), f.kind.as_str(), f.queue.as_str(), f.attempt);
    if !applied {
        tracing::warn!(
            job_id,
            kind,
            queue,
            attempt,
            worker,
            outcome = f.outcome.name(),
            "discarded a stale result: the job's claim had expired and was rescued"
        );
        return;
    }
    match &f.outcome {
        Outcome::Completed { .. } => tracing::debug!(job_id, kind, queue, attempt, "job completed"),
        Outcome::Retry { run_at, error } => {
            tracing::warn!(job_id, kind, queue, attempt, run_at, error = %error, "job failed; will retry")
        }
        Outcome::Failed { error } => tracing::error!(job_id, kind, queue, attempt, error = %error, "job failed"),
        Outcome::Snoozed { run_at } => tracing::debug!(job_id, kind, queue, attempt, run_at, "job snoozed"),
        Outcome::Released => tracing::info!(job_id, kind, queue, attempt, "job released at shutdown"),
    }
}
