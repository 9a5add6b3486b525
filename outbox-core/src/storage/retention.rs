//! Retention: which finished jobs are due to go, deleted in batches by the worker that holds the retention
//! lease, and workers' feed rows past their age, with the events of the jobs they completed unkept.

use sea_orm::{ConnectionTrait, Value};

use super::backend::Params;
use super::jobs::HELD_KEPT;
use super::{Backend, execute_write, limit_value};
use crate::error::Result;
use crate::record::JobStatus;

/// Which finished jobs retention deletes: those last updated before their status's cutoff (integer
/// milliseconds; 0 keeps them), a kind's own cutoff where it has one. Never a failed or cancelled job that
/// holds its sequence, nor the latest completed job of a sequence (the reconcilers' evidence).
#[derive(Debug, Clone)]
pub(crate) struct PruneRules {
    /// Per status (`completed`, `failed`, `cancelled`): the default cutoff and the kinds' own.
    pub(crate) statuses: Vec<StatusCutoffs>,
}

/// One status's default cutoff and the kinds' own, for [`PruneRules`].
pub(crate) type StatusCutoffs = (JobStatus, i64, Vec<(String, i64)>);

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
    fn condition(&self, b: Backend, p: &mut Params) -> String {
        let mut parts = Vec::new();
        for (status, default, kinds) in &self.statuses {
            let status_mark = p.push(status.as_str());
            let mut cutoff = String::new();
            for (kind, kind_cutoff) in kinds {
                cutoff.push_str(&format!(" WHEN {} THEN {}", p.push(kind.as_str()), p.push(*kind_cutoff)));
            }
            let d = p.push(*default);
            // A `CASE` needs one `WHEN` at least.
            let cutoff = if cutoff.is_empty() { d } else { format!("CASE j.kind{cutoff} ELSE {d} END") };
            parts.push(format!("(j.status = {status_mark} AND j.updated_at < {})", b.ts(&cutoff)));
        }
        let newest = b.ts(&p.push(self.newest()));
        format!(
            "j.status IN ('completed', 'failed', 'cancelled') AND ({}) AND j.updated_at < {newest}{} {HELD_KEPT} \
             AND NOT (j.status = 'completed' AND j.sequence_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM \
             outbox_jobs l WHERE l.sequence_key = j.sequence_key AND l.sequence_no > j.sequence_no \
             AND l.status = 'completed'))",
            if parts.is_empty() { "FALSE".to_owned() } else { parts.join(" OR ") },
            b.finished_before("j.", &newest),
        )
    }
}

/// Deletes at most `batch` finished jobs (with their history) that `rules` says are due; how many.
pub(crate) async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, batch: u64) -> Result<u64> {
    let b = Backend::of(conn)?;
    let mut p = Params::default();
    let condition = rules.condition(b, &mut p);
    let sql = format!(
        "DELETE FROM outbox_jobs WHERE id IN (SELECT j.id FROM outbox_jobs j WHERE {condition} LIMIT {})",
        p.push(limit_value(batch))
    );
    let res = execute_write(conn, b.stmt(sql, p.0), || "pruning finished jobs".into()).await?;
    Ok(res.rows_affected())
}

/// Deletes at most `batch` workers' feed rows older than `before`; how many. Before them, the events of the
/// jobs their `completed` rows list that were deleted as they completed (kinds that keep nothing): those
/// events outlived their job for the feed's readers, and go with the row that recorded the completion.
pub(crate) async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64> {
    let b = Backend::of(conn)?;
    let window = format!(
        "SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < {} ORDER BY id LIMIT $2",
        b.ts("$1")
    );
    let listed = match b {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => "SELECT x.value ->> 0 FROM w, json_each(w.jobs) AS x WHERE w.event = 'completed'",
        #[cfg(feature = "postgres")]
        Backend::Postgres => "SELECT x ->> 0 FROM w, json_array_elements(w.jobs) AS x WHERE w.event = 'completed'",
    };
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
