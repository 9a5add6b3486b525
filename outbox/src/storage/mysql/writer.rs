//! The worker's store on MySQL: claims, renewals and rescues on a small pool of the worker's own, and a writer task
//! that writes queued outcomes as they come (`store.rs` holds the statements); remote workers run the same
//! statements on the caller's pool.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use sea_orm::DatabaseConnection;
use tokio::sync::{Notify, watch};

use super::store::{Config, claim, extend, rescue, write_all};
use crate::error::Result;
use crate::storage::worker_store::{FlowWake, StoreFuture};
use crate::storage::{
    ClaimedJob, Finished, Rescued, WorkerStore, WorkerStoreOpts, log_finished, log_rescued, rescue_due,
};

/// The worker's store: its own pool, and a writer task that writes queued outcomes as they come.
pub(super) struct MyStore {
    db: DatabaseConnection,
    config: Config,
    queued: Arc<Mutex<Vec<Finished>>>,
    /// The jobs of outcomes queued and not written yet: still claimed, their leases renewed by the worker, and a
    /// drain does not end while there are any (their sequences' next jobs may follow).
    unwritten: Arc<Mutex<std::collections::HashSet<String>>>,
    /// When this store's rescue last swept for sequences left waiting (ms).
    swept_at: AtomicI64,
    /// The poll of the wake-up ring, once the worker loop started it ([`WorkerStore::listen`]).
    watch: Mutex<Option<crate::wake::Watch>>,
    notify: Arc<Notify>,
    /// When a job the last claim left behind for a rate or a hold may be taken.
    wake: FlowWake,
    /// Outcomes queued so far, and outcomes written (or given up on) so far.
    counts: Arc<(std::sync::atomic::AtomicU64, watch::Sender<u64>)>,
}

impl MyStore {
    pub(super) fn open(db: DatabaseConnection, config: Config, bg: &tokio::runtime::Handle) -> MyStore {
        let store = MyStore {
            db,
            config,
            queued: Arc::default(),
            unwritten: Arc::default(),
            swept_at: AtomicI64::new(0),
            watch: Mutex::default(),
            notify: Arc::default(),
            wake: FlowWake::default(),
            counts: Arc::new((std::sync::atomic::AtomicU64::new(0), watch::channel(0).0)),
        };
        // The writer's own connection, opened on the runtime it runs on: a connection the claims opened belongs to
        // the worker loop's runtime, and a handler blocking that runtime's thread would stall the writer on it (an
        // attempt given back from outside was never written: `time.rs`, on MariaDB in CI).
        let (db, owner, queued, unwritten, notify, counts) = (
            super::conn::own_pool(&store.db, 1),
            store.config.worker_id().to_owned(),
            store.queued.clone(),
            store.unwritten.clone(),
            store.notify.clone(),
            store.counts.clone(),
        );
        bg.spawn(async move {
            loop {
                notify.notified().await;
                let batch: Vec<Finished> = std::mem::take(&mut *queued.lock().unwrap_or_else(|p| p.into_inner()));
                if batch.is_empty() {
                    continue;
                }
                let n = batch.len() as u64;
                write_with_retries(&db, &owner, &batch).await;
                let mut left = unwritten.lock().unwrap_or_else(|p| p.into_inner());
                for f in &batch {
                    left.remove(&f.id);
                }
                drop(left);
                counts.1.send_modify(|written| *written += n);
            }
        });
        store
    }
}

/// How long the writer retries outcomes a passing error refused before it leaves them to their leases.
const GIVE_UP: std::time::Duration = std::time::Duration::from_secs(60);

/// Writes `batch`, retrying what a passing error refused (a deadlock, a lock wait, a restart) for up to a minute;
/// a batch the database refuses for good is written one outcome at a time, so one it cannot store (a trigger's
/// refusal, an output it cannot take) fails that job alone, with the reason, and the rest are written. What is
/// given up on is left to the leases: the rescuers put the jobs back.
async fn write_with_retries(db: &DatabaseConnection, owner: &str, batch: &[Finished]) {
    let started = tokio::time::Instant::now();
    let mut retry =
        crate::backoff::Backoff::new(std::time::Duration::from_millis(10), std::time::Duration::from_secs(5));
    loop {
        match write_batch(db, owner, batch).await {
            Ok(()) => return,
            Err(e) if e.is_transient() && started.elapsed() < GIVE_UP => {
                tracing::warn!(worker = %owner, error = %e, jobs = batch.len(), "writing outcomes failed; retrying");
                retry.sleep().await;
            }
            Err(e) if e.is_transient() => {
                tracing::error!(
                    worker = %owner, error = %e, jobs = batch.len(),
                    "giving up writing outcomes; their leases will expire and the jobs will run again"
                );
                return;
            }
            Err(e) if batch.len() > 1 => {
                tracing::warn!(worker = %owner, error = %e, jobs = batch.len(), "a batch of outcomes was refused; writing them one by one");
                for f in batch {
                    Box::pin(write_with_retries(db, owner, std::slice::from_ref(f))).await;
                }
                return;
            }
            Err(e) => match batch.first().and_then(|f| f.refused(&e)) {
                Some(failed) => return Box::pin(write_with_retries(db, owner, &[failed])).await,
                None => {
                    tracing::error!(
                        worker = %owner, error = %e, job_id = ?batch.first().map(|f| &f.id),
                        "giving up writing an outcome; its lease will expire and the job will run again"
                    );
                    return;
                }
            },
        }
    }
}

/// [`write_all`], each outcome logged, and the workers woken.
async fn write_batch(db: &DatabaseConnection, owner: &str, batch: &[Finished]) -> Result<()> {
    let applied = write_all(db, owner, batch).await?;
    for (f, applied) in batch.iter().zip(applied) {
        log_finished(f, applied, owner);
    }
    crate::wake::wake();
    Ok(())
}

impl WorkerStore for MyStore {
    fn claim(&self, limit: usize, now: i64, lease_until: i64) -> StoreFuture<'_, Vec<ClaimedJob>> {
        Box::pin(async move {
            let (claimed, wake) = claim(&self.db, &self.config, limit, now, lease_until).await?;
            self.wake.set(wake);
            Ok(claimed)
        })
    }

    fn flow_wake_at(&self) -> Option<i64> {
        self.wake.get()
    }

    fn finish(&self, finished: Finished) -> Result<()> {
        self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).insert(finished.id.clone());
        self.queued.lock().unwrap_or_else(|p| p.into_inner()).push(finished);
        self.counts.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_one();
        Ok(())
    }

    fn listen(&self) {
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        if watch.is_none() {
            *watch = Some(super::wake::watch(&self.db));
        }
    }

    fn unwritten(&self) -> Vec<String> {
        self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    fn unwritten_count(&self) -> usize {
        self.unwritten.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn extend(&self, ids: Vec<String>, until: i64) -> StoreFuture<'_, u64> {
        Box::pin(extend(&self.db, self.config.worker_id(), ids, until))
    }

    fn rescue(&self, now: i64) -> StoreFuture<'_, Vec<Rescued>> {
        Box::pin(rescue(&self.db, now, sweep_due(&self.swept_at, now)))
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let target = self.counts.0.load(std::sync::atomic::Ordering::SeqCst);
            self.notify.notify_one();
            let mut written = self.counts.1.subscribe();
            let _ = written.wait_for(|n| *n >= target).await;
            Ok(())
        })
    }
}

/// A remote worker's claim: the in-process worker's statements, on the caller's pool, with a rescue at most once a
/// second.
pub(super) async fn remote_claim(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    let c = Config::of(opts)?;
    if rescue_due(now) {
        // A failed rescue is the next claim's to do; this claim goes on.
        static SWEPT_AT: AtomicI64 = AtomicI64::new(0);
        match rescue(db, now, sweep_due(&SWEPT_AT, now)).await {
            Ok(rescued) => log_rescued(&rescued, c.worker_id()),
            Err(e) => tracing::warn!(worker = %c.worker_id(), error = %e, "rescuing expired claims failed"),
        }
    }
    Ok(claim(db, &c, limit, now, lease_until).await?.0)
}

/// A remote worker's outcome, fenced like the in-process worker's, in a transaction of its own.
pub(super) async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
    let applied = write_all(db, owner, std::slice::from_ref(&finished)).await?.first().copied().unwrap_or(false);
    log_finished(&finished, applied, owner);
    if applied {
        crate::wake::wake();
    }
    Ok(applied)
}

/// `batch` written one outcome after another in one transaction; which applied.
#[cfg(test)]
pub(super) async fn finish_batch(db: &DatabaseConnection, owner: &str, batch: Vec<Finished>) -> Result<Vec<bool>> {
    write_all(db, owner, &batch).await
}

/// How often a rescue sweeps for sequences left waiting with no note (a scan of the waiting jobs).
const SWEEP_EVERY_MS: i64 = 60_000;

/// Whether a sweep is due by `now`, the last one having run at `at` (taken for this one when due).
fn sweep_due(at: &AtomicI64, now: i64) -> bool {
    let last = at.load(Ordering::Relaxed);
    now - last >= SWEEP_EVERY_MS && at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}
