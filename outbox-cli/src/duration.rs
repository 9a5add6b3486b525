//! Durations as operators type them: `500ms`, `45s`, `30m`, `12h`, `7d`, `2w`, and sums like `1h30m`.

use std::time::Duration;

/// Parses a duration; the error says what is wrong with `text` and what is accepted.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let usage = "use a whole number with a unit (ms, s, m, h, d, w), e.g. 45s, 7d or 1h30m";
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("an empty duration: {usage}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("`{text}` is not a duration: {usage}"));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| format!("`{text}` is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let secs = |k: u64| n.checked_mul(k).map(Duration::from_secs).ok_or_else(|| format!("`{text}` is too large"));
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => secs(1)?,
            "m" => secs(60)?,
            "h" => secs(3_600)?,
            "d" => secs(86_400)?,
            "w" => secs(604_800)?,
            "" => return Err(format!("`{text}` has no unit: {usage}")),
            other => return Err(format!("`{text}` has an unknown unit `{other}`: {usage}")),
        };
        total = total.checked_add(part).ok_or_else(|| format!("`{text}` is too large"))?;
    }
    Ok(total)
}

/// A clap value parser for durations.
pub(crate) fn arg(text: &str) -> Result<Duration, String> {
    parse(text)
}

/// A short human form: `950ms`, `12.3s`, `4m10s`, `3h05m`, `2d04h`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    match s {
        _ if ms < 1_000 => format!("{ms}ms"),
        0..60 => format!("{:.1}s", d.as_secs_f64()),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_sums_parse() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse("2w"), Ok(Duration::from_secs(14 * 86_400)));
    }

    #[test]
    fn bad_durations_name_the_value() {
        for bad in ["", "7", "7x", "d7", "1.5h", "-3d", "99999999999999999999d"] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains(bad.trim()) || bad.is_empty(), "{bad}: {err}");
        }
        assert!(parse("7x").expect_err("unit").contains("unknown unit `x`"));
    }

    #[test]
    fn human_forms_are_short() {
        assert_eq!(human(Duration::from_millis(950)), "950ms");
        assert_eq!(human(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(human(Duration::from_secs(250)), "4m10s");
        assert_eq!(human(Duration::from_secs(11_100)), "3h05m");
        assert_eq!(human(Duration::from_secs(187_200)), "2d04h");
    }
}
