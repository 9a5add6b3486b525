//! Remote workers' claims and outcomes on PostgreSQL: the in-process worker's statements, on the caller's pool.

use sea_orm::DatabaseConnection;

use super::super::conn::store_config;
use super::{applied, claim_rows, claimed_job, promote_due, queues_of, rescue::rescue_on, retrying, write_batch};
#[cfg(test)]
use crate::error::Error;
use crate::error::Result;
use crate::storage::{ClaimedJob, Finished, Keep, Outcome, WorkerStoreOpts, log_finished, log_rescued, rescue_due};

/// A remote worker's claim: the in-process worker's statements, on the caller's pool.
pub(in crate::storage::postgres) async fn remote_claim(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    let c = store_config(db, opts).await?;
    if rescue_due(now) {
        // A failed rescue is the next claim's to do; this claim goes on.
        match rescue_on(db.get_postgres_connection_pool(), &c.schema, now).await {
            Ok(rescued) => log_rescued(&rescued, &c.worker_id),
            Err(e) => tracing::warn!(worker = %c.worker_id, error = %e, "rescuing expired claims failed"),
        }
    }
    let pool = db.get_postgres_connection_pool();
    promote_due(pool, now).await?;
    let queues = queues_of(pool, &c).await?;
    let rows = claim_rows(pool, &c, &queues, limit, now, lease_until, None, None, &mut None).await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for row in &rows {
        match claimed_job(row) {
            Ok(job) => jobs.push(job),
            Err((u, attempt, run)) => {
                u.log(&c.worker_id);
                let error = u.error();
                let failed = Finished {
                    id: u.id,
                    kind: u.kind,
                    queue: String::new(),
                    attempt,
                    run,
                    outcome: Outcome::Failed { error },
                    keep: Keep::Row,
                    parent: false,
                };
                remote_finish(db, &c.worker_id, failed).await?;
            }
        }
    }
    Ok(jobs)
}

/// `batch` written by the worker's batched completion statement (see `remote::finish_batch`).
#[cfg(test)]
pub(in crate::storage::postgres) async fn finish_batch(
    db: &DatabaseConnection,
    owner: &str,
    batch: Vec<Finished>,
) -> Result<Vec<bool>> {
    let pool = db.get_postgres_connection_pool();
    let written = retrying("writing a batch of outcomes", || write_batch(pool, owner, &batch, true, &[])).await?;
    Ok(batch.iter().map(|f| applied(&written, f)).collect())
}

/// Lets go the first job of each of the sequences `keys`, as a worker's listener does when a transaction of one
/// snapshot enqueued onto them (see `wake.rs`); how many jobs it let go, and the sequences whose lock another
/// transaction held (the listener tries those again).
#[cfg(test)]
pub(crate) async fn release_sequences(db: &DatabaseConnection, keys: &[String]) -> Result<(u64, Vec<String>)> {
    let schema = super::super::conn::current_schema(db).await?;
    let mut conn = db.get_postgres_connection_pool().acquire().await.map_err(Error::db("connecting"))?;
    super::super::wake::release_sequences(&mut conn, &schema, keys).await.map_err(Error::db("letting go sequences"))
}

/// A remote worker's outcome, fenced like the in-process worker's.
pub(in crate::storage::postgres) async fn remote_finish(
    db: &DatabaseConnection,
    owner: &str,
    finished: Finished,
) -> Result<bool> {
    let pool = db.get_postgres_connection_pool();
    let batch = std::slice::from_ref(&finished);
    let written = retrying("writing a remote worker's outcome", || write_batch(pool, owner, batch, false, &[])).await?;
    let applied = applied(&written, &finished);
    log_finished(&finished, applied, owner);
    Ok(applied)
}
