//! The command's logs: on stderr, filtered by `OUTBOX_LOG` (or `RUST_LOG`), coloured only for a person.

use std::ffi::OsString;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Starts logging to stderr: warnings by default, progress too for `work`. `OUTBOX_LOG` (an env-filter
/// directive such as `info` or `outbox=debug`) overrides, else `RUST_LOG`; colours only on a terminal,
/// and never when `NO_COLOR` is set (<https://no-color.org>).
pub(crate) fn init(work: bool) {
    let default = if work { "info" } else { "warn" };
    let (filter, warning) = filter(std::env::var("OUTBOX_LOG").ok(), std::env::var("RUST_LOG").ok(), default);
    let ansi = colour(std::env::var_os("NO_COLOR"), std::io::stderr().is_terminal());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .try_init();
    if let Some(warning) = warning {
        tracing::warn!("{warning}");
    }
}

/// The filter from the first of `OUTBOX_LOG` and `RUST_LOG` that is set and not empty, else `default`; with a
/// warning when the chosen directive does not parse (the command still runs, with `default`).
fn filter(outbox_log: Option<String>, rust_log: Option<String>, default: &str) -> (EnvFilter, Option<String>) {
    let chosen = [("OUTBOX_LOG", outbox_log), ("RUST_LOG", rust_log)]
        .into_iter()
        .find_map(|(name, value)| value.filter(|v| !v.trim().is_empty()).map(|v| (name, v)));
    let Some((name, directive)) = chosen else { return (EnvFilter::new(default), None) };
    match EnvFilter::try_new(&directive) {
        Ok(filter) => (filter, None),
        Err(e) => {
            let warning = format!(
                "{name}=`{}` is not a log filter ({e}); logging at `{default}`",
                crate::fail::quoted(&directive)
            );
            (EnvFilter::new(default), Some(warning))
        }
    }
}

/// Whether log lines carry ANSI colours: only for a terminal (a file or a pipe gets plain text), and never
/// when `NO_COLOR` is set to anything but the empty string.
fn colour(no_color: Option<OsString>, terminal: bool) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(outbox_log: Option<&str>, rust_log: Option<&str>) -> (String, bool) {
        let (filter, warning) = filter(outbox_log.map(str::to_owned), rust_log.map(str::to_owned), "warn");
        (filter.to_string(), warning.is_some())
    }

    #[test]
    fn outbox_log_wins_over_rust_log_which_wins_over_the_default() {
        assert_eq!(chosen(None, None), ("warn".into(), false));
        assert_eq!(chosen(None, Some("debug")), ("debug".into(), false));
        assert_eq!(chosen(Some("outbox=trace"), Some("debug")), ("outbox=trace".into(), false));
        assert_eq!(chosen(Some(""), Some("info")), ("info".into(), false), "an empty OUTBOX_LOG counts as unset");
        assert_eq!(chosen(Some("x=nonsense=1"), Some("info")), ("warn".into(), true), "a bad one is reported");
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colour(None, true));
        assert!(!colour(None, false));
        assert!(!colour(Some("1".into()), true));
        assert!(colour(Some("".into()), true), "an empty NO_COLOR does not count");
    }
}
