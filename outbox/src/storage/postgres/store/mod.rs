//! The worker's own PostgreSQL connections: `SKIP LOCKED` claims (`claim.rs`), batched fenced completions
//! (`complete.rs`), lease renewals, rescues, and the `LISTEN` connection that wakes the worker when jobs are
//! enqueued.
//!
//! The worker opens its own small pool (from the caller's connection options, named `outbox-worker <id>` in
//! `pg_stat_activity`) so handlers and the application cannot starve the claim path, one connection for the
//! worker loop's claims (`outbox-claimer <id>`), one for the completion writer (`outbox-writer <id>`), and one for
//! `LISTEN` (`outbox-listener <id>`). A connection
//! the server drops (restart, failover, `pg_terminate_backend`) costs one failed statement: every call is
//! retried on a fresh connection, completions until they are written or their lease would have run out anyway.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use sea_orm::sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sea_orm::sqlx::{self, Row};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use super::ts;
use super::wake::listen;
use crate::error::{Error, Result};
use crate::storage::transient;
use crate::storage::worker_store::StoreFuture;
use crate::storage::{ClaimedJob, Finished, Rescued, WorkerStore};
use claim::claimed_jobs;
use claim::{CursorCell, PROMOTE_EVERY_MS, QUEUES_EVERY_MS};
pub(super) use claim::{claim_rows, promote_due, queues_of};
pub(super) use claims::{Claims, claim_counts};
use complete::write_finished;
use flow::FlowMemoryCell;

/// What the worker claims and who it is.
#[derive(Debug, Clone)]
pub(crate) struct PgStoreConfig {
    pub(crate) worker_id: String,
    /// Kinds this worker has handlers for and no fleet-wide limit.
    pub(crate) kinds: Vec<String>,
    /// Kinds whose claims are controlled fleet-wide (a limit on running jobs, a rate, fair share).
    pub(crate) limited: Vec<crate::flow::FlowKind>,
    /// Queues it serves; `None` for all.
    pub(crate) queues: Option<Vec<String>>,
    /// The schema holding the outbox tables; notifications from other schemas are ignored.
    pub(crate) schema: String,
}

/// The feed row of a worker statement's `$event` at `$at` by `$worker` (placeholders), listing the jobs of the
/// updated rows `u` that pass `$filter`; none when no job does. Jobs of one kind and queue are listed as
/// `[id, attempt]` under the row's kind and queue, as `events::listing` writes them (`s` finds the shared pair,
/// or `''` for a row of several; materialized, so that it is computed once, not for each job).
macro_rules! feed_row {
    ($at:literal, $event:literal, $worker:literal, $filter:literal) => {
        concat!(
            "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
             WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) \
             THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) \
             THEN min(queue) ELSE '' END AS queue FROM u",
            $filter,
            ") SELECT '', s.kind, s.queue, ",
            ts!($at),
            ", '",
            $event,
            "', 0, ",
            $worker,
            ", json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) \
             ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) \
             FROM s, u",
            $filter,
            " GROUP BY s.kind, s.queue HAVING count(*) > 0"
        )
    };
}

mod claim;
mod claims;
mod complete;
pub(super) mod flow;
#[cfg(test)]
mod plans;
pub(super) mod remote;
mod rescue;
#[cfg(test)]
pub(super) mod statements;

pub(in crate::storage::postgres) use claim::claimed_job;
pub(in crate::storage::postgres) use complete::{applied, write_batch};

/// Never shortens a lease a handler extended further than the heartbeat does. A renewal of several rows never
/// waits for one: waiting for a row while holding others is how a heartbeat and a completion batch deadlocked,
/// each having locked rows the other wanted. A row another transaction holds (this worker's writer finishing
/// it, a rescuer, an application transaction that enqueued a duplicate behind it) is renewed by a later
/// heartbeat, a third of a lease on.
///
/// Rows are found by id: the claim's test is written `status || ''`, which the planner cannot match to a partial
/// index on the status. Such an index's statistics can make it look nearly empty while it keeps an entry for
/// every claim since the last vacuum, none of which can be removed or marked dead while a snapshot older than
/// them is open (a report, a session idle in a transaction): a completion of 100 jobs that scanned such an index of
/// leases walked 4,700 pages in 16 ms under a held snapshot, against one lookup per id (measured with
/// `auto_explain`). The completion's fence (`complete.rs`) and the rescue are written the same
/// way. The rows are updated by `id = ANY(...)` rather than joined, as the claim's are (`claim.rs`), whatever
/// their number. A renewal moves only the jobs' leases: their claims keep theirs (see [`RESCUE`]).
pub(super) const EXTEND: &str = concat!(
    "WITH l AS (SELECT id FROM outbox_jobs WHERE (status || '') = 'claimed' AND locked_by = $2 AND id = ANY($3) \
     FOR UPDATE SKIP LOCKED) \
     UPDATE outbox_jobs j SET lease_expires_at = GREATEST(COALESCE(j.lease_expires_at, TIMESTAMPTZ 'epoch'), ",
    ts!("$1"),
    ") WHERE j.id = ANY(ARRAY(SELECT id FROM l))"
);

/// The renewal of one row (a handler's own extension, or a heartbeat with one job): it holds no other row while
/// it waits, so it can wait, and a handler's extension is never skipped. Found by id like the others: with
/// `status = 'claimed'` and statistics that counted no claimed job, the planner scanned the whole lease index
/// this table had for the one row (shown by `EXPLAIN` on 200,000 finished jobs).
const EXTEND_ONE: &str = concat!(
    "UPDATE outbox_jobs SET lease_expires_at = GREATEST(COALESCE(lease_expires_at, TIMESTAMPTZ 'epoch'), ",
    ts!("$1"),
    ") WHERE (status || '') = 'claimed' AND locked_by = $2 AND id = ($3::text[])[1]"
);

/// The worker's own connections: claims, the completion writer, renewals and rescues.
const POOL: u32 = 4;
/// Attempts at one claim, renewal or rescue: a dropped connection fails one statement; after a server restart
/// every pooled connection may be dead, so there are more attempts than connections.
const CALL_TRIES: u32 = POOL + 2;
/// How long finished attempts are retried before they are left to the lease.
const FINISH_GIVE_UP: Duration = Duration::from_secs(300);
/// Finished attempts written per statement at most.
const FINISH_BATCH: usize = 1_000;

enum Msg {
    Finish(Finished),
    Flush(oneshot::Sender<()>),
}

/// Handle to the worker's PostgreSQL connections. Clones share them.
#[derive(Clone)]
pub(crate) struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Renewals, rescues and claims that take a limited kind's lock, on the background runtime.
    pool: PgPool,
    /// The completion writer's connection, on the background runtime.
    write_pool: PgPool,
    /// The worker loop's claims when the worker serves no limited kind, on the loop's own runtime: each is one
    /// statement that commits on its own (see [`WorkerStore::claim`]).
    claim_pool: PgPool,
    config: PgStoreConfig,
    /// The worker's background runtime, which runs every statement of the store but the loop's single-statement
    /// claims: a handler that stalls the worker's own runtime cannot hold a claim's transaction (and its
    /// advisory locks) open, nor delay a completion.
    bg: Handle,
    tx: mpsc::UnboundedSender<Msg>,
    /// Finished attempts not yet written. Their leases are renewed until they are, and past one batch they
    /// keep their slots.
    unwritten: Unwritten,
    /// The `LISTEN` connection's pool, and the task that listens once the worker loop started it.
    listen_pool: PgPool,
    listener: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// When this worker's claim last let in due scheduled jobs (ms; `i64::MIN` before the first).
    promoted_at: AtomicI64,
    /// Where its last claim ended (see [`claim::Cursor`]).
    cursor: CursorCell,
    /// What it remembers of its claims of controlled kinds (see [`flow::FlowMemory`]).
    flow: FlowMemoryCell,
    /// Its claims with outcomes still to write.
    claims: Claims,
    /// When its last claim said to claim again.
    wake: crate::storage::worker_store::FlowWake,
    /// For a worker of every queue, the queues it last listed and when (ms; see [`claim::QUEUES`]).
    queues: std::sync::Mutex<Option<(i64, Vec<String>)>>,
}

impl Inner {
    /// The queues this worker's claims read at `now`: its own, or those it listed less than `max_age` ms before,
    /// else listed again on `pool`; and whether they were listed now.
    async fn queues(&self, pool: &PgPool, now: i64, max_age: i64) -> Result<(Vec<String>, bool)> {
        if let Some(queues) = &self.config.queues {
            return Ok((queues.clone(), false));
        }
        let lock = || self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, queues)) = lock().as_ref()
            && (0..max_age).contains(&now.saturating_sub(*at))
        {
            return Ok((queues.clone(), false));
        }
        let queues = queues_of(pool, &self.config).await?;
        *lock() = Some((now, queues.clone()));
        Ok((queues, true))
    }

    /// Claims up to `limit` due jobs on `pool` (see [`claim_rows`]), after letting in the due scheduled jobs when
    /// `promote`. A worker of every queue reads the queues it listed within the last [`QUEUES_EVERY_MS`]; when
    /// that claim finds nothing, it lists them again and claims from the queues that were not listed before, so a
    /// job enqueued into a new queue waits for no poll (a claim that found some jobs but fewer than asked does the
    /// same, at most every [`PROMOTE_EVERY_MS`]).
    async fn claim_on(
        &self,
        pool: &PgPool,
        limit: usize,
        now: i64,
        lease_until: i64,
        promote: bool,
    ) -> Result<Vec<sqlx::postgres::PgRow>> {
        if promote {
            promote_due(pool, now).await?;
        }
        let (queues, listed) = self.queues(pool, now, QUEUES_EVERY_MS).await?;
        let c = &self.config;
        let mut wake = None;
        let mut rows =
            claim_rows(pool, c, &queues, limit, now, lease_until, Some(&self.cursor), Some(&self.flow), &mut wake)
                .await?;
        self.wake.set(wake);
        if rows.len() < limit && !listed {
            // A claim that found nothing starts no job late by listing again; one that found some does it at most
            // every `PROMOTE_EVERY_MS`.
            let max_age = if rows.is_empty() { 0 } else { PROMOTE_EVERY_MS };
            let (fresh, listed) = match self.queues(pool, now, max_age).await {
                Ok(fresh) => fresh,
                Err(e) => return claim::keep_claimed(rows, e),
            };
            let new: Vec<String> = fresh.into_iter().filter(|q| !queues.contains(q)).collect();
            if listed && !new.is_empty() {
                match claim_rows(pool, c, &new, limit - rows.len(), now, lease_until, None, None, &mut None).await {
                    Ok(more) => rows.extend(more),
                    Err(e) => return claim::keep_claimed(rows, e),
                }
            }
        }
        Ok(rows)
    }
}

/// Ids of finished attempts waiting for the completion writer.
type Unwritten = Arc<std::sync::Mutex<HashSet<String>>>;

fn unwritten_ids(unwritten: &Unwritten) -> std::sync::MutexGuard<'_, HashSet<String>> {
    // The set holds plain ids; a panic elsewhere while it was locked leaves nothing half-done in it.
    unwritten.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Inner {
    fn stop_listening(&self) {
        if let Some(listener) = self.listener.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            listener.abort();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_listening();
    }
}

/// `role worker`, as PostgreSQL keeps it (the first 63 bytes).
pub(super) fn application_name(role: &str, worker_id: &str) -> String {
    let mut name = format!("{role} {worker_id}");
    while name.len() > 63 {
        name.pop();
    }
    name
}

impl PgStore {
    /// Opens the worker's pool on the options of `caller` and starts the completion writer on the runtime of
    /// `bg`; the listener starts with the worker loop ([`WorkerStore::listen`]).
    pub(crate) fn open(caller: &PgPool, config: PgStoreConfig, bg: &Handle) -> PgStore {
        let _entered = bg.enter();
        let name = |role: &str| application_name(role, &config.worker_id);
        let options = caller.connect_options().as_ref().clone();
        let listen_options = options.clone().application_name(&name("outbox-listener"));
        // The claims and the batch completions, the statements every job pays for, are planned once per
        // connection (generic plans): planning was a sixth of each one's time, 0.48 ms of a claim's 2.9 and
        // 0.34 ms of a completion's 2.5 (`pg_stat_statements` with `track_planning`, concurrency 100). Each finds
        // its rows by id and its ready range by kind whatever the values (`plans.rs` holds both kinds of plan
        // to that). The other statements are planned for their values on every run.
        let generic = options.clone().options([("plan_cache_mode", "force_generic_plan")]);
        let custom = options.options([("plan_cache_mode", "force_custom_plan")]);
        // No ping before each statement (it cost 13 % of throughput): a connection a server restart or
        // `pg_terminate_backend` left dead fails one statement, is dropped, and the call is retried.
        let pool_of = |size: u32, role: &str, options: &PgConnectOptions| {
            PgPoolOptions::new()
                .max_connections(size)
                .min_connections(0)
                .acquire_timeout(Duration::from_secs(30))
                .test_before_acquire(false)
                .connect_lazy_with(options.clone().application_name(&name(role)))
        };
        let pool = pool_of(POOL, "outbox-worker", &custom);
        // Opened by the loop's first claim, so on its runtime.
        let claim_pool = pool_of(1, "outbox-claimer", &generic);
        // The completion writer writes one batch at a time.
        let write_pool = pool_of(1, "outbox-writer", &generic);
        let listen_pool = super::wake::pool(listen_options);
        let (tx, rx) = mpsc::unbounded_channel();
        let unwritten = Unwritten::default();
        let claims = Claims::default();
        let owner = config.worker_id.clone();
        tokio::spawn(write_finished(write_pool.clone(), owner, rx, Arc::clone(&unwritten), Arc::clone(&claims)));
        let promoted_at = AtomicI64::new(i64::MIN);
        let cursor = CursorCell::default();
        let flow = FlowMemoryCell::default();
        let listener = std::sync::Mutex::new(None);
        let inner = Inner {
            pool,
            write_pool,
            claim_pool,
            config,
            tx,
            unwritten,
            listen_pool,
            listener,
            bg: bg.clone(),
            promoted_at,
            cursor,
            flow,
            claims,
            queues: std::sync::Mutex::new(None),
            wake: Default::default(),
        };
        PgStore { inner: Arc::new(inner) }
    }

    /// Runs `call` on the background runtime.
    async fn on_bg<T, Fut>(&self, call: impl FnOnce(Arc<Inner>) -> Fut) -> Result<T>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        self.inner.bg.spawn(call(Arc::clone(&self.inner))).await.map_err(|e| {
            if e.is_cancelled() {
                Error::WorkerStopped
            } else {
                Error::Internal(format!("a worker store call failed: {e}"))
            }
        })?
    }
}

/// Renewals, rescues and limited kinds' claims run on the background runtime, and finished attempts queue for
/// the writer there; other claims run on the worker loop's runtime.
impl WorkerStore for PgStore {
    /// Claims up to `limit` due jobs (see [`claim_rows`]).
    ///
    /// A worker that serves no limited kind claims on the loop's own runtime and connection. Each of its claim
    /// statements (and the promotion of due scheduled jobs) commits by itself once its rows are sent. Going by the
    /// background thread cost two thread wake-ups between a job's wake-up and its start (`latency_cross` on PostgreSQL,
    /// five alternating rounds: p99 11.9 ms with them against 5.7 ms without). The trade: a claim whose rows outgrow
    /// the socket's buffers (megabytes of payloads: on loopback here 3.2 MB was committed unread, 6.4 MB was not) while
    /// a handler stalls this runtime stays uncommitted until the runtime reads on. It then holds only the rows it
    /// claims, which every other claim, rescue and completion skips or never touches, and vacuum's horizon. A limited
    /// kind's claim is a transaction holding the kind's advisory lock, which other claimers wait for, so a worker that
    /// serves one claims on the background runtime.
    fn claim(&self, limit: usize, now: i64, lease_until: i64) -> StoreFuture<'_, Vec<ClaimedJob>> {
        Box::pin(async move {
            let last = self.inner.promoted_at.load(Ordering::Relaxed);
            let promote = now.saturating_sub(last) >= PROMOTE_EVERY_MS || now < last;
            if promote {
                self.inner.promoted_at.store(now, Ordering::Relaxed);
            }
            let inner = &self.inner;
            let rows = if inner.config.limited.is_empty() {
                inner.claim_on(&inner.claim_pool, limit, now, lease_until, promote).await?
            } else {
                self.on_bg(
                    move |inner| async move { inner.claim_on(&inner.pool, limit, now, lease_until, promote).await },
                )
                .await?
            };
            {
                let mut claims = claim_counts(&inner.claims);
                for row in &rows {
                    if let (Ok(Some(claim)), Ok(id), Ok(run)) =
                        (row.try_get::<Option<i64>, _>(11), row.try_get::<String, _>(0), row.try_get::<i32, _>(7))
                    {
                        claims.claimed(claim, id, run);
                    }
                }
            }
            Ok(claimed_jobs(self, rows))
        })
    }

    /// Queues a finished attempt; it is written with whatever else finished meanwhile, in one statement.
    fn finish(&self, finished: Finished) -> Result<()> {
        unwritten_ids(&self.inner.unwritten).insert(finished.id.clone());
        self.inner.tx.send(Msg::Finish(finished)).map_err(|_| Error::WorkerStopped)
    }

    /// Finished attempts the writer has not written yet; their jobs are still claimed.
    fn unwritten(&self) -> Vec<String> {
        unwritten_ids(&self.inner.unwritten).iter().cloned().collect()
    }

    fn unwritten_count(&self) -> usize {
        unwritten_ids(&self.inner.unwritten).len()
    }

    fn extend(&self, ids: Vec<String>, until: i64) -> StoreFuture<'_, u64> {
        Box::pin(self.on_bg(move |inner| async move {
            let (pool, worker) = (&inner.pool, &inner.config.worker_id);
            retrying("renewing leases", || async {
                let sql = if ids.len() == 1 { EXTEND_ONE } else { EXTEND };
                let res = sqlx::query(sql).bind(until).bind(worker).bind(&ids).execute(pool).await?;
                Ok(res.rows_affected())
            })
            .await
        }))
    }

    fn rescue(&self, now: i64) -> StoreFuture<'_, Vec<Rescued>> {
        Box::pin(self.on_bg(move |inner| async move { rescue::rescue(&inner, now).await }))
    }

    /// Stops the listener and closes the worker's pools: the claim connection here, on the loop's runtime, and
    /// `outbox-worker <id>` and `outbox-writer <id>` on the background runtime, where their connections live. The
    /// worker has written its outcomes by then.
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            // Side by side: each waits for its server to end the session.
            let others = self.on_bg(|inner| async move {
                inner.stop_listening();
                tokio::join!(inner.pool.close(), inner.write_pool.close());
                Ok(())
            });
            let ((), closed) = tokio::join!(self.inner.claim_pool.close(), others);
            if let Err(e) = closed {
                tracing::debug!(worker = %self.inner.config.worker_id, error = %e, "closing the worker's connections failed");
            }
        })
    }

    /// Each connection took about 3 ms to open here (its server process, its first catalog reads), and the rescue
    /// before the first claim, the claim and the first write each opened theirs when they came to it: a third of a
    /// worker's time to its first claim (`process`, 20,000 jobs). The claim connection opens on the calling runtime
    /// (the loop's), the others on the background runtime, where they live; a call that comes first waits for
    /// the connection being opened rather than opening another.
    fn open(&self) {
        let inner = &self.inner;
        let worker = inner.config.worker_id.clone();
        let opened = |role: &'static str, pool: PgPool, worker: String| async move {
            if let Err(e) = pool.acquire().await {
                tracing::debug!(worker, role, error = %e, "opening a connection ahead of its first use failed");
            }
        };
        if inner.config.limited.is_empty() {
            tokio::spawn(opened("claim", inner.claim_pool.clone(), worker.clone()));
        }
        inner.bg.spawn(opened("worker", inner.pool.clone(), worker.clone()));
        inner.bg.spawn(opened("writer", inner.write_pool.clone(), worker));
    }

    fn listen(&self) {
        let inner = &self.inner;
        let mut listener = inner.listener.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if listener.is_none() {
            let (pool, schema, worker) =
                (inner.listen_pool.clone(), inner.config.schema.clone(), inner.config.worker_id.clone());
            *listener = Some(tokio::spawn(listen(pool, schema, worker, true)));
        }
    }

    fn flow_wake_at(&self) -> Option<i64> {
        self.inner.wake.get()
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let (reply, rx) = oneshot::channel();
            self.inner.tx.send(Msg::Flush(reply)).map_err(|_| Error::WorkerStopped)?;
            rx.await.map_err(|_| Error::WorkerStopped)
        })
    }
}

pub(super) async fn retrying<T, F, Fut>(what: &str, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if tries < CALL_TRIES && transient::sqlx(&e) => {
                tracing::debug!(error = %e, tries, "{what} failed on a dropped connection; retrying");
                tokio::time::sleep(Duration::from_millis(20 * u64::from(tries - 1))).await;
            }
            Err(e) => return Err(Error::db(what)(e)),
        }
    }
}
