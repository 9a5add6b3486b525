//! A worker process for the crash, race and fleet tests.
//!
//! `outbox-test-worker DATABASE RUN_LOG MODE LEASE_MS [CONCURRENCY]`
//!
//! - DATABASE: a sea-orm URL (`sqlite://...`, `postgres://...`) or the path of an SQLite file.
//! - RUN_LOG: every run of a `race` job appends `<job id> <n> <attempt> <pid>` to it, flushed before the
//!   handler goes on, so the test counts executions rather than trusting the job table. Runs of `step` and
//!   `limited` jobs append `B <job id> <key or n> <seq> <pid> <monotonic ns>` when they begin and the same
//!   line with `E` when they end, each with one `write` to a file opened with `O_APPEND`.
//! - MODE: `drain` runs jobs until none is due and none is in flight, then exits; `serve` runs them
//!   until no job is pending or claimed anywhere (so a worker stays to rescue a claim lost with a
//!   connection), then shuts down gracefully; `hang` writes RUN_LOG on the first job and hangs; `schedule`
//!   also runs the every-second schedule `tick` (its job: `ticked`), catching up missed ticks when
//!   `OUTBOX_TEST_CATCH_UP=1`, until SIGTERM; `enqueue` enqueues one `race` job whose `n` is LEASE_MS, writes its
//!   id to RUN_LOG and exits (a commit of another process).
//! - CONCURRENCY: jobs run at once (default 8).
//!
//! `OUTBOX_LOG` (a tracing filter such as `warn`) turns on the worker's logs on stderr.
//!
//! Once its worker is built the process creates `RUN_LOG.ready` (holding its id and the time in milliseconds
//! since the epoch), so a test can tell start-up from running.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox::{JobContext, JobError, Schedule, Worker};
use outbox_tests::{
    FairWork, Limited, Metered, MeteredPerTenant, Node, NodeOutput, Paced, Race, Step, Ticked, Weighted, monotonic_ns,
    sqlite_url,
};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};

const USAGE: &str =
    "usage: outbox-test-worker DATABASE RUN_LOG drain|serve|hang|schedule|enqueue LEASE_MS [CONCURRENCY]";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("OUTBOX_LOG") {
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
    }
    let args: Vec<String> = std::env::args().collect();
    let (database, run_log, mode, lease_ms, concurrency) = match args.as_slice() {
        [_, database, run_log, mode, lease_ms] => (database, run_log, mode, lease_ms, 8),
        [_, database, run_log, mode, lease_ms, concurrency] => {
            (database, run_log, mode, lease_ms, concurrency.parse()?)
        }
        _ => return Err(USAGE.into()),
    };
    // `drain+flow` and `serve+flow` also serve the flow-controlled kinds (`metered`, `fair_work`, ...): only the flow
    // tests ask for them, as a worker serving such kinds claims each of them in a transaction of its own.
    let (mode, flow) = match mode.strip_suffix("+flow") {
        Some(m) => (m.to_owned(), true),
        None => (mode.clone(), false),
    };
    if !matches!(mode.as_str(), "drain" | "serve" | "hang" | "schedule" | "enqueue") {
        return Err(format!("unknown mode `{mode}`\n{USAGE}").into());
    }
    let url = if database.contains("://") { database.clone() } else { sqlite_url(database.as_ref()) };
    let db = outbox::connect(&url).await?;
    if mode == "enqueue" {
        let job = Race { n: lease_ms.parse()?, sleep_ms: 0 };
        let enqueued = outbox::enqueue(&db, &job, outbox::EnqueueOpts::new()).await?;
        std::fs::write(run_log, enqueued.id())?;
        return Ok(());
    }
    let lease = Duration::from_millis(lease_ms.parse()?);
    let log = Arc::new(Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(run_log)?));
    let hang = mode == "hang";
    let pid = std::process::id();
    let step_log = Arc::clone(&log);
    let limited_log = Arc::clone(&log);
    let metered_log = Arc::clone(&log);
    let paced_log = Arc::clone(&log);
    let node_log = Arc::clone(&log);
    let mut builder = Worker::builder(&db);
    if mode == "schedule" {
        let schedule =
            Schedule::every("tick", Duration::from_secs(1), |tick| Ticked { tick_ms: tick.timestamp_millis() });
        let catch_up = std::env::var("OUTBOX_TEST_CATCH_UP").is_ok_and(|v| v == "1");
        builder = builder
            .schedule(if catch_up { schedule.catch_up() } else { schedule })
            .register(|_: Ticked, _: JobContext| async { Ok::<_, JobError>(()) });
    }
    let builder = builder
        .concurrency(concurrency)
        .lease(lease)
        .poll_interval(Duration::from_millis(50))
        // Only a claim lost with its connection expires while these workers live; rescue it soon after.
        .rescue_interval(Duration::from_secs(1))
        .register(move |job: Race, ctx: JobContext| {
            let log = Arc::clone(&log);
            async move {
                {
                    let mut f = log.lock().map_err(|_| JobError::permanent("run log lock poisoned"))?;
                    writeln!(f, "{} {} {} {pid}", ctx.id(), job.n, ctx.attempt())?;
                    f.flush()?;
                }
                if hang {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_millis(job.sleep_ms)).await;
                Ok::<_, JobError>(())
            }
        })
        .register(move |job: Step, ctx: JobContext| {
            let log = Arc::clone(&step_log);
            async move {
                mark(&log, 'B', ctx.id(), job.key.into(), job.seq, pid)?;
                tokio::time::sleep(Duration::from_millis(job.sleep_ms)).await;
                mark(&log, 'E', ctx.id(), job.key.into(), job.seq, pid)?;
                Ok::<_, JobError>(())
            }
        })
        .register(move |job: Node, ctx: JobContext| {
            let log = Arc::clone(&node_log);
            async move {
                mark(&log, 'B', ctx.id(), job.wf.into(), job.step, pid)?;
                let parents = ctx.parents().await.map_err(JobError::retry)?;
                let mut read = Vec::new();
                // A batch's callback counts its members; a step of a diamond reads every parent's output.
                if job.step != 9 {
                    for p in parents.iter() {
                        let out: NodeOutput = parents.output(&p.step).map_err(JobError::permanent)?;
                        if out.wf != job.wf {
                            return Err(JobError::permanent(format!("parent {} is of workflow {}", p.id, out.wf)));
                        }
                        read.push(out.step);
                    }
                }
                let s = parents.summary();
                tokio::time::sleep(Duration::from_millis(job.sleep_ms)).await;
                mark(&log, 'E', ctx.id(), job.wf.into(), job.step, pid)?;
                let summary = [s.completed, s.failed, s.cancelled, s.unfinished];
                Ok::<_, JobError>(serde_json::to_value(NodeOutput { wf: job.wf, step: job.step, read, summary })?)
            }
        })
        .register(move |job: Limited, ctx: JobContext| {
            let log = Arc::clone(&limited_log);
            async move {
                mark(&log, 'B', ctx.id(), job.n, 0, pid)?;
                tokio::time::sleep(Duration::from_millis(job.sleep_ms)).await;
                mark(&log, 'E', ctx.id(), job.n, 0, pid)?;
                Ok::<_, JobError>(())
            }
        })
        .register(move |job: Paced, ctx: JobContext| {
            let log = Arc::clone(&paced_log);
            async move {
                mark(&log, 'B', ctx.id(), job.n, 4, pid)?;
                tokio::time::sleep(Duration::from_millis(job.sleep_ms)).await;
                mark(&log, 'E', ctx.id(), job.n, 4, pid)?;
                Ok::<_, JobError>(())
            }
        });
    let builder = if flow {
        builder
            .register(metered(Arc::clone(&metered_log), |job: &FairWork| (job.tenant, 5)))
            .register(metered(Arc::clone(&metered_log), |job: &Metered| (job.n, 1)))
            .register(metered(Arc::clone(&metered_log), |job: &MeteredPerTenant| (job.tenant, 2)))
            .register(metered(Arc::clone(&metered_log), |job: &Weighted| (job.cost, 3)))
    } else {
        builder
    };
    let worker = builder.build().await?;
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis();
    // Written whole, then renamed into place: a test that sees the file reads all of it. The processes of a
    // fleet share the run log, so each writes a part of its own (the last rename wins).
    let part = format!("{run_log}.ready.{}.part", std::process::id());
    std::fs::write(&part, format!("{} {started}", worker.id()))?;
    std::fs::rename(&part, format!("{run_log}.ready"))?;
    if mode == "schedule" {
        worker.run_until(outbox::shutdown_signal()).await?;
    } else if mode == "serve" {
        worker.run_until(until_no_job_is_left(&db)).await?;
    } else {
        worker.drain().await?;
    }
    Ok(())
}

/// A handler of a rate-limited kind: a begin line whose key column is what `fields` reads of the job (its
/// number, tenant or cost).
fn metered<J: outbox::Job + Send + 'static>(
    log: Arc<Mutex<std::fs::File>>,
    fields: fn(&J) -> (u64, u32),
) -> impl Fn(J, JobContext) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), JobError>> + Send>>
+ Clone
+ Send
+ Sync
+ 'static {
    move |job: J, ctx: JobContext| {
        let log = Arc::clone(&log);
        let (key, seq) = fields(&job);
        Box::pin(async move { mark(&log, 'B', ctx.id(), key, seq, std::process::id()) })
    }
}

/// Appends one begin (`B`) or end (`E`) line in a single `write`, so lines of concurrent processes never mix.
fn mark(log: &Mutex<std::fs::File>, what: char, id: &str, key: u64, seq: u32, pid: u32) -> Result<(), JobError> {
    let line = format!("{what} {id} {key} {seq} {pid} {}\n", monotonic_ns());
    let mut f = log.lock().map_err(|_| JobError::permanent("run log lock poisoned"))?;
    f.write_all(line.as_bytes())?;
    Ok(())
}

/// Resolves once no job is pending or claimed. A failed look (a killed connection) just looks again.
async fn until_no_job_is_left(db: &DatabaseConnection) {
    let sql = "SELECT COUNT(*) FROM outbox_jobs WHERE status IN ('pending', 'claimed')";
    let statement = Statement::from_string(db.get_database_backend(), sql);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let left = db.query_one_raw(statement.clone()).await.ok().flatten().and_then(|r| r.try_get_by_index(0).ok());
        if left == Some(0i64) {
            return;
        }
    }
}
