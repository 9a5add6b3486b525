//! The worker's own SQLite connection: claims, fenced completions, lease renewals and rescues.
//!
//! The hot path does not go through the caller's sea-orm pool: sqlx-sqlite hands every statement to a
//! per-connection thread (about fifteen context switches per transaction), so the worker owns one rusqlite
//! connection on a dedicated thread instead and batches finished jobs into one transaction.

use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, params};
use tokio::sync::{mpsc, oneshot};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::storage::worker_store::{StoreFuture, WorkerStore, limited_share};
use crate::storage::{ClaimedJob, Finished, Outcome, Rescued, Unreadable};

/// How the worker's connection is opened and what it may claim.
#[derive(Debug, Clone)]
pub(crate) struct StoreConfig {
    pub(crate) path: PathBuf,
    pub(crate) synchronous: String,
    pub(crate) busy_timeout: Duration,
    pub(crate) worker_id: String,
    /// JSON array of the kinds this worker has handlers for and no fleet-wide limit.
    pub(crate) kinds_json: String,
    /// Kinds with a fleet-wide limit on running jobs: each as a JSON array of itself, and its limit.
    pub(crate) limited: Vec<(String, u32)>,
    /// JSON array of the queues it serves; `None` for all.
    pub(crate) queues_json: Option<String>,
    /// Whether the schema has migration 7: claims and batched completions are then recorded one feed row
    /// per statement by the worker, else one row per job by the transition trigger. Read off the connection
    /// that claims ([`has_batched_events`]).
    pub(crate) batched_events: bool,
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
}

impl SqliteStore {
    /// Opens the connection on its own thread. The thread ends when every handle is dropped.
    pub(crate) fn open(mut config: StoreConfig) -> Result<SqliteStore> {
        let conn = open_connection(&config)?;
        config.batched_events = has_batched_events(&conn)?;
        let (tx, rx) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("outbox-worker-db".into())
            .spawn(move || Actor { conn, config, rx }.run())
            .map_err(|e| Error::Internal(format!("cannot start the worker's database thread: {e}")))?;
        Ok(SqliteStore { tx })
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
}

pub(super) fn open_connection(config: &StoreConfig) -> Result<Connection> {
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

/// Whether the schema has migration 7's batched feed rows (see [`StoreConfig::batched_events`]).
pub(super) fn has_batched_events(conn: &Connection) -> Result<bool> {
    conn.prepare_cached("SELECT COUNT(*) FROM pragma_table_info('outbox_jobs') WHERE name = 'event_flip'")
        .and_then(|mut s| s.query_row([], |row| row.get::<_, i64>(0)))
        .map(|n| n > 0)
        .map_err(Error::db("reading the outbox schema's columns"))
}

struct Actor {
    conn: Connection,
    config: StoreConfig,
    rx: mpsc::UnboundedReceiver<Cmd>,
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
    /// "record what finished, take the next batch".
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

    fn write_cycle(&mut self, finished: Vec<Finished>, claims: Vec<ClaimReq>) {
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
                let applied = write_finished(&tx, &config.worker_id, &finished, now, config.batched_events)?;
                let mut claimed = Vec::with_capacity(claims.len());
                let mut unreadable = Vec::new();
                for c in &claims {
                    let late = (now - c.now).max(0);
                    let (at, lease) = (c.now + late, c.lease_until.saturating_add(late));
                    claimed.push(claim(&tx, config, c.limit, at, lease, &mut unreadable)?);
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

    fn finish_with_retries(&mut self, batch: &[Finished]) {
        let mut retry = Backoff::new(Duration::from_millis(20), Duration::from_secs(30));
        for attempt in 1..=FINISH_TRIES {
            let (worker_id, batched) = (&self.config.worker_id, self.config.batched_events);
            let result = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(Error::db("beginning a worker transaction"))
                .and_then(|tx| {
                    let applied = write_finished(&tx, worker_id, batch, crate::storage::now_ms(), batched)?;
                    tx.commit().map_err(Error::db("committing finished jobs"))?;
                    Ok(applied)
                });
            match result {
                Ok(applied) => {
                    for (f, ok) in batch.iter().zip(applied) {
                        crate::storage::log_finished(f, ok, worker_id);
                    }
                    crate::wake::outcome_written();
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
        let ctx = || Error::db("renewing leases");
        let ids = serde_json::to_string(ids).map_err(|e| Error::Internal(format!("encoding job ids: {e}")))?;
        let n = self
            .conn
            .prepare_cached(
                // Never shortens a lease a handler extended further than the heartbeat does.
                "UPDATE outbox_jobs SET lease_expires_at = MAX(COALESCE(lease_expires_at, 0), ?1) \
                 WHERE status = 'claimed' AND locked_by = ?2 \
                 AND id IN (SELECT value FROM json_each(?3))",
            )
            .and_then(|mut s| s.execute(params![until, self.config.worker_id, ids]))
            .map_err(ctx())?;
        Ok(n as u64)
    }

    fn rescue(&mut self, now: i64) -> Result<Vec<Rescued>> {
        // Writers take turns here, so the triggers never miss a job to let go; rows written or changed by hand
        // can still leave one waiting with nothing ahead of it. A sequence with a job running or free to run is
        // moving and left alone (its first waiting job may be one retried behind the running one).
        let released = self
            .conn
            .prepare_cached(concat!(
                "UPDATE outbox_jobs SET waiting = 0 WHERE id IN (SELECT (SELECT h.id FROM outbox_jobs h \
                 WHERE h.sequence_key = k.sequence_key AND ",
                crate::storage::blocking!("h"),
                " ORDER BY h.sequence_no LIMIT 1) FROM (SELECT DISTINCT w.sequence_key FROM outbox_jobs w \
                 WHERE w.status = 'pending' AND w.waiting = 1 AND NOT EXISTS (SELECT 1 FROM outbox_jobs c \
                 WHERE c.sequence_key = w.sequence_key \
                 AND (c.status = 'claimed' OR (c.status = 'pending' AND c.waiting = 0)))) k) \
                 AND status = 'pending' AND waiting = 1"
            ))
            .and_then(|mut s| s.execute([]))
            .map_err(Error::db("letting waiting sequences go"))?;
        if released > 0 {
            tracing::info!(jobs = released, "let go jobs waiting behind sequences that had moved on");
            crate::wake::wake();
        }
        let ctx = || Error::db("rescuing expired claims");
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

/// Claims up to `limit` due jobs: first those of kinds with a fleet-wide limit, each up to what its limit
/// leaves (the count and the claim share the write transaction, so no other claimer can slip in between;
/// the count reads claimed rows through the lease index, at most the fleet's concurrency of them), then the
/// others.
pub(super) fn claim(
    conn: &Connection,
    config: &StoreConfig,
    limit: usize,
    now: i64,
    lease_until: i64,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<ClaimedJob>> {
    let mut claimed = Vec::new();
    for (kinds_json, cap) in &config.limited {
        let left = limit - claimed.len();
        if left == 0 {
            return Ok(claimed);
        }
        let running: i64 = conn
            .prepare_cached(
                "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed' \
                 AND kind IN (SELECT value FROM json_each(?1))",
            )
            .and_then(|mut s| s.query_row(params![kinds_json], |row| row.get(0)))
            .map_err(Error::db("counting running jobs of a limited kind"))?;
        let room =
            usize::try_from(i64::from(*cap) - running).unwrap_or(0).min(limited_share(left, config.kinds_json != "[]"));
        if room > 0 {
            claimed.extend(claim_of(conn, config, kinds_json, room, now, lease_until, unreadable)?);
        }
    }
    let left = limit - claimed.len();
    if left > 0 && config.kinds_json != "[]" {
        claimed.extend(claim_of(conn, config, &config.kinds_json, left, now, lease_until, unreadable)?);
    }
    Ok(claimed)
}

/// Claims up to `limit` due jobs of `kinds_json` that nothing in their sequence holds back. A claimed row
/// that cannot be read is failed by itself in the same transaction (by rowid: even its id may be unreadable)
/// and the rest are returned.
fn claim_of(
    conn: &Connection,
    config: &StoreConfig,
    kinds_json: &str,
    limit: usize,
    now: i64,
    lease_until: i64,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<ClaimedJob>> {
    let queue_filter = if config.queues_json.is_some() {
        " AND queue IN (SELECT value FROM json_each(?6))"
    } else {
        " AND ?6 IS NULL"
    };
    let flip = if config.batched_events { ", event_flip = 1 - event_flip" } else { "" };
    // Rows are picked by rowid, which the ready index holds: by id, each picked row cost one more descent of
    // the id index, the deeper the bigger the backlog. `LIMIT ?5 + 0`, not `LIMIT ?5`: SQLite folds a bare
    // bound LIMIT into the plan and prepares the statement again whenever the value changes, which a claim's
    // room does nearly every time.
    let sql = format!(
        "UPDATE outbox_jobs SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, \
         locked_at = ?2, \
         claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2{flip} \
         WHERE rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND run_at <= ?2 \
         AND kind IN (SELECT value FROM json_each(?4)){queue_filter} \
         ORDER BY priority DESC, run_at, id LIMIT ?5 + 0) \
         RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, \
         sequence_key IS NOT NULL, rowid"
    );
    let ctx = || Error::db("claiming jobs");
    let mut claimed = Vec::new();
    let mut listed_before = 0;
    // Rows that could not be read take no slot: claim again past them, so a head of the queue made of
    // them never looks like an empty queue.
    loop {
        let want = i64::try_from(limit - claimed.len()).unwrap_or(i64::MAX);
        let mut bad = Vec::new();
        {
            let mut stmt = conn.prepare_cached(&sql).map_err(ctx())?;
            let mut rows = stmt
                .query(params![config.worker_id, now, lease_until, kinds_json, want, config.queues_json])
                .map_err(ctx())?;
            while let Some(row) = rows.next().map_err(ctx())? {
                match claimed_row(row) {
                    Ok(job) => claimed.push(job),
                    Err(u) => bad.push((
                        row.get::<_, i64>(9).map_err(ctx())?,
                        u,
                        shown(row, 2),
                        row.get::<_, i64>(4).ok().and_then(|n| i32::try_from(n).ok()).unwrap_or(0),
                    )),
                }
            }
        }
        // The claim's feed row lists every row it took, the unreadable ones as well as they can be named.
        if config.batched_events {
            let mut listed: Vec<(&str, &str, &str, i32)> = claimed[listed_before..]
                .iter()
                .map(|j| (j.id.as_str(), j.kind.as_str(), j.queue.as_str(), j.attempt))
                .collect();
            listed.extend(
                bad.iter().map(|(_, u, queue, attempt)| (u.id.as_str(), u.kind.as_str(), queue.as_str(), *attempt)),
            );
            insert_batch_event(conn, "claimed", &config.worker_id, now, &listed)?;
        }
        listed_before = claimed.len();
        if bad.is_empty() {
            return Ok(claimed);
        }
        for (rowid, u, _, _) in bad {
            conn.prepare_cached(
                "UPDATE outbox_jobs SET status = 'failed', last_error = ?1, lease_expires_at = NULL, \
                 updated_at = ?2 WHERE rowid = ?3",
            )
            .and_then(|mut s| s.execute(params![u.error(), now, rowid]))
            .map_err(Error::db(format!("failing unreadable job `{}`", u.id)))?;
            unreadable.push(u);
        }
        if claimed.len() == limit {
            return Ok(claimed);
        }
    }
}

/// One row of the claim, each column checked for the type that belongs there.
fn claimed_row(row: &rusqlite::Row<'_>) -> std::result::Result<ClaimedJob, Unreadable> {
    let at = |column: &'static str| move |found| Unreadable { id: shown(row, 0), kind: shown(row, 1), column, found };
    Ok(ClaimedJob {
        id: text(row, 0).map_err(at("id"))?,
        kind: text(row, 1).map_err(at("kind"))?,
        queue: text(row, 2).map_err(at("queue"))?,
        payload: text(row, 3).map_err(at("payload"))?,
        attempt: int(row, 4).map_err(at("attempts"))?,
        max_attempts: int(row, 5).map_err(at("max_attempts"))?,
        schema_hash: text(row, 6).map_err(at("schema_hash"))?,
        run: int(row, 7).map_err(at("runs"))?,
        sequenced: int(row, 8).map_err(at("sequence_key"))? != 0,
    })
}

fn text(row: &rusqlite::Row<'_>, i: usize) -> std::result::Result<String, String> {
    match row.get_ref(i) {
        Ok(ValueRef::Text(bytes)) => {
            std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| "text that is not UTF-8".to_owned())
        }
        Ok(other) => Err(found(other)),
        Err(e) => Err(e.to_string()),
    }
}

fn int(row: &rusqlite::Row<'_>, i: usize) -> std::result::Result<i32, String> {
    match row.get_ref(i) {
        Ok(ValueRef::Integer(n)) => i32::try_from(n).map_err(|_| format!("{n}, out of range")),
        Ok(other) => Err(found(other)),
        Err(e) => Err(e.to_string()),
    }
}

/// What a value is, for an error: never its content, which may be anything.
fn found(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(n) => format!("the INTEGER {n}"),
        ValueRef::Real(x) => format!("the REAL {x}"),
        ValueRef::Text(t) => format!("TEXT of {} bytes", t.len()),
        ValueRef::Blob(b) => format!("a BLOB of {} bytes", b.len()),
    }
}

/// A column as well as it can be shown, for naming an unreadable job.
fn shown(row: &rusqlite::Row<'_>, i: usize) -> String {
    match row.get_ref(i) {
        Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
        Ok(ValueRef::Integer(n)) => n.to_string(),
        Ok(ValueRef::Blob(b)) => format!("x'{}'", b.iter().map(|b| format!("{b:02X}")).collect::<String>()),
        _ => "?".into(),
    }
}

/// The fence of every write after the claim: this job, still claimed, by this owner, in this attempt.
macro_rules! fence {
    () => {
        "WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND attempts = ?3"
    };
}

/// Writes each outcome fenced by (id, claimed, owner, attempt); returns which rows it applied to.
///
/// A batch of distinct jobs is one statement over a JSON array, with one feed row for its completions: one
/// statement per job costs several times more (each execution builds the status check's and the partial
/// indexes' value lists again). A batch that names a job twice (never the worker's own) is written row by row,
/// so the second write meets the fence the first one moved, and so is every batch on a schema from before
/// migration 7 (whose trigger records each job).
pub(super) fn write_finished(
    tx: &Connection,
    owner: &str,
    batch: &[Finished],
    now: i64,
    batched_events: bool,
) -> Result<Vec<bool>> {
    if batched_events && batch.len() > 1 {
        let mut ids: Vec<&str> = batch.iter().map(|f| f.id.as_str()).collect();
        ids.sort_unstable();
        if ids.windows(2).all(|w| w[0] != w[1]) {
            return write_batch(tx, owner, batch, now);
        }
    }
    write_rows(tx, owner, batch, now)
}

/// One finished attempt as [`FINISH_BATCH`] reads it: id, attempt, new status, attempts given back, output,
/// error, next run.
#[derive(serde::Serialize)]
struct BatchRow<'a> {
    i: &'a str,
    a: i32,
    s: &'static str,
    g: i32,
    o: Option<&'a str>,
    e: Option<&'a str>,
    r: Option<i64>,
}

/// The outcomes of a batch, each with the same columns and fence as in [`write_rows`].
const FINISH_BATCH: &str = "UPDATE outbox_jobs SET status = f.value ->> 's', attempts = attempts - (f.value ->> 'g'), \
     output = CASE WHEN f.value ->> 's' = 'completed' THEN f.value ->> 'o' ELSE output END, \
     completed_at = CASE WHEN f.value ->> 's' = 'completed' THEN ?3 ELSE completed_at END, \
     last_error = COALESCE(f.value ->> 'e', last_error), run_at = COALESCE(f.value ->> 'r', run_at), \
     lease_expires_at = NULL, updated_at = ?3, \
     event_flip = CASE WHEN f.value ->> 's' = 'completed' THEN 1 - event_flip ELSE event_flip END \
     FROM json_each(?1) AS f \
     WHERE outbox_jobs.id = f.value ->> 'i' AND outbox_jobs.status = 'claimed' AND outbox_jobs.locked_by = ?2 \
     AND outbox_jobs.attempts = f.value ->> 'a' \
     RETURNING outbox_jobs.id, outbox_jobs.kind, outbox_jobs.queue, outbox_jobs.status, outbox_jobs.attempts";

fn write_batch(tx: &Connection, owner: &str, batch: &[Finished], now: i64) -> Result<Vec<bool>> {
    let rows: Vec<BatchRow<'_>> = batch
        .iter()
        .map(|f| {
            let c = f.outcome.columns(now);
            BatchRow { i: &f.id, a: f.attempt, s: c.status, g: c.give_back, o: c.output, e: c.error, r: c.run_at }
        })
        .collect();
    let json = serde_json::to_string(&rows).map_err(|e| Error::Internal(format!("encoding finished jobs: {e}")))?;
    let ctx = || Error::db("writing finished jobs");
    let mut stmt = tx.prepare_cached(FINISH_BATCH).map_err(ctx())?;
    let mut written = std::collections::HashSet::with_capacity(batch.len());
    let mut completed: Vec<(String, String, String, i32)> = Vec::with_capacity(batch.len());
    let mut rows = stmt.query(params![json, owner, now]).map_err(ctx())?;
    while let Some(row) = rows.next().map_err(ctx())? {
        let id: String = row.get(0).map_err(ctx())?;
        if row.get_ref(3).map_err(ctx())?.as_str().ok() == Some("completed") {
            completed.push((
                id.clone(),
                row.get(1).map_err(ctx())?,
                row.get(2).map_err(ctx())?,
                row.get(4).map_err(ctx())?,
            ));
        }
        written.insert(id);
    }
    drop(rows);
    insert_batch_event(tx, "completed", owner, now, &completed)?;
    Ok(batch.iter().map(|f| written.contains(&f.id)).collect())
}

/// The feed row of one worker statement's `event` (`claimed` or `completed`) for `jobs`, listed as
/// `[id, kind, queue, attempt]`; nothing when the statement took no job. The statement flipped `event_flip`
/// on these jobs, so the transition trigger left them to it.
fn insert_batch_event<T: serde::Serialize>(
    conn: &Connection,
    event: &str,
    worker: &str,
    at: i64,
    jobs: &[T],
) -> Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    let ctx = || Error::db(format!("recording {} {event} jobs in the event feed", jobs.len()));
    let jobs = serde_json::to_string(jobs).map_err(|e| Error::Internal(format!("encoding {event} jobs: {e}")))?;
    conn.prepare_cached(
        "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
         VALUES ('', '', '', ?1, ?2, 0, ?3, ?4)",
    )
    .and_then(|mut s| s.execute(params![at, event, worker, jobs]))
    .map_err(ctx())?;
    Ok(())
}

/// Writes each outcome by itself.
fn write_rows(tx: &Connection, owner: &str, batch: &[Finished], now: i64) -> Result<Vec<bool>> {
    let ctx = || Error::db("writing finished jobs");
    let mut applied = Vec::with_capacity(batch.len());
    {
        for f in batch {
            let n = match &f.outcome {
                Outcome::Completed { output } => tx
                    .prepare_cached(concat!(
                        "UPDATE outbox_jobs SET status = 'completed', output = ?4, completed_at = ?5, \
                         lease_expires_at = NULL, updated_at = ?5 ",
                        fence!()
                    ))
                    .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, output, now])),
                Outcome::Retry { run_at, error } => tx
                    .prepare_cached(concat!(
                        "UPDATE outbox_jobs SET status = 'pending', run_at = ?4, last_error = ?5, \
                         lease_expires_at = NULL, updated_at = ?6 ",
                        fence!()
                    ))
                    .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, run_at, error, now])),
                Outcome::Failed { error } => tx
                    .prepare_cached(concat!(
                        "UPDATE outbox_jobs SET status = 'failed', last_error = ?4, lease_expires_at = NULL, \
                         updated_at = ?5 ",
                        fence!()
                    ))
                    .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, error, now])),
                Outcome::Snoozed { run_at } => tx
                    .prepare_cached(concat!(
                        "UPDATE outbox_jobs SET status = 'pending', attempts = attempts - 1, run_at = ?4, \
                         lease_expires_at = NULL, updated_at = ?5 ",
                        fence!()
                    ))
                    .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, run_at, now])),
                Outcome::Released => tx
                    .prepare_cached(concat!(
                        "UPDATE outbox_jobs SET status = 'pending', attempts = attempts - 1, run_at = ?4, \
                         lease_expires_at = NULL, updated_at = ?4 ",
                        fence!()
                    ))
                    .and_then(|mut s| s.execute(params![f.id, owner, f.attempt, now])),
            }
            .map_err(ctx())?;
            applied.push(n == 1);
        }
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(path: PathBuf, busy_timeout: Duration) -> StoreConfig {
        StoreConfig {
            path,
            synchronous: "NORMAL".into(),
            busy_timeout,
            worker_id: "test".into(),
            kinds_json: "[]".into(),
            limited: Vec::new(),
            queues_json: None,
            batched_events: false,
        }
    }

    /// The worker's busy handler waits out another writer, gets the lock soon after it is free, and gives up
    /// after the busy timeout while it is not.
    #[test]
    fn the_busy_handler_waits_for_the_lock_then_gives_up_at_the_timeout() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("busy.db");
        Connection::open(&path).expect("create the file");
        let holder = open_connection(&config(path.clone(), Duration::from_secs(1))).expect("open");
        holder.execute_batch("CREATE TABLE t (x INTEGER)").expect("create");

        // Freed after 100 ms: the waiter gets the lock then, not at its 10 s timeout.
        holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let waiter_config = config(path.clone(), Duration::from_secs(10));
        let waiter = std::thread::spawn(move || {
            let conn = open_connection(&waiter_config).expect("open");
            let start = Instant::now();
            conn.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (1); COMMIT")
                .expect("write after the lock is free");
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(100));
        holder.execute_batch("COMMIT").expect("unlock");
        let waited = waiter.join().expect("waiter");
        assert!(waited < Duration::from_secs(5), "waited {waited:?} for a lock freed after 100 ms");

        // Held throughout: the waiter gives up after its 200 ms, with SQLITE_BUSY.
        holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let conn = open_connection(&config(path, Duration::from_millis(200))).expect("open");
        let start = Instant::now();
        let err = conn.execute_batch("BEGIN IMMEDIATE").expect_err("the lock is held");
        let waited = start.elapsed();
        assert_eq!(err.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy), "{err}");
        assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "gave up after {waited:?}");
        holder.execute_batch("COMMIT").expect("unlock");
    }
}
