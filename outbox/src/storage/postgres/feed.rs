//! PostgreSQL's event feed: identity values are handed out before commit, so positions are (transaction, id)
//! pairs, and a reader sees only rows of transactions older than every one still running; an event that
//! commits later has a transaction id at or above that bound.

use sea_orm::Value;

use crate::error::Result;
use crate::storage::Dialect;
use crate::storage::events::invalid;

/// The feed's query from the row `row` of the position `after`, `rows` rows at most
/// ([`crate::storage::engine::Engine::feed_after`]).
pub(super) fn feed_after(row: &str, after: &str, rows: i64) -> Result<(String, Vec<Value>, String)> {
    let parsed = row
        .split_once('-')
        .and_then(|(tx, id)| Some((tx.parse::<u64>().ok()?, id.parse::<i64>().ok().filter(|n| *n >= 0)?)));
    let (tx, id) = parsed.ok_or_else(|| invalid(after, "`<transaction>-<number>`"))?;
    let sql = format!(
        "SELECT txid::text || '-' || id::text, job_id, kind, queue, event, attempt, worker, error, {}, \
         jobs::text FROM outbox_job_events WHERE (txid, id) >= ($1::text::xid8, $2::int8) \
         AND txid < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY txid, id LIMIT $3",
        Dialect::Postgres.ms("at")
    );
    Ok((sql, vec![tx.to_string().into(), id.into(), rows.into()], format!("{tx}-{id}")))
}

/// The feed's current end: every event after `<oldest running transaction>-0` commits from now on.
pub(super) const FEED_HEAD: &str = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text || '-0'";
