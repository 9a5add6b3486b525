//! The worker's own connection to the database, whichever backend holds it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::{ClaimedJob, Finished, Rescued};
use crate::error::Result;

/// Who the worker is and what it may claim.
#[derive(Debug, Clone)]
pub(crate) struct WorkerStoreOpts {
    pub(crate) worker_id: String,
    /// Kinds this worker has handlers for, sorted.
    pub(crate) kinds: Vec<String>,
    /// Of those, the kinds with a fleet-wide limit on running jobs, and the limit.
    pub(crate) limits: Vec<(String, u32)>,
    /// Queues it serves; `None` for all.
    pub(crate) queues: Option<Vec<String>>,
}

impl WorkerStoreOpts {
    /// The kinds without a fleet-wide limit.
    pub(crate) fn unlimited_kinds(&self) -> Vec<String> {
        self.kinds.iter().filter(|k| !self.limits.iter().any(|(l, _)| l == *k)).cloned().collect()
    }
}

/// The slots of a claim a kind with a fleet-wide limit may take: all that are left, or half of them when the
/// worker serves kinds without a limit too, so that a limit above the worker's concurrency cannot starve
/// them (the limited kinds are claimed first).
pub(crate) fn limited_share(left: usize, others: bool) -> usize {
    if others { left.div_ceil(2) } else { left }
}

/// What a [`WorkerStore`] call returns.
pub(crate) type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// The worker's claim/complete path, on connections of the worker's own: claims, completions, renewals,
/// rescues. Each backend implements it (`sqlite::worker::SqliteStore`, `postgres::worker::PgStore`); the
/// worker holds it as a [`Store`].
pub(crate) trait WorkerStore: Send + Sync {
    /// Claims up to `limit` due jobs, leased until `lease_until`.
    fn claim(&self, limit: usize, now: i64, lease_until: i64) -> StoreFuture<'_, Vec<ClaimedJob>>;

    /// Queues a finished attempt; it is written with whatever else finished meanwhile.
    fn finish(&self, finished: Finished) -> Result<()>;

    /// Jobs whose attempt has finished but whose outcome is not written yet: they still hold their claim and
    /// keep their leases renewed, and past one batch of them they count against the worker's concurrency.
    /// Empty where the store writes queued outcomes before it claims.
    fn unwritten(&self) -> Vec<String> {
        Vec::new()
    }

    /// How many of [`WorkerStore::unwritten`] there are.
    fn unwritten_count(&self) -> usize {
        0
    }

    /// Renews the leases of the worker's claimed jobs among `ids` until `until`; how many it renewed.
    fn extend(&self, ids: Vec<String>, until: i64) -> StoreFuture<'_, u64>;

    /// Takes back claims whose lease expired (anyone's), and lets go sequences that moved on.
    fn rescue(&self, now: i64) -> StoreFuture<'_, Vec<Rescued>>;

    /// Resolves once every finish queued before it has been written (or given up on).
    fn flush(&self) -> StoreFuture<'_, ()>;

    /// Closes the store's connections once its outcomes are flushed; the worker is stopping. Where a
    /// connection closes with its last handle, nothing to do.
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

/// A worker's store, shared by its loop, its handlers' contexts and its watchdog.
pub(crate) type Store = Arc<dyn WorkerStore>;
