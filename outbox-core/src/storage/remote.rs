//! Claims and outcomes of workers outside the process (over HTTP): what an in-process worker of the same
//! kinds and queues would claim, with the same limits, sequences and fences, through the backend's own claim
//! and completion statements.

use sea_orm::DatabaseConnection;

use super::{Backend, ClaimedJob, Finished, WorkerStoreOpts, execute_write};
use crate::error::Result;

/// Claims up to `limit` due jobs for the remote worker `opts` describes, leased until `lease_until`.
pub(crate) async fn claim(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    match Backend::of(db)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => super::sqlite::remote_claim(db, opts, limit, now, lease_until).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => super::postgres::remote_claim(db, opts, limit, now, lease_until).await,
    }
}

/// Writes one outcome of a remote worker, fenced like the in-process worker's; false when the fence held (the
/// claim is not this worker's attempt any more).
pub(crate) async fn finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
    match Backend::of(db)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => super::sqlite::remote_finish(db, owner, finished).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => super::postgres::remote_finish(db, owner, finished).await,
    }
}

/// Extends one claim's lease to `until` (never shortening it), fenced the same way; false when the fence held.
pub(crate) async fn extend(db: &DatabaseConnection, owner: &str, id: &str, attempt: i32, until: i64) -> Result<bool> {
    let b = Backend::of(db)?;
    let sql = format!(
        "UPDATE outbox_jobs SET lease_expires_at = {}(COALESCE(lease_expires_at, {}), {}) \
         WHERE id = $2 AND status = 'claimed' AND locked_by = $3 AND attempts = $4",
        b.greatest(),
        b.ts("0"),
        b.ts("$1")
    );
    let values = vec![until.into(), id.into(), owner.into(), attempt.into()];
    let res = execute_write(db, b.stmt(sql, values), || format!("renewing the lease of job `{id}`")).await?;
    Ok(res.rows_affected() == 1)
}
