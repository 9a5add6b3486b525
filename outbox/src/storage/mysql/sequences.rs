//! Sequences on MySQL: letting a sequence's next job go. A trigger here cannot write `outbox_jobs` (error 1442), so
//! the triggers only note a sequence to look at (`outbox_sequence_notes`): a job of it went in (every sequenced job
//! goes in waiting), stopped holding it back, was deleted while holding it, or rejoined it. [`release`] drains the
//! notes in the caller's transaction: at every claim, before it reads candidates, and after the outcomes a store
//! writes. Nothing in it waits for a lock:
//! - notes another transaction wrote and has not committed are passed over (`SKIP LOCKED`);
//! - a sequence an enqueuer holds (its row of `outbox_sequences`) is left with its notes: the enqueuer's own note
//!   asks again once it commits, and a slow application transaction never stalls a worker;
//! - a head another transaction holds (an operator's change) keeps its note for the next look.
//!
//! A sequence's head (the first job that holds it back, by place) goes when it waits, nothing of its sequence runs
//! or is free to run, and no parent holds it.

use std::collections::BTreeSet;

use sea_orm::{ConnectionTrait, Value};

use super::{marks, stmt};
use crate::error::{Error, Result};

/// Notes read by one look at most; the rest wait for the next.
const NOTES_PER_LOOK: u64 = 500;

const NOTES: &str = "SELECT id, sequence_key FROM outbox_sequence_notes ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED";
/// The sequence's head, and whether a job of it runs or is free to run.
const HEAD: &str = "SELECT (SELECT h.id FROM outbox_jobs h WHERE h.blocking_key = $1 ORDER BY h.sequence_no LIMIT 1), \
     EXISTS (SELECT 1 FROM outbox_jobs l WHERE l.live_key = $1)";
const LOCK_HEAD: &str = "SELECT id FROM outbox_jobs WHERE id = $1 FOR UPDATE SKIP LOCKED";
const RELEASE: &str =
    "UPDATE outbox_jobs SET waiting = FALSE WHERE id = $1 AND status = 'pending' AND waiting AND parents_left = 0";

/// Looks at the noted sequences in `tx`, letting go each one's head when nothing holds it; the jobs that went.
pub(super) async fn release<C: ConnectionTrait>(tx: &C) -> Result<Vec<String>> {
    let ctx = || Error::db("letting go the next jobs of sequences");
    let notes = tx.query_all_raw(stmt(NOTES, vec![NOTES_PER_LOOK.into()])).await.map_err(ctx())?;
    if notes.is_empty() {
        return Ok(Vec::new());
    }
    let mut noted: Vec<(i64, String)> = Vec::with_capacity(notes.len());
    for row in &notes {
        noted.push((row.try_get_by_index(0).map_err(ctx())?, row.try_get_by_index(1).map_err(ctx())?));
    }
    let keys: BTreeSet<&str> = noted.iter().map(|(_, k)| k.as_str()).collect();
    // In the order of their keys, as enqueuers take them; held ones are passed over.
    let sql = format!(
        "SELECT sequence_key FROM outbox_sequences WHERE sequence_key IN ({}) ORDER BY sequence_key \
         FOR UPDATE SKIP LOCKED",
        marks(1, keys.len())
    );
    let values = keys.iter().map(|k| Value::from(*k)).collect();
    let mut looked: BTreeSet<String> = BTreeSet::new();
    let mut released = Vec::new();
    for row in tx.query_all_raw(stmt(&sql, values)).await.map_err(ctx())? {
        let key: String = row.try_get_by_index(0).map_err(ctx())?;
        let Some(head) = tx.query_one_raw(stmt(HEAD, vec![key.clone().into()])).await.map_err(ctx())? else {
            continue;
        };
        let (first, live): (Option<String>, bool) =
            (head.try_get_by_index(0).map_err(ctx())?, head.try_get_by_index(1).map_err(ctx())?);
        if let (Some(first), false) = (first, live) {
            let held = tx.query_one_raw(stmt(LOCK_HEAD, vec![first.clone().into()])).await.map_err(ctx())?;
            if held.is_none() {
                // Another transaction holds the head: this sequence's notes stay for the next look.
                continue;
            }
            if tx.execute_raw(stmt(RELEASE, vec![first.clone().into()])).await.map_err(ctx())?.rows_affected() == 1 {
                released.push(first);
            }
        }
        looked.insert(key);
    }
    let done: Vec<Value> = noted.iter().filter(|(_, k)| looked.contains(k)).map(|(id, _)| Value::from(*id)).collect();
    if !done.is_empty() {
        let sql = format!("DELETE FROM outbox_sequence_notes WHERE id IN ({})", marks(1, done.len()));
        tx.execute_raw(stmt(&sql, done)).await.map_err(ctx())?;
    }
    Ok(released)
}
