//! MySQL's enqueue: one job or a batch as a `VALUES` list. A key an active job holds skips the row through
//! `ON DUPLICATE KEY UPDATE`, whose count (sqlx asks the server for found rows) takes in the skipped rows too, so
//! which went in is read back. Sequenced jobs are refused until the engine keeps their order.

use sea_orm::Value;

use super::UNDER_CONSTRUCTION;
use crate::error::{Error, Result};
use crate::storage::Dialect;
use crate::storage::enqueue::{NewJob, insert_values};

/// The INSERT of `jobs`; a sequenced job is refused before any SQL.
pub(super) fn insert(jobs: &[&NewJob]) -> Result<(String, Vec<Value>)> {
    if let Some(job) = jobs.iter().find(|j| j.sequence_key.is_some()) {
        let (id, kind) = (&job.id, &job.kind);
        return Err(Error::Unsupported(format!(
            "job `{id}` of kind `{kind}` names a sequence, and sequences are not available on MariaDB or MySQL yet: \
             {UNDER_CONSTRUCTION}"
        )));
    }
    Ok(insert_values(Dialect::MySql, jobs, None))
}

/// A duplicate of the unique key of active keys leaves the holder as it is. Not `INSERT IGNORE`, which would also
/// turn a value too long or out of range into a truncated or default one.
pub(super) const SKIP_HELD_KEYS: &str = " ON DUPLICATE KEY UPDATE id = id";

/// The unique index of keys is on the generated column `active_key`.
pub(super) fn holds_key(j: &str, key: &str) -> String {
    format!("{j}.active_key = {key}")
}
