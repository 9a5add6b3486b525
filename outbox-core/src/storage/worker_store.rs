//! The worker's own connection to the database, whichever backend holds it.

use super::postgres::PgStore;
use super::sqlite::SqliteStore;
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

/// The worker's claim/complete path: claims, completions, renewals, rescues.
#[derive(Clone)]
pub(crate) enum WorkerStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl WorkerStore {
    pub(crate) async fn claim(&self, limit: usize, now: i64, lease_until: i64) -> Result<Vec<ClaimedJob>> {
        match self {
            WorkerStore::Sqlite(s) => s.claim(limit, now, lease_until).await,
            WorkerStore::Postgres(s) => s.claim(limit, now, lease_until).await,
        }
    }

    /// Queues a finished attempt; it is written with whatever else finished meanwhile.
    pub(crate) fn finish(&self, finished: Finished) -> Result<()> {
        match self {
            WorkerStore::Sqlite(s) => s.finish(finished),
            WorkerStore::Postgres(s) => s.finish(finished),
        }
    }

    /// Jobs whose attempt has finished but whose outcome is not written yet: they still hold their claim and
    /// keep their leases renewed, and past one batch of them they count against the worker's concurrency.
    /// Always empty where the store writes queued outcomes before it claims.
    pub(crate) fn unwritten(&self) -> Vec<String> {
        match self {
            WorkerStore::Sqlite(_) => Vec::new(),
            WorkerStore::Postgres(s) => s.unwritten(),
        }
    }

    /// How many of [`WorkerStore::unwritten`] there are.
    pub(crate) fn unwritten_count(&self) -> usize {
        match self {
            WorkerStore::Sqlite(_) => 0,
            WorkerStore::Postgres(s) => s.unwritten_count(),
        }
    }

    pub(crate) async fn extend(&self, ids: Vec<String>, until: i64) -> Result<u64> {
        match self {
            WorkerStore::Sqlite(s) => s.extend(ids, until).await,
            WorkerStore::Postgres(s) => s.extend(ids, until).await,
        }
    }

    pub(crate) async fn rescue(&self, now: i64) -> Result<Vec<Rescued>> {
        match self {
            WorkerStore::Sqlite(s) => s.rescue(now).await,
            WorkerStore::Postgres(s) => s.rescue(now).await,
        }
    }

    /// Closes the store's connections once its outcomes are flushed; the worker is stopping. SQLite's
    /// connection closes with its thread, once the last handle is dropped.
    pub(crate) async fn close(&self) {
        match self {
            WorkerStore::Sqlite(_) => {}
            WorkerStore::Postgres(s) => s.close().await,
        }
    }

    /// Resolves once every finish queued before it has been written (or given up on).
    pub(crate) async fn flush(&self) -> Result<()> {
        match self {
            WorkerStore::Sqlite(s) => s.flush().await,
            WorkerStore::Postgres(s) => s.flush().await,
        }
    }
}
