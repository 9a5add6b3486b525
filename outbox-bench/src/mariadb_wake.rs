//! `outbox-bench mariadb-wake URL`: the measurements that choose how a MariaDB worker hears another process's
//! enqueue, before the MariaDB backend is built on one (see `docs/internals/mariadb.md`).
//!
//! MariaDB has no `LISTEN`, and an enqueue commits in the caller's transaction, whose end outbox does not see: a
//! signal can only be written inside the transaction, by a trigger. Two places for it are measured:
//! - an InnoDB row, which the trigger's `UPDATE` holds locked until the enqueuer commits: concurrent enqueuers
//!   queue behind one another;
//! - a MEMORY table row, written at once and not rolled back: no lock outlives the statement, but a watcher may see
//!   the signal before the job's row is committed. It then waits for that row with a locking read
//!   (`SELECT ... LOCK IN SHARE MODE` by the id the signal carries), which returns when the enqueuer commits or
//!   rolls back, so the wake-up is never early.
//!
//! A third form is what the engine will use: the trigger appends the job's id to a MEMORY log, and a watcher waits
//! for every id logged since its last look, so a job whose transaction commits after a later one's is not missed.
//!
//! Printed, one JSON line each: the enqueue rate of 4 concurrent enqueuers (one job per transaction, durable) with
//! no trigger, the InnoDB signal row, the MEMORY signal row and the MEMORY log, medians of `runs` alternating runs; the wake-up latency
//! (commit returned to the watcher knowing the row is committed) at poll intervals of 5 to 100 ms; and what an
//! idle watcher costs at each interval (this process and the server, % of one core over 10 s).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::sqlx::mysql::MySqlConnection;
use sea_orm::sqlx::{self, Connection, Row};

use crate::BoxError;
use crate::idle_cpu::cpu_ticks;
use crate::latency::{Latency, epoch_us};

/// The command-line name of this measurement.
pub(crate) const MARIADB_WAKE: &str = "mariadb-wake";

/// Concurrent enqueuers of the rate measurement.
const ENQUEUERS: u64 = 4;
/// Jobs per run of the rate measurement.
const RATE_JOBS: u64 = 4_000;
/// Jobs timed per wake-up run.
const WAKE_JOBS: u64 = 300;
/// Poll intervals of the MEMORY signal.
const INTERVALS_MS: [u64; 5] = [5, 10, 25, 50, 100];
/// How long the idle watcher is measured.
const IDLE: Duration = Duration::from_secs(10);

/// Where the trigger writes the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    None,
    Innodb,
    Memory,
    MemoryLog,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::None => "none",
            Signal::Innodb => "innodb",
            Signal::Memory => "memory",
            Signal::MemoryLog => "memory_log",
        }
    }
}

/// Runs every measurement against the server `url` names (any database; a scratch one is made and dropped).
pub(crate) fn mariadb_wake(argv: &[String]) -> Result<(), BoxError> {
    let url = argv.first().ok_or("usage: outbox-bench mariadb-wake mysql://USER@HOST:PORT/DB [RUNS]")?;
    let runs: usize = argv.get(1).map(|r| r.parse()).transpose()?.unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let scratch = format!("bench_{:016x}", fastrand::u64(..));
        let mut admin = MySqlConnection::connect(url).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {scratch}"))).execute(&mut admin).await?;
        let db_url = with_database(url, &scratch);
        let measured = measure(&db_url, runs).await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE {scratch}"))).execute(&mut admin).await?;
        measured
    })
}

async fn measure(url: &str, runs: usize) -> Result<(), BoxError> {
    let mut conn = MySqlConnection::connect(url).await?;
    let flush: u64 = sqlx::query("SELECT @@innodb_flush_log_at_trx_commit").fetch_one(&mut conn).await?.try_get(0)?;
    if flush != 1 {
        return Err(
            format!("the server must sync every commit (innodb_flush_log_at_trx_commit = 1), not {flush}").into()
        );
    }
    sqlx::raw_sql(
        "CREATE TABLE jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload TEXT NOT NULL) ENGINE=InnoDB; \
         CREATE TABLE signal_innodb (id INT PRIMARY KEY, last_id BIGINT NOT NULL) ENGINE=InnoDB; \
         CREATE TABLE signal_memory (id INT PRIMARY KEY, last_id BIGINT NOT NULL) ENGINE=MEMORY; \
         CREATE TABLE wake_log (seq BIGINT AUTO_INCREMENT, job_id BIGINT NOT NULL, PRIMARY KEY USING BTREE (seq)) ENGINE=MEMORY; \
         INSERT INTO signal_innodb VALUES (1, 0); INSERT INTO signal_memory VALUES (1, 0)",
    )
    .execute(&mut conn)
    .await?;

    // Enqueue rates, the four signals alternating run by run.
    let mut rates: Vec<(Signal, Vec<f64>)> = [Signal::None, Signal::Innodb, Signal::Memory, Signal::MemoryLog]
        .into_iter()
        .map(|s| (s, Vec::new()))
        .collect();
    for _ in 0..runs {
        for (signal, measured) in &mut rates {
            set_trigger(&mut conn, *signal).await?;
            measured.push(enqueue_rate(url).await?);
        }
    }
    let none = median(&rates[0].1);
    for (signal, measured) in &rates {
        let m = median(measured);
        println!(
            "{}",
            serde_json::json!({"measure": "enqueue_rate", "signal": signal.name(), "enqueuers": ENQUEUERS,
                "jobs_per_sec": round(m), "of_no_trigger": round2(m / none), "runs": measured.iter().map(|r| round(*r)).collect::<Vec<_>>()})
        );
    }

    // Wake-up latency through the MEMORY log, and an idle watcher's cost, at each poll interval.
    set_trigger(&mut conn, Signal::MemoryLog).await?;
    // The engine keeps a minute of the log; the rate runs left thousands of rows.
    sqlx::raw_sql("DELETE FROM wake_log").execute(&mut conn).await?;
    for interval in INTERVALS_MS {
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        for _ in 0..runs {
            let latency = wake_latency(url, Duration::from_millis(interval)).await?;
            p50.push(latency.p50_ms);
            p99.push(latency.p99_ms);
        }
        let (own, server) = idle_cost(url, Duration::from_millis(interval)).await?;
        println!(
            "{}",
            serde_json::json!({"measure": "wake", "signal": "memory_log", "poll_ms": interval,
                "p50_ms": round2(median(&p50)), "p99_ms": round2(median(&p99)), "p50_runs": p50, "p99_runs": p99,
                "idle_watcher_cpu_pct": round2(own), "idle_server_cpu_pct": round2(server)})
        );
    }
    Ok(())
}

async fn set_trigger(conn: &mut MySqlConnection, signal: Signal) -> Result<(), BoxError> {
    sqlx::raw_sql("DROP TRIGGER IF EXISTS jobs_signal").execute(&mut *conn).await?;
    let write = match signal {
        Signal::None => return Ok(()),
        Signal::Innodb => "UPDATE signal_innodb SET last_id = NEW.id WHERE id = 1",
        Signal::Memory => "UPDATE signal_memory SET last_id = NEW.id WHERE id = 1",
        Signal::MemoryLog => "INSERT INTO wake_log (job_id) VALUES (NEW.id)",
    };
    let sql = format!("CREATE TRIGGER jobs_signal AFTER INSERT ON jobs FOR EACH ROW {write}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut *conn).await?;
    Ok(())
}

/// Jobs per second of [`ENQUEUERS`] connections each enqueuing its share of [`RATE_JOBS`], one per transaction.
async fn enqueue_rate(url: &str) -> Result<f64, BoxError> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..ENQUEUERS {
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut conn = MySqlConnection::connect(&url).await?;
            for _ in 0..RATE_JOBS / ENQUEUERS {
                let mut tx = conn.begin().await?;
                sqlx::query("INSERT INTO jobs (payload) VALUES (?)").bind("{\"n\":1}").execute(&mut *tx).await?;
                tx.commit().await?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(RATE_JOBS as f64 / start.elapsed().as_secs_f64())
}

/// One watcher polling the MEMORY log every `interval`, and one enqueuer committing [`WAKE_JOBS`] jobs 0 to
/// 20 ms apart: each job timed from its commit returning to the watcher knowing it is committed.
async fn wake_latency(url: &str, interval: Duration) -> Result<Latency, BoxError> {
    let mut conn = MySqlConnection::connect(url).await?;
    let from = logged_through(&mut conn).await?;
    let heard: Arc<Mutex<Vec<(i64, i64)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (url, heard, stop) = (url.to_owned(), Arc::clone(&heard), Arc::clone(&stop));
        tokio::spawn(async move {
            watch(&url, interval, &stop, from, |id| heard.lock().map(|mut h| h.push((id, epoch_us())))).await
        })
    };
    let mut committed = Vec::with_capacity(WAKE_JOBS as usize);
    for _ in 0..WAKE_JOBS {
        let mut tx = conn.begin().await?;
        let id =
            sqlx::query("INSERT INTO jobs (payload) VALUES (?)").bind("{}").execute(&mut *tx).await?.last_insert_id();
        tx.commit().await?;
        committed.push((i64::try_from(id)?, epoch_us()));
        tokio::time::sleep(Duration::from_micros(fastrand::u64(0..20_000))).await;
    }
    tokio::time::sleep(interval * 4).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.await??;
    let heard = heard.lock().map_err(|_| "lock poisoned")?.clone();
    let mut ms = Vec::with_capacity(committed.len());
    for (id, at) in committed {
        let first = heard.iter().filter(|(h, _)| *h == id).map(|(_, t)| *t).min();
        let first = first.ok_or_else(|| format!("mariadb-wake: job {id} was never heard"))?;
        ms.push((first - at).max(0) as f64 / 1000.0);
    }
    Ok(Latency::of(ms))
}

/// Polls the MEMORY log every `interval` until `stop`, from after `seen`; for the jobs logged since its last look, waits until each
/// one's row is committed (or rolled back) and calls `heard` with each id.
async fn watch<E>(
    url: &str,
    interval: Duration,
    stop: &std::sync::atomic::AtomicBool,
    mut seen: i64,
    mut heard: impl FnMut(i64) -> Result<(), E>,
) -> Result<(), BoxError> {
    let mut conn = MySqlConnection::connect(url).await?;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let logged = sqlx::query("SELECT seq, job_id FROM wake_log WHERE seq > ? ORDER BY seq")
            .bind(seen)
            .fetch_all(&mut conn)
            .await?;
        if logged.is_empty() {
            tokio::time::sleep(interval).await;
            continue;
        }
        let mut ids = Vec::with_capacity(logged.len());
        for row in &logged {
            seen = seen.max(row.try_get(0)?);
            ids.push(row.try_get::<i64, _>(1)?);
        }
        // Blocks while an enqueuer's transaction holds one of the rows; autocommit ends the read's locks at once.
        let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let wait = format!("SELECT id FROM jobs WHERE id IN ({list}) LOCK IN SHARE MODE");
        sqlx::raw_sql(sqlx::AssertSqlSafe(wait)).execute(&mut conn).await?;
        for id in ids {
            if heard(id).is_err() {
                return Err("lock poisoned".into());
            }
        }
    }
    Ok(())
}

/// What a watcher polling every `interval` costs over [`IDLE`] with nothing enqueued: (this process, the server),
/// each as a share of one core.
async fn idle_cost(url: &str, interval: Duration) -> Result<(f64, f64), BoxError> {
    let mut conn = MySqlConnection::connect(url).await?;
    let pid_file: String = sqlx::query("SELECT @@pid_file").fetch_one(&mut conn).await?.try_get(0)?;
    let from = logged_through(&mut conn).await?;
    let server: u32 = std::fs::read_to_string(&pid_file)
        .map_err(|e| format!("the server's pid file {pid_file} (run on the server's machine): {e}"))?
        .trim()
        .parse()?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (url, stop) = (url.to_owned(), Arc::clone(&stop));
        tokio::spawn(async move { watch(&url, interval, &stop, from, |_| Ok::<_, ()>(())).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (own_before, server_before) = (cpu_ticks(std::process::id())?, cpu_ticks(server)?);
    let began = Instant::now();
    tokio::time::sleep(IDLE).await;
    let (own, srv) = (cpu_ticks(std::process::id())? - own_before, cpu_ticks(server)? - server_before);
    let secs = began.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.await??;
    let hz = rustix::param::clock_ticks_per_second() as f64;
    Ok((own as f64 / hz / secs * 100.0, srv as f64 / hz / secs * 100.0))
}

/// The last `seq` of the MEMORY log.
async fn logged_through(conn: &mut MySqlConnection) -> Result<i64, BoxError> {
    Ok(sqlx::query("SELECT COALESCE(MAX(seq), 0) FROM wake_log").fetch_one(conn).await?.try_get(0)?)
}

/// `server` (a URL naming any database) with `database` as its database.
fn with_database(server: &str, database: &str) -> String {
    let (base, query) = server.split_once('?').map_or((server, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let base = base[authority_end..].find('/').map_or(base, |slash| &base[..authority_end + slash]);
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
