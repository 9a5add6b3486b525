//! Opening a database the way the outbox wants it: on SQLite WAL, a busy timeout, `synchronous=FULL` unless
//! asked otherwise; on PostgreSQL the server's own durability settings; on both a pool larger than one
//! connection.

use std::time::Duration;

use sea_orm::{ConnectOptions, Database, DatabaseConnection};

use crate::error::{Error, Result};
use crate::storage::{self, Tuning};

/// How [`connect_with`] opens a database.
#[derive(Debug, Clone)]
pub struct ConnectOpts {
    /// SQLite only. Durable by default (`true`: `synchronous=FULL`). `false` selects `NORMAL`: in WAL mode a power loss
    /// can then lose the last transactions committed before it (never corrupt the file). Jobs enqueued in
    /// them would be lost with the domain rows they belong to.
    pub full_sync: bool,
    /// Pool size (default 8). sea-orm's own SQLite default is one connection, which deadlocks any statement
    /// issued on the pool while a transaction from it is open.
    pub max_connections: u32,
    /// SQLite only. How long a statement waits for another writer (default 10 s).
    pub busy_timeout: Duration,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts { full_sync: true, max_connections: 8, busy_timeout: Duration::from_secs(10) }
    }
}

/// Connects with [`ConnectOpts::default`]. `url` is a sea-orm URL: `sqlite://outbox.db?mode=rwc`, or
/// `postgres://user:password@host/db` (add `?options=-c%20search_path%3Dname` to keep the outbox tables in
/// schema `name`). The URL picks the backend; nothing else in the API changes with it.
pub async fn connect(url: &str) -> Result<DatabaseConnection> {
    connect_with(url, ConnectOpts::default()).await
}

/// Connects with explicit options.
pub async fn connect_with(url: &str, opts: ConnectOpts) -> Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url.to_owned());
    options.max_connections(opts.max_connections.max(2)).test_before_acquire(false).sqlx_logging(false);
    storage::tune(url, &mut options, &Tuning { full_sync: opts.full_sync, busy_timeout: opts.busy_timeout })?;
    Database::connect(options).await.map_err(Error::db(format!("connecting to {}", redacted(url))))
}

/// The URL without its password, for error messages.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, tail) = rest.split_once('/').map_or((rest, ""), |(a, t)| (a, t));
    match authority.rsplit_once('@') {
        Some((user_info, host)) if user_info.contains(':') => {
            let user = user_info.split(':').next().unwrap_or_default();
            let slash = if rest.contains('/') { "/" } else { "" };
            format!("{scheme}://{user}:***@{host}{slash}{tail}")
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_reach_errors() {
        assert_eq!(super::redacted("postgres://app:s3cret@db/app"), "postgres://app:***@db/app");
        assert_eq!(super::redacted("postgres://app@db/app"), "postgres://app@db/app");
        assert_eq!(super::redacted("sqlite://a.db?mode=rwc"), "sqlite://a.db?mode=rwc");
    }
}
