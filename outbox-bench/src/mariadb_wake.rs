//! `outbox-bench mariadb-wake URL`: the measurements that choose how a MariaDB worker hears another process's
//! enqueue, before the MariaDB backend is built on one (see `docs/internals/mariadb.md`).
//!
//! MariaDB has no `LISTEN`, and an enqueue commits in the caller's transaction, whose end outbox does not see: a
//! signal can only be written inside the transaction, by a trigger. Three places for it are measured by what they
//! cost 4 concurrent enqueuers (one job per transaction, durable), against no trigger:
//! - an InnoDB row, which the trigger's `UPDATE` holds locked until the enqueuer commits: enqueuers queue behind
//!   one another;
//! - a MEMORY table row, written at once and not rolled back: no lock outlives the statement;
//! - what the engine will use: a MEMORY ring of 32,768 slots, each job's id written at the next place a MEMORY
//!   counter hands out, so a watcher sees every job logged since its last look (a single "last id" row would lose a
//!   job whose enqueue commits after a later one's) and the log never outgrows the server's MEMORY table limit.
//!
//! The log is written before the enqueue commits (or rolls back). The watcher takes no lock: it reads the logged
//! jobs' rows as any reader does, and looks again for those not visible yet, 1, 2, 4, … ms later.
//!
//! Printed, one JSON line each: the enqueue rates, medians of `runs` alternating runs; the wake-up latency (commit
//! returned to the watcher seeing the committed row) at poll intervals of 5 to 100 ms; and what an idle watcher
//! costs at each interval over 20 s, in % of one core: this process, and the server beyond its own idle use without
//! a watcher (measured once, first).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::sqlx::mysql::MySqlConnection;
use sea_orm::sqlx::{self, Connection, Row};

use crate::BoxError;
use crate::idle_cpu::cpu_ticks;
use crate::latency::{Latency, epoch_us};
use crate::stats::{median, round};

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
const IDLE: Duration = Duration::from_secs(20);

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
    let runs: usize = argv
        .get(1)
        .map(|r| r.parse().map_err(|e| format!("runs must be a number, not {r:?}: {e}")))
        .transpose()?
        .unwrap_or(3);
    if runs == 0 {
        return Err("runs must be at least 1".into());
    }
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
         CREATE TABLE wake_seq (id TINYINT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=MEMORY; \
         CREATE TABLE wake_log (slot INT NOT NULL, seq BIGINT NOT NULL, job_id BIGINT NOT NULL, \
             PRIMARY KEY USING BTREE (slot), KEY seq USING BTREE (seq)) ENGINE=MEMORY; \
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
                "jobs_per_sec": round(m, 1), "of_no_trigger": round(m / none, 2), "runs": measured.iter().map(|r| round(*r, 1)).collect::<Vec<_>>()})
        );
    }

    // Wake-up latency through the MEMORY log, and an idle watcher's cost, at each poll interval.
    set_trigger(&mut conn, Signal::MemoryLog).await?;
    // The log is a ring of 32,768 slots: what the rate runs left is overwritten, never pruned.
    let idle_server = idle_baseline(url).await?;
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
                "p50_ms": round(median(&p50), 2), "p99_ms": round(median(&p99), 2), "p50_runs": p50, "p99_runs": p99,
                "idle_watcher_cpu_pct": round(own, 2), "idle_server_cpu_pct": round(server - idle_server, 2),
                "idle_server_baseline_pct": round(idle_server, 2), "idle_secs": IDLE.as_secs()})
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
        Signal::MemoryLog => {
            "BEGIN \
             INSERT INTO wake_seq (id, n) VALUES (1, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE n = LAST_INSERT_ID(n + 1); \
             INSERT INTO wake_log (slot, seq, job_id) VALUES (LAST_INSERT_ID() % 32768, LAST_INSERT_ID(), NEW.id) \
             ON DUPLICATE KEY UPDATE seq = VALUES(seq), job_id = VALUES(job_id); \
             END"
        }
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
    // Until the watcher heard every job, or 10 s passed (a job it never hears is reported below).
    let deadline = Instant::now() + Duration::from_secs(10);
    while heard.lock().map_err(|_| "lock poisoned")?.len() < committed.len() && Instant::now() < deadline {
        tokio::time::sleep(interval).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.await??;
    let heard = heard.lock().map_err(|_| "lock poisoned")?.clone();
    let mut ms = Vec::with_capacity(committed.len());
    for (id, at) in committed {
        let first = heard.iter().filter(|(h, _)| *h == id).map(|(_, t)| *t).min();
        let Some(first) = first else {
            let logged: Option<(i64, i64)> = sqlx::query_as("SELECT slot, seq FROM wake_log WHERE job_id = ?")
                .bind(id)
                .fetch_optional(&mut conn)
                .await?;
            return Err(format!(
                "mariadb-wake: job {id} was never heard (logged at slot and seq {logged:?}, watched from seq {from}; \
                 heard {} jobs)",
                heard.len()
            )
            .into());
        };
        // Seen before the enqueuer's client had the commit's answer: heard at the commit, 0 ms.
        ms.push((first - at).max(0) as f64 / 1000.0);
    }
    Ok(Latency::of(ms))
}

/// Polls the MEMORY log every `interval` until `stop`, from after `seen`, and calls `heard` with each logged job
/// once its row is committed. It takes no lock: it reads the rows as any reader does, and a job logged but not yet
/// visible (its enqueue has not committed) is looked for again 1, 2, 4, … ms later, up to `interval`, then at every
/// poll, for a minute (a rolled-back enqueue's job never shows). A log that went back (the server restarted and
/// emptied its MEMORY tables) starts over.
async fn watch<E>(
    url: &str,
    interval: Duration,
    stop: &std::sync::atomic::AtomicBool,
    mut seen: i64,
    mut heard: impl FnMut(i64) -> Result<(), E>,
) -> Result<(), BoxError> {
    let mut conn = MySqlConnection::connect(url).await?;
    let mut pending: Vec<(i64, Instant)> = Vec::new();
    let mut backoff = Duration::from_millis(1);
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        // One round trip: the entries after `seen`, and the counter only if it went back.
        let logged = sqlx::query(
            "SELECT seq, job_id FROM wake_log WHERE seq > ? UNION ALL SELECT -n, 0 FROM wake_seq WHERE n < ?",
        )
        .bind(seen)
        .bind(seen)
        .fetch_all(&mut conn)
        .await?;
        for row in &logged {
            let seq: i64 = row.try_get(0)?;
            if seq < 0 {
                seen = 0;
                continue;
            }
            seen = seen.max(seq);
            pending.push((row.try_get(1)?, Instant::now()));
        }
        if !pending.is_empty() {
            let list = pending.iter().map(|(id, _)| id.to_string()).collect::<Vec<_>>().join(",");
            // The text protocol, one packet: a statement prepared afresh for each list (prepare, then execute) waited
            // about 50 ms for the server's delayed acknowledgement of the first packet.
            let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SELECT id FROM jobs WHERE id IN ({list})")))
                .fetch_all(&mut conn)
                .await?;
            let visible = rows.iter().map(|row| row.try_get::<i64, _>(0)).collect::<Result<Vec<_>, _>>()?;
            for id in &visible {
                if heard(*id).is_err() {
                    return Err("lock poisoned".into());
                }
            }
            pending.retain(|(id, at)| !visible.contains(id) && at.elapsed() < Duration::from_secs(60));
        }
        if pending.is_empty() {
            backoff = Duration::from_millis(1);
            tokio::time::sleep(interval).await;
        } else {
            tokio::time::sleep(backoff.min(interval)).await;
            backoff *= 2;
        }
    }
    Ok(())
}

/// The server's own CPU use over [`IDLE`] with no watcher, in % of one core: what [`idle_cost`]'s server figure is
/// taken beyond.
async fn idle_baseline(url: &str) -> Result<f64, BoxError> {
    let server = server_pid(url).await?;
    let before = cpu_ticks(server)?;
    let began = Instant::now();
    tokio::time::sleep(IDLE).await;
    let ticks = cpu_ticks(server)? - before;
    Ok(ticks as f64 / rustix::param::clock_ticks_per_second() as f64 / began.elapsed().as_secs_f64() * 100.0)
}

/// The server's process id, from its pid file (the measurement runs on the server's machine).
pub(crate) async fn server_pid(url: &str) -> Result<u32, BoxError> {
    let mut conn = MySqlConnection::connect(url).await?;
    let pid_file: String = sqlx::query("SELECT @@pid_file").fetch_one(&mut conn).await?.try_get(0)?;
    let text = std::fs::read_to_string(&pid_file)
        .map_err(|e| format!("the server's pid file {pid_file} (run on the server's machine): {e}"))?;
    Ok(text.trim().parse().map_err(|e| format!("the server's pid file {pid_file} holds {text:?}: {e}"))?)
}

/// What a watcher polling every `interval` costs over [`IDLE`] with nothing enqueued: (this process, the server),
/// each as a share of one core.
async fn idle_cost(url: &str, interval: Duration) -> Result<(f64, f64), BoxError> {
    let mut conn = MySqlConnection::connect(url).await?;
    let from = logged_through(&mut conn).await?;
    let server = server_pid(url).await?;
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
    Ok(sqlx::query("SELECT COALESCE(MAX(n), 0) FROM wake_seq").fetch_one(conn).await?.try_get(0)?)
}

/// `server` (a URL naming any database) with `database` as its database.
pub(crate) fn with_database(server: &str, database: &str) -> String {
    let (base, query) = server.split_once('?').map_or((server, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let base = base[authority_end..].find('/').map_or(base, |slash| &base[..authority_end + slash]);
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}
