//! PostgreSQL's archive: partitions of `outbox_jobs_done` by range of `updated_at` (an archived job's completion
//! time), made a few spans ahead; rows no partition covers go to `outbox_jobs_done_default`, pruned row by row.

use sea_orm::ConnectionTrait;

use crate::error::Result;
use crate::storage::archive::{COLUMNS, Done, Round, Upkeep, drop_partition, exists, partition_name, round, run};
use crate::storage::{Dialect, execute_write, limit_value};

/// The names of the archive's partitions.
const PARTITIONS: &str = "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
     WHERE i.inhparent = 'outbox_jobs_done'::regclass";

/// How many spans ahead PostgreSQL's partitions are made, the current one included: retention may miss a few
/// passes without completions falling into the default partition.
const SPANS_AHEAD: i64 = 3;

/// `outbox_jobs` and the archive as one relation, for readers of jobs finished since `since`: the planner skips
/// partitions by their bounds by itself; the jobs table's part holds only jobs finished since `since`, found
/// through the log of finished jobs, which lists each at or after its time.
pub(super) async fn jobs_and_archive_since<C: ConnectionTrait + ?Sized>(_conn: &C, since: i64) -> Result<String> {
    let b = Dialect::Postgres;
    let since = b.ts(&since.to_string());
    Ok(format!(
        "(SELECT {COLUMNS} FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_finished \
         WHERE at >= {since})) AND finished_at >= {since} \
         UNION ALL SELECT {COLUMNS} FROM outbox_jobs_archive) outbox_jobs"
    ))
}

/// One round of upkeep: partitions made ahead, old ones dropped, the default partition pruned past the cutoff.
pub(super) async fn upkeep<C: ConnectionTrait + ?Sized>(
    conn: &C,
    plan: &Upkeep,
    (ahead, batch): (bool, u64),
    now: i64,
) -> Result<Done> {
    let b = Dialect::Postgres;
    let Round { newest, window, old } = round(conn, b, PARTITIONS, plan, now).await?;
    let span = plan.span.max(1);
    let mut done = Done::default();
    // Making and dropping a partition wait for the archive's readers; a long one costs a pass, not every
    // completion queued behind the waiting lock.
    run(conn, b, "SET LOCAL lock_timeout = '2s'".into(), || "bounding the upkeep's lock waits".into()).await?;
    if ahead || newest.is_some() {
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
        let values = vec![sea_orm::Value::from(cutoff), limit_value(batch)];
        let res = execute_write(conn, b.stmt(sql, values), || "pruning the archive's default partition".into()).await?;
        done.pruned += res.rows_affected();
    }
    Ok(done)
}

/// The partitioned table: a delete reaches every partition through it.
pub(super) async fn archive_tables<C: ConnectionTrait + ?Sized>(_conn: &C) -> Result<Vec<String>> {
    Ok(vec!["outbox_jobs_done".to_owned()])
}
