//! Remote workers' claims and outcomes on SQLite: the in-process worker's own statements, each call in a write
//! transaction on a connection of its own.

use rusqlite::TransactionBehavior;
use sea_orm::DatabaseConnection;

use super::super::conn::store_config;
use super::{StoreConfig, claim, open_connection, rescue, write_finished};
use crate::error::{Error, Result};
use crate::storage::{ClaimedJob, Finished, WorkerStoreOpts, log_finished, log_rescued, now_ms, rescue_due};

/// Runs `f` in a write transaction on a connection of its own, off the async threads: a remote worker's claim
/// and outcome run the in-process worker's own statements, so the limits, sequences and fences are the same
/// ones; opening a connection to a local file costs far less than the HTTP request that asks for it.
async fn on_own_connection<T: Send + 'static>(
    config: StoreConfig,
    what: &'static str,
    f: impl FnOnce(&rusqlite::Connection, &StoreConfig) -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(move || {
        let mut conn = open_connection(&config)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(Error::db(what))?;
        let out = f(&tx, &config)?;
        tx.commit().map_err(Error::db(what))?;
        Ok(out)
    })
    .await
    .map_err(|e| Error::Internal(format!("{what}: the database task failed: {e}")))?
}

pub(in crate::storage::sqlite) async fn remote_claim(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    let due = rescue_due(now);
    let worker = opts.worker_id.clone();
    let (rescued, jobs) =
        on_own_connection(store_config(db, opts).await?, "claiming jobs for a remote worker", move |tx, config| {
            let rescued = if due { rescue(tx, now)? } else { Vec::new() };
            let mut unreadable = Vec::new();
            let jobs = claim(tx, config, limit, now, lease_until, &mut unreadable, &mut None)?;
            for u in &unreadable {
                u.log(&config.worker_id);
            }
            Ok((rescued, jobs))
        })
        .await?;
    // Logged once committed.
    log_rescued(&rescued, &worker);
    Ok(jobs)
}

/// `batch` written by the worker's batched completion statements (see `remote::finish_batch`).
#[cfg(test)]
pub(in crate::storage::sqlite) async fn finish_batch(
    db: &DatabaseConnection,
    owner: &str,
    batch: Vec<Finished>,
) -> Result<Vec<bool>> {
    let opts = WorkerStoreOpts { worker_id: owner.to_owned(), kinds: Vec::new(), flows: Vec::new(), queues: None };
    on_own_connection(store_config(db, opts).await?, "writing a batch of outcomes", move |tx, config| {
        write_finished(tx, &config.worker_id, &batch, now_ms())
    })
    .await
}

pub(in crate::storage::sqlite) async fn remote_finish(
    db: &DatabaseConnection,
    owner: &str,
    finished: Finished,
) -> Result<bool> {
    let opts = WorkerStoreOpts { worker_id: owner.to_owned(), kinds: Vec::new(), flows: Vec::new(), queues: None };
    on_own_connection(store_config(db, opts).await?, "writing a remote worker's outcome", move |tx, config| {
        let now = now_ms();
        let applied = write_finished(tx, &config.worker_id, std::slice::from_ref(&finished), now)?;
        let applied = applied.first().copied().unwrap_or(false);
        log_finished(&finished, applied, &config.worker_id);
        Ok(applied)
    })
    .await
}
