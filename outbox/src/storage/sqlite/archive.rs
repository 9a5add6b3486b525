//! SQLite's archive: completions write `outbox_jobs_done`, which retention renames to a partition's name once per
//! span before making it again, empty; readers of recent jobs read only the partitions that can hold them.

use sea_orm::ConnectionTrait;

use crate::error::{Error, Result};
use crate::storage::Dialect;
use crate::storage::archive::{
    COLUMNS, Done, Round, Upkeep, drop_partition, exists, partition_name, partitions, round, run,
};

/// The names of the archive's partitions, by the prefix they share.
const PARTITIONS: &str =
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'outbox\\_jobs\\_done\\_%' ESCAPE '\\'";

/// How far before a reader's `since` SQLite's partitions are still read (ms).
const CLOCK_SLACK_MS: i64 = 60_000;

/// `outbox_jobs` and the archive as one relation, for readers of jobs finished since `since`: only the
/// partitions that can hold such jobs, as SQLite's planner cannot skip plain tables (they have no index on
/// `updated_at`, which would cost every archived job an index entry). The time ending a partition's name is
/// when retention set it aside, holding the write lock, so no job in it finished later.
pub(super) async fn jobs_and_archive_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<String> {
    let b = Dialect::Sqlite;
    let mut sql = format!("(SELECT {COLUMNS} FROM outbox_jobs UNION ALL SELECT {COLUMNS} FROM outbox_jobs_done");
    // A clock set back after a partition was set aside must not hide its last jobs.
    let from = since.saturating_sub(CLOCK_SLACK_MS);
    for (name, _, to) in partitions(conn, b, PARTITIONS).await? {
        if to >= from {
            sql.push_str(&format!(" UNION ALL SELECT {COLUMNS} FROM \"{name}\""));
        }
    }
    sql.push_str(") outbox_jobs");
    Ok(sql)
}

/// One round of upkeep: the table set aside once per span, and only with jobs in it; old partitions dropped;
/// the view of them made again when either happened.
pub(super) async fn upkeep<C: ConnectionTrait + ?Sized>(conn: &C, plan: &Upkeep, now: i64) -> Result<Done> {
    let b = Dialect::Sqlite;
    let Round { newest, window, old } = round(conn, b, PARTITIONS, plan, now).await?;
    let mut done = Done::default();
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
        let kept = partitions(conn, b, PARTITIONS).await?;
        let mut view = format!("CREATE VIEW outbox_jobs_archive AS SELECT {COLUMNS} FROM outbox_jobs_done");
        for (name, _, _) in &kept {
            view.push_str(&format!(" UNION ALL SELECT {COLUMNS} FROM \"{name}\""));
        }
        run(conn, b, "DROP VIEW IF EXISTS outbox_jobs_archive".into(), || "dropping the archive's view".into()).await?;
        run(conn, b, view, || "making the archive's view".into()).await?;
    }
    Ok(done)
}

/// Renames SQLite's `outbox_jobs_done` to a partition ending at `to` and makes it again, empty, from its own
/// definition, with its index and trigger under names ending in `to`.
async fn rotate<C: ConnectionTrait + ?Sized>(conn: &C, b: Dialect, from: i64, to: i64) -> Result<()> {
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

/// `outbox_jobs_done` and each partition: the view cannot be deleted from.
pub(super) async fn archive_tables<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<String>> {
    let current = "outbox_jobs_done".to_owned();
    let kept = partitions(conn, Dialect::Sqlite, PARTITIONS).await?;
    Ok(std::iter::once(current).chain(kept.into_iter().map(|(name, _, _)| name)).collect())
}

/// The partitions, dropped before the schema is undone: tables retention named.
pub(super) async fn drop_partitions<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<()> {
    for (name, _, _) in partitions(conn, Dialect::Sqlite, PARTITIONS).await? {
        drop_partition(conn, Dialect::Sqlite, &name).await?;
    }
    Ok(())
}
