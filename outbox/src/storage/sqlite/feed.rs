//! SQLite's event feed: positions are the rows' ids, which grow in commit order (one writer at a time), and a
//! worker's batch row lists its jobs as [`listing`] writes them.

use sea_orm::Value;

use crate::error::{Error, Result};
use crate::storage::events::invalid;

/// The feed's query from the row `row` of the position `after`, `rows` rows at most
/// ([`crate::storage::engine::Engine::feed_after`]).
pub(super) fn feed_after(row: &str, after: &str, rows: i64) -> Result<(String, Vec<Value>, String)> {
    let id = row.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| invalid(after, "whole numbers"))?;
    let sql = "SELECT CAST(id AS TEXT), job_id, kind, queue, event, attempt, worker, error, at, jobs \
         FROM outbox_job_events WHERE id >= $1 ORDER BY id LIMIT $2";
    Ok((sql.to_owned(), vec![id.into(), rows.into()], id.to_string()))
}

/// The feed's current end: its last row.
pub(super) const FEED_HEAD: &str = "SELECT CAST(COALESCE(MAX(id), 0) AS TEXT) FROM outbox_job_events";

/// The kind, queue and job list of a worker's feed row for `jobs` (id, kind, queue, attempt). When they all
/// share one kind and one queue, the row names them and lists each job as `[id, attempt]`; otherwise its kind
/// and queue are empty and each job is `[id, kind, queue, attempt]`. PostgreSQL's statements write the same
/// (`feed_row!` in `postgres/store/`). A claim's row lists up to a claim's worth of jobs, and a job's kind and
/// queue were a third of its entry.
pub(crate) fn listing<S: AsRef<str>>(jobs: &[(S, S, S, i32)]) -> Result<(&str, &str, String)> {
    let first = jobs.first().map_or(("", ""), |(_, kind, queue, _)| (kind.as_ref(), queue.as_ref()));
    let shared = jobs.iter().all(|(_, kind, queue, _)| (kind.as_ref(), queue.as_ref()) == first);
    let listed = if shared {
        serde_json::to_string(&jobs.iter().map(|(id, _, _, attempt)| (id.as_ref(), attempt)).collect::<Vec<_>>())
    } else {
        serde_json::to_string(
            &jobs.iter().map(|(id, k, q, attempt)| (id.as_ref(), k.as_ref(), q.as_ref(), attempt)).collect::<Vec<_>>(),
        )
    };
    let listed = listed.map_err(|e| Error::Internal(format!("listing {} jobs for the event feed: {e}", jobs.len())))?;
    let (kind, queue) = if shared { first } else { ("", "") };
    Ok((kind, queue, listed))
}
