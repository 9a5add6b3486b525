//! PostgreSQL's retention: finished jobs are found through the log of when they finished (`outbox_finished`),
//! as the jobs table has no index of them.

use sea_orm::{ConnectionTrait, Value};

use crate::error::{Error, Result};
use crate::storage::dialect::Params;
use crate::storage::retention::{PruneRules, Pruned};
use crate::storage::{Dialect, execute_write, limit_value, query_write};

/// Deletes the due finished jobs (with their history) that the log's oldest rows list: the rows before the
/// latest cutoff, as many as list `batch` jobs (a row of a larger completion whole), go with the due jobs they
/// list. A job they list that stays finished is listed again, in a row at the time it comes due (or at `now`,
/// for one that is due but kept: the latest completed job of its sequence, or one holding its sequence).
pub(super) async fn prune<C: ConnectionTrait + ?Sized>(
    conn: &C,
    rules: &PruneRules,
    now: i64,
    batch: u64,
) -> Result<Pruned> {
    let b = Dialect::Postgres;
    let mut p = Params::default();
    let condition = rules.condition(b, &mut p);
    let newest = p.push(rules.newest());
    let limit = p.push(limit_value(batch));
    let now = p.push(now);
    let own = own_cutoff(rules, &mut p);
    // Rows are read by their time and deleted by their place: nothing else deletes or updates them.
    let sql = format!(
        "WITH r AS (DELETE FROM outbox_finished WHERE ctid = ANY(ARRAY(SELECT ctid FROM (SELECT ctid, \
         sum(cardinality(jobs)) OVER (ORDER BY at, ctid) - cardinality(jobs) AS before FROM (SELECT ctid, \
         at, jobs FROM outbox_finished WHERE at < {newest_ts} ORDER BY at LIMIT {limit}) w) t \
         WHERE before < {limit})) RETURNING jobs), \
         listed AS (SELECT DISTINCT unnest(jobs) AS id FROM r), \
         d AS (DELETE FROM outbox_jobs j WHERE j.id = ANY(ARRAY(SELECT id FROM listed)) AND {condition} \
         RETURNING j.id), \
         k AS (SELECT j.id, CASE WHEN j.finished_at < {own_ts} THEN {now_ts} ELSE LEAST({now_ts}, \
         j.finished_at + ({newest} - {own}) * INTERVAL '1 millisecond') END AS at FROM outbox_jobs j \
         WHERE j.id = ANY(ARRAY(SELECT id FROM listed)) AND j.finished_at IS NOT NULL \
         AND NOT EXISTS (SELECT 1 FROM d WHERE d.id = j.id)), \
         a AS (INSERT INTO outbox_finished (at, jobs) SELECT at, array_agg(id ORDER BY id) FROM k GROUP BY at) \
         SELECT (SELECT count(*) FROM d), (SELECT COALESCE(sum(cardinality(jobs)), 0) FROM r)::int8",
        newest_ts = b.ts(&newest),
        own_ts = b.ts(&own),
        now_ts = b.ts(&now),
    );
    let ctx = || "pruning finished jobs".to_owned();
    let rows = query_write(conn, b.stmt(sql, p.0), ctx).await?;
    let read =
        |i| -> Result<i64> { rows.first().map_or(Ok(0), |r| r.try_get_by_index::<i64>(i).map_err(Error::db(ctx()))) };
    let (jobs, listed) = (read(0)?, read(1)?);
    let jobs = u64::try_from(jobs).unwrap_or(0);
    Ok(Pruned { jobs, more: u64::try_from(listed).unwrap_or(0) >= batch })
}

/// `j`'s own cutoff (ms, as `int8`; 0 for a status without rules), its values pushed to `p`.
fn own_cutoff(rules: &PruneRules, p: &mut Params) -> String {
    let mut cases = String::new();
    for (status, default, kinds) in &rules.statuses {
        let status_mark = p.push(status.as_str());
        cases.push_str(&format!(" WHEN {status_mark} THEN {}", PruneRules::kind_cutoff(default, kinds, p)));
    }
    if cases.is_empty() { "0::int8".to_owned() } else { format!("(CASE j.status{cases} ELSE 0 END)::int8") }
}

/// The log's rows as old as `before` that list only jobs gone now; a row that lists a job still here stays, for
/// retention to find it.
pub(super) async fn after_purge<C: ConnectionTrait + ?Sized>(conn: &C, before: i64) -> Result<()> {
    let b = Dialect::Postgres;
    let sql = format!(
        "DELETE FROM outbox_finished f WHERE f.at < {} \
         AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = ANY(f.jobs))",
        b.ts("$1")
    );
    let listed = || "purging the log's rows of purged jobs".into();
    execute_write(conn, b.stmt(sql, vec![Value::from(before)]), listed).await?;
    Ok(())
}

/// The claims whose lease ran out list every stuck job (`outbox_claims`).
pub(super) fn stuck_through(d: Dialect) -> String {
    format!("id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_claims WHERE lease_expires_at < {})) AND ", d.ts("$1"))
}
