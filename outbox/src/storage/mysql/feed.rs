//! MariaDB's event feed: ids are handed out before commit, and no reader can see which transactions still run, so
//! a reader stamps the rows committed since the last stamp before it reads (`outbox_feed_stamp` in `schema.sql`),
//! and positions are (stamp, id) pairs. Stamps commit in the order of their numbers: an event that commits later
//! gets a later stamp.

use sea_orm::Value;

use crate::error::Result;
use crate::storage::events::invalid;

/// What a reader runs before it reads: stamps up to 10,000 committed rows, or nothing while another reader stamps.
/// Nothing inside a transaction (the function looks): its snapshot may predate a stamp another reader committed,
/// whose rows it would not see beside its own later stamp, and the reader would move past them. Read so, the feed
/// shows the stamps committed before the snapshot, a prefix of the feed's order: exact, if not the newest.
pub(super) const FEED_STAMP: Option<&str> = Some("SELECT outbox_feed_stamp(FALSE)");

/// The feed's query from the row `row` of the position `after`, `rows` rows at most
/// ([`crate::storage::engine::Engine::feed_after`]).
pub(super) fn feed_after(row: &str, after: &str, rows: i64) -> Result<(String, Vec<Value>, String)> {
    let parsed = row.split_once('-').and_then(|(stamp, id)| {
        Some((stamp.parse::<i64>().ok().filter(|n| *n >= 0)?, id.parse::<i64>().ok().filter(|n| *n >= 0)?))
    });
    let (stamp, id) = parsed.ok_or_else(|| invalid(after, "`<stamp>-<number>`"))?;
    let sql = "SELECT CONCAT(seq, '-', id), job_id, kind, queue, event, attempt, worker, error, at, jobs \
         FROM outbox_job_events WHERE seq >= $1 AND (seq > $1 OR id >= $2) ORDER BY seq, id LIMIT $3";
    let values = vec![stamp.into(), id.into(), rows.into()];
    Ok((sql.to_owned(), values, format!("{stamp}-{id}")))
}

/// The feed's current end: every row committed before it is stamped first, so every event after `<next stamp>-0`
/// commits from now on. Inside a transaction, the next stamp as its snapshot sees it, stamping nothing (a head
/// taken there may be followed by events committed before it, and misses none).
pub(super) const FEED_HEAD: &str = "SELECT CONCAT(COALESCE(outbox_feed_stamp(TRUE), 0) + 1, '-0')";
