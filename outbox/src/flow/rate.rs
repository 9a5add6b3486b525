//! Rates: `50/1m`, `20/s burst 5`, `1000/500ms`; and the token bucket that holds one.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A fleet-wide rate limit: at most `amount` units of cost per `window` on average, with room for `burst` units at
/// once after a quiet spell (`burst` defaults to `amount`: a window's allowance). A job costs one unit unless its
/// kind or its enqueue says otherwise, so `Rate::per(50, 1 min)` is 50 jobs a minute.
///
/// The database enforces it at claim time across every process, as a token bucket of `burst` units refilled at
/// `amount / window`: in any span of time `t`, at most `burst + amount * t / window` units are claimed.
///
/// Written `"50/1m"`, `"20/s"`, `"1000/500ms"`, `"40000/1m burst 10000"` (units `ms`, `s`, `m`, `h`, `d`).
///
/// ```
/// use std::time::Duration;
/// use outbox::flow::Rate;
///
/// let rate: Rate = "20/s burst 5".parse()?;
/// assert_eq!(rate, Rate::per(20, Duration::from_secs(1)).with_burst(5));
/// assert_eq!(rate.to_string(), "20/1s burst 5");
/// assert!("0/1m".parse::<Rate>().is_err());
/// # Ok::<(), outbox::flow::RateError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    amount: u64,
    window_ms: u64,
    burst: Option<u64>,
}

/// What is wrong with a rate, naming the text at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rate {text:?}: {reason}")]
pub struct RateError {
    text: String,
    reason: String,
}

impl From<RateError> for crate::Error {
    fn from(e: RateError) -> Self {
        crate::Error::Invalid(e.to_string())
    }
}

impl Rate {
    /// `amount` units per `window`. Panics when either is zero or the window is over a year: constants only; parse
    /// text with [`str::parse`], which reports an error instead.
    pub const fn per(amount: u64, window: Duration) -> Rate {
        let ms = window.as_millis();
        assert!(amount > 0, "a rate's amount must be at least 1");
        assert!(ms > 0 && ms <= MAX_WINDOW_MS as u128, "a rate's window must be between 1 ms and 366 days");
        Rate { amount, window_ms: ms as u64, burst: None }
    }

    /// The same rate with room for `burst` units at once (at least 1).
    pub const fn with_burst(mut self, burst: u64) -> Rate {
        assert!(burst > 0, "a rate's burst must be at least 1");
        self.burst = Some(burst);
        self
    }

    /// Units per window.
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// The window.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }

    /// The bucket's size: the units that may be taken at once after a quiet spell.
    pub fn burst(&self) -> u64 {
        self.burst.unwrap_or(self.amount)
    }

    pub(crate) fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// A rate read back from its stored parts.
    pub(crate) fn from_parts(amount: i64, window_ms: i64, burst: i64) -> Option<Rate> {
        let (amount, window_ms, burst) =
            (u64::try_from(amount).ok()?, u64::try_from(window_ms).ok()?, u64::try_from(burst).ok()?);
        if amount == 0 || window_ms == 0 || window_ms > MAX_WINDOW_MS || burst == 0 {
            return None;
        }
        Some(Rate { amount, window_ms, burst: (burst != amount).then_some(burst) })
    }

    /// Units refilled per millisecond.
    fn per_ms(&self) -> f64 {
        self.amount as f64 / self.window_ms as f64
    }
}

/// The longest window: a year and a day.
const MAX_WINDOW_MS: u64 = 366 * 24 * 3_600_000;

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.window_ms;
        let units = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s")];
        match units.iter().find(|(size, _)| ms.is_multiple_of(*size)) {
            Some((size, unit)) => write!(f, "{}/{}{unit}", self.amount, ms / size)?,
            None => write!(f, "{}/{ms}ms", self.amount)?,
        }
        if let Some(burst) = self.burst {
            write!(f, " burst {burst}")?;
        }
        Ok(())
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Rate, RateError> {
        let fail = |reason: String| RateError { text: text.to_owned(), reason };
        let (rate, burst) = match text.split_once(" burst ") {
            Some((rate, burst)) => (rate.trim(), Some(burst.trim())),
            None => (text.trim(), None),
        };
        let Some((amount, window)) = rate.split_once('/') else {
            return Err(fail("write it as AMOUNT/WINDOW, like `50/1m` or `20/s burst 5`".into()));
        };
        let amount = whole(amount.trim()).map_err(|e| fail(format!("the amount {e}")))?;
        if amount == 0 {
            return Err(fail("the amount must be at least 1 (pause the work instead to stop it)".into()));
        }
        let window = window.trim();
        let digits = window.find(|c: char| !c.is_ascii_digit()).unwrap_or(window.len());
        let (count, unit) = window.split_at(digits);
        let count = if count.is_empty() { 1 } else { whole(count).map_err(|e| fail(format!("the window {e}")))? };
        let size = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(fail("the window needs a unit: ms, s, m, h or d".into())),
            other => return Err(fail(format!("unknown unit `{other}`: use ms, s, m, h or d"))),
        };
        let window_ms = count.checked_mul(size).filter(|ms| *ms <= MAX_WINDOW_MS);
        let Some(window_ms) = window_ms else { return Err(fail("the window is longer than 366 days".into())) };
        if window_ms == 0 {
            return Err(fail("the window must be longer than zero".into()));
        }
        let burst = match burst {
            None => None,
            Some(b) => match whole(b) {
                Ok(0) => return Err(fail("the burst must be at least 1".into())),
                Ok(n) => Some(n),
                Err(e) => return Err(fail(format!("the burst {e}"))),
            },
        };
        Ok(Rate { amount, window_ms, burst })
    }
}

/// A whole number of at most 18 digits, or why not.
fn whole(text: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{text}` is not a whole number"));
    }
    text.parse::<u64>().ok().filter(|n| *n < 1_000_000_000_000_000_000).ok_or_else(|| format!("`{text}` is too large"))
}

/// A token bucket as stored: its level (units, may be negative after a job costlier than the bucket) at `at` (ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bucket {
    pub(crate) level: f64,
    pub(crate) at: i64,
}

impl Bucket {
    /// A bucket never drawn from: full.
    pub(crate) fn full(rate: &Rate, now: i64) -> Bucket {
        Bucket { level: rate.burst() as f64, at: now }
    }

    /// The level at `now`, refilled since `at` and capped at the burst.
    pub(crate) fn level_at(&self, rate: &Rate, now: i64) -> f64 {
        let elapsed = now.saturating_sub(self.at).max(0) as f64;
        (self.level + elapsed * rate.per_ms()).min(rate.burst() as f64)
    }

    /// Whether `cost` may be taken at `now`: the level covers it, or the bucket is full and the cost is larger
    /// than the bucket (such a job runs when nothing else has drawn from it for a while, and leaves it in debt).
    pub(crate) fn allows(&self, rate: &Rate, now: i64, cost: u64) -> bool {
        self.level_at(rate, now) + 1e-9 >= (cost as f64).min(rate.burst() as f64)
    }

    /// Takes `cost` at `now`. A clock reading older than the bucket's (a claimer that read it before waiting for
    /// its turn) takes from the bucket as it stands, and leaves its time where it was: moving it back would refill
    /// the span between the two readings twice.
    pub(crate) fn take(&mut self, rate: &Rate, now: i64, cost: u64) {
        self.level = self.level_at(rate, now) - cost as f64;
        self.at = self.at.max(now);
    }

    /// When `cost` may be taken, at the earliest (`now` if it may be now).
    pub(crate) fn ready_at(&self, rate: &Rate, now: i64, cost: u64) -> i64 {
        let need = (cost as f64).min(rate.burst() as f64) - self.level_at(rate, now);
        if need <= 1e-9 {
            return now;
        }
        now.saturating_add((need / rate.per_ms()).ceil() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        for (text, amount, window_ms, burst, shown) in [
            ("50/1m", 50, 60_000, 50, "50/1m"),
            ("20/s", 20, 1_000, 20, "20/1s"),
            ("1000/500ms", 1000, 500, 1000, "1000/500ms"),
            ("40000/1m burst 10000", 40_000, 60_000, 10_000, "40000/1m burst 10000"),
            (" 3/2h ", 3, 7_200_000, 3, "3/2h"),
        ] {
            let rate: Rate = text.parse().expect(text);
            assert_eq!((rate.amount(), rate.window_ms(), rate.burst()), (amount, window_ms, burst), "{text}");
            assert_eq!(rate.to_string(), shown);
            assert_eq!(shown.parse::<Rate>(), Ok(rate));
        }
    }

    #[test]
    fn bad_rates_say_what_is_wrong() {
        for (text, says) in [
            ("0/1m", "the amount must be at least 1"),
            ("-1/s", "the amount `-1` is not a whole number"),
            ("50/0s", "the window must be longer than zero"),
            ("50", "write it as AMOUNT/WINDOW"),
            ("50/1", "the window needs a unit"),
            ("50/1w", "unknown unit `w`"),
            ("1.5/s", "`1.5` is not a whole number"),
            ("5/s burst 0", "the burst must be at least 1"),
            ("5/s burst x", "the burst `x` is not a whole number"),
            ("5/400d", "longer than 366 days"),
        ] {
            let err = text.parse::<Rate>().expect_err(text).to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(err.contains(&format!("{text:?}")), "{err}");
        }
    }

    #[test]
    fn a_bucket_refills_at_the_rate_and_caps_at_its_burst() {
        let rate: Rate = "10/s burst 5".parse().expect("rate");
        let mut b = Bucket::full(&rate, 0);
        for _ in 0..5 {
            assert!(b.allows(&rate, 0, 1));
            b.take(&rate, 0, 1);
        }
        assert!(!b.allows(&rate, 0, 1));
        assert_eq!(b.ready_at(&rate, 0, 1), 100);
        assert!(b.allows(&rate, 100, 1));
        assert_eq!(b.level_at(&rate, 10_000), 5.0);
        // A cost above the burst waits for a full bucket and leaves it in debt.
        let mut b = Bucket::full(&rate, 0);
        assert!(b.allows(&rate, 0, 8));
        b.take(&rate, 0, 8);
        assert_eq!(b.ready_at(&rate, 0, 1), 400);
        // A late clock reading takes from the bucket as it stands and keeps its time.
        let mut b = Bucket { level: 1.0, at: 1_000 };
        b.take(&rate, 900, 1);
        assert_eq!((b.level, b.at), (0.0, 1_000));
    }
}
