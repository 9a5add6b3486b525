//! Opening the database the command operates on.

use std::path::Path;
use std::time::Duration;

use sea_orm::DatabaseConnection;

use crate::fail::{Failure, Result};

/// `--database-url` as a URL: a bare path becomes an SQLite URL.
pub(crate) fn url(arg: &str) -> String {
    if arg.contains("://") || arg.starts_with("sqlite:") { arg.to_owned() } else { format!("sqlite://{arg}") }
}

/// The URL with any password hidden, for messages.
pub(crate) fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    match rest.split_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_owned(),
    }
}

/// The file of an SQLite URL, if it names one.
fn sqlite_file(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then_some(path)
}

/// Connects. Only `create` (migrate) may create a missing SQLite file; every other command needs the
/// outbox tables to be up to date. With `wait` (what `work` does), a database that is unavailable for a
/// reason that passes by itself (a server restarting or refusing connections, a full disk) is waited for,
/// with a log line per try, instead of failing.
pub(crate) async fn open(arg: &str, create: bool, wait: bool) -> Result<DatabaseConnection> {
    let mut delay = Duration::from_millis(500);
    loop {
        match try_open(arg, create).await {
            Err((failure, true)) if wait => {
                tracing::warn!(error = %failure.message, retry_in = ?delay, "database unavailable; waiting for it");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            result => return result.map_err(|(failure, _)| failure),
        }
    }
}

/// One try at [`open`]; a failure says whether it may pass by itself.
async fn try_open(arg: &str, create: bool) -> std::result::Result<DatabaseConnection, (Failure, bool)> {
    let mut url = url(arg);
    if let Some(file) = sqlite_file(&url) {
        if create {
            if !url.contains("mode=") {
                url.push_str(if url.contains('?') { "&mode=rwc" } else { "?mode=rwc" });
            }
        } else if !Path::new(file).exists() {
            let failure = Failure::error(format!("database file `{file}` does not exist")).hint(
                "run `outbox migrate` to create it, or point --database-url (OUTBOX_DATABASE_URL) at your database",
            );
            return Err((failure, false));
        }
    }
    let db = outbox::connect(&url).await.map_err(|e| {
        let transient = e.is_transient();
        let failure = Failure::error(format!("cannot open database `{}`: {e}", shown(&url)))
            .hint("check --database-url (OUTBOX_DATABASE_URL)");
        (failure, transient)
    })?;
    if !create {
        let pending = outbox::pending_migrations(&db).await.map_err(|e| {
            let message = e.to_string();
            let transient = e.is_transient();
            let mut failure = Failure::error(format!("reading the migrations of `{}`: {message}", shown(&url)));
            if message.contains("is missing") {
                failure = failure.hint("a newer outbox migrated this database: run a binary at least as new as it");
            }
            (failure, transient)
        })?;
        if !pending.is_empty() {
            let failure = Failure::error(format!(
                "database `{}` lacks {} outbox migration(s): {}",
                shown(&url),
                pending.len(),
                pending.join(", ")
            ))
            .hint("run `outbox migrate` first");
            return Err((failure, false));
        }
    }
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_sqlite_urls_and_passwords_are_hidden() {
        assert_eq!(url("data/app.db"), "sqlite://data/app.db");
        assert_eq!(url("postgres://u:p@h/db"), "postgres://u:p@h/db");
        assert_eq!(shown("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(shown("sqlite://a.db"), "sqlite://a.db");
        assert_eq!(sqlite_file("sqlite://a/b.db?mode=rwc"), Some("a/b.db"));
        assert_eq!(sqlite_file("sqlite::memory:"), None);
    }
}
