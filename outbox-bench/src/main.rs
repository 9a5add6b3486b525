//! Throughput of outbox-core against the same SQL run directly: on SQLite through rusqlite on the same
//! libsqlite3, on PostgreSQL through bare sqlx on one connection.
//!
//! `cargo run --release -p outbox-bench -- [--json] [--runs N] [--jobs N] [--case NAME] [--sync full|normal]
//! [--pg-url URL] [--backend sqlite|postgres]`
//!
//! Every figure is the median of `--runs` runs, each on a fresh database: a WAL-mode file in a temporary
//! directory, or a schema of its own on the PostgreSQL server that `--pg-url` (else `OUTBOX_BENCH_PG_URL`,
//! else `OUTBOX_TEST_PG_URL`) names; without one only the SQLite rows run. `--sync` is SQLite's
//! `synchronous` (FULL, NORMAL) and, on PostgreSQL, `synchronous_commit` (FULL = on, NORMAL = off).
//! `--jobs N` (default 20,000) sizes the cases: `enqueue` runs N/10 jobs at FULL and N/4 at NORMAL (one
//! transaction each; each `enqueue` run is followed by an `enqueue_orm_ceiling` run, and the row carries their
//! ratio as `orm_ceiling_ratio`), `enqueue_batch` and `process` N, `process_memory` 5×N. `--concurrency N`
//! (default 100) is the worker's concurrency in `process`, `process_sequenced` and `held_snapshot`, and the
//! baselines' claim size. `process_memory` drains in a
//! child process (this binary again, `--drain-child`) so its RSS figures hold the worker alone (on
//! PostgreSQL, without the server's processes). `reconcile` runs outbox-fs's reconciler over 5×N completed
//! `create_file` jobs whose files are on disk (default 100,000), also in a child process
//! (`--reconcile-child`); it has no baseline. `process_sequenced` drains N jobs on N distinct sequences and
//! `process_sequenced_100` N jobs on 100 sequences (at most 100 run at once), each against the unsequenced
//! `process` of as many jobs in the same run; `claim_sequenced` times one claim of 100 over 5×N pending jobs
//! in sequences of 100 (rolled back, 21 times) against the same claim over as many unsequenced jobs.
//! `dashboard` fills a database with 5×N jobs (all but 5,000 completed, 2,000 of those failed) and times
//! what the dashboard's jobs page and overview request when they open, each against a fresh server: the
//! page, then its API requests at once; its `jobs_page_ms` and `overview_ms` are the medians.
//! `retention` drains N new jobs with a started worker whose retention prunes 50×N finished jobs completed
//! two days ago (1,000,000 by default), against the same drain beside the same old jobs with retention off;
//! it also reports how many were pruned during the drain and how long pruning all of them took.
//! `retention_partitioned` is `retention` for a kind kept in time partitions: the old jobs are in an archive
//! partition of two days ago, the new ones are archived as they complete, and retention drops the partition.
//! `latency` enqueues 1,000 jobs one per transaction, 0 to 3 ms apart (1.5 ms on average), to a started
//! worker at its defaults and times each from its commit returning to its handler starting (p50, p99, max,
//! and how many waited 100 ms or more); `latency_loaded` does the same while another task enqueues 100 jobs/s.
//! `latency_cross` is `latency` with the worker in another process (this binary again, `--latency-child`):
//! the enqueues' commits reach it through the database alone (SQLite: a watch of the file; PostgreSQL:
//! `LISTEN`); on PostgreSQL its runs also time the floor, bare sqlx doing the same inserts, claims and
//! completions with the worker told in-process or woken through `LISTEN` in another process (see
//! [`raw_pg::latency_floor`]). `idle_cpu` starts `outbox work` (the command, built beside this binary) on an
//! empty database and reports the CPU it uses over a minute of waiting, as a percentage of one core.
//! `million` drains 1,000,000 pending jobs in a child process against 20,000 in the same run; it also times a
//! claim of 100 over 10,000 and 1,000,000 pending jobs and over the million once 100,000 future-dated and
//! 100,000 unserved jobs of a higher priority stand ahead of it (deleted again before the drain), compares the
//! worker's peak RSS with a drain of 100,000, and reports the database's size after the drain and after the
//! completed jobs are deleted and the database vacuumed.
//! `stall` runs a worker on a current-thread runtime whose handler blocks it for 2 s, 20 times a run, with
//! retention passing every 10 ms, and times an application enqueue on another pool during each stall.
//! `process` and `held_snapshot` also report the database's work per job (`work.rs`): WAL bytes while the
//! jobs were enqueued, while they were drained and in all, rows written and commits, and the dead tuples left.
//! `held_snapshot` (PostgreSQL only) drains 5×N jobs while another connection holds a `REPEATABLE READ`
//! snapshot from before the drain to after it, against the same drain without it, alternating run by run.

mod dashboard;
mod http;
mod latency;
mod memory;
mod million;
mod outbox;
mod raw;
mod raw_pg;
mod reconcile;
mod retention;
mod scratch;
mod stall;
mod work;

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;

use memory::{Memory, WatchedDrain};
use scratch::{Location, Target};

/// Every error of the benchmark, reported and turned into a failing exit code by `main`.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Jobs per transaction in `enqueue_batch`.
const BATCH: u64 = 1_000;
/// Worker concurrency, and the baseline's claim size, in `process` and `process_memory`.
const CONCURRENCY: usize = 100;
/// Jobs timed per run of the latency cases, whatever `--jobs` says.
const LATENCY_JOBS: u64 = 1_000;
/// Old finished jobs per new job in the `retention` case (1,000,000 beside the default 20,000).
const RETENTION_OLD_PER_JOB: u64 = 50;

/// The database engine of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
enum Backend {
    Sqlite,
    #[value(alias = "postgresql")]
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// How durable a commit is: SQLite's `synchronous` (FULL, NORMAL), PostgreSQL's `synchronous_commit`
/// (on, off). The weaker setting may lose the last commits on power loss (PostgreSQL: on a server crash too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
enum SyncMode {
    Full,
    Normal,
}

impl SyncMode {
    fn name(self) -> &'static str {
        match self {
            SyncMode::Full => "FULL",
            SyncMode::Normal => "NORMAL",
        }
    }

    /// The setting's own name on `backend`.
    fn label(self, backend: Backend) -> &'static str {
        match (backend, self) {
            (Backend::Sqlite, _) => self.name(),
            (Backend::Postgres, SyncMode::Full) => "on",
            (Backend::Postgres, SyncMode::Normal) => "off",
        }
    }

    fn is_full(self) -> bool {
        self == SyncMode::Full
    }
}

/// One timed run.
#[derive(Debug, Clone, Copy)]
struct Measure {
    jobs: u64,
    secs: f64,
}

impl Measure {
    fn jobs_per_sec(self) -> f64 {
        self.jobs as f64 / self.secs
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Enqueue,
    EnqueueOrmCeiling,
    EnqueueBatch,
    Process,
    ProcessMemory,
    ProcessSequenced,
    ProcessSequenced100,
    ClaimSequenced,
    Reconcile,
    Http,
    Dashboard,
    Retention,
    RetentionPartitioned,
    Latency,
    LatencyLoaded,
    Million,
    Stall,
    HeldSnapshot,
    LatencyCross,
    IdleCpu,
}

const CASES: [Case; 20] = [
    Case::Enqueue,
    Case::EnqueueOrmCeiling,
    Case::EnqueueBatch,
    Case::Process,
    Case::ProcessMemory,
    Case::ProcessSequenced,
    Case::ProcessSequenced100,
    Case::ClaimSequenced,
    Case::Reconcile,
    Case::Http,
    Case::Dashboard,
    Case::Retention,
    Case::RetentionPartitioned,
    Case::Latency,
    Case::LatencyLoaded,
    Case::Million,
    Case::Stall,
    Case::HeldSnapshot,
    Case::LatencyCross,
    Case::IdleCpu,
];

/// `--case` takes a case by its row name.
impl clap::ValueEnum for Case {
    fn value_variants<'a>() -> &'a [Case] {
        &CASES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

/// Sequences in `process_sequenced_100`.
const FEW_KEYS: u64 = 100;
/// Pending jobs per sequence in `claim_sequenced`.
const PER_SEQUENCE: u64 = 100;
/// Claims timed per run of `claim_sequenced`.
const CLAIM_REPS: usize = 21;

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Enqueue => "enqueue",
            Case::EnqueueOrmCeiling => "enqueue_orm_ceiling",
            Case::EnqueueBatch => "enqueue_batch",
            Case::Process => "process",
            Case::ProcessMemory => "process_memory",
            Case::ProcessSequenced => "process_sequenced",
            Case::ProcessSequenced100 => "process_sequenced_100",
            Case::ClaimSequenced => "claim_sequenced",
            Case::Reconcile => "reconcile",
            Case::Http => "http",
            Case::Dashboard => "dashboard",
            Case::Retention => "retention",
            Case::RetentionPartitioned => "retention_partitioned",
            Case::Latency => "latency",
            Case::LatencyLoaded => "latency_loaded",
            Case::Million => "million",
            Case::Stall => "stall",
            Case::HeldSnapshot => "held_snapshot",
            Case::LatencyCross => "latency_cross",
            Case::IdleCpu => "idle_cpu",
        }
    }

    fn syncs(self) -> &'static [SyncMode] {
        match self {
            Case::EnqueueOrmCeiling => &[SyncMode::Normal],
            Case::ProcessMemory
            | Case::Reconcile
            | Case::ClaimSequenced
            | Case::Dashboard
            | Case::Retention
            | Case::RetentionPartitioned
            | Case::Million
            | Case::Stall
            | Case::HeldSnapshot
            | Case::IdleCpu => &[SyncMode::Full],
            _ => &[SyncMode::Full, SyncMode::Normal],
        }
    }

    /// Jobs per run, scaled from `--jobs`.
    fn jobs(self, sync: SyncMode, base: u64) -> u64 {
        let n = match (self, sync) {
            (Case::Enqueue | Case::EnqueueOrmCeiling | Case::Http, SyncMode::Full) => base / 10,
            (Case::Enqueue | Case::EnqueueOrmCeiling | Case::Http, SyncMode::Normal) => base / 4,
            (Case::EnqueueBatch | Case::Process | Case::ProcessSequenced | Case::ProcessSequenced100, _) => base,
            (Case::Retention | Case::RetentionPartitioned, _) => base,
            (Case::Latency | Case::LatencyLoaded | Case::LatencyCross, _) => LATENCY_JOBS,
            (Case::IdleCpu, _) => 1,
            (Case::Million, _) => million::BIG,
            (Case::Stall, _) => stall::ROUNDS,
            (
                Case::ProcessMemory | Case::Reconcile | Case::ClaimSequenced | Case::Dashboard | Case::HeldSnapshot,
                _,
            ) => base * 5,
        };
        n.max(1)
    }

    /// Whether the case's jobs carry the default payload-hash idempotency key.
    fn unique(self) -> bool {
        matches!(self, Case::Enqueue | Case::EnqueueOrmCeiling | Case::EnqueueBatch | Case::Reconcile | Case::Http)
    }

    /// Whether the case runs on `backend`: a held snapshot is a PostgreSQL matter (SQLite readers hold back
    /// only checkpoints, never the reuse of a row's space).
    fn runs_on(self, backend: Backend) -> bool {
        self != Case::HeldSnapshot || backend == Backend::Postgres
    }

    fn baseline(self, backend: Backend) -> Option<&'static str> {
        match (backend, self) {
            (Backend::Sqlite, Case::Enqueue | Case::EnqueueOrmCeiling) => {
                Some("rusqlite: BEGIN IMMEDIATE; INSERT order; INSERT job ON CONFLICT DO NOTHING; COMMIT")
            }
            (Backend::Sqlite, Case::EnqueueBatch) => {
                Some("rusqlite: one transaction per 1000 jobs, multi-row INSERT, row count checked")
            }
            (Backend::Sqlite, Case::Process) => {
                Some("rusqlite: claim UPDATE ... RETURNING LIMIT 100, then 100 fenced UPDATEs in one transaction")
            }
            (Backend::Postgres, Case::Enqueue | Case::EnqueueOrmCeiling) => {
                Some("sqlx-postgres: BEGIN; INSERT order; INSERT job ON CONFLICT DO NOTHING; COMMIT")
            }
            (Backend::Postgres, Case::EnqueueBatch) => Some(
                "sqlx-postgres: one transaction per 1000 jobs, one INSERT from json_to_recordset, row count checked",
            ),
            (Backend::Postgres, Case::Process) => Some(raw_pg::PROCESS),
            (_, Case::ProcessSequenced | Case::ProcessSequenced100) => {
                Some("outbox process: as many unsequenced jobs, same worker, same run")
            }
            (_, Case::ClaimSequenced) => Some("the same claim of 100 over as many unsequenced pending jobs"),
            (
                _,
                Case::ProcessMemory
                | Case::Reconcile
                | Case::Dashboard
                | Case::Latency
                | Case::LatencyLoaded
                | Case::LatencyCross
                | Case::IdleCpu
                | Case::Stall,
            ) => None,
            (_, Case::Million) => Some("the same worker draining 20,000 jobs, same run"),
            (_, Case::HeldSnapshot) => Some("the same drain with no snapshot held, runs alternating"),
            (_, Case::Retention | Case::RetentionPartitioned) => {
                Some("the same drain beside the same old finished jobs, retention off")
            }
            (_, Case::Http) => Some("outbox enqueue in process: 16 tasks on the pool, one job per statement"),
        }
    }
}

/// Throughput of outbox-core against the same SQL run directly (rusqlite, bare sqlx), the median of
/// `--runs` runs each on a fresh database.
#[derive(Debug, Parser)]
#[command(
    name = "outbox-bench",
    args_override_self = true,
    after_help = "PostgreSQL rows run when --pg-url, OUTBOX_BENCH_PG_URL or OUTBOX_TEST_PG_URL names a server"
)]
struct Args {
    /// One JSON object per row instead of a table.
    #[arg(long)]
    json: bool,
    /// Runs per row; the row holds their median.
    #[arg(long, value_name = "N", default_value_t = 3)]
    runs: usize,
    /// Sizes the cases: `enqueue` runs N/10 jobs at FULL and N/4 at NORMAL, `process` N, `process_memory` 5×N.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    jobs: u64,
    /// Only this case.
    #[arg(long, value_name = "NAME")]
    case: Option<Case>,
    /// Only this durability: SQLite's `synchronous`, PostgreSQL's `synchronous_commit` (full = on, normal = off).
    #[arg(long, ignore_case = true)]
    sync: Option<SyncMode>,
    /// Only this database engine.
    #[arg(long, ignore_case = true)]
    backend: Option<Backend>,
    /// The PostgreSQL server the PostgreSQL rows run on.
    #[arg(long, value_name = "URL")]
    pg_url: Option<String>,
    /// Worker concurrency in the process cases (`process`, `process_sequenced`, `held_snapshot`), and the
    /// baselines' claim size.
    #[arg(long, value_name = "N", default_value_t = CONCURRENCY)]
    concurrency: usize,
}

/// The arguments, checked beyond what clap checks; `--pg-url` defaults to the first of
/// `OUTBOX_BENCH_PG_URL` and `OUTBOX_TEST_PG_URL` that is set and not empty.
fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args::parse();
    args.pg_url = args.pg_url.or_else(|| {
        ["OUTBOX_BENCH_PG_URL", "OUTBOX_TEST_PG_URL"]
            .into_iter()
            .find_map(|var| std::env::var(var).ok().filter(|url| !url.is_empty()))
    });
    if args.runs == 0 || args.jobs == 0 || args.concurrency == 0 {
        return Err("--runs, --jobs and --concurrency must be at least 1".into());
    }
    if args.backend == Some(Backend::Postgres) && args.pg_url.is_none() {
        return Err("--backend postgres needs a server: --pg-url URL".into());
    }
    Ok(args)
}

/// One output line.
#[derive(Debug, Serialize)]
struct Row {
    case: &'static str,
    backend: &'static str,
    sync: &'static str,
    jobs: u64,
    jobs_per_sec: f64,
    /// Median seconds of one run (the `reconcile` case).
    #[serde(skip_serializing_if = "Option::is_none")]
    seconds: Option<f64>,
    baseline_jobs_per_sec: Option<f64>,
    ratio: Option<f64>,
    runs: usize,
    /// Whether jobs carry the payload-hash idempotency key (`unique = true`, the default).
    unique: bool,
    /// Jobs per transaction on the enqueue side; null for the process cases.
    jobs_per_txn: Option<u64>,
    /// Worker concurrency (and the baseline's claim size) in the process cases.
    concurrency: Option<usize>,
    baseline: Option<&'static str>,
    run_jobs_per_sec: Vec<f64>,
    baseline_run_jobs_per_sec: Vec<f64>,
    /// 1-minute load average when the case finished: other work on the machine (builds) skews fsync-bound
    /// FULL figures most.
    load_avg_1m: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rss_before_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_rss_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rss_after_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vm_hwm_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hwm_reset: Option<bool>,
    /// The `http` case: commit-to-client latency of the event stream (medians over the runs), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    sse_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sse_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sse_max_ms: Option<f64>,
    /// The latency cases: commit returned to handler started (medians over the runs), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    start_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_max_ms: Option<f64>,
    /// The latency cases: jobs that waited 100 ms or more, over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    start_waited_100ms: Option<u64>,
    /// Case `latency_cross` on PostgreSQL: its floor, bare sqlx doing the same enqueues and claims (commit
    /// returned to claim returned, medians over the runs, ms), with the worker told in the enqueuing process,
    /// woken in another by `LISTEN` and claiming on a second connection, and claiming on the listening one.
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_in_process_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_in_process_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_listen_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_listen_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_listen_and_claim_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    floor_listen_and_claim_p99_ms: Option<f64>,
    /// Case `stall`: an application enqueue on its own pool while a worker's runtime is stalled for 2 s (20
    /// stalls a run): its time (medians over the runs), ms, and how many of all took 100 ms or more.
    #[serde(skip_serializing_if = "Option::is_none")]
    stall_enqueue_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stall_enqueue_max_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stall_enqueue_waited_100ms: Option<u64>,
    /// Case `idle_cpu`: an idle `outbox work`'s CPU time over a minute, % of one core (median over the runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_cpu_percent: Option<f64>,
    /// Case `dashboard`: the jobs page's first requests, start to last answer, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    jobs_page_ms: Option<f64>,
    /// Case `dashboard`: the overview's first requests, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    overview_ms: Option<f64>,
    /// Case `enqueue`: `enqueue_orm_ceiling` measured in the same runs, alternating with ours, and our ratio to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    orm_ceiling_jobs_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    orm_ceiling_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    orm_ceiling_run_jobs_per_sec: Option<Vec<f64>>,
    /// Case `million`: the median claim of 100 over 10,000 pending jobs, over 1,000,000, and over 1,000,000
    /// behind 100,000 future-dated and 100,000 unserved jobs of a higher priority, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    claim_10k_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    claim_1m_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    claim_1m_head_ms: Option<f64>,
    /// Case `million`: the worker's peak RSS draining 100,000 and 1,000,000 jobs, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_rss_100k_mb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_rss_1m_mb: Option<f64>,
    /// Case `million`: the database's size after the drain, and after deleting the completed jobs and
    /// vacuuming, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    db_mb_after_drain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    db_mb_after_vacuum: Option<f64>,
    /// The database's work per job (cases `process` and `held_snapshot`, medians over the runs): WAL bytes
    /// written while the jobs were enqueued, while they were drained, and in all (PostgreSQL; on SQLite the
    /// bytes this process wrote: WAL frames and checkpoints), rows written and commits (PostgreSQL), and the
    /// dead tuples left in the tables after the drain (PostgreSQL).
    #[serde(skip_serializing_if = "Option::is_none")]
    wal_bytes_per_job_enqueue: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wal_bytes_per_job_drain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wal_bytes_per_job: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rows_per_job: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    commits_per_job: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_tuples: Option<i64>,
    /// Case `held_snapshot`: the same figures of the drain with no snapshot held.
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_wal_bytes_per_job_drain: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_dead_tuples: Option<i64>,
    /// Case `retention`: finished jobs older than their age when the drain starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    old_jobs: Option<u64>,
    /// Case `retention`: how many of them were pruned by the time the drain ended (median).
    #[serde(skip_serializing_if = "Option::is_none")]
    pruned_during_drain: Option<u64>,
    /// Case `retention`: seconds from the worker's start until all were pruned (median).
    #[serde(skip_serializing_if = "Option::is_none")]
    prune_all_secs: Option<f64>,
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 }
}

fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// Runs one case on one backend at one sync setting `runs` times, outbox and baseline alternating, and
/// summarizes it.
struct Runner {
    rt: tokio::runtime::Runtime,
    runs: usize,
    base_jobs: u64,
    /// Worker concurrency in the process cases (`--concurrency`).
    concurrency: usize,
    /// The PostgreSQL server the `postgres` rows run on.
    pg_url: Option<String>,
    /// Baseline runs already measured, by (baseline, backend, sync, jobs): the ORM ceiling shares `enqueue`'s.
    baselines: HashMap<(&'static str, &'static str, SyncMode, u64), Vec<f64>>,
}

impl Runner {
    /// The worker concurrency (and baseline claim size) `case` runs at: `--concurrency` in the cases it sizes,
    /// [`CONCURRENCY`] in the others (`process_memory`'s child, the claims of `claim_sequenced` and `million`,
    /// `retention`).
    fn concurrency_for(&self, case: Case) -> usize {
        match case {
            Case::Process | Case::ProcessSequenced | Case::ProcessSequenced100 | Case::HeldSnapshot => self.concurrency,
            _ => CONCURRENCY,
        }
    }

    fn target(&self, backend: Backend, sync: SyncMode) -> Result<Target, BoxError> {
        Ok(match backend {
            Backend::Sqlite => Target::Sqlite(sync),
            Backend::Postgres => {
                let server = self.pg_url.clone().ok_or("the postgres rows need a server: --pg-url URL")?;
                Target::Postgres { server, sync }
            }
        })
    }

    fn baseline_run(&self, case: Case, target: &Target, n: u64) -> Result<Measure, BoxError> {
        let prepared = match case {
            Case::ProcessSequenced | Case::ProcessSequenced100 => {
                return Ok(self.rt.block_on(outbox::process(target, n, self.concurrency_for(case)))?.0);
            }
            Case::ClaimSequenced => return self.claim_run(target, n, false),
            Case::Enqueue | Case::EnqueueOrmCeiling | Case::EnqueueBatch => self.rt.block_on(outbox::empty(target))?,
            Case::Process | Case::ProcessMemory => self.rt.block_on(outbox::backlog(target, n))?,
            Case::Reconcile => return Err("the reconcile case has no baseline".into()),
            Case::Http => return Err("the http case measures its baseline within its own run".into()),
            Case::Dashboard
            | Case::Latency
            | Case::LatencyLoaded
            | Case::LatencyCross
            | Case::IdleCpu
            | Case::Million
            | Case::Stall => {
                return Err(format!("the {} case has no baseline", case.name()).into());
            }
            Case::HeldSnapshot => {
                return Ok(self.rt.block_on(outbox::held_snapshot(target, n, self.concurrency_for(case), false))?.0);
            }
            Case::Retention | Case::RetentionPartitioned => {
                let old = n * RETENTION_OLD_PER_JOB;
                let partitioned = case == Case::RetentionPartitioned;
                return Ok(self.rt.block_on(retention::run(target, n, old, CONCURRENCY, false, partitioned))?.0);
            }
        };
        let sync = target.sync();
        let measure = match (&prepared.location, case) {
            (Location::File(path), Case::EnqueueBatch) => {
                raw::enqueue_batch(path, sync, &outbox::order_kind()?, n, BATCH)
            }
            (Location::File(path), Case::Process | Case::ProcessMemory) => {
                raw::process(path, sync, &outbox::noop_kind()?, n, self.concurrency_for(case) as u64)
            }
            (Location::File(path), _) => raw::enqueue(path, sync, &outbox::order_kind()?, n),
            (Location::Url(url), Case::EnqueueBatch) => {
                self.rt.block_on(raw_pg::enqueue_batch(url, &outbox::order_kind()?, n, BATCH))
            }
            (Location::Url(url), Case::Process | Case::ProcessMemory) => {
                self.rt.block_on(raw_pg::process(url, &outbox::noop_kind()?, n, self.concurrency_for(case) as u64))
            }
            (Location::Url(url), _) => self.rt.block_on(raw_pg::enqueue(url, &outbox::order_kind()?, n)),
        };
        self.rt.block_on(prepared.remove())?;
        measure
    }

    /// One run of a `latency_cross` floor on a fresh schema (see [`raw_pg::latency_floor`]).
    fn floor_run(&self, target: &Target, n: u64, wake: raw_pg::Wake) -> Result<latency::Latency, BoxError> {
        let prepared = self.rt.block_on(outbox::empty(target))?;
        let Location::Url(url) = &prepared.location else {
            return Err("the latency floor runs on PostgreSQL".into());
        };
        let l = self.rt.block_on(raw_pg::latency_floor(url, &outbox::noop_kind()?, n, wake));
        self.rt.block_on(prepared.remove())?;
        l
    }

    /// One claim of [`CONCURRENCY`] jobs over `n` pending ones (in sequences of [`PER_SEQUENCE`] when
    /// `sequenced`), timed on the raw connection as the worker issues it.
    fn claim_run(&self, target: &Target, n: u64, sequenced: bool) -> Result<Measure, BoxError> {
        let prepared = if sequenced {
            self.rt.block_on(outbox::sequenced_backlog(target, n, (n / PER_SEQUENCE).max(1)))?
        } else {
            self.rt.block_on(outbox::backlog(target, n))?
        };
        let secs = self.claim_cost(&prepared, target.sync(), if sequenced { "step" } else { "noop" });
        self.rt.block_on(prepared.remove())?;
        Ok(Measure { jobs: CONCURRENCY as u64, secs: secs? })
    }

    /// The median time of one claim of [`CONCURRENCY`] jobs of `kind` (rolled back, [`CLAIM_REPS`] times).
    fn claim_cost(&self, prepared: &scratch::Prepared, sync: SyncMode, kind: &str) -> Result<f64, BoxError> {
        let batch = CONCURRENCY as u64;
        match &prepared.location {
            Location::File(path) => raw::claim_cost(path, sync, &[kind], batch, CLAIM_REPS),
            Location::Url(url) => self.rt.block_on(raw_pg::claim_cost(url, &[kind], batch, CLAIM_REPS)),
        }
    }

    /// Preloads a database here, then drains it in a fresh child process whose RSS holds the worker alone.
    fn process_memory_run(&self, target: &Target, n: u64) -> Result<(Measure, Memory), BoxError> {
        let prepared = self.rt.block_on(outbox::backlog(target, n))?;
        let drained = self.drain_in_child(&prepared, target.sync(), n);
        self.rt.block_on(prepared.remove())?;
        drained
    }

    /// Drains the `n` pending `noop` jobs of `prepared` in a fresh child process.
    fn drain_in_child(
        &self,
        prepared: &scratch::Prepared,
        sync: SyncMode,
        n: u64,
    ) -> Result<(Measure, Memory), BoxError> {
        let output = std::process::Command::new(std::env::current_exe()?)
            .arg(DRAIN_CHILD)
            .arg(prepared.location.arg())
            .arg(sync.name())
            .arg(n.to_string())
            .stderr(std::process::Stdio::inherit())
            .output()?;
        if !output.status.success() {
            return Err(format!("the draining child failed: {}", output.status).into());
        }
        let report: WatchedDrain = serde_json::from_slice(&output.stdout)?;
        Ok((Measure { jobs: n, secs: report.secs }, report.memory))
    }

    /// One run of case `million`: the big drain's rate, with the figures it is compared with.
    fn million_run(&self, target: &Target) -> Result<(Measure, Measure, million::Scale), BoxError> {
        let sync = target.sync();
        let claim_small_ms = self.claim_run(target, million::SMALL_CLAIM, false)?.secs * 1000.0;
        let (small, _) = self.process_memory_run(target, million::SMALL_DRAIN)?;
        let (_, small_memory) = self.process_memory_run(target, million::MEMORY_DRAIN)?;
        let prepared = self.rt.block_on(outbox::backlog(target, million::BIG))?;
        let measured = (|| {
            let claim_big_ms = self.claim_cost(&prepared, sync, "noop")? * 1000.0;
            self.rt.block_on(million::add_head(&prepared.location, sync))?;
            let claim_head_ms = self.claim_cost(&prepared, sync, "noop")? * 1000.0;
            self.rt.block_on(million::remove_head(&prepared.location, sync))?;
            let (big, memory) = self.drain_in_child(&prepared, sync, million::BIG)?;
            let (drained_mb, reclaimed_mb) = self.rt.block_on(million::sizes(&prepared, sync))?;
            let scale = million::Scale {
                claim_small_ms,
                claim_big_ms,
                claim_head_ms,
                rss_small_mb: small_memory.peak_rss_mb,
                rss_big_mb: memory.peak_rss_mb,
                drained_mb,
                reclaimed_mb,
            };
            Ok::<_, BoxError>((big, scale))
        })();
        self.rt.block_on(prepared.remove())?;
        let (big, scale) = measured?;
        Ok((big, small, scale))
    }

    /// Prepares a tree and its completed jobs here, then reconciles it in a fresh child process.
    fn reconcile_run(&self, target: &Target, n: u64) -> Result<(Measure, Memory), BoxError> {
        let prepared = self.rt.block_on(reconcile::prepare(target, n))?;
        let output = std::process::Command::new(std::env::current_exe()?)
            .arg(RECONCILE_CHILD)
            .arg(prepared.db.location.arg())
            .arg(&prepared.root)
            .arg(n.to_string())
            .stderr(std::process::Stdio::inherit())
            .output()?;
        self.rt.block_on(prepared.db.remove())?;
        if !output.status.success() {
            return Err(format!("the reconcile child failed: {}", output.status).into());
        }
        let report: WatchedDrain = serde_json::from_slice(&output.stdout)?;
        Ok((Measure { jobs: n, secs: report.secs }, report.memory))
    }

    fn run(&mut self, case: Case, backend: Backend, sync: SyncMode) -> Result<Row, BoxError> {
        let target = self.target(backend, sync)?;
        let n = case.jobs(sync, self.base_jobs);
        let baseline = case.baseline(backend);
        let cached = baseline.and_then(|b| self.baselines.get(&(b, backend.name(), sync, n)).cloned());
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        let mut memory = Vec::new();
        let mut latencies = Vec::new();
        let mut starts = Vec::new();
        let mut stalls = Vec::new();
        let mut pages = Vec::new();
        let mut pruned = Vec::new();
        let mut scales = Vec::new();
        let mut idle = Vec::new();
        let mut ceilings = Vec::new();
        let mut works: Vec<work::Work> = Vec::new();
        let mut free_works: Vec<work::Work> = Vec::new();
        let mut floors: Vec<(raw_pg::Wake, Vec<latency::Latency>)> =
            [raw_pg::Wake::InProcess, raw_pg::Wake::Listen, raw_pg::Wake::ListenAndClaim]
                .into_iter()
                .map(|w| (w, Vec::new()))
                .collect();
        for run in 1..=self.runs {
            let (name, label, runs) = (case.name(), sync.label(backend), self.runs);
            eprintln!("{name} {} {label} run {run}/{runs} ({n} jobs)", backend.name());
            let measure = match case {
                Case::Enqueue => {
                    // The ORM ceiling alternates with it run by run, so their ratio sees the same machine.
                    let ours = self.rt.block_on(outbox::enqueue(&target, n))?;
                    ceilings.push(self.rt.block_on(outbox::enqueue_orm_ceiling(&target, n))?.jobs_per_sec());
                    ours
                }
                Case::EnqueueOrmCeiling => self.rt.block_on(outbox::enqueue_orm_ceiling(&target, n))?,
                Case::EnqueueBatch => self.rt.block_on(outbox::enqueue_batch(&target, n, BATCH))?,
                Case::Process => {
                    let (measure, w) = self.rt.block_on(outbox::process(&target, n, self.concurrency_for(case)))?;
                    works.push(w);
                    measure
                }
                Case::HeldSnapshot => {
                    // The free drain alternates with the held one, run by run, on the same server.
                    let (held, w) =
                        self.rt.block_on(outbox::held_snapshot(&target, n, self.concurrency_for(case), true))?;
                    works.push(w);
                    let (free, fw) =
                        self.rt.block_on(outbox::held_snapshot(&target, n, self.concurrency_for(case), false))?;
                    theirs.push(free.jobs_per_sec());
                    free_works.push(fw);
                    held
                }
                Case::ProcessSequenced => {
                    self.rt.block_on(outbox::process_sequenced(&target, n, n, self.concurrency_for(case)))?
                }
                Case::ProcessSequenced100 => {
                    self.rt.block_on(outbox::process_sequenced(&target, n, FEW_KEYS, self.concurrency_for(case)))?
                }
                Case::ClaimSequenced => self.claim_run(&target, n, true)?,
                Case::ProcessMemory => {
                    let (measure, mem) = self.process_memory_run(&target, n)?;
                    memory.push(mem);
                    measure
                }
                Case::Reconcile => {
                    let (measure, mem) = self.reconcile_run(&target, n)?;
                    memory.push(mem);
                    measure
                }
                Case::Http => {
                    // Its baseline (in-process enqueue) runs inside the same run, on the same database.
                    let run = self.rt.block_on(http::run(&target, n))?;
                    theirs.push(run.in_process.jobs_per_sec());
                    latencies.push(run.latency);
                    run.http
                }
                Case::Retention | Case::RetentionPartitioned => {
                    let old = n * RETENTION_OLD_PER_JOB;
                    let partitioned = case == Case::RetentionPartitioned;
                    let (measure, p) =
                        self.rt.block_on(retention::run(&target, n, old, CONCURRENCY, true, partitioned))?;
                    pruned.extend(p);
                    measure
                }
                Case::Million => {
                    let (big, small, scale) = self.million_run(&target)?;
                    theirs.push(small.jobs_per_sec());
                    scales.push(scale);
                    big
                }
                Case::Latency | Case::LatencyLoaded => {
                    let loaded = case == Case::LatencyLoaded;
                    let (measure, l) = self.rt.block_on(latency::run(&target, n, loaded))?;
                    starts.push(l);
                    measure
                }
                Case::LatencyCross => {
                    let (measure, l) = self.rt.block_on(latency::run_cross(&target, n))?;
                    starts.push(l);
                    if let Target::Postgres { .. } = &target {
                        for (wake, runs) in floors.iter_mut() {
                            runs.push(self.floor_run(&target, n, *wake)?);
                        }
                    }
                    measure
                }
                Case::IdleCpu => {
                    idle.push(self.rt.block_on(latency::idle_cpu(&target))?);
                    Measure { jobs: 1, secs: latency::IDLE_SECS as f64 }
                }
                Case::Stall => {
                    let (measure, l) = self.rt.block_on(stall::run(&target))?;
                    stalls.push(l);
                    measure
                }
                Case::Dashboard => {
                    let times = self.rt.block_on(dashboard::run(&target, n))?;
                    pages.push(times);
                    Measure { jobs: n, secs: (times.jobs_page_ms + times.overview_ms) / 1_000.0 }
                }
            };
            ours.push(measure.jobs_per_sec());
            if baseline.is_some()
                && cached.is_none()
                && !matches!(case, Case::Http | Case::Million | Case::HeldSnapshot)
            {
                theirs.push(self.baseline_run(case, &target, n)?.jobs_per_sec());
            }
        }
        if let (Some(b), Some(runs)) = (baseline, &cached) {
            theirs.clone_from(runs);
            eprintln!("{} {}: reusing the baseline runs measured for `{b}`", case.name(), sync.label(backend));
        } else if let Some(b) = baseline {
            self.baselines.insert((b, backend.name(), sync, n), theirs.clone());
        }
        let jobs_per_sec = median(&ours);
        let baseline_jobs_per_sec = (!theirs.is_empty()).then(|| median(&theirs));
        let mem = |f: fn(&Memory) -> f64| {
            (!memory.is_empty()).then(|| round(median(&memory.iter().map(f).collect::<Vec<_>>()), 1))
        };
        let process = matches!(
            case,
            Case::Process
                | Case::ProcessMemory
                | Case::ProcessSequenced
                | Case::ProcessSequenced100
                | Case::ClaimSequenced
                | Case::Retention
                | Case::RetentionPartitioned
                | Case::Million
                | Case::HeldSnapshot
        );
        Ok(Row {
            case: case.name(),
            backend: backend.name(),
            sync: sync.label(backend),
            jobs: n,
            jobs_per_sec: round(jobs_per_sec, 1),
            seconds: (case == Case::Reconcile).then(|| round(n as f64 / jobs_per_sec, 3)),
            baseline_jobs_per_sec: baseline_jobs_per_sec.map(|b| round(b, 1)),
            ratio: baseline_jobs_per_sec.map(|b| round(jobs_per_sec / b, 3)),
            runs: self.runs,
            unique: case.unique(),
            jobs_per_txn: match case {
                Case::Enqueue | Case::EnqueueOrmCeiling => Some(1),
                Case::EnqueueBatch => Some(BATCH),
                _ => None,
            },
            concurrency: process.then_some(self.concurrency_for(case)),
            baseline,
            run_jobs_per_sec: ours.iter().map(|v| round(*v, 1)).collect(),
            baseline_run_jobs_per_sec: theirs.iter().map(|v| round(*v, 1)).collect(),
            load_avg_1m: load_avg(),
            rss_before_mb: mem(|m| m.rss_before_mb),
            peak_rss_mb: mem(|m| m.peak_rss_mb),
            rss_after_mb: mem(|m| m.rss_after_mb),
            vm_hwm_mb: mem(|m| m.vm_hwm_mb),
            hwm_reset: (!memory.is_empty()).then(|| memory.iter().all(|m| m.hwm_reset)),
            sse_p50_ms: latency(&latencies, |l| l.p50_ms),
            sse_p99_ms: latency(&latencies, |l| l.p99_ms),
            sse_max_ms: latency(&latencies, |l| l.max_ms),
            start_p50_ms: latency(&starts, |l| l.p50_ms),
            start_p99_ms: latency(&starts, |l| l.p99_ms),
            start_max_ms: latency(&starts, |l| l.max_ms),
            start_waited_100ms: (!starts.is_empty()).then(|| starts.iter().map(|l| l.waited).sum()),
            floor_in_process_p50_ms: latency(&floors[0].1, |l| l.p50_ms),
            floor_in_process_p99_ms: latency(&floors[0].1, |l| l.p99_ms),
            floor_listen_p50_ms: latency(&floors[1].1, |l| l.p50_ms),
            floor_listen_p99_ms: latency(&floors[1].1, |l| l.p99_ms),
            floor_listen_and_claim_p50_ms: latency(&floors[2].1, |l| l.p50_ms),
            floor_listen_and_claim_p99_ms: latency(&floors[2].1, |l| l.p99_ms),
            stall_enqueue_p50_ms: latency(&stalls, |l| l.p50_ms),
            stall_enqueue_max_ms: latency(&stalls, |l| l.max_ms),
            stall_enqueue_waited_100ms: (!stalls.is_empty()).then(|| stalls.iter().map(|l| l.waited).sum()),
            idle_cpu_percent: (!idle.is_empty()).then(|| round(median(&idle), 3)),
            jobs_page_ms: page_time(&pages, |p| p.jobs_page_ms),
            overview_ms: page_time(&pages, |p| p.overview_ms),
            orm_ceiling_jobs_per_sec: (!ceilings.is_empty()).then(|| round(median(&ceilings), 1)),
            orm_ceiling_ratio: (!ceilings.is_empty()).then(|| round(jobs_per_sec / median(&ceilings), 3)),
            orm_ceiling_run_jobs_per_sec: (!ceilings.is_empty())
                .then(|| ceilings.iter().map(|v| round(*v, 1)).collect()),
            claim_10k_ms: scale(&scales, |s| s.claim_small_ms, 3),
            claim_1m_ms: scale(&scales, |s| s.claim_big_ms, 3),
            claim_1m_head_ms: scale(&scales, |s| s.claim_head_ms, 3),
            peak_rss_100k_mb: scale(&scales, |s| s.rss_small_mb, 1),
            peak_rss_1m_mb: scale(&scales, |s| s.rss_big_mb, 1),
            db_mb_after_drain: scale(&scales, |s| s.drained_mb, 1),
            db_mb_after_vacuum: scale(&scales, |s| s.reclaimed_mb, 1),
            wal_bytes_per_job_enqueue: per_job(&works, |w| Some(w.enqueue_bytes), 0),
            wal_bytes_per_job_drain: per_job(&works, |w| Some(w.drain_bytes), 0),
            wal_bytes_per_job: per_job(&works, |w| Some(w.life_bytes()), 0),
            rows_per_job: per_job(&works, |w| w.rows, 2),
            commits_per_job: per_job(&works, |w| w.commits, 3),
            dead_tuples: per_job(&works, |w| w.dead.map(|d| d as f64), 0).map(|d| d as i64),
            baseline_wal_bytes_per_job_drain: per_job(&free_works, |w| Some(w.drain_bytes), 0),
            baseline_dead_tuples: per_job(&free_works, |w| w.dead.map(|d| d as f64), 0).map(|d| d as i64),
            old_jobs: matches!(case, Case::Retention | Case::RetentionPartitioned).then_some(n * RETENTION_OLD_PER_JOB),
            pruned_during_drain: (!pruned.is_empty())
                .then(|| median(&pruned.iter().map(|p| p.during_drain as f64).collect::<Vec<_>>()).round() as u64),
            prune_all_secs: (!pruned.is_empty())
                .then(|| round(median(&pruned.iter().map(|p| p.all_secs).collect::<Vec<_>>()), 1)),
        })
    }
}

/// The median over runs of one figure of the database's work, when every run measured it.
fn per_job(runs: &[work::Work], f: fn(&work::Work) -> Option<f64>, digits: i32) -> Option<f64> {
    let values = runs.iter().map(f).collect::<Option<Vec<f64>>>()?;
    (!values.is_empty()).then(|| round(median(&values), digits))
}

/// The median over runs of one latency figure, when the case measured any.
fn latency(runs: &[latency::Latency], f: fn(&latency::Latency) -> f64) -> Option<f64> {
    (!runs.is_empty()).then(|| round(median(&runs.iter().map(f).collect::<Vec<_>>()), 2))
}

/// The median over runs of one figure of case `million`, when the case ran.
fn scale(runs: &[million::Scale], f: fn(&million::Scale) -> f64, digits: i32) -> Option<f64> {
    (!runs.is_empty()).then(|| round(median(&runs.iter().map(f).collect::<Vec<_>>()), digits))
}

/// The median over runs of one page's time, when the case measured any.
fn page_time(runs: &[dashboard::PageTimes], f: fn(&dashboard::PageTimes) -> f64) -> Option<f64> {
    (!runs.is_empty()).then(|| round(median(&runs.iter().map(f).collect::<Vec<_>>()), 1))
}

/// The 1-minute load average from `/proc/loadavg`.
fn load_avg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

fn table_header() -> String {
    format!(
        "{:<20} {:<8} {:<6} {:>7} {:>11} {:>11} {:>6}  notes",
        "case", "backend", "sync", "jobs", "jobs/s", "baseline/s", "ratio"
    )
}

fn table_line(row: &Row) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"));
    let mut notes = vec![if row.unique { "unique key" } else { "no key" }.to_owned()];
    if let Some(n) = row.jobs_per_txn {
        notes.push(format!("{n}/txn"));
    }
    if let Some(c) = row.concurrency {
        notes.push(format!("concurrency {c}"));
    }
    if let Some(secs) = row.seconds {
        notes.push(format!("{secs:.2} s"));
    }
    if let (Some(jobs), Some(overview)) = (row.jobs_page_ms, row.overview_ms) {
        notes.push(format!("jobs page {jobs:.1} ms, overview {overview:.1} ms"));
    }
    if let (Some(p50), Some(p99)) = (row.sse_p50_ms, row.sse_p99_ms) {
        notes.push(format!("stream p50 {p50:.2} ms, p99 {p99:.2} ms"));
    }
    if let (Some(p50), Some(p99), Some(max), Some(waited)) =
        (row.start_p50_ms, row.start_p99_ms, row.start_max_ms, row.start_waited_100ms)
    {
        notes.push(format!("start p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.1} ms, {waited} waited >= 100 ms"));
    }
    if let (Some(ceiling), Some(ratio)) = (row.orm_ceiling_jobs_per_sec, row.orm_ceiling_ratio) {
        notes.push(format!("ORM ceiling {ceiling:.0}/s, ratio {ratio:.2}"));
    }
    if let (Some(small), Some(big), Some(head)) = (row.claim_10k_ms, row.claim_1m_ms, row.claim_1m_head_ms) {
        notes.push(format!("claim 10k {small:.2} ms, 1M {big:.2} ms, 1M behind head {head:.2} ms"));
    }
    if let (Some(small), Some(big)) = (row.peak_rss_100k_mb, row.peak_rss_1m_mb) {
        notes.push(format!("peak RSS 100k {small:.1} MiB, 1M {big:.1} MiB"));
    }
    if let (Some(drained), Some(vacuumed)) = (row.db_mb_after_drain, row.db_mb_after_vacuum) {
        notes.push(format!("db {drained:.0} MiB drained, {vacuumed:.0} MiB vacuumed"));
    }
    if let (Some(life), Some(drain)) = (row.wal_bytes_per_job, row.wal_bytes_per_job_drain) {
        notes.push(format!("WAL/job {life:.0} B (drain {drain:.0} B)"));
    }
    if let (Some(rows), Some(commits)) = (row.rows_per_job, row.commits_per_job) {
        notes.push(format!("rows/job {rows:.2}, commits/job {commits:.3}"));
    }
    if let Some(dead) = row.dead_tuples {
        notes.push(format!("{dead} dead tuples"));
    }
    if let Some(load) = row.load_avg_1m {
        notes.push(format!("load {load:.1}"));
    }
    if let (Some(before), Some(peak), Some(after), Some(hwm)) =
        (row.rss_before_mb, row.peak_rss_mb, row.rss_after_mb, row.vm_hwm_mb)
    {
        notes.push(format!("RSS {before:.1} -> peak {peak:.1} -> {after:.1} MiB, HWM {hwm:.1} MiB"));
    }
    format!(
        "{:<20} {:<8} {:<6} {:>7} {:>11.0} {:>11} {:>6}  {}",
        row.case,
        row.backend,
        row.sync,
        row.jobs,
        row.jobs_per_sec,
        opt(row.baseline_jobs_per_sec, 0),
        opt(row.ratio, 2),
        notes.join(", ")
    )
}

/// The hidden first argument that makes this binary the child of a `process_memory` run:
/// `--drain-child <db file or URL> <FULL|NORMAL> <jobs>`; it prints one [`WatchedDrain`] as JSON.
const DRAIN_CHILD: &str = "--drain-child";

fn drain_child(argv: &[String]) -> Result<(), BoxError> {
    let [location, sync, jobs] = argv else {
        return Err(format!("usage: {DRAIN_CHILD} <db file or URL> <sync> <jobs>").into());
    };
    let sync = <SyncMode as clap::ValueEnum>::from_str(sync, true)?;
    let jobs: u64 = jobs.parse()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = rt.block_on(outbox::drain_watched(&Location::parse(location), sync, jobs, CONCURRENCY))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// The hidden first argument that makes this binary the child of a `reconcile` run:
/// `--reconcile-child <db file or URL> <root dir> <jobs>`; it prints one [`WatchedDrain`] as JSON.
const RECONCILE_CHILD: &str = "--reconcile-child";

fn reconcile_child(argv: &[String]) -> Result<(), BoxError> {
    let [location, root, jobs] = argv else {
        return Err(format!("usage: {RECONCILE_CHILD} <db file or URL> <root dir> <jobs>").into());
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (location, root) = (Location::parse(location), std::path::Path::new(root));
    let report = rt.block_on(reconcile::reconcile_watched(&location, root, jobs.parse()?))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// The hidden first argument that makes this binary the worker process of a `latency_cross` run:
/// `--latency-child <db file or URL> <FULL|NORMAL> <jobs>`.
const LATENCY_CHILD: &str = "--latency-child";

fn latency_child(argv: &[String]) -> Result<(), BoxError> {
    let [location, sync, jobs] = argv else {
        return Err(format!("usage: {LATENCY_CHILD} <db file or URL> <sync> <jobs>").into());
    };
    let sync = <SyncMode as clap::ValueEnum>::from_str(sync, true)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(latency::cross_child(&Location::parse(location), sync, jobs.parse()?))
}

/// The hidden first argument that makes this binary the worker process of a `latency_cross` floor on
/// PostgreSQL: `--latency-floor-child <URL> <kind> <jobs> <listen|listen-and-claim>`.
const FLOOR_CHILD: &str = "--latency-floor-child";

fn floor_child(argv: &[String]) -> Result<(), BoxError> {
    let [url, kind, jobs, wake] = argv else {
        return Err(format!("usage: {FLOOR_CHILD} <URL> <kind> <jobs> <wake>").into());
    };
    let (jobs, wake): (u64, raw_pg::Wake) = (jobs.parse()?, raw_pg::Wake::parse(wake)?);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (url, kind) = (url.clone(), kind.clone());
        let task = tokio::spawn(async move { raw_pg::floor_worker(&url, &kind, jobs, wake, None, ready_tx).await });
        ready_rx.await?;
        println!("ready");
        let started = task.await??;
        println!("{}", serde_json::to_string(&started)?);
        Ok(())
    })
}

fn run() -> Result<(), BoxError> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().is_some_and(|a| a == LATENCY_CHILD) {
        return latency_child(&argv[1..]);
    }
    if argv.first().is_some_and(|a| a == FLOOR_CHILD) {
        return floor_child(&argv[1..]);
    }
    if argv.first().is_some_and(|a| a == DRAIN_CHILD) {
        return drain_child(&argv[1..]);
    }
    if argv.first().is_some_and(|a| a == RECONCILE_CHILD) {
        return reconcile_child(&argv[1..]);
    }
    let args = parse_args()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let backends: Vec<Backend> = [Backend::Sqlite, Backend::Postgres]
        .into_iter()
        .filter(|&b| args.backend.is_none_or(|only| only == b))
        .filter(|&b| b == Backend::Sqlite || args.pg_url.is_some())
        .collect();
    let mut runner = Runner {
        rt,
        runs: args.runs,
        base_jobs: args.jobs,
        concurrency: args.concurrency,
        pg_url: args.pg_url,
        baselines: HashMap::new(),
    };
    let mut out = std::io::stdout().lock();
    if !args.json {
        writeln!(out, "{}", table_header())?;
    }
    for backend in backends {
        for case in CASES {
            if args.case.is_some_and(|c| c != case) || !case.runs_on(backend) {
                continue;
            }
            for &sync in case.syncs() {
                if args.sync.is_some_and(|s| s != sync) {
                    continue;
                }
                let row = runner.run(case, backend, sync)?;
                if args.json {
                    writeln!(out, "{}", serde_json::to_string(&row)?)?;
                } else {
                    writeln!(out, "{}", table_line(&row))?;
                }
                out.flush()?;
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outbox-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
