//! Times as the crate keeps them: integer milliseconds since the Unix epoch, bounded to what every engine's time
//! columns hold, and durations as messages show them.

use chrono::{DateTime, Utc};

/// The earliest time a job may be due: 0001-01-01T00:00:00Z (every backend's time columns hold it).
pub(crate) const MIN_RUN_AT_MS: i64 = -62_135_596_800_000;
/// The latest: 9999-12-31T23:59:59.999Z. Snoozes and lease extensions beyond it are clamped to it.
pub(crate) const MAX_RUN_AT_MS: i64 = 253_402_300_799_999;

/// `d` in whole milliseconds, saturating at `i64::MAX`.
pub(crate) fn duration_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `now` plus `d`, saturating at [`MAX_RUN_AT_MS`].
pub(crate) fn ms_after(now: i64, d: std::time::Duration) -> i64 {
    now.saturating_add(duration_ms(d)).min(MAX_RUN_AT_MS)
}

/// A duration as `200ms`, `30s` or `1.5s`, for messages.
pub(crate) fn short_duration(d: std::time::Duration) -> String {
    match d.as_millis() {
        ms if ms < 1_000 => format!("{ms}ms"),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        _ => format!("{:.1}s", d.as_secs_f64()),
    }
}

/// The time `ms` milliseconds after the epoch; the epoch where chrono cannot hold it.
pub(crate) fn from_ms(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::UNIX_EPOCH)
}
