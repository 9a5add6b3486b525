//! Claims and outcomes of workers outside the process (over HTTP): what an in-process worker of the same
//! kinds and queues would claim, with the same limits, sequences and fences, through the backend's own claim
//! and completion statements.

use sea_orm::DatabaseConnection;

use super::engine::Engine;
use super::{ClaimedJob, Dialect, Finished, WorkerStoreOpts, execute_write, on_engine, query_write};
use crate::error::{Error, Result};

/// Claims up to `limit` due jobs for the remote worker `opts` describes, leased until `lease_until`.
pub(crate) async fn claim(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    on_engine!(Dialect::of(db)?, E => E::remote_claim(db, opts, limit, now, lease_until).await)
}

/// Writes one outcome of a remote worker, fenced like the in-process worker's; false when the fence held (the
/// claim is not this worker's attempt any more).
pub(crate) async fn finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
    on_engine!(Dialect::of(db)?, E => E::remote_finish(db, owner, finished).await)
}

/// Writes `batch` as a worker's completion writer does, in one statement of its batched form, fenced by `owner`
/// and each outcome's run; which it wrote, in order. For the conformance suite.
#[cfg(test)]
pub(crate) async fn finish_batch(db: &DatabaseConnection, owner: &str, batch: Vec<Finished>) -> Result<Vec<bool>> {
    on_engine!(Dialect::of(db)?, E => E::finish_batch(db, owner, batch).await)
}

/// Extends one claim's lease to `until`, never shortening it, fenced the same way; the lease it holds now (ms),
/// or `None` when the fence held. The row is found by id, as the worker's renewals find theirs
/// ([`Dialect::unindexed`], see `EXTEND` in `postgres/store/mod.rs`). The lease is read back by a second
/// statement in the same transaction: MySQL has no `UPDATE … RETURNING`.
pub(crate) async fn extend(
    db: &DatabaseConnection,
    owner: &str,
    id: &str,
    run: i32,
    until: i64,
) -> Result<Option<i64>> {
    let b = Dialect::of(db)?;
    let status = b.unindexed("status");
    let fence =
        |n: usize| format!("WHERE id = ${n} AND {status} = 'claimed' AND locked_by = ${} AND runs = ${}", n + 1, n + 2);
    let sql = format!(
        "UPDATE outbox_jobs SET lease_expires_at = {}(COALESCE(lease_expires_at, {}), {}) {}",
        b.greatest(),
        b.ts("0"),
        b.ts("$1"),
        fence(2),
    );
    let ctx = || format!("renewing the lease of job `{id}`");
    let txn = super::begin_write(db).await?;
    execute_write(&txn, b.stmt(sql, vec![until.into(), id.into(), owner.into(), run.into()]), ctx).await?;
    let sql = format!("SELECT {} FROM outbox_jobs {}", b.ms("lease_expires_at"), fence(1));
    let rows = query_write(&txn, b.stmt(sql, vec![id.into(), owner.into(), run.into()]), ctx).await?;
    txn.commit().await.map_err(Error::db(ctx()))?;
    rows.first()
        .map(|r| r.try_get_by_index::<i64>(0))
        .transpose()
        .map_err(Error::db(format!("reading the renewed lease of job `{id}`")))
}
