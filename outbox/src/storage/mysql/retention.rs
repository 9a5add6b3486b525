//! MariaDB's retention: finished jobs are found through the log of when they finished (`outbox_finished`, one JSON
//! array of ids a row), as on PostgreSQL; without data-modifying CTEs a pass is a few statements in the caller's
//! transaction, which holds the retention lease (nothing else deletes or updates the log's rows). The events of
//! jobs deleted as they completed are found through `outbox_outlived`, which the delete trigger writes.

use std::collections::BTreeMap;

use sea_orm::{ConnectionTrait, QueryResult, Value};

use super::stmt;
use crate::error::{Error, Result};
use crate::record::JobStatus;
use crate::storage::dialect::Params;
use crate::storage::retention::{PruneRules, Pruned};
use crate::storage::{Dialect, execute_write, limit_value, query_write};

/// Ids a statement lists at most: the log's rows list one job each but for hand-written ones, and a pass lists
/// `batch` jobs.
const IDS_PER_STATEMENT: usize = 1_000;

/// Deletes the due finished jobs (with their history) that the log's oldest rows list: the rows before the latest
/// cutoff, as many as list `batch` jobs (a row of a larger completion whole), go with the due jobs they list. A job
/// they list that stays finished is listed again, in a row at the time it comes due (or at `now`, for one that is
/// due but kept: the latest completed job of its sequence, or one holding its sequence).
pub(super) async fn prune<C: ConnectionTrait + ?Sized>(
    conn: &C,
    rules: &PruneRules,
    now: i64,
    batch: u64,
) -> Result<Pruned> {
    let ctx = || "pruning finished jobs".to_owned();
    let newest = rules.newest();
    let sql = "SELECT id, jobs FROM outbox_finished WHERE at < $1 ORDER BY at, id LIMIT $2";
    let rows = query_write(conn, stmt(sql, vec![newest.into(), limit_value(batch)]), ctx).await?;
    let (mut log_rows, mut listed) = (Vec::new(), Vec::new());
    for row in &rows {
        if listed.len() as u64 >= batch {
            break;
        }
        let (id, jobs) = log_row(row)?;
        log_rows.push(Value::from(id));
        listed.extend(jobs);
    }
    if log_rows.is_empty() {
        return Ok(Pruned { jobs: 0, more: false });
    }
    let more = listed.len() as u64 >= batch;
    listed.sort_unstable();
    listed.dedup();

    let mut deleted = 0;
    let mut kept: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for ids in listed.chunks(IDS_PER_STATEMENT) {
        // The due jobs, locked, then deleted by id: a statement deleting from `outbox_jobs` cannot name it under
        // another name, which the rules' condition reads it by.
        let mut p = Params::default();
        let condition = rules.condition(Dialect::MySql, &mut p);
        let marks: Vec<String> = ids.iter().map(|id| p.push(id.as_str())).collect();
        let sql =
            format!("SELECT j.id FROM outbox_jobs j WHERE j.id IN ({}) AND {condition} FOR UPDATE", marks.join(", "));
        let due: Vec<Value> = query_write(conn, stmt(&sql, p.0), ctx)
            .await?
            .iter()
            .map(|r| r.try_get_by_index::<String>(0).map(Value::from))
            .collect::<std::result::Result<_, _>>()
            .map_err(Error::db(ctx()))?;
        if !due.is_empty() {
            let sql = format!("DELETE FROM outbox_jobs WHERE id IN ({})", super::marks(1, due.len()));
            deleted += execute_write(conn, stmt(&sql, due), ctx).await?.rows_affected();
        }
        // What stays finished is listed again at the time it comes due.
        let sql = format!(
            "SELECT id, status, kind, finished_at FROM outbox_jobs WHERE id IN ({}) AND finished_at IS NOT NULL",
            super::marks(1, ids.len())
        );
        let values = ids.iter().map(|id| Value::from(id.as_str())).collect();
        for row in query_write(conn, stmt(&sql, values), ctx).await? {
            let read = |i| row.try_get_by_index::<String>(i).map_err(Error::db(ctx()));
            let (id, status, kind) = (read(0)?, read(1)?, read(2)?);
            let finished_at: i64 = row.try_get_by_index(3).map_err(Error::db(ctx()))?;
            let own = own_cutoff(rules, &status, &kind);
            let at = if finished_at < own { now } else { now.min(finished_at.saturating_add(newest - own)) };
            kept.entry(at).or_default().push(id);
        }
    }
    let sql = format!("DELETE FROM outbox_finished WHERE id IN ({})", super::marks(1, log_rows.len()));
    execute_write(conn, stmt(&sql, log_rows), ctx).await?;
    for (at, ids) in kept {
        let jobs = serde_json::to_string(&ids).map_err(|e| Error::Internal(format!("listing kept jobs: {e}")))?;
        let sql = "INSERT INTO outbox_finished (at, jobs) VALUES ($1, $2)";
        execute_write(conn, stmt(sql, vec![at.into(), jobs.into()]), ctx).await?;
    }
    Ok(Pruned { jobs: deleted, more })
}

/// A row of the log: its id and the jobs it lists.
fn log_row(row: &QueryResult) -> Result<(i64, Vec<String>)> {
    let ctx = || Error::db("reading the log of finished jobs");
    let id: i64 = row.try_get_by_index(0).map_err(ctx())?;
    let jobs: String = row.try_get_by_index(1).map_err(ctx())?;
    let jobs = serde_json::from_str(&jobs).map_err(|e| Error::CorruptRow {
        id: format!("outbox_finished {id}"),
        reason: format!("its jobs are not a JSON array of ids: {e}"),
    })?;
    Ok((id, jobs))
}

/// The cutoff of a job of `kind` under `status` (ms; 0 for a status without rules).
fn own_cutoff(rules: &PruneRules, status: &str, kind: &str) -> i64 {
    let Ok(status) = status.parse::<JobStatus>() else { return 0 };
    rules
        .statuses
        .iter()
        .find(|(s, _, _)| *s == status)
        .map_or(0, |(_, default, kinds)| kinds.iter().find(|(k, _)| k == kind).map_or(*default, |(_, cutoff)| *cutoff))
}

/// The log's rows as old as `before` that list only jobs gone now; a row that lists a job still here stays, for
/// retention to find it.
pub(super) async fn after_purge<C: ConnectionTrait + ?Sized>(conn: &C, before: i64) -> Result<()> {
    let sql = "DELETE FROM outbox_finished WHERE at < $1 AND NOT EXISTS (SELECT 1 FROM \
         JSON_TABLE(outbox_finished.jobs, '$[*]' COLUMNS (id VARCHAR(26) CHARACTER SET ascii PATH '$')) x \
         JOIN outbox_jobs j ON j.id = x.id)";
    let listed = || "purging the log's rows of purged jobs".into();
    execute_write(conn, stmt(sql, vec![Value::from(before)]), listed).await?;
    Ok(())
}

/// Deletes the events of at most `batch` jobs deleted as they completed before `before` (kinds that keep nothing,
/// or keep their jobs in the archive), which outlived their job for the feed's readers, and at most `batch` rows
/// of many jobs (none of the engine's own statements writes one); how many of both.
pub(super) async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64> {
    let ctx = || "pruning the events of jobs kept nowhere".to_owned();
    let sql = "SELECT job_id FROM outbox_outlived WHERE at < $1 ORDER BY at, job_id LIMIT $2";
    let rows = query_write(conn, stmt(sql, vec![before.into(), limit_value(batch)]), ctx).await?;
    let gone: Vec<Value> = rows
        .iter()
        .map(|r| r.try_get_by_index::<String>(0).map(Value::from))
        .collect::<std::result::Result<_, _>>()
        .map_err(Error::db(ctx()))?;
    for ids in gone.chunks(IDS_PER_STATEMENT) {
        let marks = super::marks(1, ids.len());
        let sql = format!("DELETE FROM outbox_job_events WHERE job_id IN ({marks})");
        execute_write(conn, stmt(&sql, ids.to_vec()), ctx).await?;
        let sql = format!("DELETE FROM outbox_outlived WHERE job_id IN ({marks})");
        execute_write(conn, stmt(&sql, ids.to_vec()), ctx).await?;
    }
    let sql = "DELETE FROM outbox_job_events WHERE job_id = '' AND at < $1 ORDER BY id LIMIT $2";
    let rows =
        execute_write(conn, stmt(sql, vec![before.into(), limit_value(batch)]), || "pruning old feed rows".into())
            .await?
            .rows_affected();
    Ok((gone.len() as u64).max(rows))
}
