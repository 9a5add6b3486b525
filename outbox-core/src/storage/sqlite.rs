//! SQLite statements issued through the caller's sea-orm connection: schema, enqueue and operator queries.
//! Timestamps are stored as integer milliseconds since the Unix epoch.

use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use super::{NewJob, rows};
use crate::error::{Error, Result};
use crate::ops::{DuplicateKey, JobEvent, JobFilter, KindDurations, KindRecord, QueueCounts, StatusCount};
use crate::record::{JobRecord, JobStatus};

/// The first schema: the jobs table and the indexes of the claim paths, the lease scan, dedup and purge.
pub(crate) const SCHEMA_V1: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS outbox_jobs (
        id TEXT PRIMARY KEY NOT NULL,
        kind TEXT NOT NULL,
        queue TEXT NOT NULL DEFAULT 'default',
        payload TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending'
            CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
        priority INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        runs INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
        run_at INTEGER NOT NULL,
        locked_by TEXT,
        locked_at INTEGER,
        lease_expires_at INTEGER,
        last_error TEXT,
        idempotency_key TEXT,
        schema_hash TEXT NOT NULL,
        output TEXT,
        created_at INTEGER NOT NULL,
        claimed_at INTEGER,
        completed_at INTEGER,
        updated_at INTEGER NOT NULL
    )",
    // Workers serving every queue claim in (priority, run_at, id) order straight off this index; a claim
    // that had to sort the whole backlog would cost time proportional to it.
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim
        ON outbox_jobs (priority DESC, run_at, id) WHERE status = 'pending'",
    // Workers restricted to queues seek each queue's due jobs here.
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim_queue
        ON outbox_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending'",
    "CREATE UNIQUE INDEX IF NOT EXISTS outbox_jobs_active_key
        ON outbox_jobs (kind, idempotency_key)
        WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_lease
        ON outbox_jobs (lease_expires_at) WHERE status = 'claimed'",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_finished
        ON outbox_jobs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled')",
];

/// The job history, written by a trigger so every writer (workers, operators, hand-written SQL) is recorded
/// without an extra round trip. Only the transitions the job row cannot tell are stored: retries with their
/// errors, failures, rescues, snoozes, releases, cancels and operator retries. The happy path (enqueue, claim,
/// complete) adds no row; [`history`] reads those milestones off the job itself.
pub(crate) const SCHEMA_V2_EVENTS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS outbox_job_events (
        id INTEGER PRIMARY KEY,
        job_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        event TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        worker TEXT,
        error TEXT
    )",
    "CREATE INDEX IF NOT EXISTS outbox_job_events_job ON outbox_job_events (job_id, id)",
    "CREATE TRIGGER IF NOT EXISTS outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs
    WHEN (OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts)
        AND NEW.status NOT IN ('claimed', 'completed') BEGIN
        INSERT INTO outbox_job_events (job_id, at, event, attempt, worker, error)
        VALUES (
            NEW.id,
            NEW.updated_at,
            CASE
                WHEN NEW.status = 'cancelled' THEN 'cancelled'
                WHEN OLD.status IN ('failed', 'cancelled') THEN 'retried_by_operator'
                WHEN OLD.status = 'claimed' AND NEW.attempts = OLD.attempts AND NEW.last_error LIKE 'lease expired%' THEN
                    CASE WHEN NEW.status = 'failed' THEN 'rescued_failed' ELSE 'rescued' END
                WHEN NEW.status = 'failed' THEN 'failed'
                WHEN NEW.attempts < OLD.attempts THEN
                    CASE WHEN NEW.run_at > NEW.updated_at THEN 'snoozed' ELSE 'released' END
                ELSE 'retried'
            END,
            CASE WHEN NEW.attempts < OLD.attempts THEN OLD.attempts ELSE NEW.attempts END,
            NEW.locked_by,
            CASE WHEN NEW.status IN ('pending', 'failed') AND OLD.status = 'claimed' AND NEW.attempts >= OLD.attempts
                THEN NEW.last_error END
        );
    END",
    "CREATE TRIGGER IF NOT EXISTS outbox_jobs_purged AFTER DELETE ON outbox_jobs BEGIN
        DELETE FROM outbox_job_events WHERE job_id = OLD.id;
    END",
];

/// The kinds workers have registered, with their JSON Schemas, so tools without the Rust types can validate
/// and show them.
pub(crate) const SCHEMA_V3_KINDS: &[&str] = &["CREATE TABLE IF NOT EXISTS outbox_kinds (
        name TEXT PRIMARY KEY NOT NULL,
        schema TEXT NOT NULL,
        schema_hash TEXT NOT NULL,
        queue TEXT NOT NULL,
        priority INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        is_unique INTEGER NOT NULL,
        key_fields TEXT NOT NULL,
        recorded_by TEXT,
        first_seen_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    )"];

/// One row's placeholders in the enqueue INSERT (SQLite numbers `?` by position).
fn push_row(sql: &mut String, _first: usize) {
    sql.push_str("(?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?, ?, ?, ?)");
}

fn stmt(sql: impl Into<String>, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Sqlite, sql, values)
}

/// Inserts one job unless an active job of its kind holds its key. True when the row was written.
pub(crate) async fn insert_job<C: ConnectionTrait + ?Sized>(conn: &C, job: &NewJob) -> Result<bool> {
    super::insert_job(conn, DbBackend::Sqlite, job, push_row).await
}

/// Inserts many jobs in as few statements as the parameter limit allows; returns the ids written.
pub(crate) async fn insert_jobs<C: ConnectionTrait + ?Sized>(conn: &C, jobs: &[NewJob]) -> Result<Vec<String>> {
    super::insert_jobs(conn, DbBackend::Sqlite, jobs, push_row).await
}

/// The id of the active (pending or claimed) job of `kind` holding `key`.
pub(crate) async fn find_active<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kind: &str,
    key: &str,
) -> Result<Option<String>> {
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

const RECORD_COLUMNS: &str = "id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, \
     locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, \
     claimed_at, completed_at, updated_at, runs";

async fn records<C: ConnectionTrait + ?Sized>(conn: &C, what: &str, s: Statement) -> Result<Vec<JobRecord>> {
    let rows = conn.query_all_raw(s).await.map_err(Error::db(what.to_owned()))?;
    rows.iter().map(rows::record).collect()
}

/// One job by id.
pub(crate) async fn get<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Option<JobRecord>> {
    let sql = format!("SELECT {RECORD_COLUMNS} FROM outbox_jobs WHERE id = ?");
    Ok(records(conn, &format!("reading job `{id}`"), stmt(sql, vec![id.into()])).await?.into_iter().next())
}

/// Jobs matching a filter, newest first.
pub(crate) async fn list<C: ConnectionTrait + ?Sized>(conn: &C, filter: &JobFilter) -> Result<Vec<JobRecord>> {
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
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    values.push(i64::try_from(filter.limit).unwrap_or(i64::MAX).into());
    records(conn, "listing jobs", stmt(sql, values)).await
}

/// Claimed jobs whose lease has run out: their worker died or hung and no rescuer has run since.
pub(crate) async fn stuck<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<JobRecord>> {
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM outbox_jobs WHERE status = 'claimed' AND lease_expires_at < ? \
         ORDER BY lease_expires_at"
    );
    records(conn, "listing stuck jobs", stmt(sql, vec![now.into()])).await
}

/// Job counts by kind and status, with the oldest enqueue time of each group.
pub(crate) async fn counts<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<StatusCount>> {
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
pub(crate) async fn finished_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<Vec<StatusCount>> {
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

/// Run and wait times of jobs completed since `since`, by kind.
pub(crate) async fn durations<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<Vec<KindDurations>> {
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
pub(crate) async fn duplicates<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<Vec<DuplicateKey>> {
    let rows = conn
        .query_all_raw(stmt(
            "SELECT kind, idempotency_key, COUNT(*), SUM(status IN ('pending', 'claimed')), \
             SUM(status = 'completed') FROM outbox_jobs WHERE idempotency_key IS NOT NULL \
             GROUP BY kind, idempotency_key HAVING COUNT(*) > 1 ORDER BY COUNT(*) DESC, kind LIMIT ?",
            vec![i64::try_from(limit).unwrap_or(i64::MAX).into()],
        ))
        .await
        .map_err(Error::db("finding duplicate keys"))?;
    rows::duplicates(&rows)
}

fn is_unique_violation(err: &sea_orm::DbErr) -> bool {
    err.to_string().contains("UNIQUE constraint failed")
}

/// Failed or cancelled back to pending with its attempts reset. `Ok(false)` when no such job is in a
/// retryable status; an active job with the same key is reported by id.
pub(crate) async fn retry<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool> {
    let res = conn
        .execute_raw(stmt(
            "UPDATE outbox_jobs SET status = 'pending', attempts = 0, run_at = ?, lease_expires_at = NULL, \
             updated_at = ? WHERE id = ? AND status IN ('failed', 'cancelled')",
            vec![now.into(), now.into(), id.into()],
        ))
        .await;
    match res {
        Ok(r) => Ok(r.rows_affected() == 1),
        Err(e) if is_unique_violation(&e) => Err(Error::InvalidTransition {
            id: id.to_owned(),
            action: "retry",
            status: "failed".into(),
            hint: "an active job with the same kind and idempotency key exists; it already carries this intent",
        }),
        Err(e) => Err(Error::Database { context: format!("retrying job `{id}`"), source: e }),
    }
}

/// Every failed job (of one kind, when given) back to pending; jobs whose key is held by an active twin stay.
pub(crate) async fn retry_failed<C: ConnectionTrait + ?Sized>(conn: &C, kind: Option<&str>, now: i64) -> Result<u64> {
    let mut sql = String::from(
        "UPDATE OR IGNORE outbox_jobs SET status = 'pending', attempts = 0, run_at = ?, \
         lease_expires_at = NULL, updated_at = ? WHERE status = 'failed'",
    );
    let mut values: Vec<Value> = vec![now.into(), now.into()];
    if let Some(kind) = kind {
        sql.push_str(" AND kind = ?");
        values.push(kind.into());
    }
    let res = conn.execute_raw(stmt(sql, values)).await.map_err(Error::db("retrying failed jobs"))?;
    Ok(res.rows_affected())
}

/// Pending to cancelled. `Ok(false)` when the job is not pending.
pub(crate) async fn cancel<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool> {
    let res = conn
        .execute_raw(stmt(
            "UPDATE outbox_jobs SET status = 'cancelled', updated_at = ? WHERE id = ? AND status = 'pending'",
            vec![now.into(), id.into()],
        ))
        .await
        .map_err(Error::db(format!("cancelling job `{id}`")))?;
    Ok(res.rows_affected() == 1)
}

/// Deletes terminal jobs (of the given statuses) last changed before `before`.
pub(crate) async fn purge<C: ConnectionTrait + ?Sized>(conn: &C, statuses: &[JobStatus], before: i64) -> Result<u64> {
    let terminal: Vec<&str> = statuses.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
    if terminal.is_empty() {
        return Ok(0);
    }
    let marks = vec!["?"; terminal.len()].join(", ");
    let mut values: Vec<Value> = terminal.iter().map(|s| (*s).into()).collect();
    values.push(before.into());
    let sql = format!("DELETE FROM outbox_jobs WHERE status IN ({marks}) AND updated_at < ?");
    let res = conn.execute_raw(stmt(sql, values)).await.map_err(Error::db("purging finished jobs"))?;
    Ok(res.rows_affected())
}

/// The history of one job, oldest first.
pub(crate) async fn history<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Vec<JobEvent>> {
    let rows = conn
        .query_all_raw(stmt(
            "SELECT at, event, attempt, worker, error FROM outbox_job_events WHERE job_id = ? ORDER BY id",
            vec![id.into()],
        ))
        .await
        .map_err(Error::db(format!("reading the history of job `{id}`")))?;
    rows::history(&rows, id)
}

/// Materializes the latest completed job per path into the connection's temp schema (`outbox_path_scan`,
/// numbered in path order) and returns (completed jobs, distinct paths). Must run inside a transaction:
/// rolling it back drops the table, and the pages read it on the same connection.
pub(crate) async fn open_path_scan<C: ConnectionTrait + ?Sized>(
    conn: &C,
    fields: &[crate::ops::PathField<'_>],
) -> Result<(u64, u64)> {
    // Each kind's path field is picked by a CASE, so adding kinds adds no scan.
    let mut values: Vec<Value> = Vec::with_capacity(fields.len() * 2);
    let mut case = String::from("CAST(json_extract(payload, CASE kind");
    for f in fields {
        case.push_str(" WHEN ? THEN ?");
        values.push(f.kind.into());
        values.push(f.json_path.into());
    }
    case.push_str(" END) AS TEXT)");
    let kinds: Vec<&str> = fields.iter().map(|f| f.kind).collect();
    open_scan(conn, &kinds, &case, values).await
}

/// Opens the scan of [`crate::ops::latest_completed_by_key`]: the key of a job is the JSON array of the
/// values at `json_paths` in its payload.
pub(crate) async fn open_key_scan<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kind: &str,
    json_paths: &[&str],
) -> Result<(u64, u64)> {
    let marks = vec!["json_extract(payload, ?)"; json_paths.len()].join(", ");
    let values = json_paths.iter().map(|p| Value::from(*p)).collect();
    open_scan(conn, &[kind], &format!("json_array({marks})"), values).await
}

/// Fills the connection's scratch table with the latest completed job (by completion time, then id) of
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
                 ROW_NUMBER() OVER (PARTITION BY path ORDER BY completed_at DESC, id DESC) AS rn, \
                 COUNT(*) OVER (PARTITION BY path) AS jobs \
             FROM (SELECT id, kind, output, completed_at, {key_sql} AS path \
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

/// The entries of the open path scan numbered after `after`, at most `limit`, each with its number.
pub(crate) async fn path_scan_page<C: ConnectionTrait + ?Sized>(
    conn: &C,
    after: i64,
    limit: u64,
) -> Result<Vec<(i64, crate::ops::PathJob)>> {
    let rows = conn
        .query_all_raw(stmt(
            "SELECT seq, path, job_id, kind, output, completed_at, jobs FROM temp.outbox_path_scan \
             WHERE seq > ? ORDER BY seq LIMIT ?",
            vec![after.into(), i64::try_from(limit).unwrap_or(i64::MAX).into()],
        ))
        .await
        .map_err(Error::db("reading a page of the path scan"))?;
    rows::path_scan_page(&rows)
}

/// Records (or refreshes) each kind's schema and options.
pub(crate) async fn record_kinds<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kinds: &[&crate::kind::Kind],
    worker: &str,
    now: i64,
) -> Result<()> {
    for kind in kinds {
        conn.execute_raw(stmt(
            "INSERT INTO outbox_kinds (name, schema, schema_hash, queue, priority, max_attempts, is_unique, \
             key_fields, recorded_by, first_seen_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET schema = excluded.schema, schema_hash = excluded.schema_hash, \
             queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts, \
             is_unique = excluded.is_unique, key_fields = excluded.key_fields, \
             recorded_by = excluded.recorded_by, updated_at = excluded.updated_at",
            super::kind_values(kind, worker, now, 2)?,
        ))
        .await
        .map_err(Error::db(format!("recording kind `{}`", kind.name())))?;
    }
    Ok(())
}

/// The recorded kinds, by name; only `name` when given.
pub(crate) async fn kinds<C: ConnectionTrait + ?Sized>(conn: &C, name: Option<&str>) -> Result<Vec<KindRecord>> {
    let ctx = || Error::db("reading the kinds table");
    let (filter, values) = match name {
        Some(n) => (" WHERE name = ?", vec![n.into()]),
        None => ("", vec![]),
    };
    let rows = conn
        .query_all_raw(stmt(
            format!(
                "SELECT name, schema, schema_hash, queue, priority, max_attempts, is_unique, key_fields, \
                 recorded_by, first_seen_at, updated_at FROM outbox_kinds{filter} ORDER BY name"
            ),
            values,
        ))
        .await
        .map_err(ctx())?;
    rows::kinds(&rows)
}

/// Job counts of every queue by status, with the oldest due pending job.
pub(crate) async fn queues<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<QueueCounts>> {
    let ctx = || Error::db("counting jobs by queue");
    let rows = conn
        .query_all_raw(stmt(
            "SELECT queue, \
                 SUM(status = 'pending' AND run_at <= ?), SUM(status = 'pending' AND run_at > ?), \
                 SUM(status = 'claimed'), SUM(status = 'claimed' AND lease_expires_at < ?), \
                 SUM(status = 'completed'), SUM(status = 'failed'), SUM(status = 'cancelled'), \
                 MIN(CASE WHEN status = 'pending' AND run_at <= ? THEN run_at END) \
             FROM outbox_jobs GROUP BY queue ORDER BY queue",
            vec![now.into(), now.into(), now.into(), now.into()],
        ))
        .await
        .map_err(ctx())?;
    rows::queues(&rows)
}
