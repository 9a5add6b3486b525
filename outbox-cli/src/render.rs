//! Output: aligned tables for people, JSON for programs.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::fail::{Failure, Result};

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns for people.
    Table,
    /// JSON on stdout, one document per command.
    Json,
}

/// Prints `value` as pretty JSON.
pub(crate) fn json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure::error(format!("encoding json output: {e}")))?;
    println!("{text}");
    Ok(())
}

/// Columns padded to their widest cell, two spaces apart; the last column is not padded.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            out.push_str(cell);
            if i < last {
                out.push_str(&" ".repeat(widths[i].saturating_sub(cell.chars().count()) + 2));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// `2026-11-22 22:45:01` (UTC).
pub(crate) fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// An optional time, `-` when absent.
pub(crate) fn opt_time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "-".to_owned(), time)
}

/// A duration in a short human form: `950ms`, `12.3s`, `4m10s`, `3h05m`, `2d04h`.
pub(crate) fn human(d: std::time::Duration) -> String {
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

/// `text` cut to `max` characters (with `…`), on one line.
pub(crate) fn short(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t =
            table(&["ID", "STATUS"], &[vec!["a".into(), "pending".into()], vec!["long-id".into(), "failed".into()]]);
        assert_eq!(t, "ID       STATUS\na        pending\nlong-id  failed\n");
    }

    #[test]
    fn human_forms_are_short() {
        use std::time::Duration;
        assert_eq!(human(Duration::from_millis(950)), "950ms");
        assert_eq!(human(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(human(Duration::from_secs(250)), "4m10s");
        assert_eq!(human(Duration::from_secs(11_100)), "3h05m");
        assert_eq!(human(Duration::from_secs(187_200)), "2d04h");
    }

    #[test]
    fn short_cuts_and_flattens() {
        assert_eq!(short("a\nb", 10), "a b");
        assert_eq!(short("abcdefghij", 5), "abcd…");
    }
}
