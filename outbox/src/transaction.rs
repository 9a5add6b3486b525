//! Write transactions safe on every backend: `begin`, and `transaction`, which commits, rolls back and wakes this
//! process's workers for the caller.

use sea_orm::{DatabaseConnection, DatabaseTransaction};

use crate::error::{Error, Result};
use crate::{storage, wake};

/// Opens a write transaction that is safe on every backend: where the database is an embedded file it takes
/// the write lock at once (`BEGIN IMMEDIATE`, waiting out other writers), so reading before writing cannot
/// fail with "database is locked" the way a plain `db.begin()` does there under concurrency. Commit it yourself; [`transaction`] does
/// that for you and also wakes this process's workers at once.
pub async fn begin(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    storage::begin_write(db).await
}

/// Runs `f` in a write transaction opened by [`begin`], commits when it returns `Ok`, rolls back otherwise,
/// and wakes this process's workers after a commit. `f` is an async closure called once; its error type is
/// yours, as long as it converts from [`Error`] (and, to use `?` on sea-orm calls, from `sea_orm::DbErr`,
/// as [`Error`] itself does).
///
/// ```
/// # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), outbox::Error> {
/// use outbox::sea_orm::ConnectionTrait;
/// let note = String::from("hello");
/// let rows = outbox::transaction(db, async |txn| {
///     let done = txn.execute_unprepared(&format!("SELECT '{note}'")).await?;
///     Ok::<_, outbox::Error>(done.rows_affected())
/// })
/// .await?;
/// # let _ = rows; Ok(()) }
/// ```
pub async fn transaction<T, E, F>(db: &DatabaseConnection, f: F) -> std::result::Result<T, E>
where
    F: AsyncFnOnce(&DatabaseTransaction) -> std::result::Result<T, E>,
    E: From<Error>,
{
    let txn = begin(db).await?;
    let value = match f(&txn).await {
        Ok(value) => value,
        Err(e) => {
            if let Err(rb) = txn.rollback().await {
                tracing::warn!(error = %rb, "rolling back a failed transaction");
            }
            return Err(e);
        }
    };
    txn.commit().await.map_err(|e| E::from(Error::db("committing a transaction")(e)))?;
    wake::wake();
    Ok(value)
}
