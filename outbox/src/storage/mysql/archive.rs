//! MySQL's archive: `outbox_jobs_done`, partitioned by range of `updated_at` (an archived job's completion time).
//! Its reader is here; its upkeep (spans split off the last partition ahead of time, old ones dropped) comes with
//! retention.

use sea_orm::ConnectionTrait;

use crate::error::Result;
use crate::storage::Dialect;
use crate::storage::archive::COLUMNS;

/// `outbox_jobs` and the archive as one relation, for readers of jobs finished since `since`: the server skips
/// partitions by their bounds by itself; the jobs table's part holds only jobs finished since `since`, found
/// through the log of finished jobs (a JSON array of ids per row), which lists each at or after its time.
pub(super) async fn jobs_and_archive_since<C: ConnectionTrait + ?Sized>(_conn: &C, since: i64) -> Result<String> {
    let since = Dialect::MySql.ts(&since.to_string());
    Ok(format!(
        "(SELECT {COLUMNS} FROM outbox_jobs WHERE id IN (SELECT x.id FROM outbox_finished f, \
         JSON_TABLE(f.jobs, '$[*]' COLUMNS (id VARCHAR(26) CHARACTER SET ascii PATH '$')) x WHERE f.at >= {since}) \
         AND finished_at >= {since} UNION ALL SELECT {COLUMNS} FROM outbox_jobs_archive) outbox_jobs"
    ))
}
