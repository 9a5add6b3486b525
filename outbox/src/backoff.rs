//! The wait between tries at something that failed for a reason that may pass (a database restarting, a
//! lock held by another writer).

use std::time::Duration;

/// A wait that starts at `first` and doubles after each use, up to `max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { next: first, max }
    }

    /// The wait the next [`Backoff::take`] returns: what a log line announces as `retry_in`.
    pub(crate) fn peek(&self) -> Duration {
        self.next
    }

    /// The next wait; the one after it is twice as long, up to `max`.
    pub(crate) fn take(&mut self) -> Duration {
        let wait = self.next;
        self.next = wait.saturating_mul(2).min(self.max);
        wait
    }

    /// Sleeps the next wait.
    pub(crate) async fn sleep(&mut self) {
        tokio::time::sleep(self.take()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(500));
        let waits: Vec<Duration> = (0..5).map(|_| b.take()).collect();
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        assert_eq!(b.peek(), ms(500));
        // A first wait above the cap is waited once, as the loops this replaced did.
        let mut b = Backoff::new(ms(100), ms(50));
        assert_eq!((b.take(), b.take()), (ms(100), ms(50)));
        let mut b = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!((b.take(), b.take()), (Duration::MAX, Duration::MAX));
    }
}
