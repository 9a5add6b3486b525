//! SQLite: statements issued through the caller's sea-orm connection (schema, enqueue, operator queries),
//! and the worker's own connection (`worker.rs`). Timestamps are stored as integer milliseconds since the
//! Unix epoch, JSON as text.

mod feed;
mod schema;
mod time;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, ExecResult,
    SqliteTransactionMode, SqlxSqliteConnector, Statement, TransactionOptions, TransactionTrait, Value,
};

pub(super) use worker::SqliteStore;

use super::{
    ClaimedJob, Driver, Finished, HELD_KEPT, KindRow, Migration, NewJob, PruneRules, ScanRow, ScheduleRow, Store,
    StoredEvent, Tuning, WorkerRow, WorkerStoreOpts, limit_value, rows,
};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::job::Violation;
use crate::record::{
    FeedEvent, JobFilter, JobRecord, JobStatus, KindRecord, ReconciliationRecord, ScheduleRecord, WorkerRecord,
};
use crate::stats::{BlockedSequence, DuplicateKey, FailureGroup, KindDurations, QueueCounts, StatusCount};
use worker::StoreConfig;

/// The SQLite backend.
pub(crate) struct Sqlite;

/// Tries at `BEGIN IMMEDIATE` while another writer holds the database past its busy timeout.
const BEGIN_TRIES: u32 = 5;

/// Whether SQLite said the database is locked (`SQLITE_BUSY`, code 5, or one of its extended codes).
fn is_busy(err: &DbErr) -> bool {
    let text = err.to_string();
    text.contains("database is locked") || text.contains("SQLITE_BUSY") || text.contains("(code: 5)")
}

/// `SQLITE_BUSY_SNAPSHOT` (517): a transaction that began by reading cannot become a writer because another
/// writer committed after its snapshot. SQLite reports it at once; no busy timeout can help.
fn is_busy_snapshot(err: &DbErr) -> bool {
    err.to_string().contains("(code: 517)")
}

/// Runs a write through the caller's connection; a locked database's error names its cause and its fix.
async fn execute_write<C: ConnectionTrait + ?Sized>(
    conn: &C,
    statement: Statement,
    context: impl FnOnce() -> String,
) -> Result<ExecResult> {
    let started = Instant::now();
    match conn.execute_raw(statement).await {
        Ok(res) => Ok(res),
        Err(e) => Err(write_failed(conn, context(), e, started).await),
    }
}

/// Maps the error of a write through the caller's connection that began at `started`. A locked database
/// has two causes, told apart by how long the statement waited against the connection's busy timeout:
/// SQLite fails at once a transaction that has read and now wants to write while another connection holds
/// (or has since used) the write lock, since waiting could deadlock; otherwise it waits out the busy timeout.
pub(super) async fn write_failed<C: ConnectionTrait + ?Sized>(
    conn: &C,
    context: String,
    err: DbErr,
    started: Instant,
) -> Error {
    let waited = started.elapsed();
    let timeout = if is_busy(&err) && !is_busy_snapshot(&err) { busy_timeout(conn).await } else { None };
    write_error(context, err, waited, timeout)
}

/// The connection's busy timeout, if it can be read.
async fn busy_timeout<C: ConnectionTrait + ?Sized>(conn: &C) -> Option<Duration> {
    let row = conn.query_one_raw(Statement::from_string(DbBackend::Sqlite, "PRAGMA busy_timeout")).await.ok()??;
    let ms = row.try_get_by_index::<i64>(0).ok()?;
    Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// How a write failed: see [`write_failed`]. `timeout` is the connection's busy timeout where known.
fn write_error(context: String, err: DbErr, waited: Duration, timeout: Option<Duration>) -> Error {
    const USE_BEGIN: &str = "SQLite cannot turn a transaction that has read into a writer then, and waiting cannot \
        help; open write transactions with `outbox_core::transaction` or `outbox_core::begin`, which take the \
        write lock first";
    // Well before the busy timeout: SQLite did not wait. Unknown timeout: a tenth of a second is no wait.
    let spent = match timeout {
        Some(t) => waited >= t.mul_f64(0.9),
        None => waited >= Duration::from_millis(100),
    };
    // A busy timeout this short cannot tell the causes apart: both are named.
    let short = timeout.is_some_and(|t| t < Duration::from_millis(100));
    let context = if is_busy_snapshot(&err) {
        format!("{context} (this transaction began with a read, and another writer committed since: {USE_BEGIN})")
    } else if is_busy(&err) && !spent {
        format!(
            "{context} (this transaction began with a read while another connection held the write lock, and \
             SQLite failed it after {} without waiting: {USE_BEGIN})",
            crate::record::short_duration(waited)
        )
    } else if is_busy(&err) && short {
        format!(
            "{context} (another connection held the write lock, and this connection's busy timeout is only {}: \
             raise `ConnectOpts::busy_timeout`; if this transaction began with a read, {USE_BEGIN})",
            crate::record::short_duration(timeout.unwrap_or_default())
        )
    } else if is_busy(&err) {
        format!(
            "{context} (another connection held the write lock past the busy timeout{}: look for a long write \
             transaction, or raise `ConnectOpts::busy_timeout`)",
            timeout.map(|t| format!(" of {}", crate::record::short_duration(t))).unwrap_or_default()
        )
    } else {
        context
    };
    Error::db(context)(err)
}

/// The database file of a pool; the worker opens its own connection to it.
fn database_file(db: &DatabaseConnection) -> Result<PathBuf> {
    let options = db.get_sqlite_connection_pool().connect_options();
    let path = options.get_filename();
    let text = path.to_string_lossy();
    if text.is_empty() || text == ":memory:" || text.starts_with("file:sqlx-in-memory") {
        return Err(Error::Unsupported(
            "the worker needs an SQLite file database (`sqlite://path/to/file.db?mode=rwc`); \
             an in-memory database is private to one connection"
                .into(),
        ));
    }
    Ok(path.to_path_buf())
}

/// See [`super::own_pool`]: the same file, journal mode, durability and busy timeout as `app`'s pool.
pub(super) fn own_pool(app: &DatabaseConnection, max: u32) -> DatabaseConnection {
    let options = app.get_sqlite_connection_pool().connect_options().as_ref().clone();
    let pool = SqlitePoolOptions::new().max_connections(max).min_connections(0).connect_lazy_with(options);
    SqlxSqliteConnector::from_sqlx_sqlite_pool(pool)
}

/// The pool's `synchronous` setting, which the worker's connection copies.
async fn synchronous_mode(db: &DatabaseConnection) -> Result<String> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Sqlite, "PRAGMA synchronous"))
        .await
        .map_err(Error::db("reading PRAGMA synchronous"))?;
    let level =
        row.map(|r| r.try_get_by_index::<i64>(0)).transpose().map_err(Error::db("reading PRAGMA synchronous"))?;
    Ok(match level {
        Some(0) => "OFF",
        Some(1) => "NORMAL",
        Some(3) => "EXTRA",
        _ => "FULL",
    }
    .to_owned())
}

/// How a worker's own connection to the pool's database file is opened, and what it claims.
async fn store_config(db: &DatabaseConnection, opts: WorkerStoreOpts) -> Result<StoreConfig> {
    Ok(StoreConfig {
        path: database_file(db)?,
        synchronous: synchronous_mode(db).await?,
        busy_timeout: Duration::from_secs(10),
        kinds_json: encode_names(&opts.unlimited_kinds())?,
        limited: opts
            .limits
            .iter()
            .map(|(kind, cap)| Ok((encode_names(std::slice::from_ref(kind))?, *cap)))
            .collect::<Result<_>>()?,
        queues_json: opts.queues.as_deref().map(encode_names).transpose()?,
        worker_id: opts.worker_id,
        // Read off the connection that claims.
        batched_events: false,
    })
}

fn encode_names(names: &[String]) -> Result<String> {
    serde_json::to_string(names).map_err(|e| Error::Internal(format!("encoding kind and queue names: {e}")))
}

/// One row of the enqueue INSERT and its values. A sequenced job takes the next place in its sequence and
/// waits when a job of the sequence holds it back; SQLite has one writer at a time, so the place is taken
/// in commit order.
fn push_row(sql: &mut String, values: &mut Vec<Value>, job: &NewJob) {
    sql.push_str("(?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ");
    job.push_values(values);
    match &job.sequence_key {
        None => sql.push_str("NULL, 0)"),
        Some(key) => {
            sql.push_str(concat!(
                "(SELECT COALESCE(MAX(sequence_no), 0) + 1 FROM outbox_jobs WHERE sequence_key = ?), \
                 EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = ? AND ",
                crate::storage::blocking!("b"),
                "))"
            ));
            values.extend([Value::from(key.clone()), Value::from(key.clone())]);
        }
    }
}

/// Enqueue's INSERT on SQLite.
const INSERT: super::Insert = super::Insert { columns: ", sequence_no, waiting", push_row };

fn stmt(sql: impl Into<String>, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Sqlite, sql, values)
}

const RECORD_COLUMNS: &str = concat!(
    "id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, \
     locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, \
     claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, \
     CASE WHEN waiting AND status = 'pending' THEN \
     (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND ",
    crate::storage::blocking!("h"),
    " ORDER BY h.sequence_no LIMIT 1) END, \
     (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1)"
);

async fn records<C: ConnectionTrait + ?Sized>(conn: &C, what: &str, s: Statement) -> Result<Vec<JobRecord>> {
    let rows = conn.query_all_raw(s).await.map_err(Error::db(what.to_owned()))?;
    rows.iter().map(rows::record).collect()
}

/// Fills the connection's scratch table with the latest completed job (by place in its sequence, then
/// completion time, then id; a job without a place comes before those with one) of
/// every value of `key_sql` among completed jobs of `kinds`, in one pass over the jobs. `key_values` bind
/// the placeholders of `key_sql`.
async fn open_scan<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kinds: &[&str],
    key_sql: &str,
    mut key_values: Vec<Value>,
) -> Result<(u64, u64)> {
    let ctx = || Error::db("building the latest completed job per path");
    conn.execute_unprepared("DROP TABLE IF EXISTS temp.outbox_path_scan").await.map_err(ctx())?;
    conn.execute_unprepared(
        "CREATE TEMP TABLE outbox_path_scan (seq INTEGER PRIMARY KEY, path TEXT, job_id TEXT NOT NULL, \
         kind TEXT NOT NULL, output TEXT, completed_at INTEGER, jobs INTEGER NOT NULL)",
    )
    .await
    .map_err(ctx())?;
    let marks = vec!["?"; kinds.len()].join(", ");
    key_values.extend(kinds.iter().map(|k| Value::from(*k)));
    let sql = format!(
        "INSERT INTO temp.outbox_path_scan (path, job_id, kind, output, completed_at, jobs) \
         SELECT path, id, kind, output, completed_at, jobs FROM ( \
             SELECT path, id, kind, output, completed_at, \
                 ROW_NUMBER() OVER (PARTITION BY path ORDER BY sequence_no DESC, completed_at DESC, id DESC) AS rn, \
                 COUNT(*) OVER (PARTITION BY path) AS jobs \
             FROM (SELECT id, kind, output, completed_at, sequence_no, {key_sql} AS path \
                   FROM outbox_jobs WHERE status = 'completed' AND kind IN ({marks})) \
         ) WHERE rn = 1 ORDER BY path"
    );
    conn.execute_raw(stmt(sql, key_values)).await.map_err(ctx())?;
    let row = conn
        .query_one_raw(stmt("SELECT COALESCE(SUM(jobs), 0), COUNT(*) FROM temp.outbox_path_scan", vec![]))
        .await
        .map_err(ctx())?
        .ok_or_else(|| Error::Internal("counting the path scan returned no row".into()))?;
    let n = |i| row.try_get_by_index::<i64>(i).map(|v| v.max(0).unsigned_abs()).map_err(ctx());
    Ok((n(0)?, n(1)?))
}

impl Driver for Sqlite {
    const MIGRATIONS: [Migration; 9] = schema::MIGRATIONS;

    fn tune(options: &mut ConnectOptions, settings: &Tuning) {
        let synchronous = if settings.full_sync { SqliteSynchronous::Full } else { SqliteSynchronous::Normal };
        let busy = settings.busy_timeout;
        options.map_sqlx_sqlite_opts(move |o| {
            o.journal_mode(SqliteJournalMode::Wal).synchronous(synchronous).busy_timeout(busy)
        });
    }

    /// `BEGIN IMMEDIATE`, retried while another writer holds the database past the busy timeout.
    async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        let opts = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        };
        let mut retry = Backoff::new(Duration::from_millis(10), Duration::MAX);
        let mut tries = 0;
        let started = Instant::now();
        loop {
            tries += 1;
            match db.begin_with_options(opts).await {
                Ok(txn) => return Ok(txn),
                Err(e) if is_busy(&e) && tries < BEGIN_TRIES => {
                    tracing::debug!(error = %e, tries, "database busy at begin; retrying");
                    retry.sleep().await;
                }
                // `BEGIN IMMEDIATE` reads nothing first: a busy one always waited out the busy timeout.
                Err(e) => {
                    let timeout = busy_timeout(db).await;
                    return Err(write_error("beginning a write transaction".into(), e, started.elapsed(), timeout));
                }
            }
        }
    }

    /// Deferred: a scan only reads; its scratch table lives in the connection's temp schema.
    async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        let opts = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Deferred),
            ..TransactionOptions::default()
        };
        db.begin_with_options(opts).await.map_err(Error::db("beginning a read transaction"))
    }

    /// SQLite stores any JSON text.
    fn unstorable(_payload: &serde_json::Value, _text: &str) -> Vec<Violation> {
        Vec::new()
    }

    /// The worker's connection has a thread of its own ([`SqliteStore`]); `bg` is not needed.
    async fn open_worker_store(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        _bg: &tokio::runtime::Handle,
    ) -> Result<Store> {
        Ok(Arc::new(SqliteStore::open(store_config(db, opts).await?)?))
    }

    /// Inserts one job unless an active job of its kind holds its key. True when the row was written.
    async fn insert_job<C: ConnectionTrait + ?Sized>(conn: &C, job: &NewJob) -> Result<bool> {
        super::insert_job(conn, DbBackend::Sqlite, job, &INSERT).await
    }

    /// Inserts many jobs in as few statements as the parameter limit allows; returns the ids written.
    async fn insert_jobs<C: ConnectionTrait + ?Sized>(conn: &C, jobs: &[NewJob]) -> Result<Vec<String>> {
        // A statement's subqueries may read the table before any of its rows is written: sequenced jobs
        // take their places one statement each.
        super::insert_jobs(conn, DbBackend::Sqlite, jobs, &INSERT, |j| j.sequence_key.is_some()).await
    }

    /// The id of the active (pending or claimed) job of `kind` holding `key`.
    async fn find_active<C: ConnectionTrait + ?Sized>(conn: &C, kind: &str, key: &str) -> Result<Option<String>> {
        let row = conn
            .query_one_raw(stmt(
                "SELECT id FROM outbox_jobs WHERE kind = ? AND idempotency_key = ? \
             AND status IN ('pending', 'claimed') LIMIT 1",
                vec![kind.into(), key.into()],
            ))
            .await
            .map_err(Error::db(format!("looking up the active job of kind `{kind}` by key")))?;
        row.map(|r| r.try_get_by_index::<String>(0)).transpose().map_err(Error::db("reading a job id"))
    }

    /// One job by id.
    async fn get<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Option<JobRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM outbox_jobs WHERE id = ?");
        Ok(records(conn, &format!("reading job `{id}`"), stmt(sql, vec![id.into()])).await?.into_iter().next())
    }

    /// Jobs matching a filter, newest first.
    async fn list<C: ConnectionTrait + ?Sized>(conn: &C, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        let mut sql = format!("SELECT {RECORD_COLUMNS} FROM outbox_jobs WHERE 1 = 1");
        let mut values: Vec<Value> = Vec::new();
        if let Some(status) = filter.status {
            sql.push_str(" AND status = ?");
            values.push(status.as_str().into());
        }
        if let Some(kind) = &filter.kind {
            sql.push_str(" AND kind = ?");
            values.push(kind.clone().into());
        }
        if let Some(queue) = &filter.queue {
            sql.push_str(" AND queue = ?");
            values.push(queue.clone().into());
        }
        if let Some(since) = filter.since {
            sql.push_str(" AND updated_at >= ?");
            values.push(since.timestamp_millis().into());
        }
        if let Some(key) = &filter.key {
            sql.push_str(" AND idempotency_key = ?");
            values.push(key.clone().into());
        }
        match &filter.sequence {
            Some(key) => {
                sql.push_str(" AND sequence_key = ? ORDER BY sequence_no DESC LIMIT ?");
                values.push(key.clone().into());
            }
            None => {
                if let Some(before) = &filter.before {
                    sql.push_str(" AND id < ?");
                    values.push(before.clone().into());
                }
                sql.push_str(" ORDER BY id DESC LIMIT ?");
            }
        }
        values.push(i64::try_from(filter.limit).unwrap_or(i64::MAX).into());
        records(conn, "listing jobs", stmt(sql, values)).await
    }

    /// Claimed jobs whose lease has run out: their worker died or hung and no rescuer has run since.
    async fn stuck<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<JobRecord>> {
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM outbox_jobs WHERE status = 'claimed' AND lease_expires_at < ? \
         ORDER BY lease_expires_at"
        );
        records(conn, "listing stuck jobs", stmt(sql, vec![now.into()])).await
    }

    /// Job counts by kind and status, with the oldest enqueue time of each group.
    async fn counts<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<StatusCount>> {
        let rows = conn
            .query_all_raw(stmt(
                "SELECT kind, status, COUNT(*), MIN(created_at) FROM outbox_jobs GROUP BY kind, status \
             ORDER BY kind, status",
                vec![],
            ))
            .await
            .map_err(Error::db("counting jobs"))?;
        rows::status_counts(rows)
    }

    /// Jobs that finished (completed or failed) since `since`, by kind and status.
    async fn finished_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<Vec<StatusCount>> {
        let rows = conn
            .query_all_raw(stmt(
                "SELECT kind, status, COUNT(*), MIN(created_at) FROM outbox_jobs \
             WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= ? \
             GROUP BY kind, status ORDER BY kind, status",
                vec![since.into()],
            ))
            .await
            .map_err(Error::db("counting recently finished jobs"))?;
        rows::status_counts(rows)
    }

    async fn activity<C: ConnectionTrait + ?Sized>(
        conn: &C,
        since: i64,
        bucket_ms: i64,
    ) -> Result<Vec<(i64, u64, u64)>> {
        // The finished index's own condition, so that it serves the range.
        let rows = conn
            .query_all_raw(stmt(
                "SELECT (updated_at / ?1) * ?1, SUM(status = 'completed'), SUM(status = 'failed') FROM outbox_jobs \
                 WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= ?2 GROUP BY 1 ORDER BY 1",
                vec![bucket_ms.into(), since.into()],
            ))
            .await
            .map_err(Error::db("counting recent activity"))?;
        rows::activity(&rows)
    }

    async fn failure_groups<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<Vec<FailureGroup>> {
        let rows = conn
            .query_all_raw(stmt(
                "SELECT kind, last_error, COUNT(*), MAX(updated_at), MAX(id) FROM outbox_jobs \
                 WHERE status = 'failed' GROUP BY kind, last_error ORDER BY COUNT(*) DESC, MAX(updated_at) DESC \
                 LIMIT ?",
                vec![limit_value(limit)],
            ))
            .await
            .map_err(Error::db("grouping failed jobs"))?;
        rows::failure_groups(&rows)
    }

    /// Run and wait times of jobs completed since `since`, by kind.
    async fn durations<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<Vec<KindDurations>> {
        let rows = conn
            .query_all_raw(stmt(
                "SELECT kind, COUNT(*), AVG(completed_at - claimed_at), MAX(completed_at - claimed_at), \
             AVG(claimed_at - created_at) FROM outbox_jobs \
             WHERE status = 'completed' AND updated_at >= ? GROUP BY kind ORDER BY kind",
                vec![since.into()],
            ))
            .await
            .map_err(Error::db("measuring job durations"))?;
        rows::durations(&rows)
    }

    /// Idempotency keys held by more than one job (across all statuses), most repeated first.
    async fn duplicates<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<Vec<DuplicateKey>> {
        let rows = conn
            .query_all_raw(stmt(
                "SELECT kind, idempotency_key, COUNT(*), SUM(status IN ('pending', 'claimed')), \
             SUM(status = 'completed') FROM outbox_jobs WHERE idempotency_key IS NOT NULL \
             GROUP BY kind, idempotency_key HAVING COUNT(*) > 1 ORDER BY COUNT(*) DESC, kind LIMIT ?",
                vec![limit_value(limit)],
            ))
            .await
            .map_err(Error::db("finding duplicate keys"))?;
        rows::duplicates(&rows)
    }

    /// Failed or cancelled back to pending with its attempts reset. `Ok(false)` when no such job is in a
    /// Failed or cancelled back to pending with its attempts reset, unless an active job holds its key.
    async fn retry<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool> {
        let res = execute_write(
            conn,
            stmt(
                "UPDATE outbox_jobs SET status = 'pending', attempts = 0, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, run_at = ?, lease_expires_at = NULL, \
                 updated_at = ? WHERE id = ? AND status IN ('failed', 'cancelled') AND (idempotency_key IS NULL \
                 OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = outbox_jobs.kind \
                 AND a.idempotency_key = outbox_jobs.idempotency_key AND a.status IN ('pending', 'claimed')))",
                vec![now.into(), now.into(), id.into()],
            ),
            || format!("retrying job `{id}`"),
        )
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Every failed job (of one kind, when given) back to pending: of several sharing a key the latest, and none
    /// whose key an active twin holds.
    async fn retry_failed<C: ConnectionTrait + ?Sized>(
        conn: &C,
        kind: Option<&str>,
        error: Option<&str>,
        now: i64,
    ) -> Result<u64> {
        let kind_filter = if kind.is_some() { " AND f.kind = ?" } else { "" };
        let error_filter = if error.is_some() { " AND f.last_error = ?" } else { "" };
        let sql = format!(
            "UPDATE outbox_jobs SET status = 'pending', attempts = 0, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, run_at = ?, lease_expires_at = NULL, \
         updated_at = ? WHERE status = 'failed' AND id IN ( \
             SELECT id FROM ( \
                 SELECT f.id, ROW_NUMBER() OVER ( \
                     PARTITION BY f.kind, f.idempotency_key IS NULL, COALESCE(f.idempotency_key, f.id) \
                     ORDER BY f.updated_at DESC, f.id DESC) AS rn \
                 FROM outbox_jobs f WHERE f.status = 'failed'{kind_filter}{error_filter} AND (f.idempotency_key IS NULL \
                     OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = f.kind \
                         AND a.idempotency_key = f.idempotency_key AND a.status IN ('pending', 'claimed')))) \
             WHERE rn = 1)"
        );
        let mut values: Vec<Value> = vec![now.into(), now.into()];
        values.extend(kind.map(Value::from));
        values.extend(error.map(Value::from));
        let res = execute_write(conn, stmt(sql, values), || "retrying failed jobs".into()).await?;
        Ok(res.rows_affected())
    }

    /// Pending to cancelled. `Ok(false)` when the job is not pending.
    async fn cancel<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool> {
        let res = execute_write(
            conn,
            stmt(
                "UPDATE outbox_jobs SET status = 'cancelled', sequence_hold = CASE WHEN status = 'pending' \
                 THEN sequence_hold ELSE 2 END, updated_at = ? WHERE id = ? AND (status = 'pending' \
                 OR (status IN ('failed', 'cancelled') AND sequence_key IS NOT NULL AND sequence_hold = 1))",
                vec![now.into(), id.into()],
            ),
            || format!("cancelling job `{id}`"),
        )
        .await?;
        Ok(res.rows_affected() == 1)
    }

    /// Deletes terminal jobs (of the given statuses) last changed before `before`.
    async fn purge<C: ConnectionTrait + ?Sized>(conn: &C, statuses: &[JobStatus], before: i64) -> Result<u64> {
        let terminal: Vec<&str> = statuses.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
        if terminal.is_empty() {
            return Ok(0);
        }
        let marks = vec!["?"; terminal.len()].join(", ");
        let mut values: Vec<Value> = terminal.iter().map(|s| (*s).into()).collect();
        values.push(before.into());
        let sql = format!("DELETE FROM outbox_jobs WHERE status IN ({marks}) AND updated_at < ? {HELD_KEPT}");
        let res = execute_write(conn, stmt(sql, values), || "purging finished jobs".into()).await?;
        // Workers' feed rows list many jobs and belong to none: they go by the same age.
        execute_write(
            conn,
            stmt("DELETE FROM outbox_job_events WHERE job_id = '' AND at < ?", vec![before.into()]),
            || "purging old feed rows".into(),
        )
        .await?;
        Ok(res.rows_affected())
    }

    /// Deletes one finished job unless it holds its sequence.
    async fn delete<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<bool> {
        let sql = format!(
            "DELETE FROM outbox_jobs WHERE id = ? AND status IN ('completed', 'failed', 'cancelled') {HELD_KEPT}"
        );
        let res = execute_write(conn, stmt(sql, vec![id.into()]), || format!("deleting job `{id}`")).await?;
        Ok(res.rows_affected() == 1)
    }

    /// The history of one job, oldest first.
    async fn history<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Vec<StoredEvent>> {
        let rows = conn
            .query_all_raw(stmt(
                "SELECT at, event, attempt, worker, error, claimed_at, completed_at FROM outbox_job_events \
                 WHERE job_id = ? ORDER BY id",
                vec![id.into()],
            ))
            .await
            .map_err(Error::db(format!("reading the history of job `{id}`")))?;
        rows::history(&rows, id)
    }

    /// Materializes the latest completed job per path into the connection's temp schema (`outbox_path_scan`,
    /// numbered in path order) and returns (completed jobs, distinct paths). Must run inside a transaction:
    /// rolling it back drops the table, and the pages read it on the same connection.
    async fn open_path_scan<C: ConnectionTrait + ?Sized>(conn: &C, fields: &[(&str, &str)]) -> Result<(u64, u64)> {
        // Each kind's path field is picked by a CASE, so adding kinds adds no scan.
        let mut values: Vec<Value> = Vec::with_capacity(fields.len() * 2);
        let mut case = String::from("CAST(json_extract(payload, CASE kind");
        for (kind, json_path) in fields {
            case.push_str(" WHEN ? THEN ?");
            values.push((*kind).into());
            values.push((*json_path).into());
        }
        case.push_str(" END) AS TEXT)");
        let kinds: Vec<&str> = fields.iter().map(|(kind, _)| *kind).collect();
        open_scan(conn, &kinds, &case, values).await
    }

    /// Opens the scan of `scan::latest_completed_by_key`: the key of a job is the JSON array of the
    /// values at `json_paths` in its payload.
    async fn open_key_scan<C: ConnectionTrait + ?Sized>(
        conn: &C,
        kind: &str,
        json_paths: &[&str],
    ) -> Result<(u64, u64)> {
        let marks = vec!["json_extract(payload, ?)"; json_paths.len()].join(", ");
        let values = json_paths.iter().map(|p| Value::from(*p)).collect();
        open_scan(conn, &[kind], &format!("json_array({marks})"), values).await
    }

    /// The entries of the open path scan numbered after `after`, at most `limit`, each with its number.
    async fn path_scan_page<C: ConnectionTrait + ?Sized>(conn: &C, after: i64, limit: u64) -> Result<Vec<ScanRow>> {
        let rows = conn
            .query_all_raw(stmt(
                "SELECT seq, path, job_id, kind, output, completed_at, jobs FROM temp.outbox_path_scan \
             WHERE seq > ? ORDER BY seq LIMIT ?",
                vec![after.into(), limit_value(limit)],
            ))
            .await
            .map_err(Error::db("reading a page of the path scan"))?;
        rows::path_scan_page(&rows)
    }

    /// Records (or refreshes) each kind's schema and options.
    async fn record_kinds<C: ConnectionTrait + ?Sized>(
        conn: &C,
        kinds: &[KindRow],
        worker: &str,
        now: i64,
    ) -> Result<()> {
        for kind in kinds {
            execute_write(
                conn,
                stmt(
                    "INSERT INTO outbox_kinds (name, schema, schema_hash, queue, priority, max_attempts, is_unique, \
             key_fields, recorded_by, first_seen_at, updated_at, sequence, on_sequence_failure, concurrency) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET schema = excluded.schema, schema_hash = excluded.schema_hash, \
             queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts, \
             is_unique = excluded.is_unique, key_fields = excluded.key_fields, \
             recorded_by = excluded.recorded_by, updated_at = excluded.updated_at, sequence = excluded.sequence, \
             on_sequence_failure = excluded.on_sequence_failure, concurrency = excluded.concurrency",
                    kind.values(worker, now, 2),
                ),
                || format!("recording kind `{}`", kind.name),
            )
            .await?;
        }
        Ok(())
    }

    /// The recorded kinds, by name; only `name` when given.
    async fn kinds<C: ConnectionTrait + ?Sized>(conn: &C, name: Option<&str>) -> Result<Vec<KindRecord>> {
        let ctx = || Error::db("reading the kinds table");
        let (filter, values) = match name {
            Some(n) => (" WHERE name = ?", vec![n.into()]),
            None => ("", vec![]),
        };
        let rows = conn
            .query_all_raw(stmt(
                format!(
                    "SELECT name, schema, schema_hash, queue, priority, max_attempts, is_unique, key_fields, \
                 recorded_by, first_seen_at, updated_at, sequence, on_sequence_failure, concurrency \
                 FROM outbox_kinds{filter} ORDER BY name"
                ),
                values,
            ))
            .await
            .map_err(ctx())?;
        rows::kinds(&rows)
    }

    /// Job counts of every queue by status, with the oldest due pending job.
    async fn queues<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<QueueCounts>> {
        let ctx = || Error::db("counting jobs by queue");
        let rows = conn
            .query_all_raw(stmt(
                "SELECT queue, \
                 SUM(status = 'pending' AND waiting = 0 AND run_at <= ?), \
                 SUM(status = 'pending' AND waiting = 0 AND run_at > ?), \
                 SUM(status = 'claimed'), SUM(status = 'claimed' AND lease_expires_at < ?), \
                 SUM(status = 'completed'), SUM(status = 'failed'), SUM(status = 'cancelled'), \
                 MIN(CASE WHEN status = 'pending' AND waiting = 0 AND run_at <= ? THEN run_at END), \
                 SUM(status = 'pending' AND waiting = 1) \
             FROM outbox_jobs GROUP BY queue ORDER BY queue",
                vec![now.into(), now.into(), now.into(), now.into()],
            ))
            .await
            .map_err(ctx())?;
        rows::queues(&rows)
    }

    /// Sequences held by a failed or cancelled head, and the first `limit` heads, longest held first.
    async fn blocked<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<(u64, Vec<BlockedSequence>)> {
        super::blocked(conn, DbBackend::Sqlite, RECORD_COLUMNS, "?", limit).await
    }

    async fn feed<C: ConnectionTrait + ?Sized>(conn: &C, after: &str, limit: u64) -> Result<Vec<FeedEvent>> {
        feed::feed(conn, after, limit).await
    }

    async fn feed_head<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<String> {
        feed::head(conn).await
    }

    async fn upsert_worker<C: ConnectionTrait + ?Sized>(conn: &C, worker: &WorkerRow) -> Result<()> {
        feed::upsert_worker(conn, worker).await
    }

    async fn remove_worker<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<()> {
        execute_write(conn, stmt("DELETE FROM outbox_workers WHERE id = ?", vec![id.into()]), || {
            format!("removing worker `{id}` from the registry")
        })
        .await?;
        Ok(())
    }

    async fn workers<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<WorkerRecord>> {
        feed::workers(conn, now).await
    }

    async fn remote_claim(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        limit: usize,
        now: i64,
        lease_until: i64,
    ) -> Result<Vec<ClaimedJob>> {
        feed::remote_claim(store_config(db, opts).await?, limit, now, lease_until).await
    }

    async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
        let opts = WorkerStoreOpts { worker_id: owner.to_owned(), kinds: Vec::new(), limits: Vec::new(), queues: None };
        feed::remote_finish(store_config(db, opts).await?, finished).await
    }

    async fn remote_extend(db: &DatabaseConnection, owner: &str, id: &str, attempt: i32, until: i64) -> Result<bool> {
        let res = execute_write(
            db,
            stmt(
                "UPDATE outbox_jobs SET lease_expires_at = MAX(COALESCE(lease_expires_at, 0), ?) \
                 WHERE id = ? AND status = 'claimed' AND locked_by = ? AND attempts = ?",
                vec![until.into(), id.into(), owner.into(), attempt.into()],
            ),
            || format!("renewing the lease of job `{id}`"),
        )
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn register_schedule<C: ConnectionTrait + ?Sized>(
        conn: &C,
        row: &ScheduleRow,
        now: i64,
    ) -> Result<Option<i64>> {
        time::register_schedule(conn, row, now).await
    }

    async fn claim_tick<C: ConnectionTrait + ?Sized>(conn: &C, row: &ScheduleRow, tick: i64, now: i64) -> Result<bool> {
        time::claim_tick(conn, row, tick, now).await
    }

    async fn set_tick_job<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, job_id: &str) -> Result<()> {
        time::set_tick_job(conn, name, job_id).await
    }

    async fn schedules<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ScheduleRecord>> {
        time::schedules(conn).await
    }

    async fn take_lock<C: ConnectionTrait + ?Sized>(
        conn: &C,
        name: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<bool> {
        time::take_lock(conn, name, holder, now, until).await
    }

    async fn release_lock<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, holder: &str) -> Result<()> {
        time::release_lock(conn, name, holder).await
    }

    async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, batch: u64) -> Result<u64> {
        time::prune(conn, rules, batch).await
    }

    async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64> {
        time::prune_feed(conn, before, batch).await
    }

    async fn record_reconciliation<C: ConnectionTrait + ?Sized>(conn: &C, rec: &ReconciliationRecord) -> Result<()> {
        time::record_reconciliation(conn, rec).await
    }

    async fn reconciliations<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ReconciliationRecord>> {
        time::reconciliations(conn).await
    }
}
