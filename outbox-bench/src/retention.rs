//! Case `retention`: a worker drains `n` new no-op jobs while its retention prunes `old` finished jobs
//! (completed two days ago, each with its history); the baseline drains the same jobs beside the same old
//! ones with retention off. Both workers run started (not in drain mode, which runs no retention) and the
//! drain ends when no job is pending or claimed. Partitioned (`retention_partitioned`), the new jobs' kind is
//! kept in time partitions and the old jobs are in the archive, in a partition of their own two days old that
//! retention drops whole.

use std::time::{Duration, Instant};

use outbox::{JobContext, JobError, Retention, Worker};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

use crate::scratch::{Scratch, Target};
use crate::stats::Measure;
use crate::subject::{Noop, noops, preload};
use crate::{BoxError, raw};

/// What a pruning run measured besides the drain.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pruned {
    /// Old jobs pruned by the time the drain ended.
    pub(crate) during_drain: u64,
    /// Seconds from the worker's start until every old job was pruned.
    pub(crate) all_secs: f64,
}

const OLD_LEFT: &str = "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'old'";
const OLD_LEFT_ARCHIVED: &str = "SELECT COUNT(*) FROM outbox_jobs_archive WHERE kind = 'old'";
/// 1 while a job is pending or claimed (an index probe, so watching costs the drain little).
const OUTSTANDING: &str =
    "SELECT COUNT(*) FROM (SELECT 1 FROM outbox_jobs WHERE status IN ('pending', 'claimed') LIMIT 1) o";

pub(crate) async fn run(
    target: &Target,
    n: u64,
    old: u64,
    concurrency: usize,
    prune: bool,
    partitioned: bool,
) -> Result<(Measure, Option<Pruned>), BoxError> {
    let scratch = Scratch::new(target).await?;
    if partitioned {
        seed_archived(&scratch.db, old).await?;
    } else {
        seed_old(&scratch.db, old).await?;
    }
    preload(&scratch.db, noops(n)).await?;
    let retention = if prune { Retention::new().interval(Duration::from_secs(1)) } else { Retention::off() };
    let retention = if partitioned { retention.kind_in_partitions("noop") } else { retention };
    let (old_left, done) = if partitioned {
        (OLD_LEFT_ARCHIVED, "SELECT COUNT(*) FROM outbox_jobs_archive WHERE kind = 'noop'")
    } else {
        (OLD_LEFT, "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'noop' AND status = 'completed'")
    };
    let worker = Worker::builder(&scratch.db)
        .register(|_: Noop, _: JobContext| async { Ok::<_, JobError>(()) })
        .concurrency(concurrency)
        .poll_interval(Duration::from_millis(100))
        .retention(retention)
        .build()
        .await?;
    let start = Instant::now();
    let handle = worker.start();
    while count(&scratch.db, OUTSTANDING).await? > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let pruned = if prune {
        let during_drain = old.saturating_sub(count(&scratch.db, old_left).await?);
        while count(&scratch.db, old_left).await? > 0 {
            if start.elapsed() > Duration::from_secs(1_800) {
                return Err("retention: old jobs still left after 30 minutes".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Some(Pruned { during_drain, all_secs: start.elapsed().as_secs_f64() })
    } else {
        None
    };
    handle.shutdown().await?;
    scratch.expect_count(done, n, "retention").await?;
    scratch.remove().await?;
    Ok((Measure { jobs: n, secs }, pruned))
}

async fn count(db: &DatabaseConnection, sql: &str) -> Result<u64, BoxError> {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await?;
    let n: i64 = row.ok_or("count returned no row")?.try_get_by_index(0)?;
    Ok(n.max(0).unsigned_abs())
}

/// `old` completed jobs of kind `old`, finished two days ago, in one statement (each gets its history row
/// from the enqueue trigger, as real jobs do).
async fn seed_old(db: &DatabaseConnection, old: u64) -> Result<(), BoxError> {
    let at = raw::now_ms() - 2 * 86_400_000;
    let old = i64::try_from(old)?;
    let (sql, values): (&str, Vec<sea_orm::Value>) = match db.get_database_backend() {
        DbBackend::Postgres => (
            "INSERT INTO outbox_jobs (id, kind, queue, payload, status, attempts, runs, max_attempts, run_at, \
             schema_hash, created_at, claimed_at, completed_at, updated_at) \
             SELECT 'old-' || lpad(x::text, 9, '0'), 'old', 'default', jsonb_build_object('n', x), 'completed', \
             1, 1, 3, t, 'h', t, t, t, t FROM generate_series(1, $1::int8) x, \
             (SELECT TIMESTAMPTZ 'epoch' + $2::int8 * INTERVAL '1 millisecond' AS t) s",
            vec![old.into(), at.into()],
        ),
        _ => (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) \
             INSERT INTO outbox_jobs (id, kind, queue, payload, status, attempts, runs, max_attempts, run_at, \
             schema_hash, created_at, claimed_at, completed_at, updated_at) \
             SELECT printf('old-%09d', x), 'old', 'default', json_object('n', x), 'completed', 1, 1, 3, ?, 'h', \
             ?, ?, ?, ? FROM c",
            vec![old.into(), at.into(), at.into(), at.into(), at.into(), at.into()],
        ),
    };
    db.execute_raw(Statement::from_sql_and_values(db.get_database_backend(), sql, values)).await?;
    if db.get_database_backend() == DbBackend::Postgres {
        // As autovacuum would soon after such a load: the drain is then measured beside settled old rows.
        db.execute_unprepared("VACUUM (ANALYZE) outbox_jobs").await?;
        db.execute_unprepared("VACUUM (ANALYZE) outbox_job_events").await?;
    }
    Ok(())
}

/// `old` completed jobs of kind `old` in the archive, in a partition covering two days ago (made here as
/// retention names and makes them, `outbox/src/storage/archive.rs`), in one statement.
async fn seed_archived(db: &DatabaseConnection, old: u64) -> Result<(), BoxError> {
    let at = raw::now_ms() - 2 * 86_400_000;
    let (from, to) = (at - 3_600_000, at + 3_600_000);
    let name = format!("outbox_jobs_done_{from}_{to}");
    let old = i64::try_from(old)?;
    let columns = "id, kind, queue, payload, priority, max_attempts, schema_hash, created_at, sequence_hold, \
         waiting, superseded, scheduled, run_at, attempts, runs, status, claimed_at, completed_at, updated_at";
    let backend = db.get_database_backend();
    let (sql, values): (String, Vec<sea_orm::Value>) = match backend {
        DbBackend::Postgres => {
            let ts = |ms: i64| format!("(TIMESTAMPTZ 'epoch' + ({ms})::int8 * INTERVAL '1 millisecond')");
            db.execute_unprepared(&format!(
                "CREATE TABLE \"{name}\" PARTITION OF outbox_jobs_done FOR VALUES FROM ({}) TO ({})",
                ts(from),
                ts(to)
            ))
            .await?;
            (
                format!(
                    "INSERT INTO outbox_jobs_done ({columns}) SELECT 'old-' || lpad(x::text, 9, '0'), 'old', \
                     'default', jsonb_build_object('n', x), 0, 3, 'h', t, 1, false, false, false, t, 1, 1, \
                     'completed', t, t, t FROM generate_series(1, $1::int8) x, \
                     (SELECT TIMESTAMPTZ 'epoch' + $2::int8 * INTERVAL '1 millisecond' AS t) s"
                ),
                vec![old.into(), at.into()],
            )
        }
        _ => {
            db.execute_unprepared(&format!("CREATE TABLE \"{name}\" AS SELECT * FROM outbox_jobs_done WHERE 0"))
                .await?;
            db.execute_unprepared(&format!(
                "DROP VIEW outbox_jobs_archive; CREATE VIEW outbox_jobs_archive AS SELECT * FROM outbox_jobs_done \
                 UNION ALL SELECT * FROM \"{name}\""
            ))
            .await?;
            (
                format!(
                    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) \
                     INSERT INTO \"{name}\" ({columns}) SELECT printf('old-%09d', x), 'old', 'default', \
                     json_object('n', x), 0, 3, 'h', ?, 1, 0, 0, 0, ?, 1, 1, 'completed', ?, ?, ? FROM c"
                ),
                vec![old.into(), at.into(), at.into(), at.into(), at.into(), at.into()],
            )
        }
    };
    db.execute_raw(Statement::from_sql_and_values(backend, sql, values)).await?;
    if backend == DbBackend::Postgres {
        db.execute_unprepared(&format!("VACUUM (ANALYZE) \"{name}\"")).await?;
    }
    Ok(())
}
