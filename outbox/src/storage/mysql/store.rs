//! The worker's statements on MySQL: claims with `FOR UPDATE SKIP LOCKED`, outcomes fenced by the claim, renewals
//! and rescues, each in a `READ COMMITTED` transaction of its own (`writer.rs` holds the store that runs them on a
//! small pool of the worker's, and remote workers run them on the caller's pool).
//!
//! This first form keeps to what every engine must do and is measured next: a claim reads candidates without locks
//! from each queue's and kind's range of the ready index, locks the best of them by id and updates them in one
//! statement; a kind with a fleet-wide limit on running jobs takes turns on its row of `outbox_limits`; an outcome
//! is a statement per job (the triggers record its event and its place in the log of finished jobs); rescue reads
//! the claimed jobs whose lease ran out. Kinds with a limit, a rate or fair share are claimed as `flow.rs` says.

use sea_orm::{ConnectionTrait, DatabaseConnection, QueryResult, Value};

use super::{conn, flow, marks, sequences, stmt, wake, workflows};
use crate::error::{Error, Result};
use crate::flow::FlowKind;
use crate::storage::archive::archive_columns;
use crate::storage::{ClaimedJob, Finished, Outcome, Rescued, WorkerStoreOpts};

/// Scheduled jobs let in by one claim at most; the rest follow with the next claims.
const PROMOTE_PER_CLAIM: i64 = 1_000;

/// The worker's statements, each fenced as the other engines' are.
const PROMOTE: &str =
    "UPDATE outbox_jobs SET scheduled = FALSE WHERE due_at <= $1 AND status = 'pending' ORDER BY due_at LIMIT $2";
const CLAIMED: &str = "UPDATE outbox_jobs SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, \
     locked_by = $1, locked_at = $2, claimed_at = $2, lease_expires_at = $3, updated_at = $2 WHERE id";
const READ_CLAIMED: &str = "SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, \
     sequence_key IS NOT NULL, trace, has_children FROM outbox_jobs WHERE id";
const FENCE: &str = "WHERE id = $1 AND status = 'claimed' AND locked_by = $2 AND runs = $3";
/// A renewal never shortens a lease (a handler may have extended its own further).
const EXTEND: &str = "UPDATE outbox_jobs SET lease_expires_at = GREATEST(COALESCE(lease_expires_at, 0), $1) \
     WHERE status = 'claimed' AND locked_by = $2 AND id = $3";
const STUCK: &str = "SELECT id, kind, queue, attempts, max_attempts, locked_by FROM outbox_jobs \
     WHERE status = 'claimed' AND lease_expires_at < $1 ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED";
const RESCUE: &str = "UPDATE outbox_jobs SET \
     status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END, \
     last_error = CONCAT('lease expired while claimed by ', COALESCE(locked_by, 'an unknown worker'), \
     CASE WHEN attempts >= max_attempts THEN '; no attempts left' ELSE '' END), \
     lease_expires_at = NULL, run_at = $1, updated_at = $1 \
     WHERE id = $2 AND status = 'claimed' AND lease_expires_at < $1";
const ARCHIVE: &str = concat!(
    "INSERT INTO outbox_jobs_done (",
    archive_columns!(),
    ") SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, \
     sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, $4, attempts, runs, \
     locked_by, locked_at, claimed_at, 'completed', $5, NULL, $5 FROM outbox_jobs \
     WHERE id = $1 AND status = 'claimed' AND locked_by = $2 AND runs = $3"
);

/// Who claims, and what: the worker's kinds and queues.
#[derive(Debug, Clone)]
pub(super) struct Config {
    worker_id: String,
    /// The kinds nothing controls.
    kinds: Vec<String>,
    /// The kinds with a fleet-wide limit on running jobs, a rate or fair share.
    flows: Vec<FlowKind>,
    queues: Option<Vec<String>>,
    /// Controlled kinds whose last claim took nothing and said when one may be taken (a rate spent, a hold), until
    /// then at most a second: claims pass them over without taking their turn.
    spent: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, i64>>>,
}

/// How long at most a claim passes over a kind its last claim found spent: a hold resumed early is seen by then.
const SPENT_AT_MOST_MS: i64 = 1_000;

impl Config {
    pub(super) fn worker_id(&self) -> &str {
        &self.worker_id
    }

    pub(super) fn of(opts: WorkerStoreOpts) -> Result<Config> {
        let kinds = opts.unlimited_kinds();
        Ok(Config {
            worker_id: opts.worker_id,
            kinds,
            flows: opts.flows,
            queues: opts.queues,
            spent: Default::default(),
        })
    }
}

/// What the triggers noted for other jobs, done in transactions of their own: the parents' outcomes counted for
/// their children (`workflows.rs`), then the sequences looked at (`sequences.rs`); the jobs let go.
async fn settle(db: &DatabaseConnection) -> Vec<String> {
    let mut released = workflows::settle(db).await;
    released.extend(sequences::release(db).await);
    released
}

/// Claims up to `limit` due jobs of `c`'s kinds and queues, in a transaction of its own on `db`; with when a job
/// left behind for a rate or a hold may be taken.
pub(super) async fn claim(
    db: &DatabaseConnection,
    c: &Config,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<(Vec<ClaimedJob>, Option<i64>)> {
    // Noted sequences first, in a transaction of their own (the claim's waits come after no lock of theirs), so a
    // sequence's next job let go is claimed at once.
    let released = settle(db).await;
    let tx = conn::begin_write(db).await?;
    let (claimed, wake) = claim_in(&tx, c, limit, now, lease_until).await?;
    tx.commit().await.map_err(Error::db("committing a claim"))?;
    let left: Vec<String> = released.into_iter().filter(|id| claimed.iter().all(|c| &c.id != id)).collect();
    wake::let_go(db, &left).await;
    Ok((claimed, wake))
}

/// Claims up to `limit` due jobs of `c`'s kinds and queues in the transaction `tx`: scheduled jobs that came due
/// join the ready index first; then the controlled kinds (a fleet-wide limit, a rate, fair share), each up to what
/// its controls leave, at most half the slots when the worker serves other kinds too (their claims take turns on
/// the kind's row of `outbox_limits`, `flow.rs`); paused queues, kinds and keys are passed over, and rows another
/// claim holds are skipped.
async fn claim_in<C: ConnectionTrait>(
    tx: &C,
    c: &Config,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<(Vec<ClaimedJob>, Option<i64>)> {
    if limit == 0 {
        return Ok((Vec::new(), None));
    }
    let ctx = || Error::db("claiming jobs");
    tx.execute_raw(stmt(PROMOTE, vec![now.into(), PROMOTE_PER_CLAIM.into()])).await.map_err(ctx())?;
    let mut claimed = Vec::new();
    let mut wake = None;
    // Walked once a claim: the controlled kinds and the others read the same queues.
    let queues = queues_of(tx, c).await?;
    if !c.flows.is_empty() {
        let pauses = flow::pauses(tx, now).await?;
        wake = pauses.wake_at;
        let unpaused: Vec<String> = queues.iter().filter(|q| !pauses.queues.contains(q)).cloned().collect();
        for f in &c.flows {
            let left = limit - claimed.len();
            if left == 0 {
                break;
            }
            if pauses.kinds.contains(&f.kind) {
                continue;
            }
            // A kind with nothing ready, or found spent a moment ago, is passed over without taking its turn: the
            // turns of every controlled kind are what the fleet's claims queue on.
            let spent_until = c.spent.lock().unwrap_or_else(|p| p.into_inner()).get(&f.kind).copied();
            if let Some(at) = spent_until.filter(|at| *at > now) {
                wake = Some(wake.map_or(at, |w: i64| w.min(at)));
                continue;
            }
            if !flow::any_ready(tx, &f.kind, &unpaused, now).await? {
                continue;
            }
            tx.execute_raw(stmt(flow::TURN, vec![f.kind.as_str().into()])).await.map_err(ctx())?;
            let mut room = crate::storage::worker_store::limited_share(left, !c.kinds.is_empty());
            if let Some(cap) = f.concurrency {
                let running = "SELECT COUNT(*) FROM outbox_jobs WHERE kind = $1 AND status = 'claimed'";
                let row = tx.query_one_raw(stmt(running, vec![f.kind.as_str().into()])).await.map_err(ctx())?;
                let running: i64 = row.map(|r| r.try_get_by_index(0)).transpose().map_err(ctx())?.unwrap_or_default();
                room = room.min(usize::try_from(i64::from(cap) - running).unwrap_or(0));
            }
            if room == 0 {
                continue;
            }
            let lone = f.may_be_lone() && !pauses.keys.contains_key(&f.kind) && flow::lone_key(tx, &f.kind).await?;
            if !f.chosen(&pauses, lone) {
                claimed.extend(claim_of(tx, c, std::slice::from_ref(&f.kind), &queues, room, now, lease_until).await?);
                continue;
            }
            let chosen = flow::choose(tx, f, &unpaused, &pauses, room, now).await?;
            if let Some(at) = chosen.plan.wake_at {
                wake = Some(wake.map_or(at, |w: i64| w.min(at)));
                if chosen.ids.is_empty() {
                    let until = at.min(now.saturating_add(SPENT_AT_MOST_MS));
                    c.spent.lock().unwrap_or_else(|p| p.into_inner()).insert(f.kind.clone(), until);
                }
            }
            if !chosen.ids.is_empty() {
                let ids = chosen.ids.iter().map(|id| Value::from(id.as_str())).collect();
                claimed.extend(take(tx, c, ids, now, lease_until).await?);
                flow::save(tx, f, &chosen.plan).await?;
            }
        }
    }
    let left = limit - claimed.len();
    claimed.extend(claim_of(tx, c, &c.kinds, &queues, left, now, lease_until).await?);
    Ok((claimed, wake))
}

/// The queues `c` claims from: its own, or every queue with ready jobs.
async fn queues_of<C: ConnectionTrait>(tx: &C, c: &Config) -> Result<Vec<String>> {
    match &c.queues {
        Some(queues) => Ok(queues.clone()),
        None => {
            let first = "SELECT ready_queue FROM outbox_jobs WHERE ready_queue IS NOT NULL AND $1 IS NULL ORDER BY ready_queue LIMIT 1";
            let next = "SELECT ready_queue FROM outbox_jobs WHERE ready_queue > $1 ORDER BY ready_queue LIMIT 1";
            walk(tx, (first, next), Vec::new(), usize::MAX).await
        }
    }
}

/// The distinct values of an index's column, up to `most`, one probe of the index each: `first` finds the least,
/// `next` the least after `$1`; both take `fixed` after it. A `DISTINCT` read every entry of the index (MariaDB
/// 10.11 made no loose scan of it: 7.5 ms for 10,000 ready jobs, on every claim).
pub(super) async fn walk<C: ConnectionTrait>(
    tx: &C,
    (first, next): (&str, &str),
    fixed: Vec<Value>,
    most: usize,
) -> Result<Vec<String>> {
    let ctx = || Error::db("reading the values of an index");
    let mut found: Vec<String> = Vec::new();
    while found.len() < most {
        let (sql, mut values) = match found.last() {
            None => (first, vec![Value::from(None::<String>)]),
            Some(last) => (next, vec![Value::from(last.as_str())]),
        };
        values.extend(fixed.iter().cloned());
        let row = tx.query_one_raw(stmt(sql, values)).await.map_err(ctx())?;
        match row.map(|r| r.try_get_by_index::<String>(0)).transpose().map_err(ctx())? {
            Some(value) => found.push(value),
            None => break,
        }
    }
    Ok(found)
}

/// Claims up to `limit` due jobs of `kinds` from `queues` (`c`'s, as [`queues_of`] reads them; the statement passes
/// over paused ones).
#[allow(clippy::too_many_arguments)]
async fn claim_of<C: ConnectionTrait>(
    tx: &C,
    c: &Config,
    kinds: &[String],
    queues: &[String],
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    if kinds.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let ctx = || Error::db("claiming jobs");
    // Candidates first, read without locks from each queue's and kind's range of the ready index in its order (a
    // locking read that sorts would lock every row it reads), then the best of them locked by id, passing over
    // those another claim took meanwhile.
    let mut candidates: Vec<(i32, i64, String)> = Vec::new();
    for queue in queues {
        for kind in kinds {
            let sql = "SELECT priority, run_at, id FROM outbox_jobs j WHERE ready_queue = $2 AND kind = $3 \
                 AND status = 'pending' AND run_at <= $1 AND NOT EXISTS (SELECT 1 FROM outbox_pauses p \
                 WHERE p.`key` = '' AND (p.ends_at IS NULL OR p.ends_at > $1) \
                 AND ((p.scope = 'queue' AND p.name = $2) OR (p.scope = 'kind' AND p.name = $3))) \
                 ORDER BY priority DESC, run_at, id LIMIT $4";
            let values = vec![now.into(), queue.as_str().into(), kind.as_str().into(), (limit as u64).into()];
            for row in tx.query_all_raw(stmt(sql, values)).await.map_err(ctx())? {
                let get = |i| row.try_get_by_index::<i64>(i).map_err(ctx());
                let priority = i32::try_from(get(0)?).unwrap_or_default();
                candidates.push((priority, get(1)?, row.try_get_by_index(2).map_err(ctx())?));
            }
        }
    }
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    candidates.truncate(limit);
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Value> = candidates.iter().map(|(_, _, id)| Value::from(id.as_str())).collect();
    take(tx, c, ids, now, lease_until).await
}

/// Claims the jobs `ids` that are still pending, passing over those another claim holds.
async fn take<C: ConnectionTrait>(
    tx: &C,
    c: &Config,
    ids: Vec<Value>,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    let ctx = || Error::db("claiming jobs");
    let sql = format!(
        "SELECT id FROM outbox_jobs WHERE id IN ({}) AND status = 'pending' ORDER BY priority DESC, run_at, id \
         FOR UPDATE SKIP LOCKED",
        marks(1, ids.len())
    );
    let picked = tx.query_all_raw(stmt(&sql, ids)).await.map_err(ctx())?;
    if picked.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Value> = picked
        .iter()
        .map(|r| r.try_get_by_index::<String>(0).map(Value::from))
        .collect::<std::result::Result<_, _>>()
        .map_err(ctx())?;
    let mut values: Vec<Value> = vec![c.worker_id.clone().into(), now.into(), lease_until.into()];
    values.extend(ids.iter().cloned());
    let sql = format!("{CLAIMED} IN ({}) AND status = 'pending'", marks(4, ids.len()));
    tx.execute_raw(stmt(&sql, values)).await.map_err(ctx())?;
    let sql = format!("{READ_CLAIMED} IN ({}) ORDER BY priority DESC, run_at, id", marks(1, ids.len()));
    let rows = tx.query_all_raw(stmt(&sql, ids)).await.map_err(ctx())?;
    rows.iter().map(claimed_job).collect()
}

fn claimed_job(row: &QueryResult) -> Result<ClaimedJob> {
    let ctx = || Error::db("reading a claimed job");
    Ok(ClaimedJob {
        id: row.try_get_by_index(0).map_err(ctx())?,
        kind: row.try_get_by_index(1).map_err(ctx())?,
        queue: row.try_get_by_index(2).map_err(ctx())?,
        payload: row.try_get_by_index(3).map_err(ctx())?,
        attempt: row.try_get_by_index(4).map_err(ctx())?,
        max_attempts: row.try_get_by_index(5).map_err(ctx())?,
        schema_hash: row.try_get_by_index(6).map_err(ctx())?,
        run: row.try_get_by_index(7).map_err(ctx())?,
        sequenced: row.try_get_by_index(8).map_err(ctx())?,
        trace: row.try_get_by_index(9).map_err(ctx())?,
        has_children: row.try_get_by_index(10).map_err(ctx())?,
    })
}

/// Writes one outcome of `owner`'s claim in `tx`, fenced by (id, claimed, owner, run); whether it applied.
async fn write_one<C: ConnectionTrait>(tx: &C, owner: &str, f: &Finished, now: i64) -> Result<bool> {
    let ctx = || Error::db(format!("writing the outcome of job `{}` of kind `{}`", f.id, f.kind));
    let fence = vec![f.id.clone().into(), owner.into(), f.run.into()];
    if f.discards() {
        return discard(tx, owner, f, now).await;
    }
    let (set, more): (&str, Vec<Value>) = match &f.outcome {
        Outcome::Completed { output } => (
            "status = 'completed', output = $4, completed_at = $5, lease_expires_at = NULL, updated_at = $5",
            vec![output.clone().into(), now.into()],
        ),
        Outcome::Retry { run_at, error } => (
            "status = 'pending', run_at = $4, scheduled = $4 > $6, last_error = $5, lease_expires_at = NULL, \
             updated_at = $6",
            vec![(*run_at).into(), error.clone().into(), now.into()],
        ),
        Outcome::Failed { error } => (
            "status = 'failed', last_error = $4, lease_expires_at = NULL, updated_at = $5",
            vec![error.clone().into(), now.into()],
        ),
        Outcome::Snoozed { run_at } => (
            "status = 'pending', attempts = attempts - 1, run_at = $4, scheduled = $4 > $5, lease_expires_at = NULL, \
             updated_at = $5",
            vec![(*run_at).into(), now.into()],
        ),
        Outcome::Released => (
            "status = 'pending', attempts = attempts - 1, run_at = $4, lease_expires_at = NULL, updated_at = $4",
            vec![now.into()],
        ),
    };
    let mut values = fence;
    values.extend(more);
    let sql = format!("UPDATE outbox_jobs SET {set} {FENCE}");
    Ok(tx.execute_raw(stmt(&sql, values)).await.map_err(ctx())?.rows_affected() == 1)
}

/// A completed job of a kind that keeps nothing (or keeps it in the archive), moved or deleted fenced by its claim,
/// with its `completed` event written here: no trigger records a deletion. A job with a sequence key stays.
async fn discard<C: ConnectionTrait>(tx: &C, owner: &str, f: &Finished, now: i64) -> Result<bool> {
    let ctx = || Error::db(format!("deleting completed job `{}` of kind `{}`", f.id, f.kind));
    let fence = || -> Vec<Value> { vec![f.id.clone().into(), owner.into(), f.run.into()] };
    let sql = format!(
        "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, claimed_at, completed_at) \
         SELECT id, kind, queue, $4, 'completed', attempts, locked_by, claimed_at, $4 FROM outbox_jobs {FENCE} \
         AND sequence_key IS NULL"
    );
    let mut values = fence();
    values.push(now.into());
    if tx.execute_raw(stmt(&sql, values)).await.map_err(ctx())?.rows_affected() == 0 {
        return Ok(false);
    }
    if let (true, Outcome::Completed { output }) = (f.archives(), &f.outcome) {
        let mut values = fence();
        values.extend([output.clone().into(), now.into()]);
        tx.execute_raw(stmt(ARCHIVE, values)).await.map_err(ctx())?;
    }
    let sql = format!("DELETE FROM outbox_jobs {FENCE}");
    Ok(tx.execute_raw(stmt(&sql, fence())).await.map_err(ctx())?.rows_affected() == 1)
}

/// Renews the leases of `worker`'s claimed jobs among `ids` until `until`, in a transaction of its own; how many.
pub(super) async fn extend(db: &DatabaseConnection, worker: &str, mut ids: Vec<String>, until: i64) -> Result<u64> {
    // In the order of their ids, as outcomes are written: the two never wait for each other in a circle.
    ids.sort_unstable();
    let tx = conn::begin_write(db).await?;
    let mut renewed = 0;
    for id in ids {
        let res = tx
            .execute_raw(stmt(EXTEND, vec![until.into(), worker.into(), id.into()]))
            .await
            .map_err(Error::db("renewing leases"))?;
        renewed += res.rows_affected();
    }
    tx.commit().await.map_err(Error::db("committing renewed leases"))?;
    Ok(renewed)
}

/// Claimed jobs whose lease ran out before `now`, anyone's, back to pending (or failed, with no attempts left), in a
/// transaction of its own on `db`; then, with `sweep`, sequences left waiting with no note are noted, and noted
/// sequences are looked at.
pub(super) async fn rescue(db: &DatabaseConnection, now: i64, sweep: bool) -> Result<Vec<Rescued>> {
    let ctx = || Error::db("rescuing expired claims");
    let tx = conn::begin_write(db).await?;
    // Locked as read: what they say stays true until the rescue's commit.
    let stuck = tx.query_all_raw(stmt(STUCK, vec![now.into()])).await.map_err(ctx())?;
    let mut rescued = Vec::with_capacity(stuck.len());
    for row in &stuck {
        let id: String = row.try_get_by_index(0).map_err(ctx())?;
        if tx.execute_raw(stmt(RESCUE, vec![now.into(), id.clone().into()])).await.map_err(ctx())?.rows_affected() == 0
        {
            continue;
        }
        let (attempt, max_attempts): (i32, i32) =
            (row.try_get_by_index(3).map_err(ctx())?, row.try_get_by_index(4).map_err(ctx())?);
        rescued.push(Rescued {
            id,
            kind: row.try_get_by_index(1).map_err(ctx())?,
            queue: row.try_get_by_index(2).map_err(ctx())?,
            attempt,
            status: if attempt >= max_attempts { "failed" } else { "pending" }.to_owned(),
            previous_owner: row.try_get_by_index(5).map_err(ctx())?,
        });
    }
    // Claims other writers listed (the worker's own claims are found through the jobs): gone once expired.
    tx.execute_raw(stmt("DELETE FROM outbox_claims WHERE lease_expires_at < $1", vec![now.into()]))
        .await
        .map_err(ctx())?;
    // What a rescue that failed a parent for good does to its children commits with it.
    let counted = workflows::settle_own(&tx, rescued.iter().map(|r| r.id.clone()).collect()).await?;
    tx.commit().await.map_err(Error::db("committing rescues"))?;
    if sweep {
        sequences::sweep(db).await;
    }
    // Sequences noted and not looked at since (their enqueuer or a head was held at the last look).
    let mut released = counted;
    released.extend(settle(db).await);
    released.extend(rescued.iter().filter(|r| r.status == "pending").map(|r| r.id.clone()));
    wake::let_go(db, &released).await;
    Ok(rescued)
}

/// Writes `batch` in one transaction, each outcome fenced; which applied.
pub(super) async fn write_all(db: &DatabaseConnection, owner: &str, batch: &[Finished]) -> Result<Vec<bool>> {
    let tx = conn::begin_write(db).await?;
    let now = crate::storage::now_ms();
    // In the order of their ids, as renewals are: the two never wait for each other in a circle.
    let mut order: Vec<usize> = (0..batch.len()).collect();
    order.sort_unstable_by(|a, b| batch[*a].id.cmp(&batch[*b].id));
    let mut applied = vec![false; batch.len()];
    for i in order {
        applied[i] = write_one(&tx, owner, &batch[i], now).await?;
    }
    // What the outcomes do to their children commits with them.
    let mut released = workflows::settle_own(&tx, batch.iter().map(|f| f.id.clone()).collect()).await?;
    tx.commit().await.map_err(Error::db("committing outcomes"))?;
    // The sequences these outcomes let go, at once: a failure to look is logged, and the outcomes stand.
    released.extend(sequences::release(db).await);
    wake::let_go(db, &released).await;
    Ok(applied)
}
