//! Case `claim_flow`: one claim of 100 jobs over 100,000 pending ones of a kind under a rate, shared fairly between
//! ten tenants, with rows in the pause table (another queue, another kind, one tenant of this kind), beside the same
//! claim of a kind without any of it; both through the worker's own store, runs alternating. A third claim, the
//! plain one over jobs that carry a key as the fair kind's do (written into the rows by hand), measures what the
//! index of keyed jobs costs the claim's writes by itself: the floor of a keyed claim.

use std::time::{Duration, Instant};

use outbox::flow::{self, Target};
use outbox::{Job, JobContext, JobError, KindOpts, Worker};
use schemars::JsonSchema;
use sea_orm::{ConnectionTrait, DbBackend};
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::scratch::{Scratch, Target as Db};
use crate::stats::{Measure, median};
use crate::subject::{COMPLETED, Noop, drain, noops, preload};

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

/// A job of case `process_fair`'s kind: shared fairly between tenants, all of one tenant.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Tenanted {
    n: u64,
    tenant: String,
}

impl Job for Tenanted {
    const KIND: &'static str = "tenanted";
    const OPTS: KindOpts = KindOpts { unique: false, fair: Some("{tenant}"), ..KindOpts::DEFAULT };
}

/// Case `process_fair`: `n` pending jobs of a fair kind, all of one tenant, drained by a worker with a no-op
/// handler: what fair share costs a lone tenant, beside the plain `process` drain of as many jobs.
pub(crate) async fn process_fair(target: &Db, n: u64, concurrency: usize) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(target).await?;
    preload(&scratch.db, (0..n).map(|n| Tenanted { n, tenant: "alone".into() }).collect()).await?;
    let secs = drain::<Tenanted>(&scratch.db, concurrency).await?;
    scratch.expect_count(COMPLETED, n, "process_fair").await?;
    scratch.remove().await?;
    Ok(Measure { jobs: n, secs })
}

/// Which claim [`claim`] times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// A kind without flow control.
    Plain,
    /// A kind without flow control whose jobs carry keys, so the index of keyed jobs changes with each claim.
    PlainKeyed,
    /// The rate, fair share and pauses of [`Metered`].
    Controlled,
}

/// The median time of one claim of [`BATCH`] over `n` pending jobs, the claim `which`.
pub(crate) async fn claim(target: &Db, n: u64, which: Claim) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(target).await?;
    let db = &scratch.db;
    let builder = Worker::builder(db).concurrency(BATCH);
    let worker = if which == Claim::Controlled {
        let jobs: Vec<Metered> = (0..n).map(|n| Metered { n, tenant: format!("t{}", n % TENANTS) }).collect();
        preload(db, jobs).await?;
        flow::pause(db, &Target::queue("elsewhere"), None).await?;
        flow::pause(db, &Target::kind("another"), None).await?;
        flow::pause(db, &Target::key("metered", "t-absent"), None).await?;
        builder.register(|_: Metered, _: JobContext| async { Ok::<_, JobError>(()) }).build().await?
    } else {
        preload(db, noops(n)).await?;
        if which == Claim::PlainKeyed {
            let key = match db.get_database_backend() {
                DbBackend::Postgres => "'t' || ((payload->>'n')::int8 % 10)",
                _ => "'t' || (json_extract(payload, '$.n') % 10)",
            };
            db.execute_unprepared(&format!("UPDATE outbox_jobs SET flow_key = {key}")).await?;
        }
        builder.register(|_: Noop, _: JobContext| async { Ok::<_, JobError>(()) }).build().await?
    };
    // The claims start from a table without dead rows (the keyed one's update left one per job).
    if db.get_database_backend() == DbBackend::Postgres {
        db.execute_unprepared("VACUUM ANALYZE outbox_jobs").await?;
    }
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
