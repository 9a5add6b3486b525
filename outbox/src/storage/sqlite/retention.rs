//! SQLite's retention: its index of finished jobs finds them by status and age.

use sea_orm::ConnectionTrait;

use crate::error::Result;
use crate::storage::dialect::Params;
use crate::storage::retention::{PruneRules, Pruned};
use crate::storage::{Dialect, execute_write, limit_value};

/// Deletes at most `batch` due finished jobs (with their history).
pub(super) async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, batch: u64) -> Result<Pruned> {
    let b = Dialect::Sqlite;
    let mut p = Params::default();
    let condition = rules.condition(b, &mut p);
    let sql = format!(
        "DELETE FROM outbox_jobs WHERE id IN (SELECT j.id FROM outbox_jobs j WHERE {condition} LIMIT {})",
        p.push(limit_value(batch))
    );
    let res = execute_write(conn, b.stmt(sql, p.0), || "pruning finished jobs".into()).await?;
    let jobs = res.rows_affected();
    Ok(Pruned { jobs, more: jobs >= batch })
}

/// Nothing lists finished jobs beside them.
pub(super) async fn after_purge<C: ConnectionTrait + ?Sized>(_conn: &C, _before: i64) -> Result<()> {
    Ok(())
}

/// The claimed jobs' index finds stuck ones by itself.
pub(super) fn stuck_through(_d: Dialect) -> String {
    String::new()
}
