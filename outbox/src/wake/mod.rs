//! Wake-ups: enqueue and commit nudge this process's workers so they claim without waiting for the next
//! poll, and written outcomes nudge whoever waits for a job to finish. Commits of other processes arrive
//! through a [`Watch`]: on SQLite a watch of the database file (`storage/sqlite/wake.rs`), on PostgreSQL a `LISTEN`
//! connection.

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

/// How many wake-ups this process's watches ([`Watch`]) have delivered: commits heard from the database, another
/// process's or this one's heard again (a watch cannot tell them apart). Counted apart from [`wakes`] so that a
/// claim says which called for it, `heard` rather than `wake`: an enqueue's own wake-up is otherwise
/// indistinguishable from its echo.
static HEARD: AtomicU64 = AtomicU64::new(0);

pub(crate) fn heard() -> u64 {
    HEARD.load(Ordering::SeqCst)
}

/// Wakes every worker of this process for a commit a watch heard.
pub(crate) fn wake_heard() {
    HEARD.fetch_add(1, Ordering::SeqCst);
    notifier().notify_waiters();
    changes().notify_waiters();
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

/// While held, commits made by other processes to the database wake this process's workers, its
/// [`crate::ops::wait`] calls and its [`crate::ops::changed`] readers at once instead of at their next poll.
/// On SQLite (Linux) it watches the database file's directory, so a commit by any program, `sqlite3`
/// included, is seen within a few milliseconds, and a watch costs no CPU while the directory is quiet; elsewhere on SQLite, polling
/// stays. On PostgreSQL it holds a `LISTEN` connection of its own, which hears enqueues (every inserting
/// statement notifies) and wakes workers and waiting claims, but not outcomes. Workers hold one of their
/// own; take one with [`crate::ops::watch`] for the other uses.
#[derive(Debug, Default)]
pub struct Watch {
    /// What an engine's watch holds while it lasts (SQLite's watch of a file).
    _held: Option<Box<dyn std::fmt::Debug + Send + Sync>>,
    listener: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.take() {
            listener.abort();
        }
    }
}

impl Watch {
    /// A watch that lasts as long as what it holds: `held`, an engine's watch of a file, and `listener`, a running
    /// `LISTEN` task, aborted when the watch goes.
    pub(crate) fn new(
        held: Option<Box<dyn std::fmt::Debug + Send + Sync>>,
        listener: Option<tokio::task::JoinHandle<()>>,
    ) -> Watch {
        Watch { _held: held, listener }
    }
}
