//! The worker's background thread: a Tokio runtime of its own, where everything the worker does in the database
//! besides calling handlers runs (PostgreSQL completions and limited kinds' claims, retention, schedules, the
//! registry entry) and where handler timeouts are enforced ([`super::watchdog`]). On PostgreSQL the loop's other
//! claims stay on its own runtime: each is one statement that commits by itself once its rows are sent.
//!
//! Handlers run on the application's runtime, and a handler that blocks its thread (a synchronous call, a
//! paused VM) stalls every task of a current-thread runtime, and the tasks of a multi-thread runtime that
//! share its thread. A transaction driven by such a task would hold its locks (SQLite's write lock: every
//! writer of the database) for the whole stall. Here the worker's transactions are driven by a thread that
//! runs no application code, on connections of their own, so a stalled handler holds nobody back.

use std::future::Future;

use sea_orm::DatabaseConnection;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::storage;

/// The running thread; it stops when this is shut down or dropped.
pub(crate) struct Background {
    handle: Handle,
    /// The worker's own pool for its chores, on the options of the application's.
    db: DatabaseConnection,
    /// Dropping it ends the thread's runtime.
    stop: Option<oneshot::Sender<()>>,
    /// Resolves once the runtime is gone.
    stopped: Option<oneshot::Receiver<()>>,
}

impl Background {
    /// Starts the thread and opens (lazily, on the thread's runtime) the worker's own pool to `app`'s database.
    pub(crate) fn start(app: &DatabaseConnection, worker_id: &str) -> Result<Background> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let (stopped_tx, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("outbox-background".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(rt.handle().clone()));
                rt.block_on(async {
                    let _ = stop_rx.await;
                });
                // Whatever is still running (a listener, a lease renewal in flight) is dropped with the runtime.
                drop(rt);
                let _ = stopped_tx.send(());
            })
            .map_err(|e| Error::Internal(format!("cannot start the background thread of worker `{worker_id}`: {e}")))?;
        let handle = ready_rx
            .recv()
            .map_err(|_| Error::Internal(format!("the background thread of worker `{worker_id}` ended at start")))?
            .map_err(|e| {
                Error::Internal(format!("cannot start the background runtime of worker `{worker_id}`: {e}"))
            })?;
        // The pool spawns its housekeeping on the runtime it is created in: this thread's.
        let db = {
            let _entered = handle.enter();
            storage::own_pool(app, worker_id)?
        };
        Ok(Background { handle, db, stop: Some(stop), stopped: Some(stopped) })
    }

    /// The runtime, for the worker store's tasks.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The worker's own pool; use it only in futures run by [`Background::spawn`].
    pub(crate) fn db(&self) -> DatabaseConnection {
        self.db.clone()
    }

    /// Runs `fut` on the background thread.
    pub(crate) fn spawn<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(fut)
    }

    /// Closes the worker's own pool and stops the thread; resolves once its runtime is gone.
    pub(crate) async fn shutdown(mut self) {
        let db = self.db.clone();
        let _ = self.handle.spawn(async move { db.close().await }).await;
        drop(self.stop.take());
        if let Some(stopped) = self.stopped.take() {
            let _ = stopped.await;
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        drop(self.stop.take());
    }
}
