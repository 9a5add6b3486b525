//! In-process wake-ups: enqueue and commit nudge this process's workers so they claim without waiting for
//! the next poll.

use std::sync::OnceLock;

use tokio::sync::Notify;

pub(crate) fn notifier() -> &'static Notify {
    static WAKE: OnceLock<Notify> = OnceLock::new();
    WAKE.get_or_init(Notify::new)
}

/// Wakes every worker of this process that is waiting for work.
pub(crate) fn wake() {
    notifier().notify_waiters();
}
