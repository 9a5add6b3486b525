//! In-process wake-ups: enqueue and commit nudge this process's workers so they claim without waiting for
//! the next poll, and written outcomes nudge whoever waits for a job to finish.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

pub(crate) fn notifier() -> &'static Notify {
    static WAKE: OnceLock<Notify> = OnceLock::new();
    WAKE.get_or_init(Notify::new)
}

/// How many wake-ups this process has sent. A worker compares it with the count it last acted on, so a wake-up
/// is kept even when the worker was busy with something else as it arrived: `notify_waiters` alone only
/// reaches a waiter that is registered at that moment.
static WAKES: AtomicU64 = AtomicU64::new(0);

pub(crate) fn wakes() -> u64 {
    WAKES.load(Ordering::SeqCst)
}

/// Wakes every worker of this process that is waiting for work.
pub(crate) fn wake() {
    WAKES.fetch_add(1, Ordering::SeqCst);
    notifier().notify_waiters();
    changes().notify_waiters();
}

/// Notified whenever this process writes a change: an enqueue, an outcome, an operator action.
pub(crate) fn changes() -> &'static Notify {
    static CHANGES: OnceLock<Notify> = OnceLock::new();
    CHANGES.get_or_init(Notify::new)
}

pub(crate) fn outcomes() -> &'static Notify {
    static OUTCOMES: OnceLock<Notify> = OnceLock::new();
    OUTCOMES.get_or_init(Notify::new)
}

/// Wakes every [`crate::ops::wait`] of this process: some job's outcome was written.
pub(crate) fn outcome_written() {
    outcomes().notify_waiters();
    changes().notify_waiters();
}
