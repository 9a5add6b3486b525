//! MySQL's archive: `outbox_jobs_done`, partitioned by range of `updated_at` (an archived job's completion time).
//! RANGE has no default partition here: the last one, `pmax`, takes every time past the others; retention splits
//! spans off it a few ahead (cheap while it is empty) and drops old ones whole.

use sea_orm::ConnectionTrait;

use crate::error::Result;
use crate::storage::Dialect;
use crate::storage::archive::{COLUMNS, Done, Round, Upkeep, partition_name, round, run};

/// The names of the archive's partitions.
const PARTITIONS: &str = "SELECT PARTITION_NAME FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE() \
     AND TABLE_NAME = 'outbox_jobs_done' AND PARTITION_NAME IS NOT NULL";

/// How many spans ahead partitions are made, the current one included: retention may miss a few passes without
/// completions falling into `pmax`.
const SPANS_AHEAD: i64 = 3;

/// How long the upkeep's DDL waits for the archive's readers and writers, in seconds: a long reader costs a pass,
/// not every completion queued behind the waiting lock.
const LOCK_WAIT: &str = "SET STATEMENT lock_wait_timeout = 2 FOR";

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

/// One round of upkeep: the spans ahead split off `pmax` in one statement, old partitions dropped in another. DDL
/// commits the caller's transaction here (the retention lease it took stays, as a committed row), and each statement
/// is whole or nothing. A partition holds every time below its end that no earlier one holds: the first one made
/// also takes what `pmax` held before it, moved once.
pub(super) async fn upkeep<C: ConnectionTrait + ?Sized>(
    conn: &C,
    plan: &Upkeep,
    (ahead, _batch): (bool, u64),
    now: i64,
) -> Result<Done> {
    let b = Dialect::MySql;
    let Round { newest, window, old } = round(conn, b, PARTITIONS, plan, now).await?;
    let span = plan.span.max(1);
    let mut done = Done::default();
    if ahead || newest.is_some() {
        let mut from = newest.map_or(window, |to| to.max(window));
        let until = window + SPANS_AHEAD * span;
        let mut made = Vec::new();
        while from < until {
            let to = (from.div_euclid(span) + 1) * span;
            made.push(format!("PARTITION {} VALUES LESS THAN ({to})", b.quoted(&partition_name(from, to))));
            from = to;
        }
        if !made.is_empty() {
            let sql = format!(
                "{LOCK_WAIT} ALTER TABLE outbox_jobs_done REORGANIZE PARTITION pmax INTO ({}, \
                 PARTITION pmax VALUES LESS THAN MAXVALUE)",
                made.join(", ")
            );
            run(conn, b, sql, || format!("making {} archive partitions", made.len())).await?;
            done.made += made.len() as u64;
        }
    }
    if !old.is_empty() {
        let names: Vec<String> = old.iter().map(|name| b.quoted(name)).collect();
        let sql = format!("{LOCK_WAIT} ALTER TABLE outbox_jobs_done DROP PARTITION {}", names.join(", "));
        run(conn, b, sql, || format!("dropping archive partitions {}", old.join(", "))).await?;
        done.dropped += old.len() as u64;
    }
    Ok(done)
}
