//! The worker's own SQLite connection: claims, fenced completions, lease renewals and rescues.
//!
//! The hot path does not go through the caller's sea-orm pool: sqlx-sqlite hands every statement to a
//! per-connection thread (about fifteen context switches per transaction), so the worker owns one rusqlite
//! connection on a dedicated thread instead and batches finished jobs into one transaction.

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params};
use tokio::sync::{mpsc, oneshot};

use super::{ClaimedJob, Finished, Outcome, Rescued};
use crate::error::{Error, Result};

/// How the worker's connection is opened and what it may claim.
#[derive(Debug, Clone)]
pub(crate) struct StoreConfig {
    pub(crate) path: PathBuf,
    pub(crate) synchronous: String,
    pub(crate) busy_timeout: Duration,
    pub(crate) worker_id: String,
    /// JSON array of the kinds this worker has handlers for.
    pub(crate) kinds_json: String,
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
pub(crate) struct WorkerStore {
    tx: mpsc::UnboundedSender<Cmd>,
}

impl WorkerStore {
    /// Opens the connection on its own thread. The thread ends when every handle is dropped.
    pub(crate) fn open(config: StoreConfig) -> Result<WorkerStore> {
        let conn = open_connection(&config)?;
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("outbox-worker-db".into())
            .spawn(move || Actor { conn, config, rx, stash: None }.run())
            .map_err(|e| Error::Unsupported(format!("cannot start the worker's database thread: {e}")))?;
        Ok(WorkerStore { tx })
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Cmd) -> Result<T> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).map_err(|_| Error::WorkerStopped)?;
        rx.await.map_err(|_| Error::WorkerStopped)
    }

    pub(crate) async fn claim(&self, limit: usize, now: i64, lease_until: i64) -> Result<Vec<ClaimedJob>> {
        self.ask(|reply| Cmd::Claim { limit, now, lease_until, reply }).await?
    }

    /// Queues a finished attempt; it is written with whatever else finished meanwhile, in one transaction.
    pub(crate) fn finish(&self, finished: Finished) -> Result<()> {
        self.tx.send(Cmd::Finish(finished)).map_err(|_| Error::WorkerStopped)
    }

    pub(crate) async fn extend(&self, ids: Vec<String>, until: i64) -> Result<u64> {
        self.ask(|reply| Cmd::Extend { ids, until, reply }).await?
    }

    pub(crate) async fn rescue(&self, now: i64) -> Result<Vec<Rescued>> {
        self.ask(|reply| Cmd::Rescue { now, reply }).await?
    }

    /// Resolves once every finish queued before it has been written (or given up on).
    pub(crate) async fn flush(&self) -> Result<()> {
        self.ask(|reply| Cmd::Flush { reply }).await
    }
}

fn open_connection(config: &StoreConfig) -> Result<Connection> {
    let ctx = || Error::sqlite(format!("opening {}", config.path.display()));
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(&config.path, flags).map_err(ctx())?;
    conn.busy_timeout(config.busy_timeout).map_err(ctx())?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(ctx())?;
    conn.pragma_update(None, "synchronous", &config.synchronous).map_err(ctx())?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

struct Actor {
    conn: Connection,
    config: StoreConfig,
    rx: mpsc::UnboundedReceiver<Cmd>,
    stash: Option<Cmd>,
}

/// Attempts at writing one batch of finished jobs before giving up on it (the lease rescues the jobs).
const FINISH_TRIES: u32 = 12;

impl Actor {
    fn run(mut self) {
        while let Some(cmd) = self.stash.take().or_else(|| self.rx.blocking_recv()) {
            match cmd {
                Cmd::Claim { limit, now, lease_until, reply } => {
                    let _ = reply.send(self.claim(limit, now, lease_until));
                }
                Cmd::Finish(first) => self.finish_batch(first),
                Cmd::Extend { ids, until, reply } => {
                    let _ = reply.send(self.extend(&ids, until));
                }
                Cmd::Rescue { now, reply } => {
                    let _ = reply.send(self.rescue(now));
                }
                Cmd::Flush { reply } => {
                    let _ = reply.send(());
                }
            }
        }
    }

    fn claim(&mut self, limit: usize, now: i64, lease_until: i64) -> Result<Vec<ClaimedJob>> {
        let queue_filter = if self.config.queues_json.is_some() {
            " AND queue IN (SELECT value FROM json_each(?6))"
        } else {
            " AND ?6 IS NULL"
        };
        let sql = format!(
            "UPDATE outbox_jobs SET status = 'claimed', attempts = attempts + 1, locked_by = ?1, locked_at = ?2, \
             claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2 \
             WHERE id IN (SELECT id FROM outbox_jobs WHERE status = 'pending' AND run_at <= ?2 \
             AND kind IN (SELECT value FROM json_each(?4)){queue_filter} \
             ORDER BY priority DESC, run_at, id LIMIT ?5) \
             RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash"
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let ctx = Error::sqlite("claiming jobs");
        let mut stmt = match self.conn.prepare_cached(&sql) {
            Ok(s) => s,
            Err(e) => return Err(ctx(e)),
        };
        let rows = stmt.query_map(
            params![self.config.worker_id, now, lease_until, self.config.kinds_json, limit, self.config.queues_json],
            |row| {
                Ok(ClaimedJob {
                    id: row.get(0)?,
                    kind: row.get(1)?,
                    queue: row.get(2)?,
                    payload: row.get(3)?,
                    attempt: row.get(4)?,
                    max_attempts: row.get(5)?,
                    schema_hash: row.get(6)?,
                })
            },
        );
        match rows.and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>()) {
            Ok(jobs) => Ok(jobs),
            Err(e) => Err(ctx(e)),
        }
    }

    fn finish_batch(&mut self, first: Finished) {
        let mut batch = vec![first];
        loop {
            match self.rx.try_recv() {
                Ok(Cmd::Finish(f)) => batch.push(f),
                Ok(other) => {
                    self.stash = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        let mut delay = Duration::from_millis(20);
        for attempt in 1..=FINISH_TRIES {
            match self.write_finished(&batch) {
                Ok(applied) => {
                    for (f, ok) in batch.iter().zip(applied) {
                        log_finished(f, ok, &self.config.worker_id);
                    }
                    return;
                }
                Err(e) if attempt < FINISH_TRIES => {
                    tracing::warn!(error = %e, jobs = batch.len(), attempt, "writing finished jobs failed; retrying");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(30));
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

    /// Writes each outcome fenced by (id, claimed, owner, attempt); returns which rows it applied to.
    fn write_finished(&mut self, batch: &[Finished]) -> Result<Vec<bool>> {
        let ctx = || Error::sqlite("writing finished jobs");
        let now = super::now_ms();
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(ctx())?;
        let mut applied = Vec::with_capacity(batch.len());
        {
            const FENCE: &str = "WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND attempts = ?3";
            let owner = &self.config.worker_id;
            for f in batch {
                let n = match &f.outcome {
                    Outcome::Completed { output } => tx
                        .prepare_cached(&format!(
                            "UPDATE outbox_jobs SET status = 'completed', output = ?4, completed_at = ?5, \
                             lease_expires_at = NULL, updated_at = ?5 {FENCE}"
                        ))
                        .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, output, now])),
                    Outcome::Retry { run_at, error } => tx
                        .prepare_cached(&format!(
                            "UPDATE outbox_jobs SET status = 'pending', run_at = ?4, last_error = ?5, \
                             lease_expires_at = NULL, updated_at = ?6 {FENCE}"
                        ))
                        .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, run_at, error, now])),
                    Outcome::Failed { error } => tx
                        .prepare_cached(&format!(
                            "UPDATE outbox_jobs SET status = 'failed', last_error = ?4, lease_expires_at = NULL, \
                             updated_at = ?5 {FENCE}"
                        ))
                        .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, error, now])),
                    Outcome::Snoozed { run_at } => tx
                        .prepare_cached(&format!(
                            "UPDATE outbox_jobs SET status = 'pending', attempts = attempts - 1, run_at = ?4, \
                             lease_expires_at = NULL, updated_at = ?5 {FENCE}"
                        ))
                        .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, run_at, now])),
                    Outcome::Released => tx
                        .prepare_cached(&format!(
                            "UPDATE outbox_jobs SET status = 'pending', attempts = attempts - 1, run_at = ?4, \
                             lease_expires_at = NULL, updated_at = ?4 {FENCE}"
                        ))
                        .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, now])),
                }
                .map_err(ctx())?;
                applied.push(n == 1);
            }
        }
        tx.commit().map_err(ctx())?;
        Ok(applied)
    }

    fn extend(&mut self, ids: &[String], until: i64) -> Result<u64> {
        let ctx = || Error::sqlite("renewing leases");
        let ids = serde_json::to_string(ids).map_err(|e| Error::Unsupported(format!("encoding job ids: {e}")))?;
        let n = self
            .conn
            .prepare_cached(
                "UPDATE outbox_jobs SET lease_expires_at = ?1 WHERE status = 'claimed' AND locked_by = ?2 \
                 AND id IN (SELECT value FROM json_each(?3))",
            )
            .and_then(|mut s| s.execute(params![until, self.config.worker_id, ids]))
            .map_err(ctx())?;
        Ok(n as u64)
    }

    fn rescue(&mut self, now: i64) -> Result<Vec<Rescued>> {
        let ctx = || Error::sqlite("rescuing expired claims");
        let mut stmt = self
            .conn
            .prepare_cached(
                "UPDATE outbox_jobs SET \
                 status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END, \
                 last_error = 'lease expired while claimed by ' || COALESCE(locked_by, 'an unknown worker') \
                 || CASE WHEN attempts >= max_attempts THEN '; no attempts left' ELSE '' END, \
                 lease_expires_at = NULL, run_at = ?1, updated_at = ?1 \
                 WHERE status = 'claimed' AND lease_expires_at < ?1 \
                 RETURNING id, kind, queue, attempts, status, locked_by",
            )
            .map_err(ctx())?;
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
}

fn log_finished(f: &Finished, applied: bool, worker: &str) {
    let (job_id, kind, queue, attempt) = (f.id.as_str(), f.kind.as_str(), f.queue.as_str(), f.attempt);
    if !applied {
        tracing::warn!(
            job_id,
            kind,
            queue,
            attempt,
            worker,
            outcome = f.outcome.name(),
            "discarded a stale result: the job's claim had expired and was rescued"
        );
        return;
    }
    match &f.outcome {
        Outcome::Completed { .. } => tracing::debug!(job_id, kind, queue, attempt, "job completed"),
        Outcome::Retry { run_at, error } => {
            tracing::warn!(job_id, kind, queue, attempt, run_at, error = %error, "job failed; will retry")
        }
        Outcome::Failed { error } => tracing::error!(job_id, kind, queue, attempt, error = %error, "job failed"),
        Outcome::Snoozed { run_at } => tracing::debug!(job_id, kind, queue, attempt, run_at, "job snoozed"),
        Outcome::Released => tracing::info!(job_id, kind, queue, attempt, "job released at shutdown"),
    }
}
