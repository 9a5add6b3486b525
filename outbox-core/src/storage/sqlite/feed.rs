//! SQLite: the event feed, the worker registry, and remote workers' claims and outcomes.
//!
//! A remote worker's claim and outcome run the in-process worker's own statements (`worker.rs`) on a
//! connection opened for the call, so the limits, sequences and fences are the same ones; opening a
//! connection to a local file costs far less than the HTTP request that asks for it.

use rusqlite::TransactionBehavior;
use sea_orm::{ConnectionTrait, Value};

use super::stmt;
use super::worker::{self, StoreConfig};
use crate::error::{Error, Result};
use crate::record::{FeedEvent, WorkerRecord};
use crate::storage::{ClaimedJob, Finished, WorkerRow, rows};

/// A feed position on this backend: the id of the last event read, `<row>` or `<row>.<n>`.
fn position(after: &str) -> Result<(i64, Option<usize>)> {
    let (row, n) = crate::storage::split_position(after)?;
    let row = row.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
        Error::Invalid(format!(
            "invalid event id `{after}`: this database's event ids are whole numbers, or two joined by a `.` \
             (take one from an event)"
        ))
    })?;
    Ok((row, n))
}

pub(super) async fn feed<C: ConnectionTrait + ?Sized>(conn: &C, after: &str, limit: u64) -> Result<Vec<FeedEvent>> {
    let (row, n) = position(after)?;
    // From the row read last, which may have events left: one row more than the events wanted.
    let rows_wanted = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    let rows = conn
        .query_all_raw(stmt(
            "SELECT CAST(id AS TEXT), job_id, kind, queue, event, attempt, worker, error, at, jobs \
             FROM outbox_job_events WHERE id >= ? ORDER BY id LIMIT ?",
            vec![row.into(), rows_wanted.into()],
        ))
        .await
        .map_err(Error::db("reading the event feed"))?;
    rows::feed(&rows, (&row.to_string(), n), limit)
}

pub(super) async fn head<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<String> {
    let ctx = || Error::db("reading the end of the event feed");
    let row = conn
        .query_one_raw(stmt("SELECT COALESCE(MAX(id), 0) FROM outbox_job_events", Vec::new()))
        .await
        .map_err(ctx())?;
    let id = row.map(|r| r.try_get_by_index::<i64>(0)).transpose().map_err(ctx())?.unwrap_or(0);
    Ok(id.to_string())
}

pub(super) async fn upsert_worker<C: ConnectionTrait + ?Sized>(conn: &C, w: &WorkerRow) -> Result<()> {
    let ctx = || Error::db(format!("recording worker `{}` in the registry", w.id));
    let values: Vec<Value> = vec![
        w.id.clone().into(),
        w.host.clone().into(),
        w.pid.into(),
        w.queues.clone().into(),
        w.kinds.clone().into(),
        w.concurrency.into(),
        w.running.into(),
        i64::from(w.remote).into(),
        w.now.into(),
        w.now.into(),
        w.expires_at.into(),
    ];
    conn.execute_raw(stmt(
        "INSERT INTO outbox_workers (id, host, pid, queues, kinds, concurrency, running, remote, started_at, \
         last_seen_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues, \
         kinds = excluded.kinds, concurrency = excluded.concurrency, running = excluded.running, \
         remote = excluded.remote, last_seen_at = excluded.last_seen_at, expires_at = excluded.expires_at",
        values,
    ))
    .await
    .map_err(ctx())?;
    conn.execute_raw(stmt("DELETE FROM outbox_workers WHERE expires_at < ?", vec![w.now.into()]))
        .await
        .map_err(ctx())?;
    Ok(())
}

pub(super) async fn workers<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<WorkerRecord>> {
    let rows = conn
        .query_all_raw(stmt(
            "SELECT id, host, pid, queues, kinds, concurrency, running, remote, started_at, last_seen_at, \
             expires_at FROM outbox_workers WHERE expires_at > ? ORDER BY started_at, id",
            vec![now.into()],
        ))
        .await
        .map_err(Error::db("listing workers"))?;
    rows::workers(&rows)
}

/// Runs `f` in a write transaction on a connection of its own, off the async threads.
async fn on_own_connection<T: Send + 'static>(
    config: StoreConfig,
    what: &'static str,
    f: impl FnOnce(&rusqlite::Connection, &StoreConfig) -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(move || {
        let mut conn = worker::open_connection(&config)?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(Error::db(what))?;
        let out = f(&tx, &config)?;
        tx.commit().map_err(Error::db(what))?;
        Ok(out)
    })
    .await
    .map_err(|e| Error::Internal(format!("{what}: the database task failed: {e}")))?
}

pub(super) async fn remote_claim(
    config: StoreConfig,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    on_own_connection(config, "claiming jobs for a remote worker", move |tx, config| {
        let config = &StoreConfig { batched_events: worker::has_batched_events(tx)?, ..config.clone() };
        let mut unreadable = Vec::new();
        let jobs = worker::claim(tx, config, limit, now, lease_until, &mut unreadable)?;
        for u in &unreadable {
            u.log(&config.worker_id);
        }
        Ok(jobs)
    })
    .await
}

pub(super) async fn remote_finish(config: StoreConfig, finished: Finished) -> Result<bool> {
    on_own_connection(config, "writing a remote worker's outcome", move |tx, config| {
        let now = crate::storage::now_ms();
        let applied = worker::write_finished(tx, &config.worker_id, std::slice::from_ref(&finished), now, false)?;
        crate::storage::log_finished(&finished, applied.first().copied().unwrap_or(false), &config.worker_id);
        Ok(applied.first().copied().unwrap_or(false))
    })
    .await
}
