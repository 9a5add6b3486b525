//! Retention: which finished jobs are due to go, deleted in batches by the worker that holds the retention
//! lease, and workers' feed rows past their age, with the events of the jobs they completed unkept.

use sea_orm::{ConnectionTrait, Value};

use super::dialect::Params;
use super::engine::Engine;
pub(crate) use super::engine::{PruneRules, Pruned};
use super::{Dialect, execute_write, limit_value, on_engine};
use crate::error::Result;

/// The condition purge and delete add: a failed or cancelled job that holds its sequence stays until an
/// operator retries or releases it, so removing jobs never lets a held sequence go on its own.
pub(crate) const HELD_KEPT: &str =
    "AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled'))";

impl PruneRules {
    /// The latest cutoff of all: no job updated after it is due.
    pub(crate) fn newest(&self) -> i64 {
        self.statuses
            .iter()
            .flat_map(|(_, default, kinds)| std::iter::once(*default).chain(kinds.iter().map(|(_, c)| *c)))
            .max()
            .unwrap_or(0)
    }

    /// The condition on `j`, its values pushed to `p`.
    pub(crate) fn condition(&self, b: Dialect, p: &mut Params) -> String {
        let mut parts = Vec::new();
        for (status, default, kinds) in &self.statuses {
            let status_mark = p.push(status.as_str());
            let cutoff = Self::kind_cutoff(default, kinds, p);
            parts.push(format!("(j.status = {status_mark} AND j.updated_at < {})", b.ts(&cutoff)));
        }
        let newest = b.ts(&p.push(self.newest()));
        format!(
            "j.status IN ('completed', 'failed', 'cancelled') AND ({}) AND j.updated_at < {newest} {HELD_KEPT} \
             AND NOT (j.status = 'completed' AND j.sequence_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM \
             outbox_jobs l WHERE l.sequence_key = j.sequence_key AND l.sequence_no > j.sequence_no \
             AND l.status = 'completed'))",
            if parts.is_empty() { "FALSE".to_owned() } else { parts.join(" OR ") },
        )
    }

    /// The cutoff of `j`'s kind under one status (ms), its values pushed to `p`.
    pub(crate) fn kind_cutoff(default: &i64, kinds: &[(String, i64)], p: &mut Params) -> String {
        let mut cutoff = String::new();
        for (kind, kind_cutoff) in kinds {
            cutoff.push_str(&format!(" WHEN {} THEN {}", p.push(kind.as_str()), p.push(*kind_cutoff)));
        }
        let d = p.push(*default);
        // A `CASE` needs one `WHEN` at least.
        if cutoff.is_empty() { d } else { format!("CASE j.kind{cutoff} ELSE {d} END") }
    }
}

/// Deletes the finished jobs (with their history) that `rules` says are due, about `batch` at a time.
///
/// On SQLite the index of finished jobs finds them by status and age, `batch` at most. On PostgreSQL, which has
/// no such index, they are found through the log of finished jobs (`outbox_finished`): the oldest rows before
/// the latest cutoff, as many as list `batch` jobs (a row of a larger completion whole), are deleted with the due
/// jobs they list. A job they list that stays finished is listed again, in a row at the time it comes due (or
/// at `now`, for one that is due but kept: the latest completed job of its sequence, or one holding its sequence).
/// `now` is when the pass runs (ms).
pub(crate) async fn prune<C: ConnectionTrait + ?Sized>(
    conn: &C,
    rules: &PruneRules,
    now: i64,
    batch: u64,
) -> Result<Pruned> {
    let b = Dialect::of(conn)?;
    on_engine!(b, E => E::prune(conn, rules, now, batch).await)
}

/// Deletes at most `batch` of the feed's rows older than `before` that belong to no job, with the events of the
/// jobs deleted as they completed that outlived them for the feed's readers; how many.
pub(crate) async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64> {
    let b = Dialect::of(conn)?;
    on_engine!(b, E => E::prune_feed(conn, before, batch).await)
}

/// [`prune_feed`] where workers write feed rows of many jobs: at most `batch` of them older than `before`, and
/// before them the events of the jobs their `completed` rows list that were deleted as they completed (kinds that
/// keep nothing): those go with the row that recorded the completion. Unused in a build of no such engine.
#[allow(dead_code)]
pub(crate) async fn prune_worker_rows<C: ConnectionTrait + ?Sized>(
    conn: &C,
    b: Dialect,
    before: i64,
    batch: u64,
) -> Result<u64> {
    let window = format!(
        "SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < {} ORDER BY id LIMIT $2",
        b.ts("$1")
    );
    let listed =
        format!("SELECT {} ->> 0 FROM w, {} WHERE w.event = 'completed'", b.element("x"), b.elements("w.jobs", "x"));
    let unkept = format!(
        "WITH w AS ({window}) DELETE FROM outbox_job_events WHERE job_id IN ({listed}) \
         AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = outbox_job_events.job_id)"
    );
    let values = || vec![Value::from(before), limit_value(batch)];
    execute_write(conn, b.stmt(unkept, values()), || "pruning the events of jobs kept nowhere".into()).await?;
    let sql = format!("WITH w AS ({window}) DELETE FROM outbox_job_events WHERE id IN (SELECT id FROM w)");
    let res = execute_write(conn, b.stmt(sql, values()), || "pruning old feed rows".into()).await?;
    Ok(res.rows_affected())
}
