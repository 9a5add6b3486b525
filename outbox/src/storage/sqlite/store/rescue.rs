//! Rescues on SQLite: claims whose lease ran out go back to pending (or failed, with no attempts left), and jobs
//! stranded behind sequences that moved on are let go.

use rusqlite::{Connection, params};

use crate::error::{Error, Result};
use crate::storage::Rescued;

/// Lets go the first blocking job of every sequence that has jobs waiting and none running or free to run
/// (the blocking condition of `schema.sql`, spelled out as there).
pub(super) const RELEASE_STRANDED: &str = "UPDATE outbox_jobs SET waiting = 0 WHERE id IN (SELECT (SELECT h.id FROM outbox_jobs h \
     WHERE h.sequence_key = k.sequence_key AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', \
     'cancelled') AND h.sequence_hold = 1)) ORDER BY h.sequence_no LIMIT 1) FROM (SELECT DISTINCT \
     w.sequence_key FROM outbox_jobs w WHERE w.status = 'pending' AND w.waiting = 1 AND NOT EXISTS \
     (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = w.sequence_key \
     AND (c.status = 'claimed' OR (c.status = 'pending' AND c.waiting = 0)))) k) \
     AND status = 'pending' AND waiting = 1 AND parents_left = 0";

/// The claims whose lease ran out before `?1`, put back to pending (or failed, with no attempts left).
pub(super) const RESCUE: &str = "UPDATE outbox_jobs SET \
     status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END, \
     last_error = 'lease expired while claimed by ' || COALESCE(locked_by, 'an unknown worker') \
     || CASE WHEN attempts >= max_attempts THEN '; no attempts left' ELSE '' END, \
     lease_expires_at = NULL, run_at = ?1, updated_at = ?1 \
     WHERE status = 'claimed' AND lease_expires_at < ?1 \
     RETURNING id, kind, queue, attempts, status, locked_by";

/// Lets go jobs stranded behind sequences that moved on, and puts claims whose lease ran out before `now`
/// back to pending (or failed, with no attempts left); the rescued claims.
pub(in crate::storage::sqlite) fn rescue(conn: &Connection, now: i64) -> Result<Vec<Rescued>> {
    // Writers take turns here, so the triggers never miss a job to let go; rows written or changed by hand
    // can still leave one waiting with nothing ahead of it. A sequence with a job running or free to run is
    // moving and left alone (its first waiting job may be one retried behind the running one).
    let released = conn
        .prepare_cached(RELEASE_STRANDED)
        .and_then(|mut s| s.execute([]))
        .map_err(Error::db("letting waiting sequences go"))?;
    if released > 0 {
        tracing::info!(jobs = released, "let go jobs waiting behind sequences that had moved on");
        crate::wake::wake();
    }
    let ctx = || Error::db("rescuing expired claims");
    let mut stmt = conn.prepare_cached(RESCUE).map_err(ctx())?;
    let rows = stmt
        .query_map(params![now], |row| {
            Ok(Rescued {
                id: row.get(0)?,
                kind: row.get(1)?,
                queue: row.get(2)?,
                attempt: row.get(3)?,
                status: row.get(4)?,
                previous_owner: row.get(5)?,
            })
        })
        .map_err(ctx())?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(ctx())
}
