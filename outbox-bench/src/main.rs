//! Throughput of outbox against the same SQL run directly: on SQLite through rusqlite on the same
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

mod baseline;
mod case;
mod claim;
mod commits;
mod dashboard;
mod engine;
mod flow;
mod http;
mod idle_cpu;
mod latency;
mod mariadb;
mod mariadb_wake;
mod memory;
mod million;
mod process_memory;
mod raw;
mod raw_pg;
mod reconcile;
mod retention;
mod row;
mod runner;
mod scratch;
mod stall;
mod stats;
mod subject;
mod work;
mod workflow;

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use case::{CASES, Case};
use engine::{Backend, SyncMode};
use latency::{LATENCY_CHILD, latency_child};
use process_memory::{DRAIN_CHILD, drain_child};
use raw_pg::{FLOOR_CHILD, floor_child};
use reconcile::{RECONCILE_CHILD, reconcile_child};
use row::{table_header, table_line};
use runner::Runner;

/// Every error of the benchmark, reported and turned into a failing exit code by `main`.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Worker concurrency, and the baseline's claim size, in `process` and `process_memory`.
const CONCURRENCY: usize = 100;

/// Throughput of outbox against the same SQL run directly (rusqlite, bare sqlx), the median of
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
    if argv.first().is_some_and(|a| a == mariadb::MARIADB) {
        return mariadb::mariadb(&argv[1..]);
    }
    if argv.first().is_some_and(|a| a == mariadb_wake::MARIADB_WAKE) {
        return mariadb_wake::mariadb_wake(&argv[1..]);
    }
    let args = parse_args()?;
    // Built with `--features otel`: the outbox's spans are recorded as an application's tracer would record them
    // (sampled, ended, handed to a provider that exports nothing), so `process` measures the feature's cost.
    #[cfg(feature = "otel")]
    let _tracer = otel::install()?;
    // `latency_workflow` times a step from its parent's completion commit, which the store's writer logs.
    #[cfg(not(feature = "otel"))]
    if args.case.is_none_or(|c| c == Case::LatencyWorkflow) {
        commits::install()?;
    }
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

#[cfg(feature = "otel")]
mod otel {
    use opentelemetry::trace::TracerProvider;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::layer::SubscriberExt;

    /// Installs a tracer recording every span; the provider is kept for the run.
    pub(super) fn install() -> Result<SdkTracerProvider, super::BoxError> {
        let provider = SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-bench"));
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(layer).with(super::commits::layer()),
        )?;
        Ok(provider)
    }
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
