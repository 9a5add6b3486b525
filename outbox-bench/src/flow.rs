//! Case `claim_flow`: one claim of 100 jobs over 100,000 pending ones of a kind under a rate, shared fairly between
//! ten tenants, with rows in the pause table (another queue, another kind, one tenant of this kind), beside the same
//! claim of a kind without any of it; both through the worker's own store, runs alternating.

use std::time::{Duration, Instant};

use outbox::flow::{self, Target};
use outbox::{Job, JobContext, JobError, KindOpts, Worker};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::scratch::{Scratch, Target as Db};
use crate::stats::{Measure, median};
use crate::subject::{Noop, noops, preload};

/// Claims timed per run.
const REPS: usize = 21;
/// Jobs per claim.
const BATCH: usize = 100;
/// Tenants the fair kind's jobs are spread over.
const TENANTS: u64 = 10;

/// A job of the controlled kind: a rate far above what the claims reach (so it never holds one back, yet every
/// claim reads and writes its bucket), fair share by tenant.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Metered {
    n: u64,
    tenant: String,
}

impl Job for Metered {
    const KIND: &'static str = "metered";
    const OPTS: KindOpts = KindOpts {
        unique: false,
        rate: Some(outbox::flow::Rate::per(1_000_000_000, Duration::from_secs(1))),
        fair: Some("{tenant}"),
        ..KindOpts::DEFAULT
    };
}

/// The median time of one claim of [`BATCH`] over `n` pending jobs, with flow control in use when `controlled`.
pub(crate) async fn claim(target: &Db, n: u64, controlled: bool) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(target).await?;
    let db = &scratch.db;
    let builder = Worker::builder(db).concurrency(BATCH);
    let worker = if controlled {
        let jobs: Vec<Metered> = (0..n).map(|n| Metered { n, tenant: format!("t{}", n % TENANTS) }).collect();
        preload(db, jobs).await?;
        flow::pause(db, &Target::queue("elsewhere"), None).await?;
        flow::pause(db, &Target::kind("another"), None).await?;
        flow::pause(db, &Target::key("metered", "t-absent"), None).await?;
        builder.register(|_: Metered, _: JobContext| async { Ok::<_, JobError>(()) }).build().await?
    } else {
        preload(db, noops(n)).await?;
        builder.register(|_: Noop, _: JobContext| async { Ok::<_, JobError>(()) }).build().await?
    };
    // One claim first: the store's connection opens and its statements are prepared.
    worker.claim_once_for_benchmark(BATCH).await?;
    let mut times = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let started = Instant::now();
        let got = worker.claim_once_for_benchmark(BATCH).await?;
        times.push(started.elapsed().as_secs_f64());
        if got != BATCH {
            return Err(format!("a claim took {got} jobs, not {BATCH}").into());
        }
    }
    drop(worker);
    scratch.remove().await?;
    Ok(Measure { jobs: BATCH as u64, secs: median(&times) })
}
