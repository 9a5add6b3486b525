//! Retention: which finished jobs are due to go, deleted in batches by the worker that holds the retention
//! lease, and workers' feed rows past their age, with the events of the jobs they completed unkept.

use sea_orm::{ConnectionTrait, Value};

use super::backend::Params;
use super::jobs::HELD_KEPT;
#[cfg(feature = "postgres")]
use super::query_write;
use super::{Backend, execute_write, limit_value};
#[cfg(feature = "postgres")]
use crate::error::Error;
use crate::error::Result;
use crate::record::JobStatus;

/// Which finished jobs retention deletes: those last updated before their status's cutoff (integer
/// milliseconds; 0 keeps them), a kind's own cutoff where it has one. Never a failed or cancelled job that
/// holds its sequence, nor the latest completed job of a sequence (the reconcilers' evidence).
#[derive(Debug, Clone)]
pub(crate) struct PruneRules {
    /// Per status (`completed`, `failed`, `cancelled`): the default cutoff and the kinds' own.
    pub(crate) statuses: Vec<StatusCutoffs>,
    /// When the pass runs (ms): on PostgreSQL, when a job kept past its own cutoff is looked at again.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) now: i64,
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
    fn kind_cutoff(default: &i64, kinds: &[(String, i64)], p: &mut Params) -> String {
        let mut cutoff = String::new();
        for (kind, kind_cutoff) in kinds {
            cutoff.push_str(&format!(" WHEN {} THEN {}", p.push(kind.as_str()), p.push(*kind_cutoff)));
        }
        let d = p.push(*default);
        // A `CASE` needs one `WHEN` at least.
        if cutoff.is_empty() { d } else { format!("CASE j.kind{cutoff} ELSE {d} END") }
    }

    /// `j`'s own cutoff (ms, as `int8`; 0 for a status without rules), its values pushed to `p`.
    #[cfg(feature = "postgres")]
    fn own_cutoff(&self, p: &mut Params) -> String {
        let mut cases = String::new();
        for (status, default, kinds) in &self.statuses {
            let status_mark = p.push(status.as_str());
            cases.push_str(&format!(" WHEN {status_mark} THEN {}", Self::kind_cutoff(default, kinds, p)));
        }
        if cases.is_empty() { "0::int8".to_owned() } else { format!("(CASE j.status{cases} ELSE 0 END)::int8") }
    }
}

/// What one call of [`prune`] did: the jobs it deleted, and whether there may be more to look at now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pruned {
    /// Finished jobs deleted, with their history.
    pub(crate) jobs: u64,
    /// Whether the call stopped at its batch: call again for the rest.
    pub(crate) more: bool,
}

/// Deletes the finished jobs (with their history) that `rules` says are due, about `batch` at a time.
///
/// On SQLite the index of finished jobs finds them by status and age, `batch` at most. On PostgreSQL, which has
/// no such index, they are found through the log of finished jobs (`finished_log.sql`): the oldest rows before
/// the latest cutoff, as many as list `batch` jobs (a row of a larger completion whole), are deleted with the due
/// jobs they list. A job they list that stays finished is listed again, in a row at the time it comes due (or
/// at `now`, for one that is due but kept: the latest completed job of its sequence, or one holding its sequence).
pub(crate) async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, batch: u64) -> Result<Pruned> {
    let b = Backend::of(conn)?;
    let mut p = Params::default();
    let condition = rules.condition(b, &mut p);
    match b {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            let sql = format!(
                "DELETE FROM outbox_jobs WHERE id IN (SELECT j.id FROM outbox_jobs j WHERE {condition} LIMIT {})",
                p.push(limit_value(batch))
            );
            let res = execute_write(conn, b.stmt(sql, p.0), || "pruning finished jobs".into()).await?;
            let jobs = res.rows_affected();
            Ok(Pruned { jobs, more: jobs >= batch })
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let newest = p.push(rules.newest());
            let limit = p.push(limit_value(batch));
            let now = p.push(rules.now);
            let own = rules.own_cutoff(&mut p);
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
            let read = |i| -> Result<i64> {
                rows.first().map_or(Ok(0), |r| r.try_get_by_index::<i64>(i).map_err(Error::db(ctx())))
            };
            let (jobs, listed) = (read(0)?, read(1)?);
            let jobs = u64::try_from(jobs).unwrap_or(0);
            Ok(Pruned { jobs, more: u64::try_from(listed).unwrap_or(0) >= batch })
        }
    }
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
