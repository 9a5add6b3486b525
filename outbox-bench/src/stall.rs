//! Case `stall`: how long an application's enqueue takes while a worker's runtime is stalled.
//!
//! The worker runs on a thread of its own with a current-thread runtime, retention passing every 10 ms, and a
//! handler that blocks that thread for [`STALL`] (a synchronous call, a paused VM). During each stall the
//! application enqueues once, on a pool of its own, at a different moment of the stall each round. A worker
//! that held a write transaction open across the stall would hold that enqueue back until the stall ends.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use outbox::{EnqueueOpts, Job, JobContext, JobError, KindOpts, Retention, Worker};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::latency::Latency;
use crate::scratch::{Scratch, Target, connect};
use crate::stats::Measure;

/// How long each handler blocks its worker's thread.
pub(crate) const STALL: Duration = Duration::from_secs(2);
/// Stalls per run.
pub(crate) const ROUNDS: u64 = 20;

/// A job whose handler blocks its thread for [`STALL`].
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Block {
    n: u64,
}

impl Job for Block {
    const KIND: &'static str = "block";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

/// The application's job.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Order {
    n: u64,
}

impl Job for Order {
    const KIND: &'static str = "order";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

/// One run: [`ROUNDS`] stalls, one timed enqueue in each, `offset(round)` into it.
pub(crate) async fn run(target: &Target) -> Result<(Measure, Latency), BoxError> {
    let scratch = Scratch::new(target).await?;
    let (location, sync) = (scratch.prepared.location.clone(), target.sync());
    let (blocked_tx, blocked) = mpsc::channel::<u64>();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = std::thread::spawn(move || -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let db = connect(&location, sync).await.map_err(|e| e.to_string())?;
            Worker::builder(&db)
                .concurrency(1)
                .poll_interval(Duration::from_millis(10))
                .retention(Retention::new().interval(Duration::from_millis(10)))
                .register(move |job: Block, _: JobContext| {
                    let _ = blocked_tx.send(job.n);
                    std::thread::sleep(STALL);
                    async { Ok::<_, JobError>(()) }
                })
                .register(|_: Order, _: JobContext| async { Ok::<_, JobError>(()) })
                .build()
                .await
                .map_err(|e| e.to_string())?
                .run_until(async {
                    let _ = stopped.await;
                })
                .await
                .map_err(|e| e.to_string())
        })
    });
    let app = connect(&scratch.prepared.location, sync).await?;
    let mut ms = Vec::with_capacity(ROUNDS as usize);
    let begin = Instant::now();
    for round in 0..ROUNDS {
        outbox::enqueue(&scratch.db, &Block { n: round }, EnqueueOpts::new()).await?;
        let n = tokio::task::block_in_place(|| blocked.recv_timeout(Duration::from_secs(30)))
            .map_err(|_| format!("stall: the handler of round {round} did not start within 30 s"))?;
        let stalled_at = Instant::now();
        debug_assert_eq!(n, round);
        tokio::time::sleep(offset(round)).await;
        let started = Instant::now();
        outbox::enqueue(&app, &Order { n: round }, EnqueueOpts::new()).await?;
        ms.push(started.elapsed().as_secs_f64() * 1_000.0);
        // The next round's stall begins after this one ends.
        tokio::time::sleep(STALL.saturating_sub(stalled_at.elapsed())).await;
    }
    let secs = begin.elapsed().as_secs_f64();
    let _ = stop.send(());
    tokio::task::block_in_place(|| worker.join())
        .map_err(|_| "stall: the worker's thread panicked")?
        .map_err(|e| format!("stall: the worker failed: {e}"))?;
    app.close().await?;
    scratch.remove().await?;
    Ok((Measure { jobs: ROUNDS, secs }, Latency::of(ms)))
}

/// How far into its stall round `round` enqueues: spread over the first three quarters of it.
fn offset(round: u64) -> Duration {
    STALL * 3 / 4 * ((round * 7 % ROUNDS) as u32) / ROUNDS as u32
}
