//! Jobs as operators see and change them: one job, a filtered list, stuck claims; retry, cancel, delete and
//! purge.

use sea_orm::{ConnectionTrait, Value};

use super::dialect::Params;
use super::engine::Engine;
use super::retention::HELD_KEPT;
use super::{Dialect, decode, execute_write, limit_value, on_engine};
use crate::error::{Error, Result};
use crate::record::{JobFilter, JobRecord, JobStatus};

/// Whether the row `r` (`NEW`, `OLD`, a table alias) holds back the later jobs of its sequence: it has not
/// run yet, is running, or failed for good or was cancelled under the hold policy (`sequence_hold = 1`; 0 is
/// the continue policy, 2 a hold an operator released). `schema.sql` spells the same condition out.
pub(crate) fn blocking(r: &str) -> String {
    format!(
        "({r}.status IN ('pending', 'claimed') OR ({r}.status IN ('failed', 'cancelled') AND {r}.sequence_hold = 1))"
    )
}

/// The columns of a job record, in the order [`decode::record`] reads them. A waiting job waits for the first job
/// of its sequence that holds it back and is ahead of it, or runs or is free to run (a job put back rejoins behind
/// those): a job that waits for nothing of the sort waits only to be let go, as one enqueued on MySQL does until a
/// store looks at its sequence.
pub(crate) fn record_columns(b: Dialect) -> String {
    columns_with(b, "subject, trace")
}

/// [`record_columns`] of the archive, which keeps no subject or trace context.
fn archived_record_columns(b: Dialect) -> String {
    columns_with(b, "NULL AS subject, NULL AS trace")
}

fn columns_with(b: Dialect, subject_and_trace: &str) -> String {
    format!(
        "id, kind, queue, {payload}, status, priority, attempts, max_attempts, {run_at}, locked_by, {locked_at}, \
         {lease}, last_error, idempotency_key, schema_hash, {output}, {created}, {claimed}, {completed}, {updated}, \
         runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM \
         outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND {blocking} \
         AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT \
         h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, \
         (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), {subject_and_trace}",
        payload = b.text("payload"),
        run_at = b.ms("run_at"),
        locked_at = b.ms("locked_at"),
        lease = b.ms("lease_expires_at"),
        output = b.text("output"),
        created = b.ms("created_at"),
        claimed = b.ms("claimed_at"),
        completed = b.ms("completed_at"),
        updated = b.ms("updated_at"),
        blocking = blocking("h"),
    )
}

pub(crate) async fn records<C: ConnectionTrait + ?Sized>(
    conn: &C,
    what: impl FnOnce() -> String,
    s: sea_orm::Statement,
) -> Result<Vec<JobRecord>> {
    let rows = conn.query_all_raw(s).await.map_err(Error::db(what()))?;
    rows.iter().map(decode::record).collect()
}

/// One job by id, from the jobs table or the archive.
pub(crate) async fn get<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Option<JobRecord>> {
    let b = Dialect::of(conn)?;
    let (columns, archived) = (record_columns(b), archived_record_columns(b));
    let sql = format!(
        "SELECT {columns} FROM outbox_jobs WHERE id = $1 \
         UNION ALL SELECT {archived} FROM outbox_jobs_archive outbox_jobs WHERE id = $1"
    );
    Ok(records(conn, || format!("reading job `{id}`"), b.stmt(sql, vec![id.into()])).await?.into_iter().next())
}

/// Jobs matching a filter, newest first (by place, in a sequence), from the jobs table and, for completed jobs
/// without a sequence, the archive. Each table is read in its own order up to the limit, then the two merged.
pub(crate) async fn list<C: ConnectionTrait + ?Sized>(conn: &C, filter: &JobFilter) -> Result<Vec<JobRecord>> {
    let b = Dialect::of(conn)?;
    records(conn, || "listing jobs".into(), list_statement(b, filter)).await
}

/// The statement of [`list`].
pub(crate) fn list_statement(b: Dialect, filter: &JobFilter) -> sea_orm::Statement {
    let mut sql = " WHERE TRUE".to_owned();
    let mut p = Params::default();
    if let Some(status) = filter.status {
        sql.push_str(&format!(" AND status = {}", p.push(status.as_str())));
    }
    if let Some(kind) = &filter.kind {
        sql.push_str(&format!(" AND kind = {}", p.push(kind.clone())));
    }
    if let Some(queue) = &filter.queue {
        sql.push_str(&format!(" AND queue = {}", p.push(queue.clone())));
    }
    if let Some(since) = filter.since {
        sql.push_str(&format!(" AND updated_at >= {}", b.ts(&p.push(since.timestamp_millis()))));
    }
    if let Some(key) = &filter.key {
        sql.push_str(&format!(" AND idempotency_key = {}", p.push(key.clone())));
    }
    if let Some(subject) = &filter.subject {
        sql.push_str(&format!(" AND subject = {}", p.push(subject.clone())));
    }
    let order = match &filter.sequence {
        Some(key) => {
            sql.push_str(&format!(" AND sequence_key = {}", p.push(key.clone())));
            "sequence_no DESC"
        }
        None => {
            if let Some(before) = &filter.before {
                sql.push_str(&format!(" AND id < {}", p.push(before.clone())));
            }
            "id DESC"
        }
    };
    let limit = p.push(limit_value(filter.limit));
    let (columns, archived_columns) = (record_columns(b), archived_record_columns(b));
    let jobs = format!("SELECT {columns} FROM outbox_jobs{sql} ORDER BY {order} LIMIT {limit}");
    // The archive keeps no subject: a listing by subject reads the jobs table alone.
    let archived = filter.sequence.is_none()
        && filter.subject.is_none()
        && filter.status.is_none_or(|s| s == JobStatus::Completed);
    let sql = if archived {
        format!(
            "SELECT * FROM ({jobs}) j UNION ALL SELECT * FROM (SELECT {archived_columns} FROM outbox_jobs_archive outbox_jobs\
             {sql} ORDER BY {order} LIMIT {limit}) a ORDER BY 1 DESC LIMIT {limit}"
        )
    } else {
        jobs
    };
    b.stmt(sql, p.0)
}

/// Claimed jobs whose lease ran out before `now`: their worker died or hung and no rescuer has run since. On
/// PostgreSQL they are found through the claims whose lease ran out, which list every such job (`outbox_claims` in `postgres/schema.sql`).
pub(crate) async fn stuck<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<JobRecord>> {
    let b = Dialect::of(conn)?;
    let through_claims = on_engine!(b, E => E::stuck_through(b));
    let sql = format!(
        "SELECT {} FROM outbox_jobs WHERE {through_claims}status = 'claimed' AND lease_expires_at < {} \
         ORDER BY lease_expires_at",
        record_columns(b),
        b.ts("$1")
    );
    records(conn, || "listing stuck jobs".into(), b.stmt(sql, vec![now.into()])).await
}

/// What an operator's retry sets: back to pending now with its attempts reset, taking duplicates of its key
/// again, and a released hold restored. A workflow step cancelled while it waited goes at once when no parent is
/// left to count, and waits for the ones left otherwise. A sequenced job rejoins its sequence waiting, and the
/// sequence triggers (on MySQL, the store) let it go when it is the first still to run and none runs: set here
/// too, as MariaDB computes the generated columns of an update that reads its own table (this one does, through
/// [`key_free`]) before its `BEFORE UPDATE` trigger changes the row.
const RETRY_SET: &str = "status = 'pending', attempts = 0, scheduled = FALSE, superseded = FALSE, \
     sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, lease_expires_at = NULL, \
     waiting = CASE WHEN sequence_key IS NULL THEN parents_left > 0 ELSE TRUE END";

/// No job of the same kind holds the key of the job `j` (see [`super::enqueue::holds_key`]).
fn key_free(b: Dialect, j: &str) -> String {
    format!(
        "({j}.idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = {j}.kind AND {}))",
        super::enqueue::holds_key(b, "a", &format!("{j}.idempotency_key"))
    )
}

/// Failed or cancelled back to pending with its attempts reset, unless an active job holds its key;
/// `Ok(false)` when it is not in such a status.
pub(crate) async fn retry<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "UPDATE outbox_jobs SET {RETRY_SET}, run_at = {now}, updated_at = {now} \
         WHERE id = $2 AND status IN ('failed', 'cancelled') AND {}",
        key_free(b, "outbox_jobs"),
        now = b.ts("$1"),
    );
    let res = execute_write(conn, b.stmt(sql, vec![now.into(), id.into()]), || format!("retrying job `{id}`")).await?;
    Ok(res.rows_affected() == 1)
}

/// Every failed job (of `kind`, with `error` as its last error) back to pending: of several sharing a key only
/// the latest (by last change, then id), and none whose key an active job holds.
pub(crate) async fn retry_failed<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kind: Option<&str>,
    error: Option<&str>,
    now: i64,
) -> Result<u64> {
    let mut p = Params::default();
    let kind_filter = kind.map(|k| format!(" AND f.kind = {}", p.push(k))).unwrap_or_default();
    let error_filter = error.map(|e| format!(" AND f.last_error = {}", p.push(e))).unwrap_or_default();
    retry_where(conn, p, "('failed')", &format!("{kind_filter}{error_filter}"), now, "retrying failed jobs").await
}

/// Every failed or cancelled job about `subject` back to pending, as [`retry_failed`] puts failed jobs back.
pub(crate) async fn retry_subject<C: ConnectionTrait + ?Sized>(conn: &C, subject: &str, now: i64) -> Result<u64> {
    let mut p = Params::default();
    let filter = format!(" AND f.subject = {}", p.push(subject));
    retry_where(conn, p, "('failed', 'cancelled')", &filter, now, "retrying the jobs of a subject").await
}

/// The jobs of `statuses` matching `filter` (on `f`, its values in `p`) back to pending: of several sharing a key
/// only the latest (by last change, then id), and none whose key an active job holds.
async fn retry_where<C: ConnectionTrait + ?Sized>(
    conn: &C,
    mut p: Params,
    statuses: &str,
    filter: &str,
    now: i64,
    what: &str,
) -> Result<u64> {
    let b = Dialect::of(conn)?;
    let now = b.ts(&p.push(now));
    let sql = format!(
        "UPDATE outbox_jobs SET {RETRY_SET}, run_at = {now}, updated_at = {now} WHERE status IN {statuses} AND id IN ( \
             SELECT id FROM (SELECT f.id, ROW_NUMBER() OVER ( \
                 PARTITION BY f.kind, f.idempotency_key IS NULL, COALESCE(f.idempotency_key, f.id) \
                 ORDER BY f.updated_at DESC, f.id DESC) AS rn \
             FROM outbox_jobs f WHERE f.status IN {statuses}{filter} AND {}) r WHERE rn = 1)",
        key_free(b, "f")
    );
    let res = execute_write(conn, b.stmt(sql, p.0), || what.to_owned()).await?;
    Ok(res.rows_affected())
}

/// Every pending job about `subject` to cancelled; how many.
pub(crate) async fn cancel_subject<C: ConnectionTrait + ?Sized>(conn: &C, subject: &str, now: i64) -> Result<u64> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "UPDATE outbox_jobs SET status = 'cancelled', updated_at = {} WHERE subject = $2 AND status = 'pending'",
        b.ts("$1")
    );
    let res = execute_write(conn, b.stmt(sql, vec![now.into(), subject.into()]), || {
        format!("cancelling the jobs of subject `{subject}`")
    })
    .await?;
    Ok(res.rows_affected())
}

/// Pending to cancelled, or a held failed or cancelled job's hold released; `Ok(false)` when neither applies.
pub(crate) async fn cancel<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "UPDATE outbox_jobs SET sequence_hold = CASE WHEN status = 'pending' THEN sequence_hold ELSE 2 END, \
         status = 'cancelled', updated_at = {} WHERE id = $2 AND (status = 'pending' \
         OR (status IN ('failed', 'cancelled') AND sequence_key IS NOT NULL AND sequence_hold = 1))",
        b.ts("$1")
    );
    let res =
        execute_write(conn, b.stmt(sql, vec![now.into(), id.into()]), || format!("cancelling job `{id}`")).await?;
    Ok(res.rows_affected() == 1)
}

/// Deletes terminal jobs of the given statuses last changed before `before` (archived ones too), and workers'
/// feed rows as old, and on PostgreSQL the rows of the log of finished jobs as old that list only jobs gone. An
/// operator's command: on PostgreSQL it reads the whole jobs table, whose log of finished jobs
/// (`outbox_finished`) lists a job kept past retention's cutoff at a later time than it finished.
pub(crate) async fn purge<C: ConnectionTrait + ?Sized>(conn: &C, statuses: &[JobStatus], before: i64) -> Result<u64> {
    let terminal: Vec<&str> = statuses.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
    if terminal.is_empty() {
        return Ok(0);
    }
    let b = Dialect::of(conn)?;
    let mut p = Params::default();
    let cutoff = b.ts(&p.push(before));
    let marks: Vec<String> = terminal.iter().map(|s| p.push(*s)).collect();
    let sql =
        format!("DELETE FROM outbox_jobs WHERE status IN ({}) AND updated_at < {cutoff} {HELD_KEPT}", marks.join(", "));
    let res = execute_write(conn, b.stmt(sql, p.0), || "purging finished jobs".into()).await?;
    let mut purged = res.rows_affected();
    on_engine!(b, E => E::after_purge(conn, before).await)?;
    if terminal.contains(&"completed") {
        for table in super::archive::tables(conn).await? {
            let sql = format!("DELETE FROM {} WHERE updated_at < {}", b.quoted(&table), b.ts("$1"));
            let res =
                execute_write(conn, b.stmt(sql, vec![Value::from(before)]), || "purging archived jobs".into()).await?;
            purged += res.rows_affected();
        }
    }
    // Workers' feed rows list many jobs and belong to none: they go by the same age. When completed jobs are
    // purged, each goes with the events of the jobs it recorded completing that were deleted as they completed,
    // as retention prunes them (deleting the rows alone would leave those events to no one).
    if terminal.contains(&"completed") {
        const BATCH: u64 = 1_000;
        while super::retention::prune_feed(conn, before, BATCH).await? >= BATCH {}
    } else {
        let sql = format!("DELETE FROM outbox_job_events WHERE job_id = '' AND at < {}", b.ts("$1"));
        execute_write(conn, b.stmt(sql, vec![Value::from(before)]), || "purging old feed rows".into()).await?;
    }
    Ok(purged)
}

/// Deletes one finished (completed, failed, cancelled) job that does not hold its sequence; `Ok(false)` when
/// there is no such job.
pub(crate) async fn delete<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let sql =
        format!("DELETE FROM outbox_jobs WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled') {HELD_KEPT}");
    let res = execute_write(conn, b.stmt(sql, vec![id.into()]), || format!("deleting job `{id}`")).await?;
    if res.rows_affected() == 1 {
        return Ok(true);
    }
    for table in super::archive::tables(conn).await? {
        let sql = format!("DELETE FROM {} WHERE id = $1", b.quoted(&table));
        let res = execute_write(conn, b.stmt(sql, vec![id.into()]), || format!("deleting archived job `{id}`")).await?;
        if res.rows_affected() == 1 {
            return Ok(true);
        }
    }
    Ok(false)
}
