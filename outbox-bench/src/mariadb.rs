//! `outbox-bench mariadb URL [RUNS] [JOBS]`: the MariaDB engine against bare sqlx issuing the same statements on
//! one connection, in the same run, each run on a database of its own on the server `URL` names (made and dropped
//! here), outbox and bare runs alternating. Printed, one JSON line each:
//! - the server: its version and `innodb_flush_log_at_trx_commit` (1 syncs every commit);
//! - `process`: JOBS jobs (20,000 by default) enqueued in batches, then drained by a worker of concurrency 100,
//!   against the same claims (candidates read from the ready index, locked by id `FOR UPDATE SKIP LOCKED`, updated,
//!   read back) and completions (a fenced update per job, a transaction per claim) one after the other;
//! - `enqueue`: JOBS/10 jobs one per transaction through `outbox::enqueue`, against the same INSERT and the same
//!   write of the wake-up ring;
//! - `enqueue_batch`: JOBS jobs, 1,000 a call to `outbox::enqueue_batch`, against one INSERT of 1,000 rows and a
//!   write of the ring;
//! - `latency_cross`: 1,000 jobs enqueued one per transaction, 0 to 3 ms apart, into a worker at its defaults in
//!   another process (this binary again), each timed from its commit returning to its handler starting;
//! - `idle_cpu`: that worker process waiting 10 s with nothing to do, and the server beyond its own idle use, in %
//!   of one core.
//!
//! Every figure is the median of RUNS runs (3 by default); each ratio is outbox over bare, the median of the runs'
//! ratios.

use std::time::{Duration, Instant};

use outbox::{EnqueueOpts, JobContext, JobError, Worker};
use sea_orm::sqlx::mysql::MySqlConnection;
use sea_orm::sqlx::{self, Connection, Row};

use crate::BoxError;
use crate::idle_cpu::cpu_ticks;
use crate::latency::{LATENCY_CHILD, Latency, Ping, WorkerProcess};
use crate::mariadb_wake::{server_pid, with_database};
use crate::stats::{median, round};

/// The command-line name of this measurement.
pub(crate) const MARIADB: &str = "mariadb";

/// Jobs a bare claim takes, as the worker's concurrency.
const CLAIM: usize = crate::CONCURRENCY;
/// Jobs of a batch.
const BATCH: usize = 1_000;
/// Jobs of a `latency_cross` run.
const LATENCY_JOBS: u64 = 1_000;

/// Runs every measurement against the server `url` names (any database).
pub(crate) fn mariadb(argv: &[String]) -> Result<(), BoxError> {
    let usage = "usage: outbox-bench mariadb mysql://USER@HOST:PORT/DB [RUNS] [JOBS]";
    let url = argv.first().ok_or(usage)?;
    let number = |i: usize, default: u64| -> Result<u64, BoxError> {
        argv.get(i).map_or(Ok(default), |a| a.parse().map_err(|e| format!("{usage}: {a:?}: {e}").into()))
    };
    let (runs, jobs) = (number(1, 3)?, number(2, 20_000)?);
    if runs == 0 || jobs < 10 {
        return Err(format!("{usage}: at least one run and ten jobs").into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(measure(url, runs as usize, jobs))
}

async fn measure(url: &str, runs: usize, jobs: u64) -> Result<(), BoxError> {
    let mut conn = MySqlConnection::connect(url).await?;
    let row = sqlx::query("SELECT VERSION(), @@innodb_flush_log_at_trx_commit").fetch_one(&mut conn).await?;
    let (version, flush): (String, u64) = (row.try_get(0)?, row.try_get(1)?);
    println!("{}", serde_json::json!({"server": version, "innodb_flush_log_at_trx_commit": flush}));
    for case in ["process", "enqueue", "enqueue_batch"] {
        let (mut ours, mut bare, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let o = on_fresh(url, |db_url| run(case, db_url, jobs, false)).await?;
            let b = on_fresh(url, |db_url| run(case, db_url, jobs, true)).await?;
            ratios.push(o / b);
            ours.push(o);
            bare.push(b);
        }
        let line = serde_json::json!({
            "case": case, "outbox_jobs_per_s": round(median(&ours), 0), "bare_jobs_per_s": round(median(&bare), 0),
            "ratio": round(median(&ratios), 3), "outbox_runs": ours, "bare_runs": bare,
        });
        println!("{line}");
    }
    let (mut p50, mut p99, mut own, mut server) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let latency = on_fresh(url, latency_cross).await?;
        p50.push(latency.p50_ms);
        p99.push(latency.p99_ms);
        let (o, s) = on_fresh(url, idle).await?;
        own.push(o);
        server.push(s);
    }
    println!(
        "{}",
        serde_json::json!({"case": "latency_cross", "jobs": LATENCY_JOBS, "p50_ms": round(median(&p50), 2),
            "p99_ms": round(median(&p99), 2), "p50_runs": p50, "p99_runs": p99})
    );
    println!(
        "{}",
        serde_json::json!({"case": "idle_cpu", "worker_pct_of_a_core": round(median(&own), 2),
            "server_pct_of_a_core": round(median(&server), 2), "worker_runs": own, "server_runs": server})
    );
    Ok(())
}

/// `f` on a fresh database of its own on the server `url` names, migrated; the database is dropped after.
async fn on_fresh<T, F, Fut>(url: &str, f: F) -> Result<T, BoxError>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, BoxError>>,
{
    let name = format!("bench_{:016x}", fastrand::u64(..));
    let mut admin = MySqlConnection::connect(url).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await?;
    let db_url = with_database(url, &name);
    let migrated = async {
        let db = outbox::connect(&db_url).await?;
        outbox::migrate(&db).await?;
        db.close().await?;
        Ok::<_, BoxError>(())
    }
    .await;
    let result = match migrated {
        Ok(()) => f(db_url).await,
        Err(e) => Err(e),
    };
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE {name}"))).execute(&mut admin).await?;
    result
}

/// One run of `case`, outbox's or the bare one, on the database `url`: jobs per second.
async fn run(case: &str, url: String, jobs: u64, bare: bool) -> Result<f64, BoxError> {
    let db = outbox::connect(&url).await?;
    let mut conn = MySqlConnection::connect(&url).await?;
    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").execute(&mut conn).await?;
    let pings: Vec<Ping> = (0..jobs).map(|n| Ping { n }).collect();
    let (n, secs) = match case {
        "process" => {
            for chunk in pings.chunks(BATCH) {
                outbox::enqueue_batch(&db, chunk, EnqueueOpts::new()).await?;
            }
            let began = Instant::now();
            if bare {
                bare_drain(&mut conn, jobs).await?;
            } else {
                let worker = Worker::builder(&db)
                    .concurrency(crate::CONCURRENCY)
                    .register(|_: Ping, _: JobContext| async { Ok::<_, JobError>(()) })
                    .build()
                    .await?;
                worker.drain().await?;
            }
            (jobs, began.elapsed().as_secs_f64())
        }
        "enqueue" => {
            let n = jobs / 10;
            let began = Instant::now();
            for i in 0..n {
                if bare {
                    let id = format!("{i:026}");
                    let values = format!("('{id}', {})", row_values(i));
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("{INSERT} VALUES {values}"))).execute(&mut conn).await?;
                    sqlx::query("DO outbox_wake(?)").bind(&id).execute(&mut conn).await?;
                } else {
                    outbox::enqueue(&db, &Ping { n: i }, EnqueueOpts::new()).await?;
                }
            }
            (n, began.elapsed().as_secs_f64())
        }
        _ => {
            let began = Instant::now();
            for chunk in pings.chunks(BATCH) {
                if bare {
                    let rows: Vec<String> =
                        chunk.iter().map(|p| format!("('{:026}', {})", p.n, row_values(p.n))).collect();
                    let mut tx = conn.begin().await?;
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("{INSERT} VALUES {}", rows.join(", "))))
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query("DO outbox_wake(?)").bind(format!("{:026}", chunk[0].n)).execute(&mut *tx).await?;
                    tx.commit().await?;
                } else {
                    outbox::enqueue_batch(&db, chunk, EnqueueOpts::new()).await?;
                }
            }
            (jobs, began.elapsed().as_secs_f64())
        }
    };
    db.close().await?;
    Ok(n as f64 / secs)
}

/// The columns a bare enqueue writes, as outbox's INSERT does.
const INSERT: &str = "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, \
     run_at, schema_hash, created_at, updated_at, scheduled)";

/// A bare job's values after its id.
fn row_values(n: u64) -> String {
    let now = now_ms();
    format!("'ping', 'default', '{{\"n\":{n}}}', 'pending', 0, 0, 3, {now}, 'bench', {now}, {now}, FALSE")
}

fn now_ms() -> i64 {
    crate::latency::epoch_us() / 1_000
}

/// Claims and completes `jobs` jobs on one connection with the statements of the MariaDB worker store, a claim of
/// [`CLAIM`] then its completions, until none is left.
async fn bare_drain(conn: &mut MySqlConnection, jobs: u64) -> Result<(), BoxError> {
    let mut done = 0;
    while done < jobs {
        let now = now_ms();
        let mut tx = conn.begin().await?;
        let candidates: Vec<String> = sqlx::query(
            "SELECT id FROM outbox_jobs WHERE ready_queue = 'default' AND kind = 'ping' AND status = 'pending' \
             AND run_at <= ? ORDER BY priority DESC, run_at, id LIMIT ?",
        )
        .bind(now)
        .bind(CLAIM as u64)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
        if candidates.is_empty() {
            return Err(format!("the bare drain found nothing after {done} of {jobs} jobs").into());
        }
        let marks = vec!["?"; candidates.len()].join(", ");
        let mut lock = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!(
            "SELECT id FROM outbox_jobs WHERE id IN ({marks}) AND status = 'pending' \
             ORDER BY priority DESC, run_at, id FOR UPDATE SKIP LOCKED"
        )));
        for id in &candidates {
            lock = lock.bind(id);
        }
        let ids = lock.fetch_all(&mut *tx).await?;
        let marks = vec!["?"; ids.len()].join(", ");
        let mut claim = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE outbox_jobs SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = 'bare', \
             locked_at = ?, claimed_at = ?, lease_expires_at = ?, updated_at = ? WHERE id IN ({marks}) \
             AND status = 'pending'"
        )))
        .bind(now)
        .bind(now)
        .bind(now + 30_000)
        .bind(now);
        for id in &ids {
            claim = claim.bind(id);
        }
        claim.execute(&mut *tx).await?;
        let mut read = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs FROM outbox_jobs \
             WHERE id IN ({marks}) ORDER BY priority DESC, run_at, id"
        )));
        for id in &ids {
            read = read.bind(id);
        }
        let claimed = read.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let mut tx = conn.begin().await?;
        let at = now_ms();
        for row in &claimed {
            let (id, runs): (String, i32) = (row.try_get(0)?, row.try_get(7)?);
            sqlx::query(
                "UPDATE outbox_jobs SET status = 'completed', output = NULL, completed_at = ?, \
                 lease_expires_at = NULL, updated_at = ? WHERE id = ? AND status = 'claimed' AND locked_by = 'bare' \
                 AND runs = ?",
            )
            .bind(at)
            .bind(at)
            .bind(id)
            .bind(runs)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        done += claimed.len() as u64;
    }
    Ok(())
}

/// One `latency_cross` run on the database `url`: the worker in another process, this one enqueuing.
async fn latency_cross(url: String) -> Result<Latency, BoxError> {
    let location = crate::scratch::Location::Url(url);
    let db = crate::scratch::connect(&location, crate::engine::SyncMode::Full).await?;
    let latency = crate::latency::cross_on(&db, &location, crate::engine::SyncMode::Full, LATENCY_JOBS).await;
    db.close().await?;
    latency
}

/// The worker process of `latency_cross` waiting with nothing to do for 10 s (it ends 10 s after its last job
/// started, here none): its CPU and the server's beyond the server's own idle use measured first, in % of a core.
async fn idle(url: String) -> Result<(f64, f64), BoxError> {
    let server = server_pid(&url).await?;
    let hz = rustix::param::clock_ticks_per_second() as f64;
    let quiet = cpu_ticks(server)?;
    let began = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let own_use = (cpu_ticks(server)? - quiet) as f64 / hz / began.elapsed().as_secs_f64();
    let args = [LATENCY_CHILD.into(), url.into(), "FULL".into(), "1".into()];
    let mut child = WorkerProcess::start(&args, "idle_cpu").await?;
    let pid = child.pid().ok_or("the idle worker's pid")?;
    let (before, server_before) = (cpu_ticks(pid)?, cpu_ticks(server)?);
    let began = Instant::now();
    let _ = child.report().await?;
    let secs = began.elapsed().as_secs_f64();
    let (worker, srv) = (cpu_ticks(pid).unwrap_or(before) - before, cpu_ticks(server)? - server_before);
    child.exit().await?;
    Ok((worker as f64 / hz / secs * 100.0, ((srv as f64 / hz / secs) - own_use).max(0.0) * 100.0))
}
