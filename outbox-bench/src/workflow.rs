//! Cases `claim_workflow` and `latency_workflow`: what waiting workflow steps cost a claim of ready jobs (the
//! worker's claim of 100 over ready `noop` jobs beside 100,000 waiting `noop` steps, against the same claim without
//! them, run by run), and how long a step waits once its last parent completed (one parent and one child per
//! workflow, the child timed from its parent's completion commit returning to its own handler starting, in process).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox::{Job, JobContext, JobError, KindOpts, Worker, Workflow};
use schemars::JsonSchema;
use sea_orm::{ConnectionTrait, DbBackend};
use serde::{Deserialize, Serialize};

use crate::BoxError;
use crate::latency::{Latency, epoch_us, gap};
use crate::runner::Runner;
use crate::scratch::{Scratch, Target};
use crate::stats::Measure;
use crate::subject::{noops, preload};

/// Waiting steps beside the ready jobs in `claim_workflow`.
pub(crate) const WAITING: u64 = 100_000;
/// Steps per workflow holding them: each waits for its workflow's one gate, which never runs.
const STEPS_PER_GATE: u64 = 1_000;

/// The job every waiting step of `claim_workflow` waits for, of a kind no claim there asks for.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Gate {
    n: u64,
}

impl Job for Gate {
    const KIND: &'static str = "gate";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

/// A step of `latency_workflow`: the parent (`child` false) or the child of workflow `n`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Link {
    n: u64,
    child: bool,
}

impl Job for Link {
    const KIND: &'static str = "link";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

impl Runner {
    /// One run of `claim_workflow` and of its baseline: the claim of 100 `noop` jobs over `n` ready ones, with and
    /// without [`WAITING`] waiting `noop` steps beside them; (with, without).
    pub(crate) fn claim_workflow_run(&self, target: &Target, n: u64) -> Result<(Measure, Measure), BoxError> {
        let batch = crate::CONCURRENCY as u64;
        let with = self.rt.block_on(async {
            let scratch = Scratch::new(target).await?;
            preload(&scratch.db, noops(n)).await?;
            waiting_steps(&scratch.db, WAITING).await?;
            scratch.into_prepared().await
        })?;
        let secs = self.claim_cost(&with, target.sync(), "noop");
        self.rt.block_on(with.remove())?;
        let without = self.claim_run(target, n, false)?;
        Ok((Measure { jobs: batch, secs: secs? }, without))
    }
}

/// Enqueues `n` `noop` steps, each waiting for its workflow's gate, in workflows of [`STEPS_PER_GATE`] steps.
async fn waiting_steps(db: &sea_orm::DatabaseConnection, n: u64) -> Result<(), BoxError> {
    for w in 0..n.div_ceil(STEPS_PER_GATE) {
        let mut wf = Workflow::new(format!("held {w}"));
        wf.step("gate", &Gate { n: w });
        for s in 0..STEPS_PER_GATE.min(n - w * STEPS_PER_GATE) {
            wf.step(format!("step {s}"), &crate::subject::Noop::new(w * STEPS_PER_GATE + s)).after(["gate"]);
        }
        let txn = outbox::begin(db).await?;
        outbox::enqueue_workflow(&txn, &wf).await?;
        txn.commit().await?;
    }
    let sql = "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'noop' AND status = 'pending' AND parents_left > 0";
    let waiting = db.query_one_raw(sea_orm::Statement::from_string(db.get_database_backend(), sql)).await?;
    let waiting: i64 = waiting.ok_or("no count")?.try_get_by_index(0)?;
    if waiting != i64::try_from(n)? {
        return Err(format!("claim_workflow: {waiting} steps wait, not {n}").into());
    }
    if db.get_database_backend() == DbBackend::Postgres {
        db.execute_unprepared("ANALYZE outbox_jobs").await?;
    }
    Ok(())
}

/// One run of `latency_workflow`: a worker at its defaults, idle; `n` workflows of a parent and a child enqueued
/// one per transaction, [`gap`] apart; each child timed from its parent's completion commit returning (the store's
/// writer logs it right after the commit, see [`crate::commits`]) to its own handler starting, on the wall clock, as
/// `latency` times a job from its enqueue's commit returning.
pub(crate) async fn latency(target: &Target, n: u64) -> Result<(Measure, Latency), BoxError> {
    let scratch = Scratch::new(target).await?;
    crate::commits::start()?;
    let starts: Arc<Mutex<Vec<Option<i64>>>> = Arc::new(Mutex::new(vec![None; n as usize]));
    let seen = Arc::clone(&starts);
    let worker = Worker::builder(&scratch.db)
        .concurrency(crate::CONCURRENCY)
        .register(move |job: Link, _: JobContext| {
            let now = epoch_us();
            if job.child
                && let Ok(mut starts) = seen.lock()
                && let Some(slot) = starts.get_mut(job.n as usize)
            {
                slot.get_or_insert(now);
            }
            async { Ok::<_, JobError>(()) }
        })
        .build()
        .await?
        .start();
    // Let the worker make its first, empty claim and go idle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let begin = Instant::now();
    let mut parents = Vec::with_capacity(n as usize);
    let mut next = tokio::time::Instant::now();
    for i in 0..n {
        let mut wf = Workflow::new("pair");
        wf.step("parent", &Link { n: i, child: false });
        wf.step("child", &Link { n: i, child: true }).after(["parent"]);
        let txn = outbox::begin(&scratch.db).await?;
        let enqueued = outbox::enqueue_workflow(&txn, &wf).await?;
        txn.commit().await?;
        parents.push(enqueued.step("parent").ok_or("the parent step")?.to_owned());
        next += gap(i);
        tokio::time::sleep_until(next).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while starts.lock().map_err(|_| "lock poisoned")?.iter().any(Option::is_none) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = begin.elapsed().as_secs_f64();
    worker.shutdown().await?;
    crate::commits::stop();
    let starts = starts.lock().map_err(|_| "lock poisoned")?.clone();
    let mut ms = Vec::with_capacity(n as usize);
    let mut early = 0;
    for (i, (parent, start)) in parents.iter().zip(starts).enumerate() {
        match (crate::commits::of(parent)?, start) {
            (Some(committed), Some(start)) => {
                // A child another claimer started between the commit and the writer's log line: counted as 0 ms.
                early += usize::from(start < committed);
                ms.push(((start - committed).max(0)) as f64 / 1000.0);
            }
            (None, _) => return Err(format!("latency_workflow: no completion commit seen for parent {parent}").into()),
            (_, None) => return Err(format!("latency_workflow: the child of workflow {i} never started").into()),
        }
    }
    if early > 0 {
        eprintln!(
            "latency_workflow: {early} of {n} children started before their parent's commit was logged (counted as 0 ms)"
        );
    }
    scratch.remove().await?;
    Ok((Measure { jobs: n, secs }, Latency::of(ms)))
}
