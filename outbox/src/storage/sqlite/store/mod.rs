//! The worker's own SQLite connection, on a thread of its own: claims (`claim.rs`), fenced completions
//! (`complete.rs`), lease renewals and rescues (`rescue.rs`), batched into one write transaction per cycle;
//! remote workers' calls through the same statements (`remote.rs`).
//!
//! The hot path does not go through the caller's sea-orm pool: sqlx-sqlite hands every statement to a
//! per-connection thread (about fifteen context switches per transaction), so the worker owns one rusqlite
//! connection on a dedicated thread instead and batches finished jobs into one transaction.

use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, params};
use tokio::sync::{mpsc, oneshot};

mod claim;
mod complete;
pub(super) mod flow;
pub(super) mod remote;
mod rescue;
#[cfg(test)]
pub(super) mod statements;

pub(super) use claim::claim;
pub(super) use complete::write_finished;
use rescue::rescue;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::storage::worker_store::{FlowWake, StoreFuture};
use crate::storage::{ClaimedJob, Finished, Rescued, WorkerStore};

/// How the worker's connection is opened and what it may claim.
#[derive(Debug, Clone)]
pub(crate) struct StoreConfig {
    pub(crate) path: PathBuf,
    pub(crate) synchronous: String,
    pub(crate) busy_timeout: Duration,
    pub(crate) worker_id: String,
    /// JSON array of the kinds this worker has handlers for and no fleet-wide limit.
    pub(crate) kinds_json: String,
    /// Whether `kinds_json` names exactly one kind.
    pub(crate) one_kind: bool,
    /// Kinds whose claims are controlled fleet-wide: each as a JSON array of itself, and its controls.
    pub(crate) flows: Vec<(String, crate::flow::FlowKind)>,
    /// JSON array of the queues it serves; `None` for all.
    pub(crate) queues_json: Option<String>,
}

enum Cmd {
    Claim { limit: usize, now: i64, lease_until: i64, reply: oneshot::Sender<Result<Vec<ClaimedJob>>> },
    Finish(Finished),
    Extend { ids: Vec<String>, until: i64, reply: oneshot::Sender<Result<u64>> },
    Rescue { now: i64, reply: oneshot::Sender<Result<Vec<Rescued>>> },
    Flush { reply: oneshot::Sender<()> },
}

/// Handle to the connection thread. Commands run in the order sent.
#[derive(Clone)]
pub(crate) struct SqliteStore {
    tx: mpsc::UnboundedSender<Cmd>,
    wake: std::sync::Arc<FlowWake>,
}

impl SqliteStore {
    /// Opens the connection on its own thread. The thread ends when every handle is dropped.
    pub(crate) fn open(config: StoreConfig) -> Result<SqliteStore> {
        let conn = open_connection(&config)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let watch = super::watch_file(&config.path);
        let wake = std::sync::Arc::new(FlowWake::default());
        let flow_wake = wake.clone();
        std::thread::Builder::new()
            .name("outbox-worker-db".into())
            .spawn(move || Actor { conn, config, rx, _watch: watch, relaxed: false, wake: flow_wake }.run())
            .map_err(|e| Error::Internal(format!("cannot start the worker's database thread: {e}")))?;
        Ok(SqliteStore { tx, wake })
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Cmd) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).map_err(|_| Error::WorkerStopped)?;
        rx.await.map_err(|_| Error::WorkerStopped)
    }
}

/// Every call is a command to the connection's thread; queued outcomes are written before the next claim, so
/// none waits unwritten.
impl WorkerStore for SqliteStore {
    fn claim(&self, limit: usize, now: i64, lease_until: i64) -> StoreFuture<'_, Vec<ClaimedJob>> {
        Box::pin(async move { self.ask(|reply| Cmd::Claim { limit, now, lease_until, reply }).await? })
    }

    /// Queues a finished attempt; it is written with whatever else finished meanwhile, in one transaction.
    fn finish(&self, finished: Finished) -> Result<()> {
        self.tx.send(Cmd::Finish(finished)).map_err(|_| Error::WorkerStopped)
    }

    fn extend(&self, ids: Vec<String>, until: i64) -> StoreFuture<'_, u64> {
        Box::pin(async move { self.ask(|reply| Cmd::Extend { ids, until, reply }).await? })
    }

    fn rescue(&self, now: i64) -> StoreFuture<'_, Vec<Rescued>> {
        Box::pin(async move { self.ask(|reply| Cmd::Rescue { now, reply }).await? })
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.ask(|reply| Cmd::Flush { reply }))
    }

    fn flow_wake_at(&self) -> Option<i64> {
        self.wake.get()
    }
}

pub(in crate::storage::sqlite) fn open_connection(config: &StoreConfig) -> Result<Connection> {
    let ctx = || Error::db(format!("opening {}", config.path.display()));
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(&config.path, flags).map_err(ctx())?;
    set_busy_timeout(config.busy_timeout);
    conn.busy_handler(Some(wait_for_lock)).map_err(ctx())?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(ctx())?;
    conn.pragma_update(None, "synchronous", &config.synchronous).map_err(ctx())?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

thread_local! {
    /// This thread's busy timeout, and when its connection began waiting for the current lock.
    static BUSY: Cell<(Duration, Option<Instant>)> = const { Cell::new((Duration::from_secs(10), None)) };
}

/// Sets the busy timeout of the connections this thread runs statements on.
fn set_busy_timeout(timeout: Duration) {
    BUSY.with(|b| b.set((timeout, None)));
}

/// The busy handler of the worker's connections: waits for another connection's write lock in small steps.
/// SQLite's own (`busy_timeout`) sleeps 1, 2, 5, 10, 15, 20 ms and on, so a claim that finds an enqueue
/// committing waited up to a few milliseconds past the commit; commits here take about one fsync.
fn wait_for_lock(tries: i32) -> bool {
    BUSY.with(|b| {
        let (timeout, began) = b.get();
        let began = match began {
            Some(at) if tries > 0 => at,
            _ => {
                let now = Instant::now();
                b.set((timeout, Some(now)));
                now
            }
        };
        if began.elapsed() >= timeout {
            return false;
        }
        let step = match tries {
            0..20 => Duration::from_micros(50),
            20..100 => Duration::from_micros(250),
            _ => Duration::from_millis(2),
        };
        std::thread::sleep(step);
        true
    })
}

struct Actor {
    conn: Connection,
    config: StoreConfig,
    rx: mpsc::UnboundedReceiver<Cmd>,
    /// Commits of other processes wake this process's workers while the worker's connection is open.
    _watch: crate::wake::Watch,
    /// Whether the connection now commits at `synchronous=NORMAL` for a cycle that only claims (see
    /// [`Actor::durability_for`]).
    relaxed: bool,
    /// When the last claim said to claim again.
    wake: std::sync::Arc<FlowWake>,
}

/// A claim waiting for its turn.
struct ClaimReq {
    limit: usize,
    now: i64,
    lease_until: i64,
    reply: oneshot::Sender<Result<Vec<ClaimedJob>>>,
}

/// Attempts at writing one batch of finished jobs before giving up on it (the lease rescues the jobs).
const FINISH_TRIES: u32 = 12;

impl Actor {
    /// Takes every command queued so far and runs the finished jobs and claims among them in one write
    /// transaction: under load the worker then pays one commit (one fsync at `synchronous=FULL`) per cycle of
    /// "record what finished, take the next batch". A cycle with nothing finished does not wait for the disk
    /// ([`Actor::durability_for`]).
    fn run(mut self) {
        set_busy_timeout(self.config.busy_timeout);
        while let Some(first) = self.rx.blocking_recv() {
            let mut finished = Vec::new();
            let mut claims = Vec::new();
            let mut rest = Vec::new();
            let mut next = Some(first);
            while let Some(cmd) = next.take().or_else(|| self.rx.try_recv().ok()) {
                match cmd {
                    Cmd::Finish(f) => finished.push(f),
                    Cmd::Claim { limit, now, lease_until, reply } => {
                        claims.push(ClaimReq { limit, now, lease_until, reply })
                    }
                    other => rest.push(other),
                }
            }
            if !claims.is_empty() || !finished.is_empty() {
                self.write_cycle(finished, claims);
            }
            // Extends, rescues and flushes come after: a flush resolves once the finishes before it are written.
            for cmd in rest {
                match cmd {
                    Cmd::Extend { ids, until, reply } => {
                        let _ = reply.send(self.extend(&ids, until));
                    }
                    Cmd::Rescue { now, reply } => {
                        let _ = reply.send(self.rescue(now));
                    }
                    Cmd::Flush { reply } => {
                        let _ = reply.send(());
                    }
                    Cmd::Finish(_) | Cmd::Claim { .. } => {}
                }
            }
        }
    }

    /// Sets the connection's durability for a cycle: a cycle that only claims commits without waiting for the
    /// disk (`synchronous=NORMAL`), so a job that arrives at an idle worker starts without an fsync of its
    /// claim; one that writes outcomes, and every other transaction, commits at the database's setting. A
    /// claim lost to a power cut (the machine's, not the process's: the frames are in the file) leaves its job
    /// pending, to run again as any unfinished attempt does, and the next synced commit of the database syncs
    /// the claims before it. Only ever lowers `FULL` or `EXTRA`.
    fn durability_for(&mut self, claims_only: bool) {
        let strict = matches!(self.config.synchronous.as_str(), "FULL" | "EXTRA");
        let relax = claims_only && strict;
        if relax == self.relaxed {
            return;
        }
        let level = if relax { "NORMAL" } else { self.config.synchronous.as_str() };
        match self.conn.pragma_update(None, "synchronous", level) {
            Ok(()) => self.relaxed = relax,
            Err(e) => tracing::warn!(error = %e, level, "setting the worker connection's durability failed"),
        }
    }

    fn write_cycle(&mut self, finished: Vec<Finished>, claims: Vec<ClaimReq>) {
        self.durability_for(finished.is_empty());
        let config = &self.config;
        let attempt = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(Error::db("beginning a worker transaction"))
            .and_then(|tx| {
                // One clock reading for the cycle, taken once it holds the write lock: a job claimed after
                // another completed in it (the next of a sequence) is never recorded as claimed before that
                // completion, however long the claim waited for its turn.
                let now = crate::storage::now_ms();
                let applied = write_finished(&tx, &config.worker_id, &finished, now)?;
                let mut claimed = Vec::with_capacity(claims.len());
                let mut unreadable = Vec::new();
                let mut wake = None;
                for c in &claims {
                    let late = (now - c.now).max(0);
                    let (at, lease) = (c.now + late, c.lease_until.saturating_add(late));
                    claimed.push(claim(&tx, config, c.limit, at, lease, &mut unreadable, &mut wake)?);
                }
                if !claims.is_empty() {
                    self.wake.set(wake);
                }
                tx.commit().map_err(Error::db("committing a worker transaction"))?;
                Ok((applied, claimed, unreadable))
            });
        match attempt {
            Ok((applied, claimed, unreadable)) => {
                for (f, ok) in finished.iter().zip(applied) {
                    crate::storage::log_finished(f, ok, &config.worker_id);
                }
                for u in &unreadable {
                    u.log(&config.worker_id);
                }
                if !finished.is_empty() || !unreadable.is_empty() {
                    crate::wake::outcome_written();
                }
                parents_written(&finished);
                for (c, jobs) in claims.into_iter().zip(claimed) {
                    let _ = c.reply.send(Ok(jobs));
                }
            }
            Err(e) => {
                // Nothing was claimed: the claimers back off. The finished jobs are written on their own.
                let text = e.to_string();
                let mut error = Some(e);
                for c in claims {
                    let _ = c.reply.send(Err(error.take().unwrap_or_else(|| Error::Internal(text.clone()))));
                }
                if !finished.is_empty() {
                    self.finish_with_retries(&finished);
                }
            }
        }
    }

    /// Writes a batch the database refused for good one job at a time, so that one job it refuses does not sink
    /// the rest: a completion refused by itself fails its job with the reason ([`Finished::refused`]); any other
    /// outcome refused by itself is left to its lease.
    fn refused(&mut self, batch: &[Finished], e: &Error) {
        if let [f] = batch {
            match f.refused(e) {
                Some(instead) => self.finish_with_retries(std::slice::from_ref(&instead)),
                None => tracing::error!(
                    job_id = %f.id, kind = %f.kind, outcome = f.outcome.name(), error = %e,
                    "giving up writing a finished job the database refuses; its lease will expire and it will run again"
                ),
            }
            return;
        }
        tracing::warn!(error = %e, jobs = batch.len(), "a batch of finished jobs was refused; writing them one by one");
        for f in batch {
            self.finish_with_retries(std::slice::from_ref(f));
        }
    }

    fn finish_with_retries(&mut self, batch: &[Finished]) {
        let mut retry = Backoff::new(Duration::from_millis(20), Duration::from_secs(30));
        for attempt in 1..=FINISH_TRIES {
            let worker_id = &self.config.worker_id;
            let result = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(Error::db("beginning a worker transaction"))
                .and_then(|tx| {
                    let applied = write_finished(&tx, worker_id, batch, crate::storage::now_ms())?;
                    tx.commit().map_err(Error::db("committing finished jobs"))?;
                    Ok(applied)
                });
            match result {
                Ok(applied) => {
                    for (f, ok) in batch.iter().zip(applied) {
                        crate::storage::log_finished(f, ok, worker_id);
                    }
                    crate::wake::outcome_written();
                    parents_written(batch);
                    return;
                }
                // Refused for good (a trigger or constraint an operator added, a statement this build got wrong):
                // trying again is refused again, and would hold every job of the batch until its lease ran out.
                Err(e) if !e.is_transient() => {
                    self.refused(batch, &e);
                    return;
                }
                Err(e) if attempt < FINISH_TRIES => {
                    tracing::warn!(error = %e, jobs = batch.len(), attempt, "writing finished jobs failed; retrying");
                    std::thread::sleep(retry.take());
                }
                Err(e) => {
                    tracing::error!(
                        error = %e, jobs = batch.len(),
                        "giving up writing finished jobs; their leases will expire and they will run again"
                    );
                }
            }
        }
    }

    fn extend(&mut self, ids: &[String], until: i64) -> Result<u64> {
        self.durability_for(false);
        let ctx = || Error::db("renewing leases");
        let ids = serde_json::to_string(ids).map_err(|e| Error::Internal(format!("encoding job ids: {e}")))?;
        let n = self
            .conn
            .prepare_cached(EXTEND)
            .and_then(|mut s| s.execute(params![until, self.config.worker_id, ids]))
            .map_err(ctx())?;
        Ok(n as u64)
    }

    fn rescue(&mut self, now: i64) -> Result<Vec<Rescued>> {
        self.durability_for(false);
        rescue(&self.conn, now)
    }
}

/// The renewal of the leases of the worker `?2`'s claimed jobs among `?3` (a JSON array) until `?1`; it never
/// shortens a lease a handler extended further than the heartbeat does.
const EXTEND: &str = "UPDATE outbox_jobs SET lease_expires_at = MAX(COALESCE(lease_expires_at, 0), ?1) \
     WHERE status = 'claimed' AND locked_by = ?2 AND id IN (SELECT value FROM json_each(?3))";

/// A worker statement's feed row: `?1` and `?2` the jobs' shared kind and queue (or empty), `?3` when, `?4` the
/// event, `?5` the worker, `?6` the jobs.
const FEED_ROW: &str = "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
     VALUES ('', ?1, ?2, ?3, ?4, 0, ?5, ?6)";

/// The feed row of one worker statement's `event` (`claimed` or `completed`) for `jobs` (id, kind, queue,
/// attempt), listed as [`super::feed::listing`] writes them; nothing when the statement took no job. The statement
/// flipped `event_flip` on these jobs, so the transition trigger left them to it.
pub(super) fn insert_batch_event<S: AsRef<str>>(
    conn: &Connection,
    event: &str,
    worker: &str,
    at: i64,
    jobs: &[(S, S, S, i32)],
) -> Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    let ctx = || Error::db(format!("recording {} {event} jobs in the event feed", jobs.len()));
    let (kind, queue, listed) = super::feed::listing(jobs)?;
    conn.prepare_cached(FEED_ROW)
        .and_then(|mut s| s.execute(params![kind, queue, at, event, worker, listed]))
        .map_err(ctx())?;
    Ok(())
}

/// The busy handler's own test, beside the driver conformance suite.
#[cfg(test)]
#[path = "../../../../tests/driver/sqlite_busy.rs"]
mod tests;

/// Wakes this process's workers when any of `finished` was a workflow step's parent: the statement that wrote its
/// outcome may have let steps go, which a claim now finds (another process hears the commit through its watch).
/// PostgreSQL's writer needs no such call: it wakes the workers after every write it makes.
fn parents_written(finished: &[Finished]) {
    if finished.iter().any(|f| f.parent) {
        crate::wake::wake();
    }
}
