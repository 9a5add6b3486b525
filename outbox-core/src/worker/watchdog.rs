//! Handler timeouts, enforced from the worker's background thread.
//!
//! A handler's task also keeps its own timer, but a handler that blocks its thread (a synchronous sleep or
//! call) is never polled again until it returns, so nothing in its task can act. The watchdog runs on the
//! background runtime: at the timeout it asks the handler to stop (its context's `cancelled()`), and at the
//! timeout plus the cancel grace it gives the claim back as a failed attempt, whatever the handler's thread
//! is doing. Whoever settles a job first, the worker loop (the handler returned) or the watchdog, writes its
//! outcome; the other's is dropped, and the claim's fence in the database refuses it anyway.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::background::Background;
use crate::record::ms_after;
use crate::storage::{ClaimedJob, Finished, Outcome, WorkerStore, now_ms};

/// Watches the running jobs that have a timeout. Clones share the watch list.
#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Told when a job is watched whose deadline comes before every other.
    earlier: Notify,
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

/// A watched job, to hand back to [`Watchdog::settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Ticket(u64);

/// What a job that ran past its timeout and its cancel grace failed with.
pub(crate) fn timeout_message(limit: Duration, grace: Duration) -> String {
    format!(
        "timed out after {}; the handler did not stop within the cancel grace of {} and its claim was given back",
        crate::record::short_duration(limit),
        crate::record::short_duration(grace)
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
    pub(crate) fn start(background: &Background, store: WorkerStore, worker: String) -> Watchdog {
        let shared = Arc::new(Shared { state: Mutex::default(), earlier: Notify::new() });
        background.spawn(watch(Arc::clone(&shared), store, worker));
        Watchdog { shared }
    }

    /// Watches `job`, started at `started`, whose handler may run for `limit`, then `grace` after being asked
    /// to stop through `cancel`; `backoff` is the delay its retry would take.
    pub(crate) fn watch(
        &self,
        job: &ClaimedJob,
        started: Instant,
        (limit, grace): (Duration, Duration),
        backoff: Duration,
        cancel: CancellationToken,
    ) -> Ticket {
        let watched = Watched {
            started,
            limit,
            grace,
            asked: false,
            cancel,
            job: Finished {
                id: job.id.clone(),
                kind: job.kind.clone(),
                queue: job.queue.clone(),
                attempt: job.attempt,
                outcome: Outcome::Released,
            },
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
        Ticket(key)
    }

    /// Stops watching the job of `ticket`, whose handler returned: true when its outcome is the worker's to
    /// write, false when the watchdog already gave its claim back.
    pub(crate) fn settle(&self, ticket: Ticket) -> bool {
        let mut state = self.shared.lock();
        match state.jobs.remove(&ticket.0) {
            Some(watched) => {
                state.due.remove(&(watched.deadline(), ticket.0));
                true
            }
            None => false,
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
async fn watch(shared: Arc<Shared>, store: WorkerStore, worker: String) {
    loop {
        let now = Instant::now();
        let mut expired = Vec::new();
        let next = {
            let mut state = shared.lock();
            while let Some(&(at, key)) = state.due.first() {
                if at > now {
                    break;
                }
                state.due.pop_first();
                let Some(watched) = state.jobs.get_mut(&key) else { continue };
                if watched.asked {
                    if let Some(watched) = state.jobs.remove(&key) {
                        expired.push(watched);
                    }
                } else {
                    watched.asked = true;
                    watched.cancel.cancel();
                    let deadline = watched.deadline();
                    state.due.insert((deadline, key));
                }
            }
            state.due.first().map(|(at, _)| *at)
        };
        for watched in expired {
            give_back(&store, &worker, watched);
        }
        let wait = async {
            match next {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.earlier.notified() => {}
            _ = wait => {}
        }
    }
}

/// Writes the failed attempt of a handler that outlived its timeout and grace.
fn give_back(store: &WorkerStore, worker: &str, watched: Watched) {
    let Watched { limit, grace, mut job, max_attempts, backoff, .. } = watched;
    tracing::warn!(job_id = %job.id, kind = %job.kind, attempt = job.attempt, timeout = ?limit, grace = ?grace,
        worker, "handler timed out and did not stop within its cancel grace; its claim is given back");
    job.outcome = failure(job.attempt, max_attempts, timeout_message(limit, grace), backoff);
    if store.finish(job).is_err() {
        tracing::debug!(worker, "the worker store has stopped; the timed-out job's lease will expire instead");
    }
}
