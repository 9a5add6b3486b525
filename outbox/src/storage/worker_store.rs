//! The worker's path through storage: the [`WorkerStore`] trait each backend implements on connections of the
//! worker's own (`sqlite/store/`, `postgres/store/`), and what crosses it: claimed jobs, outcomes, rescues.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use super::unused_by_mysql;
use crate::error::Result;

/// Who the worker is and what it may claim.
#[derive(Debug, Clone)]
pub(crate) struct WorkerStoreOpts {
    pub(crate) worker_id: String,
    /// Kinds this worker has handlers for, sorted.
    pub(crate) kinds: Vec<String>,
    /// Of those, the kinds whose claims are controlled fleet-wide (a limit on running jobs, a rate, fair share).
    pub(crate) flows: Vec<crate::flow::FlowKind>,
    /// Queues it serves; `None` for all.
    pub(crate) queues: Option<Vec<String>>,
}

impl WorkerStoreOpts {
    /// The kinds whose claims nothing controls.
    pub(crate) fn unlimited_kinds(&self) -> Vec<String> {
        self.kinds.iter().filter(|k| !self.flows.iter().any(|f| f.kind == **k)).cloned().collect()
    }
}

/// The slots of a claim a kind with a fleet-wide limit may take: all that are left, or half of them when the
/// worker serves kinds without a limit too, so that a limit above the worker's concurrency cannot starve
/// them (the limited kinds are claimed first).
pub(crate) fn limited_share(left: usize, others: bool) -> usize {
    if others { left.div_ceil(2) } else { left }
}

/// What a [`WorkerStore`] call returns.
pub(crate) type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// The worker's claim/complete path, on connections of the worker's own: claims, completions, renewals,
/// rescues. Each backend implements it (`sqlite::store::SqliteStore`, `postgres::store::PgStore`); the
/// worker holds it as a [`Store`].
pub(crate) trait WorkerStore: Send + Sync {
    /// Claims up to `limit` due jobs, leased until `lease_until`.
    fn claim(&self, limit: usize, now: i64, lease_until: i64) -> StoreFuture<'_, Vec<ClaimedJob>>;

    /// Queues a finished attempt; it is written with whatever else finished meanwhile.
    fn finish(&self, finished: Finished) -> Result<()>;

    /// Jobs whose attempt has finished but whose outcome is not written yet: they still hold their claim and
    /// keep their leases renewed, and past one batch of them they count against the worker's concurrency.
    /// Empty where the store writes queued outcomes before it claims.
    fn unwritten(&self) -> Vec<String> {
        Vec::new()
    }

    /// How many of [`WorkerStore::unwritten`] there are.
    fn unwritten_count(&self) -> usize {
        0
    }

    /// Renews the leases of the worker's claimed jobs among `ids` until `until`; how many it renewed.
    fn extend(&self, ids: Vec<String>, until: i64) -> StoreFuture<'_, u64>;

    /// Takes back claims whose lease expired (anyone's), and lets go sequences that moved on.
    fn rescue(&self, now: i64) -> StoreFuture<'_, Vec<Rescued>>;

    /// When a job a claim left behind for a rate or a hold may be taken, at the earliest (ms): the worker claims
    /// again then. Set by each claim.
    fn flow_wake_at(&self) -> Option<i64> {
        None
    }

    /// Resolves once every finish queued before it has been written (or given up on).
    fn flush(&self) -> StoreFuture<'_, ()>;

    /// Starts hearing other processes' enqueues on the calling task's runtime (the worker loop's), where a
    /// wake-up reaches the loop without a hop between threads. Where the wake-ups come another way, nothing.
    fn listen(&self) {}

    /// Starts opening the store's connections, each on the runtime that will use it, beside the worker's other
    /// start-up steps rather than one after another at first use. Where connections are opened up front,
    /// nothing.
    fn open(&self) {}

    /// Closes the store's connections once its outcomes are flushed; the worker is stopping. Where a
    /// connection closes with its last handle, nothing to do.
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

/// When a store's last claim said to claim again (ms since the epoch; 0 for never), shared between the store's
/// handle and whatever runs its claims.
#[derive(Debug, Default)]
pub(crate) struct FlowWake(AtomicI64);

impl FlowWake {
    pub(crate) fn set(&self, at: Option<i64>) {
        self.0.store(at.unwrap_or(0), Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Option<i64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|at| *at != 0)
    }
}

/// A worker's store, shared by its loop, its handlers' contexts and its watchdog.
pub(crate) type Store = Arc<dyn WorkerStore>;

/// A job just claimed by a worker.
#[derive(Debug, Clone)]
pub(crate) struct ClaimedJob {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) payload: String,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) schema_hash: String,
    /// How many times the job has been claimed, this claim included; never given back.
    pub(crate) run: i32,
    /// Whether it runs in a sequence.
    pub(crate) sequenced: bool,
    /// The enqueuer's trace context, as stored (`traceparent`, then a space and the `tracestate`).
    pub(crate) trace: Option<String>,
    /// Whether workflow steps wait for it: its outcome may let them go, so the worker claims again once it is
    /// written.
    pub(crate) has_children: bool,
}

impl ClaimedJob {
    /// The end of this claim's attempt with `outcome`, fenced by its run; the job stays in the table.
    pub(crate) fn finished(&self, outcome: Outcome) -> Finished {
        Finished {
            id: self.id.clone(),
            kind: self.kind.clone(),
            queue: self.queue.clone(),
            attempt: self.attempt,
            run: self.run,
            outcome,
            keep: Keep::Row,
            parent: self.has_children,
        }
    }
}

unused_by_mysql! {
    /// A claimed row the worker cannot read (a value of the wrong SQL type or text that is not UTF-8, written
    /// behind the framework's back): it is failed by itself, without running, and the rest of the claim goes on.
    /// MySQL's typed columns refuse such values, so its store has none.
    #[derive(Debug, Clone)]
    pub(crate) struct Unreadable {
        /// The job's id, or what could be read of it.
        pub(crate) id: String,
        /// The job's kind, or what could be read of it.
        pub(crate) kind: String,
        /// The first column that could not be read.
        pub(crate) column: &'static str,
        /// What it holds instead of what belongs there: `a BLOB of 12 bytes`, `text that is not UTF-8`, ...
        pub(crate) found: String,
    }

    impl Unreadable {
        /// The error recorded on the job.
        pub(crate) fn error(&self) -> String {
            format!(
                "job `{}` cannot be read: its `{}` column holds {}; failed without running",
                self.id, self.column, self.found
            )
        }

        pub(crate) fn log(&self, worker: &str) {
            tracing::error!(
                job_id = %self.id, kind = %self.kind, column = self.column, found = %self.found, worker,
                "claimed a job that cannot be read; failed it without running"
            );
        }
    }
}

/// How a claimed job ends its attempt.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// Handler succeeded.
    Completed { output: Option<String> },
    /// Back to pending after `run_at`, the attempt used.
    Retry { run_at: i64, error: String },
    /// Terminal failure.
    Failed { error: String },
    /// Back to pending after `run_at`, the attempt given back.
    Snoozed { run_at: i64 },
    /// Back to pending now, the attempt given back (shutdown).
    Released,
}

unused_by_mysql! {
    /// How an outcome changes its job's row, as every batched completion writes it: the new status, the attempts
    /// given back, the output, the error and the next run (MySQL's store writes its outcomes by their statuses).
    pub(crate) struct OutcomeColumns<'a> {
        pub(crate) status: &'static str,
        pub(crate) give_back: i32,
        pub(crate) output: Option<&'a str>,
        pub(crate) error: Option<&'a str>,
        pub(crate) run_at: Option<i64>,
    }

    impl Outcome {
        /// The columns this outcome writes; a released job runs again at `now`.
        pub(crate) fn columns(&self, now: i64) -> OutcomeColumns<'_> {
            let (status, give_back, output, error, run_at) = match self {
                Outcome::Completed { output } => ("completed", 0, output.as_deref(), None, None),
                Outcome::Retry { run_at, error } => ("pending", 0, None, Some(error.as_str()), Some(*run_at)),
                Outcome::Failed { error } => ("failed", 0, None, Some(error.as_str()), None),
                Outcome::Snoozed { run_at } => ("pending", 1, None, None, Some(*run_at)),
                Outcome::Released => ("pending", 1, None, None, Some(now)),
            };
            OutcomeColumns { status, give_back, output, error, run_at }
        }
    }
}

impl Outcome {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Retry { .. } => "retried",
            Outcome::Failed { .. } => "failed",
            Outcome::Snoozed { .. } => "snoozed",
            Outcome::Released => "released",
        }
    }
}

/// The end of one attempt, fenced by the claim it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    /// The attempt it ended, for the logs and the history.
    pub(crate) attempt: i32,
    /// The claim's run (the job's claims so far, this one included): the fence. Unlike the attempt, which an
    /// operator's retry starts over and a snooze gives back, no action ever lowers it, so an outcome of an
    /// earlier claim can never pass for one of a later claim of the same job by the same worker.
    pub(crate) run: i32,
    pub(crate) outcome: Outcome,
    /// Where a completion leaves the job. Ignored for other outcomes.
    pub(crate) keep: Keep,
    /// Whether workflow steps wait for it: once its outcome is written, this process's workers claim again (the
    /// outcome may have let them go). Only SQLite's writer reads it: PostgreSQL's wakes the workers after every write,
    /// so a build of PostgreSQL alone never does.
    #[allow(dead_code, reason = "read by SQLite's writer only; a build without SQLite does not read it")]
    pub(crate) parent: bool,
}

/// Where a completed job goes: a job with a sequence key always stays in the jobs table (the store checks that
/// again), as the latest completed job of a sequence is the reconcilers' evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Keep {
    /// In the jobs table, until retention deletes it.
    #[default]
    Row,
    /// Nowhere: deleted as it completes (its kind keeps nothing).
    Nothing,
    /// In the archive's time partitions (`storage/archive.rs`).
    Archive,
}

impl Finished {
    /// Whether this outcome deletes the job from the jobs table: a completion kept nowhere or in the archive.
    pub(crate) fn discards(&self) -> bool {
        self.keep != Keep::Row && matches!(self.outcome, Outcome::Completed { .. })
    }

    /// Whether this outcome moves the job into the archive.
    pub(crate) fn archives(&self) -> bool {
        self.keep == Keep::Archive && matches!(self.outcome, Outcome::Completed { .. })
    }

    /// What to write instead when the database refused this outcome for good (an output it cannot store, a
    /// trigger or constraint an operator added): a completion becomes a failure that gives the database's
    /// reason, as the handler's work is done but cannot be recorded, and running the job again would be refused
    /// again; logged. `None` for any other outcome, which is left to its lease. Every backend's writer calls it.
    pub(crate) fn refused(&self, reason: &dyn std::fmt::Display) -> Option<Finished> {
        let Outcome::Completed { .. } = self.outcome else { return None };
        // PostgreSQL text cannot hold NUL; an error message is for people.
        let error = format!("the job's completion could not be stored: {reason}").replace('\0', "\u{fffd}");
        tracing::warn!(
            job_id = %self.id, kind = %self.kind, error = %reason,
            "a completion was refused; failing the job with the reason"
        );
        Some(Finished { outcome: Outcome::Failed { error }, ..self.clone() })
    }
}

/// A claim returned to pending or failed by the rescuer.
#[derive(Debug, Clone)]
pub(crate) struct Rescued {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) attempt: i32,
    pub(crate) status: String,
    pub(crate) previous_owner: Option<String>,
}

/// Logs a written (or discarded) outcome; every backend's completion writer calls it.
pub(crate) fn log_finished(f: &Finished, applied: bool, worker: &str) {
    let (job_id, kind, queue, attempt) = (f.id.as_str(), f.kind.as_str(), f.queue.as_str(), f.attempt);
    if !applied {
        tracing::warn!(
            job_id,
            kind,
            queue,
            attempt,
            worker,
            outcome = f.outcome.name(),
            "discarded a stale result: the job's claim had expired and was rescued"
        );
        return;
    }
    match &f.outcome {
        Outcome::Completed { .. } => tracing::debug!(job_id, kind, queue, attempt, "job completed"),
        Outcome::Retry { run_at, error } => {
            tracing::warn!(job_id, kind, queue, attempt, run_at, error = %error, "job failed; will retry")
        }
        Outcome::Failed { error } => tracing::error!(job_id, kind, queue, attempt, error = %error, "job failed"),
        Outcome::Snoozed { run_at } => tracing::debug!(job_id, kind, queue, attempt, run_at, "job snoozed"),
        Outcome::Released => tracing::info!(job_id, kind, queue, attempt, "job released, its attempt given back"),
    }
}

/// When this process's remote claims last rescued expired claims (ms).
static LAST_RESCUE: AtomicI64 = AtomicI64::new(0);

/// Whether a remote claim at `now` rescues expired claims first: at most once a second per process. A fleet
/// of shell or HTTP workers alone has no in-process worker to rescue the claims of one that died, so their
/// claims do it.
pub(crate) fn rescue_due(now: i64) -> bool {
    let last = LAST_RESCUE.load(Ordering::Relaxed);
    now.saturating_sub(last) >= 1_000
        && LAST_RESCUE.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}

/// Logs the claims a remote claim rescued.
pub(crate) fn log_rescued(rescued: &[Rescued], worker: &str) {
    for r in rescued {
        let owner = r.previous_owner.as_deref().unwrap_or("?");
        tracing::warn!(
            job_id = %r.id,
            kind = %r.kind,
            queue = %r.queue,
            attempt = r.attempt,
            status = %r.status,
            previous_owner = owner,
            worker,
            "rescued a claim whose lease ran out"
        );
    }
    if rescued.iter().any(|r| r.status == "failed") {
        crate::wake::outcome_written();
    }
}
