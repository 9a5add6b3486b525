//! The archive of completed jobs kept in time partitions (`postgres/archive.sql`, `sqlite/archive.sql`): what
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

use super::{Backend, execute_write};
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
/// through the log of finished jobs (`finished_log.sql`), which lists each at or after its time. A
/// partition retention drops between the listing and the read fails that read once; only a reader looking back
/// further than the completed jobs' age can meet one.
pub(crate) async fn jobs_and_archive_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<String> {
    match Backend::of(conn)? {
        #[cfg(feature = "sqlite")]
        b @ Backend::Sqlite => {
            let mut sql =
                format!("(SELECT {COLUMNS} FROM outbox_jobs UNION ALL SELECT {COLUMNS} FROM outbox_jobs_done");
            // A clock set back after a partition was set aside must not hide its last jobs.
            let from = since.saturating_sub(CLOCK_SLACK_MS);
            for (name, _, to) in partitions(conn, b).await? {
                if to >= from {
                    sql.push_str(&format!(" UNION ALL SELECT {COLUMNS} FROM \"{name}\""));
                }
            }
            sql.push_str(") outbox_jobs");
            Ok(sql)
        }
        #[cfg(feature = "postgres")]
        b @ Backend::Postgres => {
            let since = b.ts(&since.to_string());
            Ok(format!(
                "(SELECT {COLUMNS} FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_finished \
                 WHERE at >= {since})) AND finished_at >= {since} \
                 UNION ALL SELECT {COLUMNS} FROM outbox_jobs_archive) outbox_jobs"
            ))
        }
    }
}

/// How far before a reader's `since` SQLite's partitions are still read (ms).
#[cfg(feature = "sqlite")]
const CLOCK_SLACK_MS: i64 = 60_000;

/// The name prefix of a partition.
const PARTITION: &str = "outbox_jobs_done_";

/// How many spans ahead PostgreSQL's partitions are made, the current one included: retention may miss a few
/// passes without completions falling into the default partition.
#[cfg(feature = "postgres")]
const SPANS_AHEAD: i64 = 3;

/// What one round of upkeep is to do: spans of `span` milliseconds, partitions whose end is at or before
/// `cutoff` dropped (none without one), and new ones made (PostgreSQL) when `ahead`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upkeep {
    pub(crate) span: i64,
    pub(crate) cutoff: Option<i64>,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) ahead: bool,
    /// Rows of PostgreSQL's default partition deleted per round, past the cutoff.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) batch: u64,
}

/// What a round of upkeep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Done {
    /// Partitions made (PostgreSQL) or tables renamed into partitions (SQLite).
    pub(crate) made: u64,
    pub(crate) dropped: u64,
    /// Jobs deleted from PostgreSQL's default partition (those of dropped partitions are not counted).
    pub(crate) pruned: u64,
}

/// A partition's bounds from its name; `None` for any other name (the default partition, SQLite's current
/// table).
fn bounds(name: &str) -> Option<(i64, i64)> {
    let (from, to) = name.strip_prefix(PARTITION)?.split_once('_')?;
    Some((from.parse().ok()?, to.parse().ok()?))
}

fn partition_name(from: i64, to: i64) -> String {
    format!("{PARTITION}{from}_{to}")
}

/// The archive's partitions, by bounds.
async fn partitions<C: ConnectionTrait + ?Sized>(conn: &C, b: Backend) -> Result<Vec<(String, i64, i64)>> {
    let sql = match b {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'outbox\\_jobs\\_done\\_%' \
             ESCAPE '\\'"
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'outbox_jobs_done'::regclass"
        }
    };
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

async fn run<C: ConnectionTrait + ?Sized>(
    conn: &C,
    b: Backend,
    sql: String,
    what: impl FnOnce() -> String,
) -> Result<u64> {
    Ok(execute_write(conn, b.stmt(sql, vec![]), what).await?.rows_affected())
}

/// Whether `sql` (a `SELECT EXISTS (...)`, its values in `values`) finds a row.
async fn exists<C: ConnectionTrait + ?Sized>(
    conn: &C,
    b: Backend,
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
    let b = Backend::of(conn)?;
    let span = plan.span.max(1);
    let existing = partitions(conn, b).await?;
    let newest = existing.iter().map(|(_, _, to)| *to).max();
    let window = now.div_euclid(span) * span;
    let mut done = Done::default();
    let old: Vec<&String> = match plan.cutoff {
        Some(cutoff) => existing.iter().filter(|(_, _, to)| *to <= cutoff).map(|(name, _, _)| name).collect(),
        None => Vec::new(),
    };
    match b {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            // Set aside once per span, and only with jobs in it.
            let due = newest.is_none_or(|to| to < window);
            let holds = "SELECT EXISTS (SELECT 1 FROM outbox_jobs_done)".to_owned();
            if due && exists(conn, b, holds, vec![], || "looking into the archive table".into()).await? {
                // Read again under the write lock the caller's transaction holds: every completion in the table
                // committed before it, so none finished after the partition's end (readers rely on that).
                let to = crate::storage::now_ms().max(now);
                rotate(conn, b, newest.unwrap_or(0).min(now), to).await?;
                done.made += 1;
            }
            for name in &old {
                drop_partition(conn, b, name).await?;
                done.dropped += 1;
            }
            if done.made + done.dropped > 0 {
                let kept = partitions(conn, b).await?;
                let mut view = format!("CREATE VIEW outbox_jobs_archive AS SELECT {COLUMNS} FROM outbox_jobs_done");
                for (name, _, _) in &kept {
                    view.push_str(&format!(" UNION ALL SELECT {COLUMNS} FROM \"{name}\""));
                }
                run(conn, b, "DROP VIEW IF EXISTS outbox_jobs_archive".into(), || "dropping the archive's view".into())
                    .await?;
                run(conn, b, view, || "making the archive's view".into()).await?;
            }
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            // Making and dropping a partition wait for the archive's readers; a long one costs a pass, not every
            // completion queued behind the waiting lock.
            run(conn, b, "SET LOCAL lock_timeout = '2s'".into(), || "bounding the upkeep's lock waits".into()).await?;
            if plan.ahead || !existing.is_empty() {
                let mut from = newest.map_or(window, |to| to.max(window));
                let until = window + SPANS_AHEAD * span;
                while from < until {
                    let to = (from.div_euclid(span) + 1) * span;
                    // A span the default partition already holds completions of (the first pass, or passes
                    // missed for longer than the spans ahead) cannot become a partition: its completions stay
                    // there, pruned row by row.
                    let taken = format!(
                        "SELECT EXISTS (SELECT 1 FROM outbox_jobs_done_default WHERE updated_at >= {} \
                         AND updated_at < {})",
                        b.ts("$1"),
                        b.ts("$2")
                    );
                    let values = vec![sea_orm::Value::from(from), sea_orm::Value::from(to)];
                    if !exists(conn, b, taken, values, || "looking into the default partition".into()).await? {
                        let name = partition_name(from, to);
                        let sql = format!(
                            "CREATE TABLE \"{name}\" PARTITION OF outbox_jobs_done FOR VALUES FROM ({}) TO ({})",
                            b.ts(&from.to_string()),
                            b.ts(&to.to_string())
                        );
                        run(conn, b, sql, || format!("making archive partition `{name}`")).await?;
                        done.made += 1;
                    }
                    from = to;
                }
            }
            for name in &old {
                drop_partition(conn, b, name).await?;
                done.dropped += 1;
            }
            if let Some(cutoff) = plan.cutoff {
                let sql = format!(
                    "DELETE FROM outbox_jobs_done_default WHERE id IN (SELECT id FROM outbox_jobs_done_default \
                     WHERE updated_at <= {} LIMIT $2)",
                    b.ts("$1")
                );
                let values = vec![sea_orm::Value::from(cutoff), super::limit_value(plan.batch)];
                let res = execute_write(conn, b.stmt(sql, values), || "pruning the archive's default partition".into())
                    .await?;
                done.pruned += res.rows_affected();
            }
        }
    }
    Ok(done)
}

async fn drop_partition<C: ConnectionTrait + ?Sized>(conn: &C, b: Backend, name: &str) -> Result<()> {
    run(conn, b, format!("DROP TABLE \"{name}\""), || format!("dropping archive partition `{name}`")).await?;
    Ok(())
}

/// Renames SQLite's `outbox_jobs_done` to a partition ending at `to` and makes it again, empty, from its own
/// definition, with its index and trigger under names ending in `to`.
#[cfg(feature = "sqlite")]
async fn rotate<C: ConnectionTrait + ?Sized>(conn: &C, b: Backend, from: i64, to: i64) -> Result<()> {
    let row = conn
        .query_one_raw(
            b.stmt("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'outbox_jobs_done'", vec![]),
        )
        .await
        .map_err(Error::db("reading the archive table's definition"))?
        .ok_or_else(|| Error::Internal("the archive table `outbox_jobs_done` is missing".into()))?;
    let definition: String = row.try_get_by_index(0).map_err(Error::db("reading the archive table's definition"))?;
    let name = partition_name(from, to);
    run(conn, b, "DROP VIEW IF EXISTS outbox_jobs_archive".into(), || "dropping the archive's view".into()).await?;
    run(conn, b, format!("ALTER TABLE outbox_jobs_done RENAME TO \"{name}\""), || {
        format!("renaming the archive to `{name}`")
    })
    .await?;
    run(conn, b, definition, || "making the archive table again".into()).await?;
    run(conn, b, format!("CREATE INDEX outbox_jobs_done_id_{to} ON outbox_jobs_done (id)"), || {
        "indexing the new archive table".into()
    })
    .await?;
    let trigger = format!(
        "CREATE TRIGGER outbox_jobs_done_purged_{to} AFTER DELETE ON outbox_jobs_done BEGIN \
         DELETE FROM outbox_job_events WHERE job_id = OLD.id; END"
    );
    run(conn, b, trigger, || "making the new archive table's trigger".into()).await?;
    Ok(())
}

/// Whether the archive holds any job: a worker whose retention keeps no kind in partitions leaves the upkeep
/// (and its write transaction) alone until another process has archived something.
pub(crate) async fn in_use<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<bool> {
    let b = Backend::of(conn)?;
    let sql = "SELECT EXISTS (SELECT 1 FROM outbox_jobs_archive)".to_owned();
    exists(conn, b, sql, vec![], || "looking into the archive".into()).await
}

/// The tables holding archived jobs that a delete names: on PostgreSQL the partitioned table; on SQLite, where
/// the view cannot be deleted from, `outbox_jobs_done` and each partition.
pub(crate) async fn tables<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<String>> {
    let current = "outbox_jobs_done".to_owned();
    Ok(match Backend::of(conn)? {
        #[cfg(feature = "sqlite")]
        b @ Backend::Sqlite => {
            std::iter::once(current).chain(partitions(conn, b).await?.into_iter().map(|(name, _, _)| name)).collect()
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => vec![current],
    })
}

/// The names of SQLite's archive partitions, for the migration's undo.
#[cfg(feature = "sqlite")]
pub(crate) async fn sqlite_partitions<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<String>> {
    Ok(partitions(conn, Backend::Sqlite).await?.into_iter().map(|(name, _, _)| name).collect())
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
