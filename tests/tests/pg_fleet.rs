//! Eight worker processes drain 20,000 jobs from one PostgreSQL schema: every job runs exactly once and none
//! is left behind, also while the workers' database connections are killed every 500 ms, and through a
//! restart of the server.
//!
//! Executions are counted from the run logs the children append to before each handler goes on, not taken
//! from the job table.

// The shared module also reads the begin and end marks, which these tests do not use.
#[allow(dead_code)]
mod fleet;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fleet::{Runs, Spawn};
use outbox::EnqueueOpts;
use outbox_tests::{Backend, ChildProcess, Race, TestDb, scalar};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

const JOBS: u64 = 20_000;
/// Jobs of the run whose connections are killed: enough for a hundred rounds of kills, at a fraction of the
/// time `JOBS` took under them.
const CHAOS_JOBS: u64 = 5_000;
const WORKERS: usize = 8;
/// Jobs each process runs at once; its claims and completions come in batches about this large.
const CONCURRENCY: usize = 16;
/// Long enough that no lease expires while its worker lives: a rescue here means a lost claim.
const LEASE_MS: u64 = 30_000;
/// Generous: a debug build of eight processes on two cores.
const TIMEOUT: Duration = Duration::from_secs(300);
const KILL_EVERY: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_worker_processes_drain_twenty_thousand_jobs_exactly_once_on_postgres() {
    let test = "eight_worker_processes_drain_twenty_thousand_jobs_exactly_once_on_postgres";
    outbox_tests::run(Backend::Postgres, test, drain).await;
}

async fn drain(t: TestDb) {
    enqueue(&t, JOBS, |n| n % 3).await;
    let started = Instant::now();
    let fleet = Fleet::start(&t, &t.url, "drain");
    fleet.wait().await;
    let elapsed = started.elapsed();
    let runs = check_every_job_ran_once(&t, &fleet.logs, JOBS).await;
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE attempts <> 1").await, 0);
    outbox_tests::assert_every_claim_rescuable(&t.db, false, "after the drain").await;
    eprintln!("{JOBS} jobs by {WORKERS} processes in {elapsed:.1?}; runs per process: {:?}", runs.per_log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_whose_connections_are_killed_every_500_ms_still_run_every_job_once_on_postgres() {
    let test = "workers_whose_connections_are_killed_every_500_ms_still_run_every_job_once_on_postgres";
    outbox_tests::run(Backend::Postgres, test, chaos).await;
}

async fn chaos(t: TestDb) {
    let server = std::env::var("OUTBOX_TEST_PG_URL").expect("the server's URL");
    let admin = outbox::connect(&server).await.expect("connect to the server");
    // Names the processes' own pools; the worker names its connections itself.
    let url = format!("{}&application_name=outbox-fleet", t.url);
    // Handlers that sleep a little keep the run going through many rounds of kills.
    enqueue(&t, CHAOS_JOBS, |n| n % 20).await;
    let fleet = Fleet::start(&t, &url, "serve");
    fleet.wait_ready().await;
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let killer = tokio::spawn(kill_connections(admin.clone(), fleet.pids(), Arc::clone(&stop)));
    let checker = tokio::spawn(check_claims_while(t.connect().await, Arc::clone(&stop)));
    fleet.wait().await;
    stop.store(true, Ordering::SeqCst);
    let kills = killer.await.expect("the killer task");
    let checks = checker.await.expect("the claims' checker");
    assert!(checks > 0, "no check of the claims saw a claimed job");
    outbox_tests::assert_every_claim_rescuable(&t.db, false, "after the chaos").await;
    let elapsed = started.elapsed();

    let warnings = fleet.warnings();
    let runs = check_every_job_ran_once(&t, &fleet.logs, CHAOS_JOBS).await;
    let reclaimed = scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE attempts <> 1").await;
    eprintln!(
        "{CHAOS_JOBS} jobs by {WORKERS} processes in {elapsed:.1?}; {} connections killed ({:?}) in {} of {} rounds; \
         {reclaimed} jobs claimed more than once (a claim lost with its connection); warnings and errors the \
         workers logged: {warnings:?}; runs per process: {:?}",
        kills.killed, kills.by_app, kills.rounds_with_kills, kills.rounds, runs.per_log
    );
    assert!(kills.killed > 0 && kills.rounds_with_kills >= 3, "too few connections were killed: {kills:?}");
    // The worker's own connections (claims, completions, LISTEN), not only the pool the process opened.
    assert!(kills.by_app.keys().any(|app| app != "outbox-fleet"), "no worker connection was killed: {kills:?}");
    admin.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_drain_through_a_server_restart_without_help_on_postgres() {
    let test = "workers_drain_through_a_server_restart_without_help_on_postgres";
    let Some(cluster) = outbox_tests::PgCluster::start(test) else { return };
    let db = outbox::connect(&cluster.url).await.expect("connect to the test's own server");
    outbox::migrate(&db).await.expect("migrate");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("unused.db");
    let t = TestDb { db, backend: Backend::Postgres, url: cluster.url.clone(), path, schema: None, mariadb: None, dir };
    enqueue(&t, JOBS, |n| n % 10).await;
    let fleet = Fleet::start(&t, &t.url, "serve");
    fleet.wait_ready().await;
    let started = Instant::now();
    // Restart once a quarter of the jobs ran, while every worker is busy claiming and completing.
    let quarter = outbox_tests::eventually(TIMEOUT, || async {
        scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await >= JOBS as i64 / 4
    })
    .await;
    assert!(quarter, "a quarter of the jobs never completed: {}", fleet.stderr_tails());
    let before = scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await;
    cluster.restart_fast();
    fleet.wait().await;
    let elapsed = started.elapsed();
    // The test's own pool lost its connections with the restart.
    let db = outbox::connect(&cluster.url).await.expect("reconnect");
    let t = TestDb { db, ..t };
    let warnings = fleet.warnings();
    let runs = check_every_job_ran_once(&t, &fleet.logs, JOBS).await;
    outbox_tests::assert_every_claim_rescuable(&t.db, false, "after the restart").await;
    eprintln!(
        "{JOBS} jobs by {WORKERS} processes in {elapsed:.1?}, restarted after {before} completed; warnings and \
         errors the workers logged: {warnings:?}; runs per process: {:?}",
        runs.per_log
    );
    assert!(before < JOBS as i64, "every job completed before the restart: it tested nothing");
    assert!(!warnings.is_empty(), "no worker noticed the restart");
}

/// Checks, until `stop`, that every claimed job is one a rescue would find, whatever the kills do to the
/// workers' statements; how many checks saw claimed jobs. Each check reads one snapshot, so it sees a claim's
/// job and its claim row together or neither.
async fn check_claims_while(db: DatabaseConnection, stop: Arc<AtomicBool>) -> usize {
    let mut saw_claims = 0;
    while !stop.load(Ordering::SeqCst) {
        outbox_tests::assert_every_claim_rescuable(&db, false, "while connections are killed").await;
        if scalar(&db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed'").await > 0 {
            saw_claims += 1;
        }
        // Paced, not timed: the checks only need to land while jobs are claimed.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    db.close().await.expect("close");
    saw_claims
}

/// Enqueues the `Race` jobs, `sleep_ms(n)` each, in batches of 1,000.
async fn enqueue(t: &TestDb, count: u64, sleep_ms: impl Fn(u64) -> u64) {
    let jobs: Vec<Race> = (0..count).map(|n| Race { n, sleep_ms: sleep_ms(n) }).collect();
    for chunk in jobs.chunks(1_000) {
        outbox::enqueue_batch(&t.db, chunk, EnqueueOpts::new()).await.expect("enqueue");
    }
}

/// The children, their run logs and their stderr files. A child is killed with its process group when its
/// handle is dropped, so a failed test does not leave its workers running.
struct Fleet {
    children: std::sync::Mutex<Vec<ChildProcess>>,
    logs: Vec<PathBuf>,
    stderrs: Vec<PathBuf>,
}

impl Fleet {
    fn start(t: &TestDb, url: &str, mode: &str) -> Fleet {
        let logs: Vec<PathBuf> = (0..WORKERS).map(|i| t.dir.path().join(format!("runs-{i}.log"))).collect();
        let stderrs: Vec<PathBuf> = (0..WORKERS).map(|i| t.dir.path().join(format!("stderr-{i}.log"))).collect();
        let children = logs
            .iter()
            .zip(&stderrs)
            .map(|(log, stderr)| {
                Spawn { url, log, mode, lease_ms: LEASE_MS, concurrency: CONCURRENCY, stderr: Some(stderr) }.start()
            })
            .collect();
        Fleet { children: std::sync::Mutex::new(children), logs, stderrs }
    }

    /// Waits until every child has built its worker.
    async fn wait_ready(&self) {
        let ready = outbox_tests::eventually(TIMEOUT, || async {
            self.logs.iter().all(|log| ready_file(log).exists()) || self.any_exited()
        })
        .await;
        assert!(ready && !self.any_exited(), "the workers did not all start: {}", self.stderr_tails());
    }

    fn pids(&self) -> Vec<u32> {
        self.children.lock().expect("children").iter().map(|c| c.id()).collect()
    }

    fn any_exited(&self) -> bool {
        let mut children = self.children.lock().expect("children");
        children.iter_mut().any(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Waits for every child to exit and checks that each succeeded.
    async fn wait(&self) {
        let mut children = std::mem::take(&mut *self.children.lock().expect("children"));
        let statuses = fleet::wait_all(&mut children, TIMEOUT).await;
        let failed: Vec<_> = statuses.iter().filter(|s| !s.success()).collect();
        assert!(failed.is_empty(), "worker processes failed: {failed:?}\n{}", self.stderr_tails());
    }

    /// How many warnings and errors the children logged, by level, target and message (fields left out).
    fn warnings(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for path in &self.stderrs {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            for line in text.lines() {
                let mut words = line.split_whitespace().skip(1).peekable();
                if !words.peek().is_some_and(|level| *level == "WARN" || *level == "ERROR") {
                    continue;
                }
                let message: Vec<&str> = words.take_while(|w| !w.contains('=')).collect();
                *counts.entry(message.join(" ")).or_default() += 1;
            }
        }
        counts
    }

    fn stderr_tails(&self) -> String {
        let tail = |p: &PathBuf| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(5)..].join("\n")
        };
        self.stderrs.iter().map(|p| format!("{}:\n{}", p.display(), tail(p))).collect::<Vec<_>>().join("\n")
    }
}

fn ready_file(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".ready");
    PathBuf::from(name)
}

/// Every job completed, none pending, claimed or failed, and every one executed exactly once.
async fn check_every_job_ran_once(t: &TestDb, logs: &[PathBuf], count: u64) -> Runs {
    let runs = Runs::read(logs);
    let twice = runs.twice();
    assert!(
        twice.is_empty(),
        "{} jobs executed more than once ((attempt, pid) of each run): {:?}",
        twice.len(),
        &twice[..twice.len().min(20)]
    );
    let left = scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status <> 'completed'").await;
    assert_eq!(left, 0, "jobs left behind (not completed)");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, count as i64);
    let statement = Statement::from_string(DbBackend::Postgres, "SELECT id FROM outbox_jobs");
    let rows = t.db.query_all_raw(statement).await.expect("job ids");
    let ids: HashSet<String> = rows.iter().map(|r| r.try_get_by_index::<String>(0).expect("id")).collect();
    let ran: HashSet<String> = runs.by_job.keys().cloned().collect();
    let never: Vec<_> = ids.difference(&ran).take(20).collect();
    assert!(never.is_empty(), "completed without a logged run: {never:?} (runs per process: {:?})", runs.per_log);
    let unknown: Vec<_> = ran.difference(&ids).take(20).collect();
    assert!(unknown.is_empty(), "runs of jobs that do not exist: {unknown:?}");
    runs
}

/// What the killer did.
#[derive(Debug, Default)]
struct Kills {
    rounds: u64,
    rounds_with_kills: u64,
    killed: i64,
    /// Connections killed by `application_name`: the worker's pool, its claim connection, its listener, the
    /// process's own pool.
    by_app: BTreeMap<String, i64>,
}

/// Every [`KILL_EVERY`] until `stop`, terminates every server connection the processes `pids` hold. The
/// worker names its own connections (`outbox-worker`, `outbox-claimer`, `outbox-listener`) whatever the URL
/// says, and other tests' workers share those names, so connections are told apart by their client port.
async fn kill_connections(admin: DatabaseConnection, pids: Vec<u32>, stop: Arc<AtomicBool>) -> Kills {
    let mut kills = Kills::default();
    let mut interval = tokio::time::interval(KILL_EVERY);
    loop {
        interval.tick().await;
        if stop.load(Ordering::SeqCst) {
            return kills;
        }
        kills.rounds += 1;
        let ports = tcp_ports_of(&pids);
        if ports.is_empty() {
            continue;
        }
        let list = ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
        let sql = format!(
            "SELECT application_name, COUNT(*) FROM (SELECT application_name, pg_terminate_backend(pid) AS killed \
             FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND client_port IN ({list})) k WHERE killed GROUP BY application_name"
        );
        let rows = admin.query_all_raw(Statement::from_string(DbBackend::Postgres, sql)).await.expect("kill");
        let mut killed = 0;
        for row in rows {
            let app: String = row.try_get_by_index(0).expect("application_name");
            let n: i64 = row.try_get_by_index(1).expect("a count");
            // The worker appends its id to the names it gives its connections.
            let app = app.split_whitespace().next().unwrap_or_default().to_owned();
            *kills.by_app.entry(app).or_default() += n;
            killed += n;
        }
        if killed > 0 {
            kills.rounds_with_kills += 1;
            kills.killed += killed;
        }
    }
}

/// The local ports of the TCP sockets the processes `pids` hold (Linux: their `/proc/PID/fd` socket inodes
/// looked up in `/proc/net/tcp` and `tcp6`).
fn tcp_ports_of(pids: &[u32]) -> Vec<u16> {
    let mut inodes = HashSet::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else { continue };
            let target = target.to_string_lossy();
            if let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
                inodes.insert(inode.to_owned());
            }
        }
    }
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(inode)) = (fields.get(1), fields.get(9)) else { continue };
            if inodes.contains(*inode)
                && let Some(port) = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok())
            {
                ports.push(port);
            }
        }
    }
    ports
}
