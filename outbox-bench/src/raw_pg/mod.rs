//! The PostgreSQL baselines: the statements outbox's PostgreSQL storage issues, run through bare sqlx on
//! one connection, each prepared once (sqlx caches statements per connection).
//!
//! The claim and the completion are planned once per connection (`plan_cache_mode = force_generic_plan`), as
//! the worker's claimer and completion writer plan them: both find their rows by id whatever the values, and
//! planning them afresh was a sixth of their time. Other statements are planned for their values every time
//! (`force_custom_plan`). A baseline is the best the same statements can do.
//!
//! The job INSERTs (a row's, and a batch's from `json_to_recordset`) are copied from
//! `outbox/src/storage/enqueue.rs`, the claim and the batched fenced completion from the PostgreSQL worker
//! store; keep them in step when those change. Rows carry the values
//! [`JobRow`] gives the SQLite baselines, times as integer milliseconds converted at the statement's edge, as
//! outbox binds them.

mod floor;
mod sql;

use std::sync::Arc;
use std::time::Instant;

use sea_orm::sqlx::postgres::PgConnection;
use sea_orm::sqlx::{self, Connection, Row};

use crate::BoxError;
use crate::raw::{Claimed, JobRow, KindInfo, now_ms, order_row};
use crate::stats::Measure;
use sql::{
    LEASE_MS, PROMOTE_EVERY_MS, PROMOTE_PER_CLAIM, QUEUE, bind_row, claim_sql, finish_sql, insert_recordset_sql,
    promote_sql, push_json_row, query,
};

pub(crate) use floor::{FLOOR_CHILD, Wake, floor_child, latency_floor};
pub(crate) use sql::{INSERT_ORDER, insert_job_sql};

/// What the `process` baseline does, for the report.
pub(crate) const PROCESS: &str = "sqlx-postgres: claim WITH ... FOR UPDATE SKIP LOCKED LIMIT 100 UPDATE ... RETURNING, then one fenced UPDATE \
     of the 100 (autocommit each)";

/// One connection, planning every statement for its values.
async fn connect(url: &str) -> Result<PgConnection, BoxError> {
    connect_planning(url, "force_custom_plan").await
}

/// One connection that plans each statement once, as the worker's claimer and completion writer do.
async fn connect_generic(url: &str) -> Result<PgConnection, BoxError> {
    connect_planning(url, "force_generic_plan").await
}

async fn connect_planning(url: &str, mode: &'static str) -> Result<PgConnection, BoxError> {
    let mut conn = PgConnection::connect(url).await?;
    let set = format!("SET plan_cache_mode = {mode}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(set)).execute(&mut conn).await?;
    Ok(conn)
}

async fn count(conn: &mut PgConnection, sql: &'static str) -> Result<u64, BoxError> {
    let n: i64 = sqlx::query(sql).fetch_one(&mut *conn).await?.try_get(0)?;
    Ok(u64::try_from(n)?)
}

async fn expect_count(conn: &mut PgConnection, sql: &'static str, want: u64, what: &str) -> Result<(), BoxError> {
    let got = count(conn, sql).await?;
    if got != want {
        return Err(format!("baseline {what}: expected {want} rows, found {got}").into());
    }
    Ok(())
}

/// Case `enqueue`: per job `BEGIN; INSERT order; INSERT job; COMMIT`.
pub(crate) async fn enqueue(url: &str, kind: &KindInfo, n: u64) -> Result<Measure, BoxError> {
    let mut conn = connect(url).await?;
    let insert_job: Arc<str> = insert_job_sql(kind).into();
    let start = Instant::now();
    for i in 0..n {
        let mut tx = conn.begin().await?;
        let (id, customer, total) = order_row(i);
        sqlx::query(INSERT_ORDER).bind(id).bind(customer).bind(total).execute(&mut *tx).await?;
        let written = bind_row(query(&insert_job), JobRow::new(kind, i, now_ms())).execute(&mut *tx).await?;
        if written.rows_affected() != 1 {
            return Err(format!("baseline enqueue: job {i} was not written").into());
        }
        tx.commit().await?;
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&mut conn, "SELECT COUNT(*) FROM outbox_jobs", n, "enqueue").await?;
    expect_count(&mut conn, "SELECT COUNT(*) FROM orders", n, "enqueue").await?;
    conn.close().await?;
    Ok(Measure { jobs: n, secs })
}

/// Case `enqueue_batch`: per `per_txn` jobs one transaction holding the batch INSERT, its row count checked.
pub(crate) async fn enqueue_batch(url: &str, kind: &KindInfo, n: u64, per_txn: u64) -> Result<Measure, BoxError> {
    let mut conn = connect(url).await?;
    let sql: Arc<str> = insert_recordset_sql(kind).into();
    let start = Instant::now();
    let mut next = 0;
    while next < n {
        let size = per_txn.min(n - next);
        let now = now_ms();
        let mut rows = String::from("[");
        for i in next..next + size {
            push_json_row(&mut rows, &JobRow::new(kind, i, now));
        }
        rows.push(']');
        let mut tx = conn.begin().await?;
        let written = query(&sql).bind(rows).execute(&mut *tx).await?.rows_affected();
        if written != size {
            return Err(format!("baseline enqueue_batch: {written} of {size} jobs written").into());
        }
        tx.commit().await?;
        next += size;
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&mut conn, "SELECT COUNT(*) FROM outbox_jobs", n, "enqueue_batch").await?;
    conn.close().await?;
    Ok(Measure { jobs: n, secs })
}

/// Case `process`: claim `batch` jobs in one autocommit statement, complete them (sorted by id, as the
/// worker writes them) in one fenced UPDATE, until nothing is left. `n` jobs of `kind` must be pending.
pub(crate) async fn process(url: &str, kind: &KindInfo, n: u64, batch: u64) -> Result<Measure, BoxError> {
    let mut conn = connect_generic(url).await?;
    let worker_id = format!("bench-host:{}:0a1b2c3d", std::process::id());
    let kinds = vec![kind.name.to_owned()];
    let queues = vec![QUEUE.to_owned()];
    let limit = i64::try_from(batch)?;
    let (claim, finish): (Arc<str>, Arc<str>) = (claim_sql().into(), finish_sql().into());
    let promote: Arc<str> = promote_sql().into();
    let mut promoted_at = i64::MIN;
    let start = Instant::now();
    loop {
        let now = now_ms();
        if now.saturating_sub(promoted_at) >= PROMOTE_EVERY_MS {
            query(&promote).bind(now).bind(PROMOTE_PER_CLAIM).execute(&mut conn).await?;
            promoted_at = now;
        }
        let rows = query(&claim)
            .bind(&worker_id)
            .bind(now)
            .bind(now + LEASE_MS)
            .bind(&kinds)
            .bind(limit)
            .bind(&queues)
            .fetch_all(&mut conn)
            .await?;
        let claimed = rows
            .iter()
            .map(|row| {
                Ok(Claimed {
                    id: row.try_get(0)?,
                    _kind: row.try_get(1)?,
                    _queue: row.try_get(2)?,
                    _payload: row.try_get(3)?,
                    attempt: row.try_get(4)?,
                    _max_attempts: row.try_get(5)?,
                    _schema_hash: row.try_get(6)?,
                    _run: row.try_get(7)?,
                })
            })
            .collect::<Result<Vec<Claimed>, sqlx::Error>>()?;
        if claimed.is_empty() {
            break;
        }
        let claims: Vec<i64> = rows.first().map(|r| r.try_get(8)).transpose()?.into_iter().collect();
        let mut claimed = claimed;
        claimed.sort_by(|a, b| a.id.cmp(&b.id));
        let ids: Vec<String> = claimed.iter().map(|c| c.id.clone()).collect();
        let outcomes: serde_json::Map<String, serde_json::Value> =
            claimed.iter().map(|c| (c.id.clone(), serde_json::json!(c.attempt))).collect();
        let done = query(&finish)
            .bind(ids)
            .bind(serde_json::Value::Object(outcomes))
            .bind(now_ms())
            .bind(&worker_id)
            .bind(claims)
            .fetch_all(&mut conn)
            .await?;
        if done.len() != claimed.len() {
            return Err(format!("baseline process: {} of {} jobs completed", done.len(), claimed.len()).into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&mut conn, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'", n, "process").await?;
    conn.close().await?;
    Ok(Measure { jobs: n, secs })
}

/// Case `claim_sequenced`: the worker's claim of `batch` jobs of `kinds`, each in a transaction rolled back
/// so the backlog stays as it was; returns the median seconds of one claim over `reps`.
/// The claim is the worker's for one kind, planned once as the worker's claimer plans it, and includes letting in
/// the scheduled jobs that are due, as a worker's first claim does.
pub(crate) async fn claim_cost(url: &str, kinds: &[&str], batch: u64, reps: usize) -> Result<f64, BoxError> {
    if kinds.len() != 1 {
        return Err("claim cost: the worker's claim of one kind is timed".into());
    }
    let mut conn = connect_generic(url).await?;
    let kinds: Vec<String> = kinds.iter().map(|k| (*k).to_owned()).collect();
    let queues = vec![QUEUE.to_owned()];
    let limit = i64::try_from(batch)?;
    let claim: Arc<str> = claim_sql().into();
    let promote: Arc<str> = promote_sql().into();
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let now = now_ms();
        let mut tx = conn.begin().await?;
        let start = Instant::now();
        query(&promote).bind(now).bind(PROMOTE_PER_CLAIM).execute(&mut *tx).await?;
        let rows = query(&claim)
            .bind("bench-claim")
            .bind(now)
            .bind(now + LEASE_MS)
            .bind(&kinds)
            .bind(limit)
            .bind(&queues)
            .fetch_all(&mut *tx)
            .await?;
        times.push(start.elapsed().as_secs_f64());
        tx.rollback().await?;
        if rows.len() as u64 != batch {
            return Err(format!("claim cost: claimed {} of {batch}", rows.len()).into());
        }
    }
    Ok(crate::stats::median(&times))
}
