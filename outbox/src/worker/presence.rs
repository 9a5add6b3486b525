//! The worker's entry in the registry (`outbox_workers`): written when it starts, refreshed on an interval
//! with how many jobs it is running, removed when it stops. A worker that dies stops refreshing it and
//! drops out of [`crate::ops::workers`] once it expires (three intervals after its last refresh).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;

use super::Worker;
use super::background::Background;
use crate::storage::workers::WorkerRow;
use crate::storage::{self, now_ms};
use crate::time::ms_after;

/// How many refreshes may be missed before the entry expires.
const MISSED: u32 = 3;

/// The running registry entry; [`Presence::stop`] removes it.
pub(super) struct Presence {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    id: String,
    /// Resolves once the entry's first write has ended (written or not).
    first_write: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Presence {
    /// Writes the entry and keeps it fresh from the background thread; `running` is read at each refresh.
    pub(super) fn start(worker: &Worker, background: &Background, running: Arc<AtomicUsize>) -> Presence {
        let interval = worker.config.presence_interval;
        let mut kinds: Vec<String> = worker.handlers.keys().cloned().collect();
        kinds.sort();
        let row = WorkerRow {
            id: worker.id.clone(),
            host: host(),
            pid: Some(i64::from(std::process::id())),
            queues: worker.queues.as_ref().and_then(|q| serde_json::to_string(q).ok()),
            kinds: serde_json::to_string(&kinds).unwrap_or_else(|_| "[]".into()),
            concurrency: i64::try_from(worker.config.concurrency).ok(),
            running: 0,
            remote: false,
            now: 0,
            expires_at: 0,
        };
        let stop = CancellationToken::new();
        let (written, first_write) = tokio::sync::oneshot::channel();
        let task = background.spawn(refresh(background.db(), row, interval, running, stop.clone(), written));
        Presence { stop, task, id: worker.id.clone(), first_write: Some(first_write) }
    }

    /// What resolves once the entry's first write has ended, written or not; `None` after the first call.
    pub(super) fn first_write(&mut self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        self.first_write.take()
    }

    /// Stops refreshing and removes the entry.
    pub(super) async fn stop(self, background: &Background) {
        self.stop.cancel();
        let _ = self.task.await;
        let (db, id) = (background.db(), self.id.clone());
        let removed = background.spawn(async move {
            let db = &db;
            let removed: crate::error::Result<()> = storage::workers::remove(db, &id).await;
            removed
        });
        if let Ok(Err(e)) = removed.await {
            tracing::warn!(worker = %self.id, error = %e, "removing the worker from the registry failed; it expires on its own");
        }
    }
}

async fn refresh(
    db: DatabaseConnection,
    mut row: WorkerRow,
    interval: Duration,
    running: Arc<AtomicUsize>,
    stop: CancellationToken,
    first_write: tokio::sync::oneshot::Sender<()>,
) {
    let mut first_write = Some(first_write);
    loop {
        row.now = now_ms();
        row.expires_at = ms_after(row.now, interval * MISSED);
        row.running = i64::try_from(running.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        let conn = &db;
        let written: crate::error::Result<()> = storage::workers::upsert(conn, &row).await;
        if let Err(e) = written {
            tracing::warn!(worker = %row.id, error = %e, "refreshing the worker's registry entry failed");
        }
        if let Some(done) = first_write.take() {
            let _ = done.send(());
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// This machine's name, as workers record it in the registry (`ClaimRequest::host`), if it has one.
pub fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
}

/// This machine's name, or `localhost`.
pub(super) fn host() -> String {
    host_name().unwrap_or_else(|| "localhost".into())
}
