//! The statements the PostgreSQL baselines run, copied from outbox: the job INSERTs, and the worker's
//! claim, promotion and batched fenced completion, with the values the worker binds them with.

use std::sync::Arc;

use sea_orm::sqlx::postgres::PgArguments;
use sea_orm::sqlx::query::Query;
use sea_orm::sqlx::{self, AssertSqlSafe, Postgres};

use crate::raw::{JobRow, KindInfo};

/// The domain row written next to each job in the enqueue cases.
pub(crate) const INSERT_ORDER: &str = "INSERT INTO orders (id, customer, total) VALUES ($1, $2, $3)";

/// `INSERT_COLUMNS` of outbox's `storage/mod.rs`.
const INSERT_COLUMNS: &str = "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, \
     max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at) VALUES ";

/// `Dialect::ts` of outbox (`storage/dialect.rs`): a `timestamptz` from integer milliseconds.
fn ts(param: &str) -> String {
    format!("(TIMESTAMPTZ 'epoch' + ({param})::int8 * INTERVAL '1 millisecond')")
}

/// A row of outbox's `insert_values` (`storage/enqueue.rs`): eleven values from `$first`.
fn push_row(sql: &mut String, first: usize) {
    let p = |i: usize| format!("${}", first + i);
    sql.push_str(&format!(
        "({}, {}, {}, {}::jsonb, 'pending', {}, 0, {}, {}, {}, {}, {}, {})",
        p(0),
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
        ts(&p(6)),
        p(7),
        p(8),
        ts(&p(9)),
        ts(&p(10)),
    ));
}

/// The single-job INSERT of outbox's `insert_job`: `ON CONFLICT DO NOTHING` only for a keyed kind.
pub(crate) fn insert_job_sql(kind: &KindInfo) -> String {
    insert_jobs_sql(kind, 1)
}

/// The multi-row INSERT of outbox's `insert_jobs` for `rows` rows of `kind`.
fn insert_jobs_sql(kind: &KindInfo, rows: usize) -> String {
    let mut sql = String::from(INSERT_COLUMNS);
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        push_row(&mut sql, i * 11 + 1);
    }
    if kind.unique {
        sql.push_str(" ON CONFLICT DO NOTHING");
    }
    sql
}

/// The batch INSERT of outbox's `insert_recordset`: the rows as one JSON array, in order.
pub(crate) fn insert_recordset_sql(kind: &KindInfo) -> String {
    let mut sql = format!(
        "{}SELECT r.i, r.k, r.q, r.p, 'pending', r.r, 0, r.m, {}, r.y, r.h, {}, {} \
         FROM ROWS FROM (json_to_recordset($1::json) AS (i text, k text, q text, p jsonb, r int4, m int4, t int8, \
         y text, h text, c int8)) WITH ORDINALITY AS r(i, k, q, p, r, m, t, y, h, c, n) ORDER BY r.n",
        INSERT_COLUMNS.trim_end_matches("VALUES "),
        ts("r.t"),
        ts("r.c"),
        ts("r.c"),
    );
    if kind.unique {
        sql.push_str(" ON CONFLICT DO NOTHING");
    }
    sql
}

/// One row of [`insert_recordset_sql`]'s array.
pub(crate) fn push_json_row(rows: &mut String, row: &JobRow) {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    if rows.len() > 1 {
        rows.push(',');
    }
    rows.push_str(&format!(
        "{{\"i\":{},\"k\":{},\"q\":{},\"p\":{},\"r\":{},\"m\":{},\"t\":{},\"y\":{},\"h\":{},\"c\":{}}}",
        text(&row.id),
        text(&row.kind),
        text(&row.queue),
        row.payload,
        row.priority,
        row.max_attempts,
        row.run_at,
        row.key.as_deref().map_or_else(|| "null".to_owned(), text),
        text(&row.schema_hash),
        row.created_at,
    ));
}

/// The worker's claim of one kind from one queue (`CLAIM_ONE`): due pending jobs, locked past other claimers, in claim
/// order, with their claim's row (its lease) and their `claimed` feed row written by the same statement.
pub(crate) fn claim_sql() -> String {
    format!(
        "WITH c AS MATERIALIZED (SELECT ctid FROM outbox_jobs WHERE open AND status = 'pending' \
         AND queue = ($6::text[])[1] AND kind = ($4::text[])[1] AND run_at <= {now} \
         ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED), \
         u AS (UPDATE outbox_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, \
         locked_by = $1, locked_at = {now}, claimed_at = {now}, lease_expires_at = {lease}, updated_at = {now}, \
         event_flip = NOT j.event_flip WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) \
         RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts, j.schema_hash, \
         j.runs), \
         l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT $1, {lease}, array_agg(id) FROM u \
         HAVING count(*) > 0 RETURNING id), \
         e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
         SELECT '', min(kind), min(queue), {now}, 'claimed', 0, $1, \
         json_agg(json_build_array(id, attempts)) FROM u HAVING count(*) > 0) \
         SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, (SELECT id FROM l) FROM u",
        now = ts("$2"),
        lease = ts("$3"),
    )
}

/// The worker's promotion of due scheduled jobs, issued before every claim (`PROMOTE`).
pub(crate) fn promote_sql() -> String {
    format!(
        "UPDATE outbox_jobs SET scheduled = false WHERE id = ANY(ARRAY(SELECT id FROM outbox_jobs \
         WHERE due_at <= {now} ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)) \
         AND status = 'pending' AND scheduled",
        now = ts("$1"),
    )
}

/// Scheduled jobs let in per claim, and how often (ms) a busy worker lets them in, as the worker does.
pub(crate) const PROMOTE_PER_CLAIM: i64 = 1_000;
pub(crate) const PROMOTE_EVERY_MS: i64 = 100;

/// The worker's batched fenced write of completions without output (`FINISH_PLAIN`), each job by id and the
/// attempt it was claimed at (`$2`, `{id: attempt}`), with one feed row for the completions, one row of the log of
/// finished jobs, and the deletion of the claims whose last jobs these are; the baseline only completes, a claim
/// at a time.
pub(crate) fn finish_sql() -> String {
    format!(
        "WITH u AS (UPDATE outbox_jobs j SET status = 'completed', output = NULL, completed_at = {now}, \
         scheduled = false, lease_expires_at = NULL, updated_at = {now}, event_flip = NOT j.event_flip \
         WHERE j.id = ANY($1::text[]) AND (j.status || '') = 'claimed' AND j.locked_by = $4 \
         AND j.attempts = ($2::jsonb ->> j.id)::int4 \
         RETURNING j.id, j.kind, j.queue, j.status, j.attempts), \
         e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
         SELECT '', min(kind), min(queue), {now}, 'completed', 0, $4, \
         json_agg(json_build_array(id, attempts)) FROM u HAVING count(*) > 0), \
         f AS (INSERT INTO outbox_finished (at, jobs) SELECT {now}, array_agg(id) FROM u \
         WHERE status = 'completed' HAVING count(*) > 0), \
         x AS (DELETE FROM outbox_claims c WHERE c.id = ANY($5::int8[])) \
         SELECT id FROM u",
        now = ts("$3"),
    )
}

/// The queue the baselines' jobs are in, and their claims read.
pub(crate) const QUEUE: &str = "default";

/// The worker's default lease.
pub(crate) const LEASE_MS: i64 = 300_000;

pub(crate) fn query(sql: &Arc<str>) -> Query<'static, Postgres, PgArguments> {
    sqlx::query(AssertSqlSafe(Arc::clone(sql)))
}

/// Binds a job row's eleven values in `push_row` order.
pub(crate) fn bind_row<'q>(q: Query<'q, Postgres, PgArguments>, row: JobRow) -> Query<'q, Postgres, PgArguments> {
    q.bind(row.id)
        .bind(row.kind)
        .bind(row.queue)
        .bind(row.payload)
        .bind(row.priority)
        .bind(row.max_attempts)
        .bind(row.run_at)
        .bind(row.key)
        .bind(row.schema_hash)
        .bind(row.created_at)
        .bind(row.created_at)
}
