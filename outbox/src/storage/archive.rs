//! The archive of completed jobs kept in time partitions (`outbox_jobs_done` in each engine's `schema.sql`): what
//! a completion writes into it, how readers see it beside `outbox_jobs`, and the partitions retention makes
//! ahead and drops whole.
//!
//! A partition is a table named `outbox_jobs_done_<from>_<to>` (milliseconds since the epoch) holding jobs
//! completed in `[from, to)`. On PostgreSQL they are partitions of `outbox_jobs_done` by range of
//! `updated_at` (an archived job's completion time), made a few spans ahead; rows no partition covers go to
//! `outbox_jobs_done_default`. On SQLite completions always write `outbox_jobs_done`, which retention renames
//! to a partition's name once per span (`to` is the time of the renaming) before making it again empty. Either way a partition goes when `to` is
//! older than the completed jobs' age: one statement, whatever it holds.

use sea_orm::ConnectionTrait;

use super::engine::Engine;
pub(crate) use super::engine::{Done, Upkeep};
use super::{Dialect, execute_write, on_engine, unused_by_mysql};
use crate::error::{Error, Result};

/// The archive's columns, in the order of its tables; `outbox_jobs` has each of them. A macro, so that the
/// completion statements name them in their `concat!`.
macro_rules! archive_columns {
    () => {
        "id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, \
         sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, \
         locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at"
    };
}
pub(crate) use archive_columns;

/// [`archive_columns`] as a constant.
pub(crate) const COLUMNS: &str = archive_columns!();

/// `outbox_jobs` and the archive read as one relation named `outbox_jobs`, for the readers of finished jobs
/// (one job, listings, counts). A job is in one of them at a time.
pub(crate) fn jobs_and_archive() -> String {
    format!("(SELECT {COLUMNS} FROM outbox_jobs UNION ALL SELECT {COLUMNS} FROM outbox_jobs_archive) outbox_jobs")
}

/// [`jobs_and_archive`] for the readers of jobs finished since `since` (ms). On SQLite, whose partitions are
/// plain tables its planner cannot skip (they have no index on `updated_at`, which would cost every archived job
/// an index entry), only the partitions that can hold such jobs: the time ending a partition's name is when
/// retention set it aside, holding the write lock, so no job in it finished later. PostgreSQL's planner skips
/// partitions by their bounds by itself; there the jobs table's part holds only jobs finished since `since`, found
/// through the log of finished jobs (`outbox_finished` in `postgres/schema.sql`), which lists each at or after its time. A
/// partition retention drops between the listing and the read fails that read once; only a reader looking back
/// further than the completed jobs' age can meet one.
pub(crate) async fn jobs_and_archive_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<String> {
    on_engine!(Dialect::of(conn)?, E => E::jobs_and_archive_since(conn, since).await)
}

/// The name prefix of a partition.
const PARTITION: &str = "outbox_jobs_done_";

/// A partition's bounds from its name; `None` for any other name (the default partition, SQLite's current
/// table).
pub(crate) fn bounds(name: &str) -> Option<(i64, i64)> {
    let (from, to) = name.strip_prefix(PARTITION)?.split_once('_')?;
    Some((from.parse().ok()?, to.parse().ok()?))
}

pub(crate) fn partition_name(from: i64, to: i64) -> String {
    format!("{PARTITION}{from}_{to}")
}

/// The archive's partitions, by bounds, as the engine's query `sql` lists their names.
pub(crate) async fn partitions<C: ConnectionTrait + ?Sized>(
    conn: &C,
    b: Dialect,
    sql: &str,
) -> Result<Vec<(String, i64, i64)>> {
    let rows = conn.query_all_raw(b.stmt(sql, vec![])).await.map_err(Error::db("listing the archive's partitions"))?;
    let mut found = Vec::with_capacity(rows.len());
    for row in rows {
        let name: String = row.try_get_by_index(0).map_err(Error::db("reading a partition's name"))?;
        if let Some((from, to)) = bounds(&name) {
            found.push((name, from, to));
        }
    }
    found.sort_by_key(|(_, from, to)| (*to, *from));
    Ok(found)
}

pub(crate) async fn run<C: ConnectionTrait + ?Sized>(
    conn: &C,
    b: Dialect,
    sql: String,
    what: impl FnOnce() -> String,
) -> Result<u64> {
    Ok(execute_write(conn, b.stmt(sql, vec![]), what).await?.rows_affected())
}

/// Whether `sql` (a `SELECT EXISTS (...)`, its values in `values`) finds a row.
pub(crate) async fn exists<C: ConnectionTrait + ?Sized>(
    conn: &C,
    b: Dialect,
    sql: String,
    values: Vec<sea_orm::Value>,
    what: impl FnOnce() -> String,
) -> Result<bool> {
    let row = conn.query_one_raw(b.stmt(sql, values)).await.map_err(Error::db(what()))?;
    Ok(row
        .map(|r| r.try_get_by_index::<bool>(0))
        .transpose()
        .map_err(Error::db("reading a yes or no"))?
        .unwrap_or(false))
}

/// One round of upkeep at `now`, in the caller's transaction (which holds the retention lease): the partitions
/// ahead first, so that completions land in them, then the old ones dropped. Nothing here reads a partition's
/// rows, so a round costs the same whatever they hold.
pub(crate) async fn upkeep<C: ConnectionTrait + ?Sized>(conn: &C, plan: &Upkeep, now: i64) -> Result<Done> {
    let Upkeep { ahead, batch, .. } = *plan;
    on_engine!(Dialect::of(conn)?, E => E::upkeep(conn, plan, (ahead, batch), now).await)
}

/// What a round of upkeep at `now` starts from, whatever the engine.
pub(crate) struct Round {
    /// The latest end among the partitions, if any.
    pub(crate) newest: Option<i64>,
    /// The start of the span `now` falls in.
    pub(crate) window: i64,
    /// The partitions whose end is at or before the plan's cutoff, to drop.
    pub(crate) old: Vec<String>,
}

/// Reads what a round of upkeep at `now` starts from; `sql` lists the partitions' names.
pub(crate) async fn round<C: ConnectionTrait + ?Sized>(
    conn: &C,
    b: Dialect,
    sql: &str,
    plan: &Upkeep,
    now: i64,
) -> Result<Round> {
    let span = plan.span.max(1);
    let existing = partitions(conn, b, sql).await?;
    let newest = existing.iter().map(|(_, _, to)| *to).max();
    let old = match plan.cutoff {
        Some(cutoff) => existing.iter().filter(|(_, _, to)| *to <= cutoff).map(|(name, _, _)| name.clone()).collect(),
        None => Vec::new(),
    };
    Ok(Round { newest, window: now.div_euclid(span) * span, old })
}

unused_by_mysql! {
    /// Drops one partition table (MySQL drops its partitions with `ALTER TABLE ... DROP PARTITION`).
    pub(crate) async fn drop_partition<C: ConnectionTrait + ?Sized>(conn: &C, b: Dialect, name: &str) -> Result<()> {
        run(conn, b, format!("DROP TABLE \"{name}\""), || format!("dropping archive partition `{name}`")).await?;
        Ok(())
    }
}

/// Whether the archive holds any job: a worker whose retention keeps no kind in partitions leaves the upkeep
/// (and its write transaction) alone until another process has archived something.
pub(crate) async fn in_use<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let sql = "SELECT EXISTS (SELECT 1 FROM outbox_jobs_archive)".to_owned();
    exists(conn, b, sql, vec![], || "looking into the archive".into()).await
}

/// The tables holding archived jobs that a delete names: on PostgreSQL the partitioned table; on SQLite, where
/// the view cannot be deleted from, `outbox_jobs_done` and each partition.
pub(crate) async fn tables<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<String>> {
    on_engine!(Dialect::of(conn)?, E => E::archive_tables(conn).await)
}

#[cfg(test)]
mod tests {
    use super::{bounds, partition_name};

    #[test]
    fn a_partition_name_gives_back_its_bounds_and_no_other_name_does() {
        assert_eq!(
            bounds(&partition_name(1_764_201_600_000, 1_764_205_200_000)),
            Some((1_764_201_600_000, 1_764_205_200_000))
        );
        assert_eq!(bounds("outbox_jobs_done_default"), None);
        assert_eq!(bounds("outbox_jobs_done"), None);
        assert_eq!(bounds("outbox_jobs_done_1_x"), None);
    }
}
