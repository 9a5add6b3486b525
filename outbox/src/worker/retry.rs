//! Retry backoff.

use std::time::Duration;

/// Exponential backoff with jitter: `base * 2^(attempt-1)`, capped at `max`, then spread by `jitter` (a
/// fraction: 0.2 means ±20%) so jobs that failed together do not retry together.
///
/// The default (`base` 30 s, `max` 1 h, `jitter` 0.2) waits about 30 s, 1 min, 2 min, 4 min, 8 min, 16 min,
/// 32 min, then an hour between attempts: with the default three attempts a job outlasts an outage of over a
/// minute (the last attempt starts 72 s to 108 s after the first), and every added attempt doubles that.
/// A disk that fills up or a service that restarts then costs a delay, not a permanent failure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay after the first failed attempt.
    pub base: Duration,
    /// Longest delay.
    pub max: Duration,
    /// Relative spread, 0.0 to 1.0.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { base: Duration::from_secs(30), max: Duration::from_secs(3600), jitter: 0.2 }
    }
}

impl RetryPolicy {
    /// The delay before retrying after failed attempt number `attempt` (from 1).
    pub fn backoff(&self, attempt: i32) -> Duration {
        let raw = self.nominal(attempt);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 + jitter * (fastrand::f64() * 2.0 - 1.0);
        raw.mul_f64(factor).min(self.max)
    }

    /// The delay before retrying after failed attempt number `attempt`, before the jitter spreads it.
    pub(crate) fn nominal(&self, attempt: i32) -> Duration {
        let exp = u32::try_from(attempt.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
        self.base.saturating_mul(1u32 << exp).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        let p = RetryPolicy { base: Duration::from_millis(100), max: Duration::from_secs(1), jitter: 0.0 };
        assert_eq!(p.backoff(1), Duration::from_millis(100));
        assert_eq!(p.backoff(2), Duration::from_millis(200));
        assert_eq!(p.backoff(4), Duration::from_millis(800));
        assert_eq!(p.backoff(5), Duration::from_secs(1));
        assert_eq!(p.backoff(500), Duration::from_secs(1));
    }

    #[test]
    fn the_default_outlasts_a_minute_long_outage() {
        let p = RetryPolicy::default();
        for _ in 0..200 {
            let span = p.backoff(1) + p.backoff(2);
            assert!(span >= Duration::from_secs(72) && span <= Duration::from_secs(108), "{span:?}");
        }
        assert_eq!(RetryPolicy { jitter: 0.0, ..p }.backoff(8), Duration::from_secs(3600));
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        let p = RetryPolicy { base: Duration::from_millis(1000), max: Duration::from_secs(60), jitter: 0.2 };
        for _ in 0..200 {
            let d = p.backoff(1);
            assert!(d >= Duration::from_millis(800) && d <= Duration::from_millis(1200), "{d:?}");
        }
    }
}
