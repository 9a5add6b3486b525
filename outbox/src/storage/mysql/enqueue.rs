//! MySQL's enqueue: one job or a batch as a `VALUES` list. A key an active job holds skips the row through
//! `ON DUPLICATE KEY UPDATE`, whose count (sqlx asks the server for found rows) takes in the skipped rows too, so
//! which went in is read back. A sequenced job takes its place in the insert trigger and goes in waiting, to be let
//! go by the store (`sequences.rs`).

use sea_orm::{ConnectionTrait, Value};

use crate::error::Result;
use crate::storage::Dialect;
use crate::storage::enqueue::{NewJob, insert_values};

/// The INSERT of `jobs`. A sequenced job takes its place in the insert trigger (`outbox_jobs_placed`).
pub(super) fn insert(jobs: &[&NewJob]) -> Result<(String, Vec<Value>)> {
    Ok(insert_values(Dialect::MySql, jobs, None))
}

/// A duplicate of the unique key of active keys leaves the holder as it is. Not `INSERT IGNORE`, which would also
/// turn a value too long or out of range into a truncated or default one.
pub(super) const SKIP_HELD_KEYS: &str = " ON DUPLICATE KEY UPDATE id = id";

/// The INSERT `sql` of one row, as it is: a row of the same key is error 1062, which rolls back the statement alone
/// (InnoDB), and is told as `false`. `ON DUPLICATE KEY UPDATE` could not tell: its count is 1 for a row found.
pub(super) async fn insert_if_absent<C: ConnectionTrait + ?Sized>(
    conn: &C,
    sql: String,
    values: Vec<Value>,
    context: String,
) -> Result<bool> {
    let started = std::time::Instant::now();
    match conn.execute_raw(Dialect::MySql.stmt(sql, values)).await {
        Ok(res) => Ok(res.rows_affected() == 1),
        Err(e) if matches!(e.sql_err(), Some(sea_orm::SqlErr::UniqueConstraintViolation(_))) => Ok(false),
        Err(e) => Err(super::conn::write_failed(context, e, started)),
    }
}

/// The unique index of keys is on the generated column `active_key`.
pub(super) fn holds_key(j: &str, key: &str) -> String {
    format!("{j}.active_key = {key}")
}
