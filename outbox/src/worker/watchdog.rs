//! Handler timeouts, enforced from the worker's background thread.
//!
//! A handler's task also keeps its own timer, but a handler that blocks its thread (a synchronous sleep or
//! call) is never polled again until it returns, so nothing in its task can act. The watchdog runs on the
//! background runtime: at the timeout it asks the handler to stop (its context's `cancelled()`), and at the
//! timeout plus the cancel grace it gives the claim back as a failed attempt, whatever the handler's thread
//! is doing. Who settles a job is decided once, when its handler ends ([`Ticket::returned`], called by the
//! handler's task, not when the worker loop gets to it) or at that deadline, whichever comes first; the other
//! side's outcome is dropped, and the claim's fence in the database would refuse it anyway. A job of a
//! sequence or of a limited kind keeps its claim instead, left to expire ([`ABANDONED`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;

use super::background::Background;
use crate::storage::{ClaimedJob, Finished, Outcome, Store, now_ms};
use crate::time::ms_after;

/// A watched job's handler is running.
const RUNNING: u8 = 0;
/// Its handler returned (or panicked, or was dropped): the worker writes its outcome.
const RETURNED: u8 = 1;
/// The watchdog gave its claim back: what the handler returns later is discarded.
const TAKEN: u8 = 2;
/// Past its deadline, a job of a sequence or of a kind with a fleet-wide limit keeps its claim, so that the
/// next job of its sequence, or another under its limit, cannot start beside a thread that still runs it; its
/// lease is no longer renewed, so another worker rescues it once the lease expires, unless the handler
/// returns first.
const ABANDONED: u8 = 3;

/// Watches the running jobs that have a timeout. Clones share the watch list.
#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Told when a job is watched whose deadline comes before every other.
    earlier: Notify,
    /// Told each time the watchdog settles a job (gives its claim back, or keeps it to expire), once that is
    /// queued: a stopping worker waits for nothing else of that job.
    gave_up: Notify,
}

#[derive(Default)]
struct State {
    next: u64,
    jobs: HashMap<u64, Watched>,
    /// Each watched job's next deadline.
    due: BTreeSet<(Instant, u64)>,
}

struct Watched {
    started: Instant,
    limit: Duration,
    grace: Duration,
    /// Whether the handler was asked to stop; the next deadline then gives the claim back.
    asked: bool,
    cancel: CancellationToken,
    settled: Arc<AtomicU8>,
    /// Whether the claim is kept past the deadline ([`ABANDONED`]) rather than given back.
    keep_claim: bool,
    job: Finished,
    max_attempts: i32,
    /// The retry delay of this attempt.
    backoff: Duration,
}

impl Watched {
    fn deadline(&self) -> Instant {
        if self.asked { self.started + self.limit + self.grace } else { self.started + self.limit }
    }
}

/// A watched job: who settles it is decided once, by the first of [`Ticket::returned`] and the watchdog.
#[derive(Debug, Clone)]
pub(crate) struct Ticket {
    key: u64,
    settled: Arc<AtomicU8>,
}

impl Ticket {
    /// The handler returned (or panicked, or was dropped): true when its outcome is the worker's to write,
    /// false when the watchdog already gave the claim back. Call it as the handler ends; later calls give the
    /// same answer.
    pub(crate) fn returned(&self) -> bool {
        match self.settled.compare_exchange(RUNNING, RETURNED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(state) => state != TAKEN,
        }
    }

    /// Whether the job is past its deadline with its claim kept: its lease is no longer renewed.
    pub(crate) fn abandoned(&self) -> bool {
        self.settled.load(Ordering::Acquire) == ABANDONED
    }

    /// Whether the watchdog has settled the job: its claim given back, or kept to expire. Its handler may
    /// still hold its thread; a stopping worker no longer waits for it.
    pub(crate) fn given_up(&self) -> bool {
        matches!(self.settled.load(Ordering::Acquire), TAKEN | ABANDONED)
    }
}

/// What a job that ran past its timeout and its cancel grace failed with.
pub(crate) fn timeout_message(limit: Duration, grace: Duration) -> String {
    format!(
        "timed out after {}; the handler did not stop within the cancel grace of {} and its claim was given back",
        crate::time::short_duration(limit),
        crate::time::short_duration(grace)
    )
}

/// The outcome of an attempt that failed with `error`: a retry after `backoff`, or the job's failure on its
/// last attempt.
pub(crate) fn failure(attempt: i32, max_attempts: i32, error: String, backoff: Duration) -> Outcome {
    if attempt >= max_attempts {
        return Outcome::Failed { error: format!("{error} (attempt {attempt} of {max_attempts})") };
    }
    Outcome::Retry { run_at: ms_after(now_ms(), backoff), error }
}

impl Watchdog {
    /// Starts watching on the background thread; outcomes go to `store`.
    pub(crate) fn start(background: &Background, store: Store, worker: String) -> Watchdog {
        let shared = Arc::new(Shared { state: Mutex::default(), earlier: Notify::new(), gave_up: Notify::new() });
        background.spawn(watch(Arc::clone(&shared), store, worker));
        Watchdog { shared }
    }

    /// Watches `job`, whose handler may run for `limit`, then `grace` after being asked to stop through
    /// `cancel`; `backoff` is the delay its retry would take. With `keep_claim` (a job of a sequence or of a
    /// limited kind) the claim is left to expire instead of given back.
    pub(crate) fn watch(
        &self,
        job: &ClaimedJob,
        (limit, grace): (Duration, Duration),
        backoff: Duration,
        keep_claim: bool,
        cancel: CancellationToken,
    ) -> Ticket {
        let settled = Arc::new(AtomicU8::new(RUNNING));
        let watched = Watched {
            started: Instant::now(),
            limit,
            grace,
            asked: false,
            cancel,
            settled: Arc::clone(&settled),
            keep_claim,
            job: job.finished(Outcome::Released),
            max_attempts: job.max_attempts,
            backoff,
        };
        let deadline = watched.deadline();
        let mut state = self.shared.lock();
        let key = state.next;
        state.next += 1;
        state.jobs.insert(key, watched);
        state.due.insert((deadline, key));
        let first = state.due.first().is_some_and(|(_, k)| *k == key);
        drop(state);
        if first {
            self.shared.earlier.notify_one();
        }
        Ticket { key, settled }
    }

    /// Resolves when the watchdog next settles a job ([`Ticket::given_up`]); enable it before reading the tickets.
    pub(crate) fn gave_up(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.gave_up.notified()
    }

    /// Stops watching the job of `ticket` once the worker has settled it. It waits for a give-back the watchdog
    /// is making to be queued, so that a flush after it writes that too.
    pub(crate) fn forget(&self, ticket: &Ticket) {
        let mut state = self.shared.lock();
        if let Some(watched) = state.jobs.remove(&ticket.key) {
            let deadline = watched.deadline();
            state.due.remove(&(deadline, ticket.key));
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change to the state is complete before the lock is let go; a panic cannot leave half of one.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The watchdog's loop, until the background runtime stops.
async fn watch(shared: Arc<Shared>, store: Store, worker: String) {
    loop {
        let now = Instant::now();
        let (next, gave_up) = {
            let mut state = shared.lock();
            let mut gave_up = false;
            while let Some(&(at, key)) = state.due.first() {
                if at > now {
                    break;
                }
                state.due.pop_first();
                let Some(watched) = state.jobs.get_mut(&key) else { continue };
                if watched.settled.load(Ordering::Acquire) != RUNNING {
                    // The handler returned; the worker loop has yet to settle it. Nothing to ask or give back.
                    state.jobs.remove(&key);
                } else if !watched.asked {
                    watched.asked = true;
                    watched.cancel.cancel();
                    let deadline = watched.deadline();
                    state.due.insert((deadline, key));
                } else if let Some(watched) = state.jobs.remove(&key) {
                    // Under the lock: [`Watchdog::forget`] returns only once the give-back is queued.
                    gave_up |= expired(&store, &worker, watched);
                }
            }
            (state.due.first().map(|(at, _)| *at), gave_up)
        };
        // After the lock is let go: a stopping worker told of it finds the give-back queued.
        if gave_up {
            shared.gave_up.notify_waiters();
        }
        let wait = async {
            match next {
                Some(at) => sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.earlier.notified() => {}
            _ = wait => {}
        }
    }
}

/// A handler outlived its timeout and grace: its claim is given back as a failed attempt, or kept to expire.
/// False when the handler returned meanwhile, and the worker settles the job.
fn expired(store: &Store, worker: &str, watched: Watched) -> bool {
    let Watched { limit, grace, mut job, max_attempts, backoff, keep_claim, settled, .. } = watched;
    let next = if keep_claim { ABANDONED } else { TAKEN };
    if settled.compare_exchange(RUNNING, next, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return false; // The handler returned meanwhile: the worker writes its outcome.
    }
    if keep_claim {
        tracing::warn!(job_id = %job.id, kind = %job.kind, attempt = job.attempt, timeout = ?limit, grace = ?grace,
            worker, "handler timed out and did not stop within its cancel grace; its claim is kept for its \
            sequence or limit and left to expire");
        return true;
    }
    tracing::warn!(job_id = %job.id, kind = %job.kind, attempt = job.attempt, timeout = ?limit, grace = ?grace,
        worker, "handler timed out and did not stop within its cancel grace; its claim is given back");
    job.outcome = failure(job.attempt, max_attempts, timeout_message(limit, grace), backoff);
    if store.finish(job).is_err() {
        tracing::debug!(worker, "the worker store has stopped; the timed-out job's lease will expire instead");
    }
    true
}
