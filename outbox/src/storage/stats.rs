//! Counts and measures over the jobs table (and the archive, for finished jobs), for `outbox stats`, the dashboard and Prometheus.

use sea_orm::{ConnectionTrait, QueryResult, Value};

use super::archive::{jobs_and_archive, jobs_and_archive_since};
use super::jobs::{blocking, record_columns};
use super::{Dialect, decode, limit_value};
use crate::error::{Error, Result};
use crate::stats::{BlockedSequence, DuplicateKey, FailureGroup, KindDurations, QueueCounts, StatusCount};

async fn rows<C: ConnectionTrait + ?Sized>(
    conn: &C,
    what: &'static str,
    sql: String,
    values: Vec<Value>,
) -> Result<Vec<QueryResult>> {
    let b = Dialect::of(conn)?;
    conn.query_all_raw(b.stmt(sql, values)).await.map_err(Error::db(what))
}

/// Job counts by kind and status, with the oldest enqueue time of each group.
pub(crate) async fn counts<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<StatusCount>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT kind, status, COUNT(*), {} FROM {} GROUP BY kind, status ORDER BY kind, status",
        b.ms("MIN(created_at)"),
        jobs_and_archive()
    );
    decode::status_counts(&rows(conn, "counting jobs", sql, vec![]).await?)
}

/// Jobs that finished since `since`, by kind and status.
pub(crate) async fn finished_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<Vec<StatusCount>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT kind, status, COUNT(*), {} FROM {} WHERE status IN ('completed', 'failed', 'cancelled') \
         AND updated_at >= {} GROUP BY kind, status ORDER BY kind, status",
        b.ms("MIN(created_at)"),
        jobs_and_archive_since(conn, since).await?,
        b.ts("$1")
    );
    decode::status_counts(&rows(conn, "counting recently finished jobs", sql, vec![since.into()]).await?)
}

/// Jobs completed and failed since `since`, counted per `bucket_ms` of their last change: each bucket's start
/// (ms), completed, failed; buckets with neither are left out.
pub(crate) async fn activity<C: ConnectionTrait + ?Sized>(
    conn: &C,
    since: i64,
    bucket_ms: i64,
) -> Result<Vec<(i64, u64, u64)>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT {} * $1, COUNT(CASE WHEN status = 'completed' THEN 1 END), \
         COUNT(CASE WHEN status = 'failed' THEN 1 END) FROM {} \
         WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= {} GROUP BY 1 ORDER BY 1",
        b.quotient(&b.ms("updated_at"), "$1"),
        jobs_and_archive_since(conn, since).await?,
        b.ts("$2")
    );
    decode::activity(&rows(conn, "counting recent activity", sql, vec![bucket_ms.into(), since.into()]).await?)
}

/// Failed jobs grouped by kind and last error, largest group first.
pub(crate) async fn failure_groups<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<Vec<FailureGroup>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT kind, last_error, COUNT(*), {}, MAX(id) FROM outbox_jobs WHERE status = 'failed' \
         GROUP BY kind, last_error ORDER BY COUNT(*) DESC, MAX(updated_at) DESC LIMIT $1",
        b.ms("MAX(updated_at)")
    );
    decode::failure_groups(&rows(conn, "grouping failed jobs", sql, vec![limit_value(limit)]).await?)
}

/// Run and wait times of jobs completed since `since`, by kind.
pub(crate) async fn durations<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<Vec<KindDurations>> {
    let b = Dialect::of(conn)?;
    let (run, wait) = (b.ms("completed_at - claimed_at"), b.ms("claimed_at - created_at"));
    let sql = format!(
        "SELECT kind, COUNT(*), {}, MAX({run}), {} FROM {} WHERE status = 'completed' AND updated_at >= {} \
         GROUP BY kind ORDER BY kind",
        b.double(&format!("AVG({run})")),
        b.double(&format!("AVG({wait})")),
        jobs_and_archive_since(conn, since).await?,
        b.ts("$1"),
    );
    decode::durations(&rows(conn, "measuring job durations", sql, vec![since.into()]).await?)
}

/// Idempotency keys held by more than one job (across all statuses), most repeated first.
pub(crate) async fn duplicates<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<Vec<DuplicateKey>> {
    let sql = format!(
        "SELECT kind, idempotency_key, COUNT(*), COUNT(CASE WHEN status IN ('pending', 'claimed') THEN 1 END), \
         COUNT(CASE WHEN status = 'completed' THEN 1 END) FROM {} WHERE idempotency_key IS NOT NULL \
         GROUP BY kind, idempotency_key HAVING COUNT(*) > 1 ORDER BY COUNT(*) DESC, kind LIMIT $1",
        jobs_and_archive()
    );
    decode::duplicates(&rows(conn, "finding duplicate keys", sql, vec![limit_value(limit)]).await?)
}

/// Job counts of every queue by state, with the oldest due pending job.
pub(crate) async fn queues<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<QueueCounts>> {
    let b = Dialect::of(conn)?;
    let now_ts = b.ts("$1");
    let due = format!("status = 'pending' AND NOT waiting AND run_at <= {now_ts}");
    let sql = format!(
        "SELECT queue, COUNT(CASE WHEN {due} THEN 1 END), \
         COUNT(CASE WHEN status = 'pending' AND NOT waiting AND run_at > {now_ts} THEN 1 END), \
         COUNT(CASE WHEN status = 'claimed' THEN 1 END), \
         COUNT(CASE WHEN status = 'claimed' AND lease_expires_at < {now_ts} THEN 1 END), \
         COUNT(CASE WHEN status = 'completed' THEN 1 END), COUNT(CASE WHEN status = 'failed' THEN 1 END), \
         COUNT(CASE WHEN status = 'cancelled' THEN 1 END), {}, \
         COUNT(CASE WHEN status = 'pending' AND waiting THEN 1 END) \
         FROM {} GROUP BY queue ORDER BY queue",
        b.ms(&format!("MIN(CASE WHEN {due} THEN run_at END)")),
        jobs_and_archive()
    );
    decode::queues(&rows(conn, "counting jobs by queue", sql, vec![now.into()]).await?)
}

/// How many sequences a failed or cancelled job holds, and the first `limit` such heads (longest held first),
/// each with the number of jobs waiting behind it.
pub(crate) async fn blocked<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<(u64, Vec<BlockedSequence>)> {
    let ctx = || Error::db("listing blocked sequences");
    let b = Dialect::of(conn)?;
    // A held head: failed or cancelled under the hold policy, with nothing earlier in its sequence holding it.
    let held_head = format!(
        "sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1 \
         AND NOT EXISTS (SELECT 1 FROM outbox_jobs e WHERE e.sequence_key = outbox_jobs.sequence_key \
         AND e.sequence_no < outbox_jobs.sequence_no AND {})",
        blocking("e")
    );
    let count_sql = format!("SELECT COUNT(*) FROM outbox_jobs WHERE {held_head}");
    let count = rows(conn, "listing blocked sequences", count_sql, vec![]).await?;
    let count = count.first().map(|r| r.try_get_by_index::<i64>(0)).transpose().map_err(ctx())?.unwrap_or(0);
    let sql = format!(
        "SELECT {}, (SELECT COUNT(*) FROM outbox_jobs w WHERE w.sequence_key = outbox_jobs.sequence_key \
         AND w.status = 'pending' AND w.waiting) FROM outbox_jobs WHERE {held_head} ORDER BY updated_at LIMIT $1",
        record_columns(b)
    );
    let mut heads = Vec::new();
    for row in &rows(conn, "listing blocked sequences", sql, vec![limit_value(limit)]).await? {
        let head = decode::record(row)?;
        let waiting = row.try_get_by_index::<i64>(27).map_err(ctx())?.max(0).unsigned_abs();
        let Some(sequence_key) = head.sequence_key.clone() else { continue };
        heads.push(BlockedSequence { sequence_key, head, waiting });
    }
    Ok((count.max(0).unsigned_abs(), heads))
}
