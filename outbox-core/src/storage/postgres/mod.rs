//! PostgreSQL: statements issued through the caller's sea-orm connection (schema, enqueue, operator queries),
//! the worker's own connections (`worker.rs`) and its `LISTEN` connection (`listener.rs`).
//!
//! The columns use PostgreSQL's own types (`timestamptz`, `jsonb`); every statement converts at its edge so
//! the rows come back in the shapes [`super::rows`] decodes for both backends: times as integer milliseconds
//! since the Unix epoch, JSON as text. Identifiers (`id`, `kind`, `queue`, keys) compare bytewise
//! (`COLLATE "C"`), as they do on SQLite.

mod feed;
mod listener;
mod schema;
mod time;
mod worker;

use sea_orm::sqlx::postgres::PgPoolOptions;
use sea_orm::{
    ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, SqlxPostgresConnector,
    Statement, TransactionTrait, Value,
};

pub(super) use worker::PgStore;

use super::{
    ClaimedJob, Driver, Finished, HELD_KEPT, KindRow, Migration, NewJob, PruneRules, ScanRow, ScheduleRow, Store,
    StoredEvent, Tuning, WorkerRow, WorkerStoreOpts, limit_value, rows,
};
use crate::error::{Error, Result, pointer_token};
use crate::job::Violation;
use crate::record::{
    FeedEvent, JobFilter, JobRecord, JobStatus, KindRecord, ReconciliationRecord, ScheduleRecord, WorkerRecord,
};
use crate::stats::{BlockedSequence, DuplicateKey, FailureGroup, KindDurations, QueueCounts, StatusCount};
use worker::PgStoreConfig;

/// The PostgreSQL backend.
pub(crate) struct Postgres;

fn write_error(context: String, err: DbErr) -> Error {
    Error::db(context)(err)
}

/// See [`super::own_pool`]: `app`'s connection options, named `outbox-chores <worker>` in `pg_stat_activity`.
pub(super) fn own_pool(app: &DatabaseConnection, worker_id: &str, max: u32) -> DatabaseConnection {
    let options = app.get_postgres_connection_pool().connect_options().as_ref().clone();
    let options = options.application_name(&worker::application_name("outbox-chores", worker_id));
    let pool = PgPoolOptions::new()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(std::time::Duration::from_secs(30))
        .connect_lazy_with(options);
    SqlxPostgresConnector::from_sqlx_postgres_pool(pool)
}

/// The schema the outbox tables are found in (the first of the connection's `search_path` that exists).
async fn current_schema(db: &DatabaseConnection) -> Result<String> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, "SELECT current_schema()::text"))
        .await
        .map_err(Error::db("reading the current schema"))?;
    row.and_then(|r| r.try_get_by_index::<Option<String>>(0).transpose())
        .transpose()
        .map_err(Error::db("reading the current schema"))?
        .ok_or_else(|| Error::Invalid("the connection's search_path names no existing schema".into()))
}

/// Whether the schema has migration 7's batched feed rows (see [`worker::PgStoreConfig::batched_events`]).
pub(super) async fn batched_events(db: &DatabaseConnection) -> Result<bool> {
    let ctx = || Error::db("reading the outbox schema's columns");
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() \
             AND table_name = 'outbox_jobs' AND column_name = 'event_flip')",
        ))
        .await
        .map_err(ctx())?;
    Ok(row.map(|r| r.try_get_by_index::<bool>(0)).transpose().map_err(ctx())?.unwrap_or(false))
}

/// `text` and `jsonb` refuse the NUL character (`\u0000`), in strings and in object keys alike.
fn nul_violations(value: &serde_json::Value, path: &mut String, out: &mut Vec<Violation>) {
    const WHY: &str = "contains the NUL character (\\u0000), which PostgreSQL cannot store";
    match value {
        serde_json::Value::String(s) if s.contains('\0') => {
            out.push(Violation { path: path.clone(), message: format!("the string {WHY}") })
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                nul_violations(item, path, out);
                path.truncate(len);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&pointer_token(key));
                if key.contains('\0') {
                    out.push(Violation { path: path.clone(), message: format!("the key {WHY}") });
                }
                nul_violations(item, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// The channel enqueues notify on commit; the payload is the schema of the jobs table, so workers of other
/// schemas in the same database ignore it.
pub(crate) const CHANNEL: &str = "outbox_jobs";

/// `timestamptz` of the integer milliseconds in SQL expression `ms` (exact, unlike `to_timestamp`).
macro_rules! ts {
    ($ms:literal) => {
        concat!("(TIMESTAMPTZ 'epoch' + (", $ms, ")::int8 * INTERVAL '1 millisecond')")
    };
}
pub(crate) use ts;

/// Integer milliseconds since the epoch of the `timestamptz` SQL expression `col`.
macro_rules! ms {
    ($col:literal) => {
        concat!("(EXTRACT(EPOCH FROM ", $col, ") * 1000)::int8")
    };
}
use ms;

fn ts_of(param: &str) -> String {
    format!("(TIMESTAMPTZ 'epoch' + ({param})::int8 * INTERVAL '1 millisecond')")
}

/// One row of the enqueue INSERT: placeholders numbered after the values already pushed, then its values.
/// The sequence columns are the insert trigger's.
fn push_row(sql: &mut String, values: &mut Vec<Value>, job: &NewJob) {
    let first = values.len() + 1;
    let p = |i: usize| format!("${}", first + i);
    sql.push_str(&format!(
        "({}, {}, {}, {}::jsonb, 'pending', {}, 0, {}, {}, {}, {}, {}, {}, {}, {})",
        p(0),
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
        ts_of(&p(6)),
        p(7),
        p(8),
        ts_of(&p(9)),
        ts_of(&p(10)),
        p(11),
        p(12),
    ));
    job.push_values(values);
}

/// Enqueue's INSERT on PostgreSQL.
const INSERT: super::Insert = super::Insert { columns: "", push_row };

fn stmt(sql: impl Into<String>, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

const RECORD_COLUMNS: &str = concat!(
    "id, kind, queue, payload::text, status, priority, attempts, max_attempts, ",
    ms!("run_at"),
    ", locked_by, ",
    ms!("locked_at"),
    ", ",
    ms!("lease_expires_at"),
    ", last_error, idempotency_key, schema_hash, output::text, ",
    ms!("created_at"),
    ", ",
    ms!("claimed_at"),
    ", ",
    ms!("completed_at"),
    ", ",
    ms!("updated_at"),
    ", runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN \
     (SELECT h.id FROM outbox_jobs h \
     WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND ",
    crate::storage::blocking!("h"),
    " ORDER BY h.sequence_no LIMIT 1) END, \
     (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1)"
);

async fn records<C: ConnectionTrait + ?Sized>(conn: &C, what: &str, s: Statement) -> Result<Vec<JobRecord>> {
    let rows = conn.query_all_raw(s).await.map_err(Error::db(what.to_owned()))?;
    rows.iter().map(rows::record).collect()
}

/// The payload path operator's right side for a JSON path of the form `$.a.b`: the keys as a text array.
fn path_keys(json_path: &str) -> Result<String> {
    let keys = json_path.strip_prefix("$.").unwrap_or_default();
    let valid = !keys.is_empty()
        && keys.split('.').all(|k| !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-'));
    if !valid {
        return Err(Error::Invalid(format!(
            "unsupported JSON path `{json_path}` on PostgreSQL: use `$.field` or `$.field.nested` (object keys only)"
        )));
    }
    Ok(keys.to_owned())
}

/// Fills the connection's scratch table with the latest completed job (by place in its sequence, then
/// completion time, then id; a job without a place comes before those with one) of
/// every value of `key_sql` among completed jobs of `kinds`, in one pass over the jobs. `key_values` bind
/// the placeholders of `key_sql` (numbered from `$1`).
async fn open_scan<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kinds: &[&str],
    key_sql: &str,
    mut key_values: Vec<Value>,
) -> Result<(u64, u64)> {
    let ctx = || Error::db("building the latest completed job per path");
    conn.execute_unprepared("DROP TABLE IF EXISTS pg_temp.outbox_path_scan").await.map_err(ctx())?;
    conn.execute_unprepared(
        "CREATE TEMP TABLE outbox_path_scan (seq int8 PRIMARY KEY, path text, job_id text NOT NULL, \
         kind text NOT NULL, output text, completed_at int8, jobs int8 NOT NULL) ON COMMIT DROP",
    )
    .await
    .map_err(ctx())?;
    let first = key_values.len() + 1;
    let marks = (first..first + kinds.len()).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
    key_values.extend(kinds.iter().map(|k| Value::from(*k)));
    let sql = format!(
        "INSERT INTO pg_temp.outbox_path_scan (seq, path, job_id, kind, output, completed_at, jobs) \
         SELECT ROW_NUMBER() OVER (ORDER BY path COLLATE \"C\" NULLS FIRST), path, id, kind, output, \
             completed_at, jobs FROM ( \
             SELECT path, id, kind, output::text AS output, {completed} AS completed_at, \
                 ROW_NUMBER() OVER (PARTITION BY path \
                     ORDER BY sequence_no DESC NULLS LAST, completed_at DESC, id DESC) AS rn, \
                 COUNT(*) OVER (PARTITION BY path) AS jobs \
             FROM (SELECT id, kind, output, completed_at, sequence_no, {key_sql} AS path \
                   FROM outbox_jobs WHERE status = 'completed' AND kind IN ({marks})) s \
         ) r WHERE rn = 1",
        completed = ms!("completed_at"),
    );
    conn.execute_raw(stmt(sql, key_values)).await.map_err(ctx())?;
    let row = conn
        .query_one_raw(stmt("SELECT COALESCE(SUM(jobs), 0)::int8, COUNT(*) FROM pg_temp.outbox_path_scan", vec![]))
        .await
        .map_err(ctx())?
        .ok_or_else(|| Error::Internal("counting the path scan returned no row".into()))?;
    let n = |i| row.try_get_by_index::<i64>(i).map(|v| v.max(0).unsigned_abs()).map_err(ctx());
    Ok((n(0)?, n(1)?))
}

impl Driver for Postgres {
    const MIGRATIONS: [Migration; 9] = schema::MIGRATIONS;

    /// The server's own durability settings apply.
    fn tune(_options: &mut ConnectOptions, _settings: &Tuning) {}

    /// Row locks and `SKIP LOCKED` need nothing beyond a plain `BEGIN`.
    async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        db.begin().await.map_err(Error::db("beginning a write transaction"))
    }

    async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        db.begin().await.map_err(Error::db("beginning a read transaction"))
    }

    fn unstorable(payload: &serde_json::Value, text: &str) -> Vec<Violation> {
        // JSON text escapes a NUL as `\u0000`: without that sequence there is none to find.
        if !text.contains("\\u0000") {
            return Vec::new();
        }
        let mut out = Vec::new();
        nul_violations(payload, &mut String::new(), &mut out);
        out
    }

    async fn open_worker_store(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        bg: &tokio::runtime::Handle,
    ) -> Result<Store> {
        let config = PgStoreConfig {
            kinds: opts.unlimited_kinds(),
            limited: opts.limits,
            worker_id: opts.worker_id,
            queues: opts.queues,
            schema: current_schema(db).await?,
            batched_events: batched_events(db).await?,
        };
        Ok(std::sync::Arc::new(PgStore::open(db.get_postgres_connection_pool(), config, bg)))
    }

    /// Inserts one job unless an active job of its kind holds its key. True when the row was written.
    async fn insert_job<C: ConnectionTrait + ?Sized>(conn: &C, job: &NewJob) -> Result<bool> {
        super::insert_job(conn, DbBackend::Postgres, job, &INSERT).await
    }

    /// Inserts many jobs in as few statements as the parameter limit allows; returns the ids written.
    async fn insert_jobs<C: ConnectionTrait + ?Sized>(conn: &C, jobs: &[NewJob]) -> Result<Vec<String>> {
        super::insert_jobs(conn, DbBackend::Postgres, jobs, &INSERT, |_| false).await
    }

    /// The id of the active (pending or claimed) job of `kind` holding `key`.
    async fn find_active<C: ConnectionTrait + ?Sized>(conn: &C, kind: &str, key: &str) -> Result<Option<String>> {
        let row = conn
            .query_one_raw(stmt(
                "SELECT id FROM outbox_jobs WHERE kind = $1 AND idempotency_key = $2 \
             AND status IN ('pending', 'claimed') LIMIT 1",
                vec![kind.into(), key.into()],
            ))
            .await
            .map_err(Error::db(format!("looking up the active job of kind `{kind}` by key")))?;
        row.map(|r| r.try_get_by_index::<String>(0)).transpose().map_err(Error::db("reading a job id"))
    }

    /// One job by id.
    async fn get<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Option<JobRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM outbox_jobs WHERE id = $1");
        Ok(records(conn, &format!("reading job `{id}`"), stmt(sql, vec![id.into()])).await?.into_iter().next())
    }

    /// Jobs matching a filter, newest first.
    async fn list<C: ConnectionTrait + ?Sized>(conn: &C, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        let mut sql = format!("SELECT {RECORD_COLUMNS} FROM outbox_jobs WHERE TRUE");
        let mut values: Vec<Value> = Vec::new();
        let param = |values: &mut Vec<Value>, v: Value| {
            values.push(v);
            format!("${}", values.len())
        };
        if let Some(status) = filter.status {
            let p = param(&mut values, status.as_str().into());
            sql.push_str(&format!(" AND status = {p}"));
        }
        if let Some(kind) = &filter.kind {
            let p = param(&mut values, kind.clone().into());
            sql.push_str(&format!(" AND kind = {p}"));
        }
        if let Some(queue) = &filter.queue {
            let p = param(&mut values, queue.clone().into());
            sql.push_str(&format!(" AND queue = {p}"));
        }
        if let Some(since) = filter.since {
            let p = param(&mut values, since.timestamp_millis().into());
            sql.push_str(&format!(" AND updated_at >= {}", ts_of(&p)));
        }
        if let Some(key) = &filter.key {
            let p = param(&mut values, key.clone().into());
            sql.push_str(&format!(" AND idempotency_key = {p}"));
        }
        let order = match &filter.sequence {
            Some(key) => {
                let p = param(&mut values, key.clone().into());
                sql.push_str(&format!(" AND sequence_key = {p}"));
                "sequence_no DESC"
            }
            None => {
                if let Some(before) = &filter.before {
                    let p = param(&mut values, before.clone().into());
                    sql.push_str(&format!(" AND id < {p}"));
                }
                "id DESC"
            }
        };
        let p = param(&mut values, limit_value(filter.limit));
        sql.push_str(&format!(" ORDER BY {order} LIMIT {p}"));
        records(conn, "listing jobs", stmt(sql, values)).await
    }

    /// Claimed jobs whose lease has run out: their worker died or hung and no rescuer has run since.
    async fn stuck<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<JobRecord>> {
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM outbox_jobs WHERE status = 'claimed' AND lease_expires_at < {} \
         ORDER BY lease_expires_at",
            ts!("$1")
        );
        records(conn, "listing stuck jobs", stmt(sql, vec![now.into()])).await
    }

    /// Job counts by kind and status, with the oldest enqueue time of each group.
    async fn counts<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<StatusCount>> {
        let rows = conn
            .query_all_raw(stmt(
                concat!(
                    "SELECT kind, status, COUNT(*), ",
                    ms!("MIN(created_at)"),
                    " FROM outbox_jobs GROUP BY kind, status ORDER BY kind, status"
                ),
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
                concat!(
                    "SELECT kind, status, COUNT(*), ",
                    ms!("MIN(created_at)"),
                    " FROM outbox_jobs WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= ",
                    ts!("$1"),
                    " GROUP BY kind, status ORDER BY kind, status"
                ),
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
        let rows = conn
            .query_all_raw(stmt(
                concat!(
                    "SELECT (",
                    ms!("updated_at"),
                    " / $1) * $1, count(*) FILTER (WHERE status = 'completed'), \
                     count(*) FILTER (WHERE status = 'failed') FROM outbox_jobs \
                     WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= ",
                    ts!("$2"),
                    " GROUP BY 1 ORDER BY 1"
                ),
                vec![bucket_ms.into(), since.into()],
            ))
            .await
            .map_err(Error::db("counting recent activity"))?;
        rows::activity(&rows)
    }

    async fn failure_groups<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<Vec<FailureGroup>> {
        let rows = conn
            .query_all_raw(stmt(
                concat!(
                    "SELECT kind, last_error, count(*), ",
                    ms!("max(updated_at)"),
                    ", max(id) FROM outbox_jobs WHERE status = 'failed' GROUP BY kind, last_error \
                     ORDER BY count(*) DESC, max(updated_at) DESC LIMIT $1"
                ),
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
                concat!(
                    "SELECT kind, COUNT(*), AVG(",
                    ms!("completed_at - claimed_at"),
                    ")::float8, MAX(",
                    ms!("completed_at - claimed_at"),
                    "), AVG(",
                    ms!("claimed_at - created_at"),
                    ")::float8 FROM outbox_jobs WHERE status = 'completed' AND updated_at >= ",
                    ts!("$1"),
                    " GROUP BY kind ORDER BY kind"
                ),
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
                "SELECT kind, idempotency_key, COUNT(*), COUNT(*) FILTER (WHERE status IN ('pending', 'claimed')), \
             COUNT(*) FILTER (WHERE status = 'completed') FROM outbox_jobs WHERE idempotency_key IS NOT NULL \
             GROUP BY kind, idempotency_key HAVING COUNT(*) > 1 ORDER BY COUNT(*) DESC, kind LIMIT $1",
                vec![limit_value(limit)],
            ))
            .await
            .map_err(Error::db("finding duplicate keys"))?;
        rows::duplicates(&rows)
    }

    /// Failed or cancelled back to pending with its attempts reset, unless an active job holds its key.
    async fn retry<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool> {
        let res = conn
            .execute_raw(stmt(
                concat!(
                    "UPDATE outbox_jobs SET status = 'pending', attempts = 0, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, run_at = ",
                    ts!("$1"),
                    ", lease_expires_at = NULL, updated_at = ",
                    ts!("$1"),
                    " WHERE id = $2 AND status IN ('failed', 'cancelled') AND (idempotency_key IS NULL \
                     OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = outbox_jobs.kind \
                     AND a.idempotency_key = outbox_jobs.idempotency_key AND a.status IN ('pending', 'claimed')))"
                ),
                vec![now.into(), id.into()],
            ))
            .await
            .map_err(Error::db(format!("retrying job `{id}`")))?;
        Ok(res.rows_affected() == 1)
    }

    /// Every failed job (of one kind, when given) back to pending; jobs whose key is held by an active twin stay,
    /// and of several failed jobs sharing a key only the latest is retried.
    async fn retry_failed<C: ConnectionTrait + ?Sized>(
        conn: &C,
        kind: Option<&str>,
        error: Option<&str>,
        now: i64,
    ) -> Result<u64> {
        let kind_filter = if kind.is_some() { " AND f.kind = $2" } else { "" };
        let error_filter = match (kind, error) {
            (_, None) => "",
            (Some(_), Some(_)) => " AND f.last_error = $3",
            (None, Some(_)) => " AND f.last_error = $2",
        };
        let sql = format!(
            "UPDATE outbox_jobs j SET status = 'pending', attempts = 0, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, run_at = {now}, lease_expires_at = NULL, \
         updated_at = {now} \
         FROM (SELECT DISTINCT ON (f.kind, f.idempotency_key IS NULL, COALESCE(f.idempotency_key, f.id)) f.id FROM outbox_jobs f \
               WHERE f.status = 'failed'{kind_filter}{error_filter} AND (f.idempotency_key IS NULL OR NOT EXISTS ( \
                   SELECT 1 FROM outbox_jobs a WHERE a.kind = f.kind AND a.idempotency_key = f.idempotency_key \
                   AND a.status IN ('pending', 'claimed'))) \
               ORDER BY f.kind, f.idempotency_key IS NULL, COALESCE(f.idempotency_key, f.id), f.updated_at DESC, f.id DESC) r \
         WHERE j.id = r.id AND j.status = 'failed'",
            now = ts!("$1"),
        );
        let mut values: Vec<Value> = vec![now.into()];
        values.extend(kind.map(Value::from));
        values.extend(error.map(Value::from));
        let res = conn.execute_raw(stmt(sql, values)).await.map_err(Error::db("retrying failed jobs"))?;
        Ok(res.rows_affected())
    }

    /// Pending to cancelled. `Ok(false)` when the job is not pending.
    async fn cancel<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool> {
        let res = conn
            .execute_raw(stmt(
                concat!(
                    "UPDATE outbox_jobs SET status = 'cancelled', sequence_hold = CASE WHEN status = 'pending' \
                     THEN sequence_hold ELSE 2 END, updated_at = ",
                    ts!("$1"),
                    " WHERE id = $2 AND (status = 'pending' OR (status IN ('failed', 'cancelled') \
                     AND sequence_key IS NOT NULL AND sequence_hold = 1))"
                ),
                vec![now.into(), id.into()],
            ))
            .await
            .map_err(Error::db(format!("cancelling job `{id}`")))?;
        Ok(res.rows_affected() == 1)
    }

    /// Deletes terminal jobs (of the given statuses) last changed before `before`.
    async fn purge<C: ConnectionTrait + ?Sized>(conn: &C, statuses: &[JobStatus], before: i64) -> Result<u64> {
        let terminal: Vec<&str> = statuses.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
        if terminal.is_empty() {
            return Ok(0);
        }
        let marks = (2..terminal.len() + 2).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
        let mut values: Vec<Value> = vec![before.into()];
        values.extend(terminal.iter().map(|s| Value::from(*s)));
        let sql =
            format!("DELETE FROM outbox_jobs WHERE status IN ({marks}) AND updated_at < {} {HELD_KEPT}", ts!("$1"));
        let res = conn.execute_raw(stmt(sql, values)).await.map_err(Error::db("purging finished jobs"))?;
        // Workers' feed rows list many jobs and belong to none: they go by the same age.
        conn.execute_raw(stmt(
            concat!("DELETE FROM outbox_job_events WHERE job_id = '' AND at < ", ts!("$1")),
            vec![before.into()],
        ))
        .await
        .map_err(Error::db("purging old feed rows"))?;
        Ok(res.rows_affected())
    }

    /// Deletes one finished job unless it holds its sequence.
    async fn delete<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<bool> {
        let sql = format!(
            "DELETE FROM outbox_jobs WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled') {HELD_KEPT}"
        );
        let res =
            conn.execute_raw(stmt(sql, vec![id.into()])).await.map_err(Error::db(format!("deleting job `{id}`")))?;
        Ok(res.rows_affected() == 1)
    }

    /// The history of one job, oldest first.
    async fn history<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Vec<StoredEvent>> {
        let rows = conn
            .query_all_raw(stmt(
                concat!(
                    "SELECT ",
                    ms!("at"),
                    ", event, attempt, worker, error, ",
                    ms!("claimed_at"),
                    ", ",
                    ms!("completed_at"),
                    " FROM outbox_job_events WHERE job_id = $1 ORDER BY id"
                ),
                vec![id.into()],
            ))
            .await
            .map_err(Error::db(format!("reading the history of job `{id}`")))?;
        rows::history(&rows, id)
    }

    /// Materializes the latest completed job per path into the connection's temp schema (`outbox_path_scan`,
    /// numbered in path order) and returns (completed jobs, distinct paths). Must run inside a transaction:
    /// the table is dropped when it ends, and the pages read it on the same connection.
    async fn open_path_scan<C: ConnectionTrait + ?Sized>(conn: &C, fields: &[(&str, &str)]) -> Result<(u64, u64)> {
        // Each kind's path field is picked by a CASE, so adding kinds adds no scan.
        let mut values: Vec<Value> = Vec::with_capacity(fields.len() * 2 + fields.len());
        let mut case = String::from("(payload #>> CASE kind");
        for (kind, json_path) in fields {
            values.push((*kind).into());
            let kind_param = values.len();
            values.push(path_keys(json_path)?.into());
            case.push_str(&format!(" WHEN ${kind_param} THEN string_to_array(${}, '.')", values.len()));
        }
        case.push_str(" END)");
        let kinds: Vec<&str> = fields.iter().map(|(kind, _)| *kind).collect();
        open_scan(conn, &kinds, &case, values).await
    }

    /// Opens the scan of `scan::latest_completed_by_key`: the key of a job is the JSON array of the
    /// values at `json_paths` in its payload, written as SQLite's `json_array` writes it (no spaces).
    async fn open_key_scan<C: ConnectionTrait + ?Sized>(
        conn: &C,
        kind: &str,
        json_paths: &[&str],
    ) -> Result<(u64, u64)> {
        let mut values: Vec<Value> = Vec::with_capacity(json_paths.len());
        let mut parts = Vec::with_capacity(json_paths.len());
        for p in json_paths {
            values.push(path_keys(p)?.into());
            parts.push(format!("COALESCE((payload #> string_to_array(${}, '.'))::text, 'null')", values.len()));
        }
        let key_sql = format!("('[' || concat_ws(',', {}) || ']')", parts.join(", "));
        open_scan(conn, &[kind], &key_sql, values).await
    }

    /// The entries of the open path scan numbered after `after`, at most `limit`, each with its number.
    async fn path_scan_page<C: ConnectionTrait + ?Sized>(conn: &C, after: i64, limit: u64) -> Result<Vec<ScanRow>> {
        let rows = conn
            .query_all_raw(stmt(
                "SELECT seq, path, job_id, kind, output, completed_at, jobs FROM pg_temp.outbox_path_scan \
             WHERE seq > $1 ORDER BY seq LIMIT $2",
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
            conn.execute_raw(stmt(
                concat!(
                    "INSERT INTO outbox_kinds (name, schema, schema_hash, queue, priority, max_attempts, is_unique, \
                 key_fields, recorded_by, first_seen_at, updated_at, sequence, on_sequence_failure, concurrency) \
                 VALUES ($1, $2::jsonb, $3, $4, $5, $6, $7, $8::jsonb, $9, ",
                    ts!("$10"),
                    ", ",
                    ts!("$10"),
                    ", $11, $12, $13) ON CONFLICT (name) DO UPDATE SET schema = EXCLUDED.schema, schema_hash = EXCLUDED.schema_hash, \
                 queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts, \
                 is_unique = EXCLUDED.is_unique, key_fields = EXCLUDED.key_fields, \
                 recorded_by = EXCLUDED.recorded_by, updated_at = EXCLUDED.updated_at, \
                 sequence = EXCLUDED.sequence, on_sequence_failure = EXCLUDED.on_sequence_failure, \
                 concurrency = EXCLUDED.concurrency"
                ),
                kind.values(worker, now, 1),
            ))
            .await
            .map_err(Error::db(format!("recording kind `{}`", kind.name)))?;
        }
        Ok(())
    }

    /// The recorded kinds, by name; only `name` when given.
    async fn kinds<C: ConnectionTrait + ?Sized>(conn: &C, name: Option<&str>) -> Result<Vec<KindRecord>> {
        let (filter, values) = match name {
            Some(n) => (" WHERE name = $1", vec![n.into()]),
            None => ("", vec![]),
        };
        let rows = conn
            .query_all_raw(stmt(
                format!(
                    "SELECT name, schema::text, schema_hash, queue, priority, max_attempts, is_unique, \
                 key_fields::text, recorded_by, {}, {}, sequence, on_sequence_failure, concurrency \
                 FROM outbox_kinds{filter} ORDER BY name",
                    ms!("first_seen_at"),
                    ms!("updated_at"),
                ),
                values,
            ))
            .await
            .map_err(Error::db("reading the kinds table"))?;
        rows::kinds(&rows)
    }

    /// Job counts of every queue by status, with the oldest due pending job.
    async fn queues<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<QueueCounts>> {
        let rows = conn
        .query_all_raw(stmt(
            format!(
                "SELECT queue, \
                     COUNT(*) FILTER (WHERE status = 'pending' AND NOT waiting AND run_at <= {now}), \
                     COUNT(*) FILTER (WHERE status = 'pending' AND NOT waiting AND run_at > {now}), \
                     COUNT(*) FILTER (WHERE status = 'claimed'), \
                     COUNT(*) FILTER (WHERE status = 'claimed' AND lease_expires_at < {now}), \
                     COUNT(*) FILTER (WHERE status = 'completed'), COUNT(*) FILTER (WHERE status = 'failed'), \
                     COUNT(*) FILTER (WHERE status = 'cancelled'), \
                     {oldest}, COUNT(*) FILTER (WHERE status = 'pending' AND waiting) \
                 FROM outbox_jobs GROUP BY queue ORDER BY queue",
                now = ts!("$1"),
                oldest = ms!("MIN(run_at) FILTER (WHERE status = 'pending' AND NOT waiting AND run_at <= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond'))"),
            ),
            vec![now.into()],
        ))
        .await
        .map_err(Error::db("counting jobs by queue"))?;
        rows::queues(&rows)
    }

    /// Sequences held by a failed or cancelled head, and the first `limit` heads, longest held first.
    async fn blocked<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<(u64, Vec<BlockedSequence>)> {
        super::blocked(conn, DbBackend::Postgres, RECORD_COLUMNS, "$1", limit).await
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
        feed::remove_worker(conn, id).await
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
        feed::remote_claim(db, opts, current_schema(db).await?, limit, now, lease_until).await
    }

    async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
        feed::remote_finish(db, owner, finished).await
    }

    async fn remote_extend(db: &DatabaseConnection, owner: &str, id: &str, attempt: i32, until: i64) -> Result<bool> {
        feed::remote_extend(db, owner, id, attempt, until).await
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
