//! Sequences on MySQL: letting a sequence's next job go. A trigger here cannot write `outbox_jobs` (error 1442), so
//! the triggers only note a sequence to look at (`outbox_sequence_notes`): a job of it went in (every sequenced job
//! goes in waiting), stopped holding it back, was deleted while holding it, or rejoined it. [`release`] drains the
//! notes in a short transaction of its own: before every claim, after the outcomes a store writes and after a
//! rescue. Nothing in it waits for a lock, and nothing else runs in its transaction:
//! - notes are read without a lock, one sequence each, oldest first: an uncommitted note is not seen, and a note
//!   another look took meanwhile is deleted by it;
//! - a sequence an enqueuer holds (its row of `outbox_sequences`) is left with its notes: the enqueuer's own note
//!   asks again once it commits, and a slow application transaction never stalls a worker;
//! - a head another transaction holds (an operator's change) keeps its notes for the next look;
//! - notes of a sequence with no row (a key changed by hand) are deleted.
//!
//! A job left waiting with no note (hand-written SQL, a note lost with a restore) is found by [`sweep`], which a
//! rescue runs at most once a minute.
//!
//! A sequence's head (the first job that holds it back, by place) goes when it waits, nothing of its sequence runs
//! or is free to run, and no parent holds it.

use std::collections::BTreeSet;

use sea_orm::{ConnectionTrait, DatabaseConnection, Value};

use super::{conn, marks, stmt};
use crate::error::{Error, Result};

/// Sequences looked at by one look at most; the rest wait for the next.
const KEYS_PER_LOOK: u64 = 100;

/// The noted sequences, oldest note first, read without a lock.
const NOTED: &str = "SELECT sequence_key FROM outbox_sequence_notes GROUP BY sequence_key ORDER BY MIN(id) LIMIT $1";
const NOTES_OF: &str = "SELECT id FROM outbox_sequence_notes WHERE sequence_key = $1";
/// The sequence's head, and whether a job of it runs or is free to run.
const HEAD: &str = "SELECT (SELECT h.id FROM outbox_jobs h WHERE h.blocking_key = $1 ORDER BY h.sequence_no LIMIT 1), \
     EXISTS (SELECT 1 FROM outbox_jobs l WHERE l.live_key = $1)";
const LOCK_HEAD: &str = "SELECT id FROM outbox_jobs WHERE id = $1 FOR UPDATE SKIP LOCKED";
const RELEASE: &str =
    "UPDATE outbox_jobs SET waiting = FALSE WHERE id = $1 AND status = 'pending' AND waiting AND parents_left = 0";
/// A note for each sequence whose head waits with nothing of it running or free to run.
const SWEEP: &str = "INSERT INTO outbox_sequence_notes (sequence_key) SELECT DISTINCT w.blocking_key FROM outbox_jobs w \
     WHERE w.blocking_key IS NOT NULL AND w.status = 'pending' AND w.waiting \
     AND NOT EXISTS (SELECT 1 FROM outbox_jobs l WHERE l.live_key = w.blocking_key) \
     AND NOT EXISTS (SELECT 1 FROM outbox_jobs e WHERE e.blocking_key = w.blocking_key \
     AND e.sequence_no < w.sequence_no) LIMIT 1000";

/// Looks at the noted sequences, letting go each one's head when nothing holds it; the jobs that went. A failure
/// is logged and left to the next look: the notes stay.
pub(super) async fn release(db: &DatabaseConnection) -> Vec<String> {
    match look(db).await {
        Ok(released) => released,
        Err(e) => {
            tracing::warn!(error = %e, "letting go the next jobs of sequences failed; the next look tries again");
            Vec::new()
        }
    }
}

async fn look(db: &DatabaseConnection) -> Result<Vec<String>> {
    let ctx = || Error::db("letting go the next jobs of sequences");
    let noted = db.query_all_raw(stmt(NOTED, vec![KEYS_PER_LOOK.into()])).await.map_err(ctx())?;
    if noted.is_empty() {
        return Ok(Vec::new());
    }
    let keys: BTreeSet<String> =
        noted.iter().map(|r| r.try_get_by_index::<String>(0)).collect::<std::result::Result<_, _>>().map_err(ctx())?;
    let tx = conn::begin_write(db).await?;
    let list = marks(1, keys.len());
    let values = || keys.iter().map(|k| Value::from(k.as_str())).collect::<Vec<_>>();
    // In the order of their keys, as enqueuers take them; held ones are passed over.
    let lock = format!(
        "SELECT sequence_key FROM outbox_sequences WHERE sequence_key IN ({list}) ORDER BY sequence_key \
         FOR UPDATE SKIP LOCKED"
    );
    let locked = tx.query_all_raw(stmt(&lock, values())).await.map_err(ctx())?;
    let exist = format!("SELECT sequence_key FROM outbox_sequences WHERE sequence_key IN ({list})");
    let existing: BTreeSet<String> = tx
        .query_all_raw(stmt(&exist, values()))
        .await
        .map_err(ctx())?
        .iter()
        .map(|r| r.try_get_by_index::<String>(0))
        .collect::<std::result::Result<_, _>>()
        .map_err(ctx())?;
    let notes_of = async |key: &str| -> Result<Vec<Value>> {
        let rows = tx.query_all_raw(stmt(NOTES_OF, vec![key.into()])).await.map_err(ctx())?;
        rows.iter().map(|r| r.try_get_by_index::<i64>(0).map(Value::from).map_err(ctx())).collect()
    };
    let mut done: Vec<Value> = Vec::new();
    for key in keys.difference(&existing) {
        done.extend(notes_of(key).await?);
    }
    let mut released = Vec::new();
    for row in locked {
        let key: String = row.try_get_by_index(0).map_err(ctx())?;
        // The notes first, then what they ask about: a note committed after this read stays for the next look.
        let notes = notes_of(&key).await?;
        let Some(head) = tx.query_one_raw(stmt(HEAD, vec![key.clone().into()])).await.map_err(ctx())? else {
            continue;
        };
        let (first, live): (Option<String>, bool) =
            (head.try_get_by_index(0).map_err(ctx())?, head.try_get_by_index(1).map_err(ctx())?);
        if let (Some(first), false) = (first, live) {
            if tx.query_one_raw(stmt(LOCK_HEAD, vec![first.clone().into()])).await.map_err(ctx())?.is_none() {
                // Another transaction holds the head: this sequence's notes stay for the next look.
                continue;
            }
            if tx.execute_raw(stmt(RELEASE, vec![first.clone().into()])).await.map_err(ctx())?.rows_affected() == 1 {
                released.push(first);
            }
        }
        done.extend(notes);
    }
    if !done.is_empty() {
        let sql = format!("DELETE FROM outbox_sequence_notes WHERE id IN ({})", marks(1, done.len()));
        tx.execute_raw(stmt(&sql, done)).await.map_err(ctx())?;
    }
    tx.commit().await.map_err(Error::db("committing the next jobs of sequences"))?;
    Ok(released)
}

/// Notes every sequence whose head waits with nothing of it running or free to run, for [`release`] to look at.
pub(super) async fn sweep(db: &DatabaseConnection) {
    if let Err(e) = db.execute_raw(stmt(SWEEP, vec![])).await {
        tracing::warn!(error = %e, "looking for sequences left waiting failed; the next sweep tries again");
    }
}
