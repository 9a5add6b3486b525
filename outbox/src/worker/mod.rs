//! The worker: claims jobs in batches sized to its free slots, runs their handlers, renews their leases,
//! records outcomes fenced by the claim, rescues expired claims, and shuts down gracefully.

mod background;
mod builder;
mod handler;
pub(crate) mod presence;
mod retry;
mod run;
mod task;
mod watchdog;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;

pub use builder::WorkerBuilder;
pub use handler::{IntoOutput, JobContext, JobError};
pub use retry::RetryPolicy;
pub use run::shutdown_signal;
/// How a worker words a failed attempt and a handler dropped at its timeout, for `testing` to say the same.
#[cfg(feature = "testing")]
pub(crate) use {
    task::{in_span, panic_message},
    watchdog::{failure as failed_attempt, timeout_message},
};

use crate::error::{Error, Result};
use crate::kind::Kind;
use crate::periodic;
use crate::retention::Retention;
use crate::storage::Store;
use background::Background;
use handler::ErasedHandler;
use watchdog::Watchdog;

pub(crate) struct Registered {
    pub(crate) handler: ErasedHandler,
    pub(crate) retry: RetryPolicy,
    /// How long its handler may run: the builder's `kind_timeout`, else the kind's own, else the worker's.
    pub(crate) timeout: Option<Duration>,
    /// The kind, recorded in the kinds table when the worker is built.
    pub(crate) kind: Arc<Kind>,
}

/// Settings of a worker; see [`WorkerBuilder`] for each one's meaning and default.
#[derive(Debug, Clone)]
pub(crate) struct WorkerConfig {
    pub(crate) concurrency: usize,
    pub(crate) poll_interval: Duration,
    pub(crate) lease: Duration,
    pub(crate) rescue_interval: Duration,
    pub(crate) shutdown_grace: Duration,
    pub(crate) cancel_grace: Duration,
    pub(crate) max_db_backoff: Duration,
    pub(crate) presence_interval: Duration,
    pub(crate) timeout: Option<Duration>,
}

/// A start-up step ([`WorkerBuilder::on_start`]): given the caller's pool and the worker's id.
type StartHook = Box<dyn FnOnce(DatabaseConnection, String) -> Pin<Box<dyn Future<Output = Result<()>> + Send>> + Send>;

/// A configured worker; start it with [`Worker::start`], [`Worker::run_until`] or [`Worker::drain`].
pub struct Worker {
    pub(crate) store: Store,
    /// The caller's pool, for the start-up steps.
    pub(crate) db: DatabaseConnection,
    /// The queues it serves; `None` for all.
    pub(crate) queues: Option<Vec<String>>,
    pub(crate) handlers: Arc<HashMap<String, Registered>>,
    pub(crate) config: WorkerConfig,
    pub(crate) id: String,
    /// Kinds with a fleet-wide limit: one ending frees a slot the next claim may take at once.
    pub(crate) limited: std::collections::HashSet<String>,
    /// Kinds whose rate applies per key: a handler rate limited upstream holds its job's key, not the kind.
    pub(crate) rate_per_key: std::collections::HashSet<String>,
    pub(crate) schedules: Arc<Vec<periodic::Ready>>,
    pub(crate) retention: Retention,
    pub(crate) on_start: Vec<(String, StartHook)>,
    /// The thread the worker's own database work runs on; taken when the worker runs.
    pub(crate) background: Option<Background>,
    pub(crate) watchdog: Watchdog,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("id", &self.id).field("config", &self.config).finish_non_exhaustive()
    }
}

impl Worker {
    /// This worker's identity, recorded as `locked_by` on the jobs it claims.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Claims up to `limit` jobs once, as the worker loop does, leased for an hour, and leaves them claimed: what the
    /// benchmark times of a claim. Not part of the public API.
    #[doc(hidden)]
    pub async fn claim_once_for_benchmark(&self, limit: usize) -> Result<usize> {
        let now = crate::storage::now_ms();
        Ok(self.store.claim(limit, now, now.saturating_add(3_600_000)).await?.len())
    }

    /// Runs in the background until [`WorkerHandle::shutdown`].
    pub fn start(self) -> WorkerHandle {
        let shutdown = CancellationToken::new();
        let join = tokio::spawn(run::run(self, shutdown.clone(), false));
        WorkerHandle { shutdown, join }
    }

    /// Runs until `signal` resolves, then shuts down gracefully.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<()> {
        let handle = self.start();
        signal.await;
        handle.shutdown().await
    }

    /// Runs until no job it can claim is due and none is in flight, then stops. For tests, scripts and
    /// batch runs; its start-up steps run, but not its schedules nor retention (which never run out of work).
    pub async fn drain(self) -> Result<()> {
        run::run(self, CancellationToken::new(), true).await
    }
}

/// A running worker.
#[derive(Debug)]
pub struct WorkerHandle {
    shutdown: CancellationToken,
    join: tokio::task::JoinHandle<Result<()>>,
}

impl WorkerHandle {
    /// Stops claiming, lets in-flight jobs finish within the grace period, then cancels the rest and
    /// releases their jobs without using their attempts. Resolves when no job of this worker is claimed.
    ///
    /// A handler that blocks its thread past its timeout does not hold it up once the watchdog has given its
    /// claim back (or, for a job of a sequence or of a limited kind, left it to expire): its thread stays busy
    /// until the handler returns, and what it returns is discarded. One without a timeout is waited for, its
    /// lease renewed meanwhile. On a current-thread runtime a blocked handler stalls this too, as it stalls
    /// every task of that runtime; and dropping a multi-thread runtime waits for its threads, the blocked one
    /// included (`Runtime::shutdown_timeout` bounds that wait).
    pub async fn shutdown(self) -> Result<()> {
        self.shutdown.cancel();
        self.join.await.map_err(|e| Error::Internal(format!("the worker task failed: {e}")))?
    }

    /// Whether the worker has stopped on its own (it only does on a fatal error).
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }
}
