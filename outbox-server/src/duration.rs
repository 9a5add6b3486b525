//! Durations and times as operators type them, in query parameters and request bodies of the API and on the
//! `outbox` command line: `500ms`, `45s`, `30m`, `12h`, `7d`, `2w`, sums like `1h30m`, and RFC 3339 times.
//! The times they reach from now must fall in the years 1 to 9999, like every time the queue stores.
//!
//! Every error is one line naming the text at fault (control characters escaped) and what is accepted.
//!
//! ```
//! use std::time::Duration;
//! use outbox_server::duration;
//!
//! assert_eq!(duration::parse("1h30m"), Ok(Duration::from_secs(5_400)));
//! assert!(duration::parse("7x").unwrap_err().contains("unknown unit `x`"));
//! assert!(duration::since("2026-11-22T10:00:00Z").is_ok() && duration::since("1h").is_ok());
//! ```

use std::time::Duration;

use chrono::{DateTime, Datelike, TimeDelta, Utc};

const USAGE: &str = "use a whole number with a unit (ms, s, m, h, d, w), e.g. 45s, 7d or 1h30m";

/// Parses a duration; the error says what is wrong with `text` and what is accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("an empty duration: {USAGE}"));
    }
    let too_large = || format!("`{}` is too large", quoted(text));
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("`{}` is not a duration: {USAGE}", quoted(text)));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| too_large())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let secs = |k: u64| n.checked_mul(k).map(Duration::from_secs).ok_or_else(too_large);
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => secs(1)?,
            "m" => secs(60)?,
            "h" => secs(3_600)?,
            "d" => secs(86_400)?,
            "w" => secs(604_800)?,
            "" => return Err(format!("`{}` has no unit: {USAGE}", quoted(text))),
            other => return Err(format!("`{}` has an unknown unit `{}`: {USAGE}", quoted(text), quoted(other))),
        };
        total = total.checked_add(part).ok_or_else(too_large)?;
    }
    Ok(total)
}

/// The time `d` before now; `None` before the year 1, where the queue's times begin (no job is older, and
/// far enough back the subtraction itself would overflow).
pub fn ago(d: Duration) -> Option<DateTime<Utc>> {
    let t = Utc::now().checked_sub_signed(TimeDelta::from_std(d).ok()?)?;
    (t.year() >= 1).then_some(t)
}

/// The time `d` after now; `None` past the year 9999, where the queue's times end (enqueue refuses a later
/// run time).
pub fn ahead(d: Duration) -> Option<DateTime<Utc>> {
    let t = Utc::now().checked_add_signed(TimeDelta::from_std(d).ok()?)?;
    (t.year() <= 9_999).then_some(t)
}

/// A duration counted back from now (a stats window, a purge age): [`parse`], then refused when it reaches
/// before the year 1.
pub fn back(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    ago(d)
        .map(|_| d)
        .ok_or_else(|| format!("`{}` reaches back before the year 1: give a shorter duration", quoted(text)))
}

/// A duration counted forward from now (an enqueue delay): [`parse`], then refused when it reaches past
/// the year 9999.
pub fn forward(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    ahead(d).map(|_| d).ok_or_else(|| format!("`{}` reaches past the year 9999: give a shorter duration", quoted(text)))
}

/// A point in the past: a duration ago (`1h`) or an RFC 3339 time (`2026-11-22T10:00:00Z`).
pub fn since(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let d = parse(text).map_err(|e| format!("{e}; or give a time like 2026-11-22T10:00:00Z"))?;
    let shorter = "give a shorter duration, or a time like 2026-11-22T10:00:00Z";
    ago(d).ok_or_else(|| format!("`{}` reaches back before the year 1: {shorter}", quoted(text)))
}

/// `text` as these messages quote it: control characters escaped (`\n`, `\u{1b}`), so a value pasted with
/// a newline or a terminal escape cannot split a one-line message or colour a terminal. The `outbox`
/// command quotes the other values it names the same way.
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;
