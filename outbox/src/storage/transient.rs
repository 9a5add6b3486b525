//! Which database errors pass by themselves (a server restarting or refusing connections, a full disk, a
//! read-only file, a lock held too long) and which need someone to change something (a bad URL, a missing
//! table, a schema this binary does not know). Workers retry the first kind with backoff and stop on the
//! second.

use std::error::Error as StdError;

use sea_orm::sqlx;
use sea_orm::{ConnAcquireErr, DbErr, RuntimeErr};

/// Whether `e`, or an error it wraps, is one that retrying later can get past.
pub(crate) fn any(e: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        #[cfg(feature = "sqlite")]
        if let Some(e) = e.downcast_ref::<rusqlite::Error>() {
            return rusqlite(e);
        }
        if let Some(e) = e.downcast_ref::<sqlx::Error>() {
            return sqlx(e);
        }
        if let Some(e) = e.downcast_ref::<DbErr>() {
            return match e {
                DbErr::Conn(RuntimeErr::SqlxError(e))
                | DbErr::Exec(RuntimeErr::SqlxError(e))
                | DbErr::Query(RuntimeErr::SqlxError(e)) => sqlx(e),
                // A closed pool (`ConnectionClosed`) never opens again.
                DbErr::ConnectionAcquire(ConnAcquireErr::Timeout) => true,
                _ => false,
            };
        }
        next = e.source();
    }
    false
}

/// SQLite's primary result codes that a later try can get past: busy (5), locked (6), read-only (8, a file
/// whose permissions an operator fixes), I/O error (10), full (13), cannot open (14, a directory or lock
/// file on a full or unmounted disk), protocol (15: a lock race in WAL mode).
#[cfg(feature = "sqlite")]
fn sqlite_code(code: i32) -> bool {
    matches!(code & 0xff, 5 | 6 | 8 | 10 | 13 | 14 | 15)
}

#[cfg(feature = "sqlite")]
fn rusqlite(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => sqlite_code(f.extended_code),
        _ => false,
    }
}

/// MySQL's error numbers that a later try can get past: out of connections (1040), the server shutting down
/// (1053), a lock wait timed out (1205), a deadlock (1213), a disk full (1021), a read-only server (1290, 1836: a
/// replica during failover), a connection killed (1927), the server gone away (2006, 2013).
#[cfg(feature = "mysql")]
fn mysql_number(number: u16) -> bool {
    matches!(number, 1021 | 1040 | 1053 | 1205 | 1213 | 1290 | 1836 | 1927 | 2006 | 2013)
}

/// Also what the PostgreSQL worker retries on a fresh connection.
pub(crate) fn sqlx(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            #[cfg(feature = "sqlite")]
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                return code.parse().is_ok_and(sqlite_code);
            }
            #[cfg(feature = "mysql")]
            if let Some(e) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                return mysql_number(e.number());
            }
            // 08: connection exception; 40: serialization failure or deadlock; 53: insufficient resources
            // (disk full, out of connections); 57P: operator intervention (admin shutdown, terminated
            // backend, the server starting up; not 57P04, a dropped database); 58: system error (I/O); 55P03:
            // lock not available; 25006: a read-only transaction (a standby during failover).
            code.starts_with("08")
                || code.starts_with("40")
                || code.starts_with("53")
                || (code.starts_with("57P") && code != "57P04")
                || code.starts_with("58")
                || code == "55P03"
                || code == "25006"
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}
