//! Cases `latency` and `latency_loaded`: how long a job committed to an idle worker waits before its handler
//! starts, one job at a time, alone or beside a steady background load; and `latency_cross`, the same with the
//! worker in a child process (this binary again, `--latency-child`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox::{EnqueueOpts, Job, JobContext, JobError, KindOpts, Worker};
use schemars::JsonSchema;
use sea_orm::DatabaseConnection;
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::engine::SyncMode;
use crate::scratch::{Location, Scratch, Target};
use crate::stats::Measure;

/// The longest time between two measured enqueues.
const MAX_GAP: Duration = Duration::from_millis(3);
/// Time between two background enqueues in `latency_loaded`: 100 jobs/s.
const LOAD_EVERY: Duration = Duration::from_millis(10);
/// A start later than this after its commit counts as a job that waited.
pub(crate) const WAITED: Duration = Duration::from_millis(100);

/// Commit-to-event latency, ms, over one run.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Latency {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    /// How many waited [`WAITED`] or longer.
    pub(crate) waited: u64,
}

impl Latency {
    pub(crate) fn of(mut ms: Vec<f64>) -> Latency {
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms.get(((ms.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        let waited = ms.iter().filter(|&&m| m >= WAITED.as_secs_f64() * 1000.0).count() as u64;
        Latency { p50_ms: at(0.5), p99_ms: at(0.99), max_ms: ms.last().copied().unwrap_or(0.0), waited }
    }
}

/// A measured job: `n` is its place in the run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Ping {
    pub(crate) n: u64,
}

impl Job for Ping {
    const KIND: &'static str = "ping";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

/// A background job of `latency_loaded`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Load {
    n: u64,
}

impl Job for Load {
    const KIND: &'static str = "load";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

/// The time before measured enqueue `i + 1`: spread evenly from none to [`MAX_GAP`] (1.5 ms on average) in a
/// fixed shuffled order, so some jobs find the worker idle and some find it claiming, running or recording
/// the one before.
pub(crate) fn gap(i: u64) -> Duration {
    MAX_GAP * ((i * 7_919 % 31) as u32) / 30
}

/// Enqueues `n` measured jobs one per transaction, [`gap`] apart; each one's commit as `clock` tells it.
async fn enqueue_spaced<T>(
    db: &sea_orm::DatabaseConnection,
    n: u64,
    clock: impl Fn() -> T,
) -> Result<Vec<T>, outbox::Error> {
    let mut committed = Vec::with_capacity(n as usize);
    let mut next = tokio::time::Instant::now();
    for i in 0..n {
        outbox::enqueue(db, &Ping { n: i }, EnqueueOpts::new()).await?;
        committed.push(clock());
        next += gap(i);
        tokio::time::sleep_until(next).await;
    }
    Ok(committed)
}

/// Each job's wait from its commit to its start, ms (`ms` of the two times); an error naming `case` for a
/// job that never started.
fn waits_ms<T: Copy>(
    case: &str,
    committed: &[T],
    started: &[Option<T>],
    ms: impl Fn(T, T) -> f64,
) -> Result<Vec<f64>, String> {
    committed
        .iter()
        .zip(started)
        .enumerate()
        .map(|(i, (commit, start))| match start {
            Some(start) => Ok(ms(*commit, *start)),
            None => Err(format!("{case}: job {i} had not started 10 s after the last commit")),
        })
        .collect()
}

/// One run: a started worker at its defaults (concurrency 100, one-second poll) with no-op handlers; `n`
/// jobs enqueued one per transaction, [`gap`] apart, each timed from its commit returning to its handler
/// starting. With `loaded`, another task enqueues a job every [`LOAD_EVERY`] meanwhile.
pub(crate) async fn run(target: &Target, n: u64, loaded: bool) -> Result<(Measure, Latency), BoxError> {
    let scratch = Scratch::new(target).await?;
    let started: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; n as usize]));
    let seen = Arc::clone(&started);
    let worker = Worker::builder(&scratch.db)
        .concurrency(crate::CONCURRENCY)
        .register(move |job: Ping, _: JobContext| {
            let now = Instant::now();
            if let Ok(mut started) = seen.lock()
                && let Some(slot) = started.get_mut(job.n as usize)
            {
                *slot = Some(now);
            }
            async { Ok::<_, JobError>(()) }
        })
        .register(|_: Load, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await?
        .start();
    // Let the worker make its first, empty claim and go idle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stop_load = Arc::new(AtomicBool::new(false));
    let load = loaded.then(|| {
        let (db, stop) = (scratch.db.clone(), Arc::clone(&stop_load));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(LOAD_EVERY);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                outbox::enqueue(&db, &Load { n: i }, EnqueueOpts::new()).await?;
                i += 1;
            }
            Ok::<_, outbox::Error>(())
        })
    });
    let begin = Instant::now();
    let committed = enqueue_spaced(&scratch.db, n, Instant::now).await?;
    // A job whose wake-up was lost starts at the next poll, a second later at most.
    let deadline = Instant::now() + Duration::from_secs(10);
    while started.lock().map_err(|_| "lock poisoned")?.iter().any(Option::is_none) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = begin.elapsed().as_secs_f64();
    stop_load.store(true, Ordering::Relaxed);
    if let Some(load) = load {
        load.await??;
    }
    worker.shutdown().await?;
    let started = started.lock().map_err(|_| "lock poisoned")?.clone();
    let ms = waits_ms("latency", &committed, &started, |commit, start| {
        start.saturating_duration_since(commit).as_secs_f64() * 1000.0
    })?;
    scratch.remove().await?;
    Ok((Measure { jobs: n, secs }, Latency::of(ms)))
}

/// Microseconds since the Unix epoch: the one clock two processes on this machine share.
pub(crate) fn epoch_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// One run of `latency_cross`: the worker (at its defaults, as in `latency`) runs in a child process (this
/// binary again, `--latency-child`); this process enqueues `n` jobs one per transaction, [`gap`] apart, and
/// each is timed from its commit returning here to its handler starting there, on the wall clock both share.
pub(crate) async fn run_cross(target: &Target, n: u64) -> Result<(Measure, Latency), BoxError> {
    let scratch = Scratch::new(target).await?;
    let begin = Instant::now();
    let latency = cross_on(&scratch.db, &scratch.prepared.location, target.sync(), n).await?;
    let secs = begin.elapsed().as_secs_f64();
    scratch.remove().await?;
    Ok((Measure { jobs: n, secs }, latency))
}

/// [`run_cross`] on a database already made: `db` open on it here, `location` what the worker process opens.
pub(crate) async fn cross_on(
    db: &DatabaseConnection,
    location: &Location,
    sync: SyncMode,
    n: u64,
) -> Result<Latency, BoxError> {
    let args = [LATENCY_CHILD.into(), location.arg(), sync.name().into(), n.to_string().into()];
    let mut child = WorkerProcess::start(&args, "latency_cross").await?;
    let committed = enqueue_spaced(db, n, epoch_us).await?;
    let report = child.report().await?;
    child.exit().await?;
    let started: Vec<Option<i64>> = serde_json::from_str(&report)?;
    let ms = waits_ms("latency_cross", &committed, &started, |commit, start| (start - commit).max(0) as f64 / 1000.0)?;
    Ok(Latency::of(ms))
}

/// This binary again as the worker process of a cross-process case: started with `args`, ready once it has
/// printed `ready`; then its report is the next line it prints, and it must exit successfully.
pub(crate) struct WorkerProcess {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    case: &'static str,
}

impl WorkerProcess {
    /// Starts the process and waits for its `ready`; `case` names it in errors.
    pub(crate) async fn start(args: &[std::ffi::OsString], case: &'static str) -> Result<WorkerProcess, BoxError> {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = tokio::io::BufReader::new(child.stdout.take().ok_or("the child's stdout")?).lines();
        match lines.next_line().await? {
            Some(line) if line == "ready" => {}
            other => return Err(format!("{case}: the worker process said {other:?} instead of ready").into()),
        }
        Ok(WorkerProcess { child, lines, case })
    }

    /// The process's id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The line the process prints when it is done.
    pub(crate) async fn report(&mut self) -> Result<String, BoxError> {
        let case = self.case;
        Ok(self.lines.next_line().await?.ok_or_else(|| format!("{case}: the worker process printed no starts"))?)
    }

    /// Waits for the process to end; an error unless it succeeded.
    pub(crate) async fn exit(mut self) -> Result<(), BoxError> {
        let status = self.child.wait().await?;
        if !status.success() {
            return Err(format!("{}: the worker process failed: {status}", self.case).into());
        }
        Ok(())
    }
}

/// The worker process of `latency_cross`: a worker at its defaults on the database at `location`; prints
/// `ready` once its first claim has gone by, then, once all `n` jobs started (or 10 s after the last did not),
/// each job's start in microseconds since the epoch as one JSON array.
pub(crate) async fn cross_child(location: &Location, sync: SyncMode, n: u64) -> Result<(), BoxError> {
    let db = crate::scratch::connect(location, sync).await?;
    let started: Arc<Mutex<Vec<Option<i64>>>> = Arc::new(Mutex::new(vec![None; n as usize]));
    // Told when the last job starts, so the wait below adds no wake-ups of its own to the runtime it measures.
    let all_started = Arc::new(tokio::sync::Notify::new());
    let (seen, all_seen, first_starts) = (Arc::clone(&started), Arc::clone(&all_started), AtomicU64::new(0));
    let worker = Worker::builder(&db)
        .concurrency(crate::CONCURRENCY)
        .register(move |job: Ping, _: JobContext| {
            let now = epoch_us();
            if let Ok(mut started) = seen.lock()
                && let Some(slot) = started.get_mut(job.n as usize)
                && slot.replace(now).is_none()
                && first_starts.fetch_add(1, Ordering::Relaxed) + 1 == n
            {
                all_seen.notify_one();
            }
            async { Ok::<_, JobError>(()) }
        })
        .build()
        .await?
        .start();
    // Let the worker make its first, empty claim and go idle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    println!("ready");
    let mut last_progress = Instant::now();
    let mut done = 0;
    loop {
        let now_done = started.lock().map_err(|_| "lock poisoned")?.iter().filter(|s| s.is_some()).count();
        if now_done as u64 == n || last_progress.elapsed() > Duration::from_secs(10) {
            break;
        }
        if now_done != done {
            done = now_done;
            last_progress = Instant::now();
        }
        // Once a second otherwise: the progress check above, not a poll of the worker's work.
        let _ = tokio::time::timeout(Duration::from_secs(1), all_started.notified()).await;
    }
    worker.shutdown().await?;
    let started = started.lock().map_err(|_| "lock poisoned")?.clone();
    println!("{}", serde_json::to_string(&started)?);
    Ok(())
}

/// The hidden first argument that makes this binary the worker process of a `latency_cross` run:
/// `--latency-child <db file or URL> <FULL|NORMAL> <jobs>`.
pub(crate) const LATENCY_CHILD: &str = "--latency-child";

pub(crate) fn latency_child(argv: &[String]) -> Result<(), BoxError> {
    let [location, sync, jobs] = argv else {
        return Err(format!("usage: {LATENCY_CHILD} <db file or URL> <sync> <jobs>").into());
    };
    let sync = <SyncMode as clap::ValueEnum>::from_str(sync, true)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(cross_child(&Location::parse(location), sync, jobs.parse()?))
}
