//! The worker registry: one row per live worker, in this process or remote, refreshed while it runs.

use sea_orm::{ConnectionTrait, Value};

use super::{Dialect, decode, execute_write};
use crate::error::{Error, Result};
use crate::record::WorkerRecord;

/// A worker's presence, as [`upsert`] writes it.
#[derive(Debug, Clone)]
pub(crate) struct WorkerRow {
    pub(crate) id: String,
    pub(crate) host: String,
    pub(crate) pid: Option<i64>,
    /// JSON array, or `None` for every queue.
    pub(crate) queues: Option<String>,
    /// JSON array.
    pub(crate) kinds: String,
    pub(crate) concurrency: Option<i64>,
    pub(crate) running: i64,
    pub(crate) remote: bool,
    pub(crate) now: i64,
    pub(crate) expires_at: i64,
}

/// Records a worker's presence (or refreshes it: `started_at` stays), and forgets workers whose presence
/// expired.
pub(crate) async fn upsert<C: ConnectionTrait + ?Sized>(conn: &C, w: &WorkerRow) -> Result<()> {
    let b = Dialect::of(conn)?;
    let ctx = || format!("recording worker `{}` in the registry", w.id);
    let sql = format!(
        "INSERT INTO outbox_workers (id, host, pid, queues, kinds, concurrency, running, remote, started_at, \
         last_seen_at, expires_at) VALUES ($1, $2, $3, {}, {}, $6, $7, $8, {now}, {now}, {}){}",
        b.json("$4"),
        b.json("$5"),
        b.ts("$10"),
        b.upsert(
            "id",
            &["host", "pid", "queues", "kinds", "concurrency", "running", "remote", "last_seen_at", "expires_at"]
        ),
        now = b.ts("$9"),
    );
    let values: Vec<Value> = vec![
        w.id.clone().into(),
        w.host.clone().into(),
        w.pid.into(),
        w.queues.clone().into(),
        w.kinds.clone().into(),
        w.concurrency.into(),
        w.running.into(),
        w.remote.into(),
        w.now.into(),
        w.expires_at.into(),
    ];
    execute_write(conn, b.stmt(sql, values), ctx).await?;
    let sql = format!("DELETE FROM outbox_workers WHERE expires_at < {}", b.ts("$1"));
    execute_write(conn, b.stmt(sql, vec![w.now.into()]), ctx).await?;
    Ok(())
}

/// Forgets a worker that stopped.
pub(crate) async fn remove<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<()> {
    let b = Dialect::of(conn)?;
    execute_write(conn, b.stmt("DELETE FROM outbox_workers WHERE id = $1", vec![id.into()]), || {
        format!("removing worker `{id}` from the registry")
    })
    .await?;
    Ok(())
}

/// The workers whose presence has not expired at `now`.
pub(crate) async fn list<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<WorkerRecord>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT id, host, pid, {}, {}, concurrency, running, remote, {}, {}, {} FROM outbox_workers \
         WHERE expires_at > {} ORDER BY started_at, id",
        b.text("queues"),
        b.text("kinds"),
        b.ms("started_at"),
        b.ms("last_seen_at"),
        b.ms("expires_at"),
        b.ts("$1"),
    );
    let rows = conn.query_all_raw(b.stmt(sql, vec![now.into()])).await.map_err(Error::db("listing workers"))?;
    decode::workers(&rows)
}
