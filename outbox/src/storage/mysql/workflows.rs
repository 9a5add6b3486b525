//! Workflows on MySQL: what a parent's outcome does to its children. A trigger here cannot write `outbox_jobs`
//! (error 1442), so the triggers note the outcome (`outbox_workflow_notes`) in the writer's transaction, and
//! they are counted in the order they were written by a transaction that holds `outbox_workflow_turn` (so two notes
//! of one parent are never counted out of order): those of a store's own outcomes and rescues in the transaction
//! that writes them ([`settle_own`], which waits for the turn), so a worker's outcome and what it does to the
//! children commit together, as on the other engines; and the rest before every claim in a transaction of its own
//! ([`settle`], which passes when another store holds the turn): what other writers noted (an operator's retry or
//! cancel), within tens of milliseconds while a worker runs. What it does is what PostgreSQL's `outbox_jobs_workflow_done` and `_retried` do (its
//! `schema.sql` says why, case by case):
//! - a completion counts for every child but a first-failure one, which it cancels once every parent completed;
//! - a failure or cancellation counts for the children that go on after it, lets a first-failure child go, and
//!   cancels the other children that wait and every step below them that cannot run either;
//! - a child that counted its last parent goes, recorded as its `ready` event: at once without a sequence, through
//!   its sequence's head with one (noted for `sequences.rs`);
//! - a retry of a parent brings back the steps its failure cancelled, and the steps below them, but a step another
//!   failed or cancelled parent still holds.
//!
//! The steps this cancels or brings back that have children of their own are noted in turn by the triggers, and
//! counted by the next round.

use sea_orm::{ConnectionTrait, DatabaseConnection, Value};

use super::{conn, marks, stmt};
use crate::error::{Error, Result};

/// Notes counted by one round at most.
const NOTES_PER_ROUND: u64 = 100;
/// Rounds of one look at most: the notes left wait for the next.
const ROUNDS: usize = 100;
/// Ids one statement lists at most.
const IDS_PER_STATEMENT: usize = 1_000;

const TURN: &str = "SELECT one FROM outbox_workflow_turn WHERE one = 1 FOR UPDATE SKIP LOCKED";
const TURN_WAITING: &str = "SELECT one FROM outbox_workflow_turn WHERE one = 1 FOR UPDATE";
const NOTES: &str = "SELECT id, parent_id, outcome, at FROM outbox_workflow_notes ORDER BY id LIMIT $1";
/// How long a count waits for a row another transaction holds (a child an operator's or an application's open
/// transaction changed), in seconds: then the round fails, is undone and logged, and its notes wait for the next look,
/// rather than holding a claim or a store's outcomes for the server's whole lock wait.
macro_rules! bounded {
    ($sql:expr) => {
        concat!("SET STATEMENT innodb_lock_wait_timeout = 1 FOR ", $sql)
    };
}

/// The children a parent's outcome `$2` counts for, locked.
const COUNTED: &str = bounded!(
    "SELECT c.id, c.kind, c.queue, c.sequence_key, c.parents_left, c.status, c.on_parent_failure, \
     c.run_at FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id \
     WHERE d.parent_id = $1 AND NOT d.done AND c.parents_left > 0 AND ($2 = 'completed' OR c.on_parent_failure <> 0) \
     AND (c.on_parent_failure <> 2 OR c.status = 'pending') ORDER BY c.id FOR UPDATE"
);
const DONE: &str = bounded!(
    "UPDATE outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id SET d.done = TRUE \
     WHERE d.parent_id = $1 AND NOT d.done AND ($2 = 'completed' OR c.on_parent_failure <> 0)"
);
/// The children that cannot run without the parent `$1`, and every step below them that cannot either.
const DOOMED: &str = "WITH RECURSIVE doomed (id) AS ( \
     SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs k ON k.id = d.child_id \
     WHERE d.parent_id = $1 AND NOT d.done AND k.on_parent_failure = 0 AND k.status = 'pending' \
     AND k.parents_left > 0 \
     UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id \
     JOIN outbox_jobs k ON k.id = d.child_id \
     WHERE NOT d.done AND k.on_parent_failure = 0 AND k.status = 'pending' AND k.parents_left > 0) \
     SELECT id FROM doomed ORDER BY id";
/// The steps the failure of the parent `$1` cancelled, and the steps below them, but those another failed or
/// cancelled parent holds.
const REVIVED: &str = "WITH RECURSIVE revived (id) AS ( \
     SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs k ON k.id = d.child_id \
     WHERE d.parent_id = $1 AND NOT d.done AND k.status = 'cancelled' AND k.last_error LIKE 'cancelled: parent %' \
     AND NOT EXISTS (SELECT 1 FROM outbox_job_deps o JOIN outbox_jobs q ON q.id = o.parent_id \
     WHERE o.child_id = k.id AND NOT o.done AND o.parent_id <> d.parent_id AND q.status IN ('failed', 'cancelled')) \
     UNION SELECT d.child_id FROM revived JOIN outbox_job_deps d ON d.parent_id = revived.id \
     JOIN outbox_jobs k ON k.id = d.child_id \
     WHERE NOT d.done AND k.status = 'cancelled' AND k.last_error LIKE 'cancelled: parent %' \
     AND NOT EXISTS (SELECT 1 FROM outbox_job_deps o JOIN outbox_jobs q ON q.id = o.parent_id \
     WHERE o.child_id = k.id AND NOT o.done AND o.parent_id <> d.parent_id AND q.status IN ('failed', 'cancelled'))) \
     SELECT id FROM revived ORDER BY id";

/// Counts the parents' outcomes noted so far (an operator's retry or cancel, what a store's outcomes set off and
/// left) in a transaction of its own; the children it let go that no sequence holds (to announce). Passes when
/// another store holds the turn. A failure is logged and left to the next look: the notes stay.
pub(super) async fn settle(db: &DatabaseConnection) -> Vec<String> {
    let ctx = || Error::db("counting the outcomes of workflow steps");
    let looked = async {
        let probe = "SELECT 1 FROM outbox_workflow_notes LIMIT 1";
        if db.query_one_raw(stmt(probe, vec![])).await.map_err(ctx())?.is_none() {
            return Ok(Vec::new());
        }
        let tx = conn::begin_write(db).await?;
        if tx.query_one_raw(stmt(TURN, vec![])).await.map_err(ctx())?.is_none() {
            return Ok(Vec::new());
        }
        let released = rounds(&tx, None).await?;
        tx.commit().await.map_err(Error::db("committing the outcomes of workflow steps"))?;
        Ok::<_, Error>(released)
    };
    match looked.await {
        Ok(released) => released,
        Err(e) => {
            tracing::warn!(error = %e, "counting the outcomes of workflow steps failed; the next look tries again");
            Vec::new()
        }
    }
}

/// Counts, in `tx` and before it commits, the notes of the jobs `parents` (a store's outcomes or rescues, which
/// `tx` wrote) and of the steps that counting cancels or brings back, so that a worker's outcome and what it does
/// to the children commit together, as on the other engines. It waits for the turn (a store counting holds it for
/// a short transaction). Other writers' notes are left to [`settle`]: a note of theirs that cannot be counted yet
/// (a child an open transaction holds) never holds a store's outcomes. A failure fails `tx`, whose writer retries
/// what a passing error refused (a deadlock, a bounded lock wait). The children let go that no sequence holds, to
/// announce once `tx` commits.
pub(super) async fn settle_own<C: ConnectionTrait>(tx: &C, parents: Vec<String>) -> Result<Vec<String>> {
    let ctx = || Error::db("counting the outcomes of workflow steps");
    let probe = "SELECT 1 FROM outbox_workflow_notes LIMIT 1";
    if parents.is_empty() || tx.query_one_raw(stmt(probe, vec![])).await.map_err(ctx())?.is_none() {
        return Ok(Vec::new());
    }
    tx.query_one_raw(stmt(TURN_WAITING, vec![])).await.map_err(ctx())?;
    rounds(tx, Some(parents)).await
}

/// Counts notes in `tx`, which holds the turn, oldest first, [`NOTES_PER_ROUND`] a round and [`ROUNDS`] rounds at
/// most (the rest wait for the next look): every note, or those of the jobs `scope` and of the steps the counting
/// cancels or brings back (their cascade). Every note of a parent is counted in the order written, whoever wrote
/// it. The children let go that no sequence holds.
async fn rounds<C: ConnectionTrait>(tx: &C, mut scope: Option<Vec<String>>) -> Result<Vec<String>> {
    let ctx = || Error::db("counting the outcomes of workflow steps");
    let mut released = Vec::new();
    for _ in 0..ROUNDS {
        let notes = match &scope {
            None => tx.query_all_raw(stmt(NOTES, vec![NOTES_PER_ROUND.into()])).await.map_err(ctx())?,
            Some(parents) => {
                let mut notes = Vec::new();
                for chunk in parents.chunks(IDS_PER_STATEMENT) {
                    let sql = format!(
                        "SELECT id, parent_id, outcome, at FROM outbox_workflow_notes WHERE parent_id IN ({}) \
                         ORDER BY id LIMIT {NOTES_PER_ROUND}",
                        marks(1, chunk.len())
                    );
                    let values = chunk.iter().map(|id| Value::from(id.as_str())).collect();
                    notes.extend(tx.query_all_raw(stmt(&sql, values)).await.map_err(ctx())?);
                }
                let id_of = |r: &sea_orm::QueryResult| r.try_get_by_index::<i64>(0).unwrap_or(i64::MAX);
                notes.sort_by_key(id_of);
                notes.truncate(NOTES_PER_ROUND as usize);
                notes
            }
        };
        if notes.is_empty() {
            break;
        }
        let mut ids: Vec<Value> = Vec::with_capacity(notes.len());
        let mut moved = Vec::new();
        for note in &notes {
            let id: i64 = note.try_get_by_index(0).map_err(ctx())?;
            let parent: String = note.try_get_by_index(1).map_err(ctx())?;
            let outcome: String = note.try_get_by_index(2).map_err(ctx())?;
            let at: i64 = note.try_get_by_index(3).map_err(ctx())?;
            if outcome == "retried" {
                moved.extend(revive(tx, &parent, at).await?);
            } else {
                let (let_go, cancelled) = count(tx, &parent, &outcome, at).await?;
                released.extend(let_go);
                moved.extend(cancelled);
            }
            ids.push(id.into());
        }
        let sql = format!("DELETE FROM outbox_workflow_notes WHERE id IN ({})", marks(1, ids.len()));
        tx.execute_raw(stmt(&sql, ids)).await.map_err(ctx())?;
        if let Some(parents) = &mut scope {
            parents.extend(moved);
            parents.sort_unstable();
            parents.dedup();
        }
    }
    Ok(released)
}

/// Counts the outcome of `parent` for its children; the children it let go that no sequence holds, and the jobs it
/// cancelled.
async fn count<C: ConnectionTrait>(tx: &C, parent: &str, outcome: &str, at: i64) -> Result<(Vec<String>, Vec<String>)> {
    let ctx = || Error::db(format!("counting the outcome of job `{parent}` for its children"));
    let completed = outcome == "completed";
    let rows = tx.query_all_raw(stmt(COUNTED, vec![parent.into(), outcome.into()])).await.map_err(ctx())?;
    let (mut released, mut cancelled) = (Vec::new(), Vec::new());
    for row in rows {
        let id: String = row.try_get_by_index(0).map_err(ctx())?;
        let (kind, queue): (String, String) =
            (row.try_get_by_index(1).map_err(ctx())?, row.try_get_by_index(2).map_err(ctx())?);
        let sequence_key: Option<String> = row.try_get_by_index(3).map_err(ctx())?;
        let left: i32 = row.try_get_by_index(4).map_err(ctx())?;
        let pending = row.try_get_by_index::<String>(5).map_err(ctx())? == "pending";
        let policy: i32 = row.try_get_by_index(6).map_err(ctx())?;
        let run_at: i64 = row.try_get_by_index(7).map_err(ctx())?;
        let first_failure = policy == 2;
        if first_failure && completed && left == 1 {
            let sql = bounded!(
                "UPDATE outbox_jobs SET parents_left = 0, status = 'cancelled', \
                 last_error = 'not run: every parent completed', updated_at = $2 WHERE id = $1"
            );
            tx.execute_raw(stmt(sql, vec![id.as_str().into(), at.into()])).await.map_err(ctx())?;
            cancelled.push(id);
            continue;
        }
        let left = if first_failure && !completed { 0 } else { left - 1 };
        let goes = pending && left == 0;
        // Ready from its release: it sorts among the ready jobs by when it became ready.
        let (waiting_off, run_at) = if goes { (sequence_key.is_none(), run_at.max(at)) } else { (false, run_at) };
        let sql = bounded!(
            "UPDATE outbox_jobs SET parents_left = $2, run_at = $3, waiting = waiting AND NOT $4 WHERE id = $1"
        );
        let values = vec![id.as_str().into(), left.into(), run_at.into(), waiting_off.into()];
        tx.execute_raw(stmt(sql, values)).await.map_err(ctx())?;
        if goes {
            let sql = "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt) \
                 VALUES ($1, $2, $3, $4, 'ready', 0)";
            let values = vec![id.as_str().into(), kind.into(), queue.into(), at.into()];
            tx.execute_raw(stmt(sql, values)).await.map_err(ctx())?;
            match sequence_key {
                Some(key) => {
                    let sql = "INSERT INTO outbox_sequence_notes (sequence_key) VALUES ($1)";
                    tx.execute_raw(stmt(sql, vec![key.into()])).await.map_err(ctx())?;
                }
                None => released.push(id),
            }
        }
    }
    tx.execute_raw(stmt(DONE, vec![parent.into(), outcome.into()])).await.map_err(ctx())?;
    if !completed {
        let doomed = ids_of(tx, DOOMED, parent).await?;
        let error = format!("cancelled: parent {parent} {outcome}");
        for chunk in doomed.chunks(IDS_PER_STATEMENT) {
            let sql = format!(
                bounded!(
                    "UPDATE outbox_jobs SET status = 'cancelled', updated_at = $1, last_error = $2 WHERE id IN ({}) \
                 AND status = 'pending'"
                ),
                marks(3, chunk.len())
            );
            let mut values: Vec<Value> = vec![at.into(), error.as_str().into()];
            values.extend(chunk.iter().map(|id| Value::from(id.as_str())));
            tx.execute_raw(stmt(&sql, values)).await.map_err(ctx())?;
        }
        cancelled.extend(doomed);
    }
    Ok((released, cancelled))
}

/// Brings back the steps the failure of `parent` cancelled, and the steps below them; which.
async fn revive<C: ConnectionTrait>(tx: &C, parent: &str, at: i64) -> Result<Vec<String>> {
    let revived = ids_of(tx, REVIVED, parent).await?;
    for chunk in revived.chunks(IDS_PER_STATEMENT) {
        let sql = format!(
            bounded!(
                "UPDATE outbox_jobs SET status = 'pending', waiting = TRUE, last_error = NULL, attempts = 0, \
             updated_at = $1 WHERE id IN ({}) AND status = 'cancelled'"
            ),
            marks(2, chunk.len())
        );
        let mut values: Vec<Value> = vec![at.into()];
        values.extend(chunk.iter().map(|id| Value::from(id.as_str())));
        tx.execute_raw(stmt(&sql, values))
            .await
            .map_err(Error::db(format!("bringing back the steps below job `{parent}`")))?;
    }
    Ok(revived)
}

/// The ids `sql` selects for the job `parent`.
async fn ids_of<C: ConnectionTrait>(tx: &C, sql: &str, parent: &str) -> Result<Vec<String>> {
    let ctx = || Error::db(format!("reading the steps below job `{parent}`"));
    let rows = tx.query_all_raw(stmt(sql, vec![parent.into()])).await.map_err(ctx())?;
    rows.iter().map(|r| r.try_get_by_index::<String>(0).map_err(ctx())).collect()
}
