//! Cases `latency` and `latency_loaded`: how long a job committed to an idle worker waits before its handler
//! starts, one job at a time, alone or beside a steady background load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_core::{EnqueueOpts, Job, JobContext, JobError, KindOpts, Worker};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::scratch::{Scratch, Target};
use crate::{BoxError, Measure};

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
struct Ping {
    n: u64,
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
fn gap(i: u64) -> Duration {
    MAX_GAP * ((i * 7_919 % 31) as u32) / 30
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
                outbox_core::enqueue(&db, &Load { n: i }, EnqueueOpts::new()).await?;
                i += 1;
            }
            Ok::<_, outbox_core::Error>(())
        })
    });
    let mut committed = Vec::with_capacity(n as usize);
    let begin = Instant::now();
    let mut next = tokio::time::Instant::now();
    for i in 0..n {
        outbox_core::enqueue(&scratch.db, &Ping { n: i }, EnqueueOpts::new()).await?;
        committed.push(Instant::now());
        next += gap(i);
        tokio::time::sleep_until(next).await;
    }
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
    let ms = committed
        .iter()
        .zip(&started)
        .enumerate()
        .map(|(i, (commit, start))| match start {
            Some(start) => Ok(start.saturating_duration_since(*commit).as_secs_f64() * 1000.0),
            None => Err(format!("latency: job {i} had not started 10 s after the last commit")),
        })
        .collect::<Result<Vec<f64>, String>>()?;
    scratch.remove().await?;
    Ok((Measure { jobs: n, secs }, Latency::of(ms)))
}
