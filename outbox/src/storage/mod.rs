//! Storage: every operation the crate asks of a database, written once. Each is a plain function in the file
//! named for what it answers (`enqueue`, `jobs`, `stats`, `events`, `kinds`, `workers`, `schedules`, `locks`,
//! `retention`, `reconciliations`, `scan`, `remote`, `archive`), its statements spelled for the connection's
//! [`Dialect`]. What an engine does its own way is one list, [`engine::Engine`], implemented once per engine in
//! its folder (`sqlite/`, `postgres/`, `mysql/`, whose files mirror each other by name); [`on_engine`] below is the
//! only match over the engines. The worker's claim and completion path is [`worker_store::WorkerStore`], which each
//! engine runs on connections of its own (`store/`).
//!
//! Not an extension point: users bring a sea-orm connection and never implement storage.

pub(crate) mod archive;
/// The driver-level conformance suite: every operation of this module on every engine. It lives beside the
/// crate's other tests and is compiled in here, where the operations are visible.
#[cfg(test)]
#[path = "../../tests/driver/conformance/mod.rs"]
mod conformance;
pub(crate) mod decode;
mod dialect;
mod engine;
pub(crate) mod enqueue;
pub(crate) mod events;
pub(crate) mod flow;
pub(crate) mod jobs;
pub(crate) mod kinds;
pub(crate) mod locks;
pub(crate) mod reconciliations;
pub(crate) mod remote;
pub(crate) mod retention;
pub(crate) mod scan;
pub(crate) mod schedules;
pub(crate) mod schema;
pub(crate) mod stats;
pub(crate) mod transient;
mod worker_store;
pub(crate) mod workers;
pub(crate) mod workflows;

// The engines, each behind its Cargo feature.
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

/// Runs `$body` with `$E` naming the [`engine::Engine`] of the dialect `$dialect`: the one match over the list of
/// engines.
macro_rules! on_engine {
    ($dialect:expr, $E:ident => $body:expr) => {
        match $dialect {
            #[cfg(feature = "sqlite")]
            $crate::storage::Dialect::Sqlite => {
                type $E = $crate::storage::sqlite::Sqlite;
                $body
            }
            #[cfg(feature = "postgres")]
            $crate::storage::Dialect::Postgres => {
                type $E = $crate::storage::postgres::Postgres;
                $body
            }
            #[cfg(feature = "mysql")]
            $crate::storage::Dialect::MySql => {
                type $E = $crate::storage::mysql::MySql;
                $body
            }
        }
    };
}
pub(crate) use on_engine;

/// Items that only the SQLite and PostgreSQL engines use: built with MySQL alone, they are compiled and checked, and
/// not warned of as dead code.
macro_rules! unused_by_mysql {
    ($($item:item)*) => {
        $(
            #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
            $item
        )*
    };
}
pub(crate) use unused_by_mysql;

use std::time::{Duration, Instant};

use sea_orm::{
    ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, ExecResult, Statement, Value,
};

pub(crate) use dialect::Dialect;
use engine::Engine;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use worker_store::Unreadable;
pub(crate) use worker_store::{
    ClaimedJob, Finished, Keep, Outcome, Rescued, Store, WorkerStore, WorkerStoreOpts, log_finished, log_rescued,
    rescue_due,
};

use crate::error::{Error, Result};
use crate::job::Violation;

/// Milliseconds since the Unix epoch, the unit of every time crossing the seam.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A row limit as a statement value; past `i64::MAX` it is as good as none.
pub(crate) fn limit_value(n: u64) -> sea_orm::Value {
    i64::try_from(n).unwrap_or(i64::MAX).into()
}

/// Maps the error of a write through the caller's connection that began at `started` ([`Engine::write_failed`]).
pub(crate) async fn write_failed<C: ConnectionTrait + ?Sized>(
    conn: &C,
    context: String,
    err: DbErr,
    started: Instant,
) -> Error {
    match Dialect::of(conn) {
        Ok(d) => on_engine!(d, E => E::write_failed(conn, context, err, started).await),
        Err(_) => Error::db(context)(err),
    }
}

/// Runs a write through the caller's connection; see [`write_failed`].
pub(crate) async fn execute_write<C: ConnectionTrait + ?Sized>(
    conn: &C,
    statement: Statement,
    context: impl FnOnce() -> String,
) -> Result<ExecResult> {
    let started = Instant::now();
    match conn.execute_raw(statement).await {
        Ok(res) => Ok(res),
        Err(e) => Err(write_failed(conn, context(), e, started).await),
    }
}

/// Runs a write that returns rows through the caller's connection; see [`write_failed`].
pub(crate) async fn query_write<C: ConnectionTrait + ?Sized>(
    conn: &C,
    statement: Statement,
    context: impl FnOnce() -> String,
) -> Result<Vec<sea_orm::QueryResult>> {
    let started = Instant::now();
    match conn.query_all_raw(statement).await {
        Ok(rows) => Ok(rows),
        Err(e) => Err(write_failed(conn, context(), e, started).await),
    }
}

/// [`Engine::insert_if_absent`] where `ON CONFLICT DO NOTHING` counts what it wrote (SQLite, PostgreSQL).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) async fn skip_if_present<C: ConnectionTrait + ?Sized>(
    conn: &C,
    d: Dialect,
    sql: String,
    values: Vec<Value>,
    context: String,
) -> Result<bool> {
    let res = execute_write(conn, d.stmt(format!("{sql} ON CONFLICT DO NOTHING"), values), || context).await?;
    Ok(res.rows_affected() == 1)
}

/// Runs the INSERT `sql` of one row unless a row of its primary key is there ([`Engine::insert_if_absent`]).
pub(crate) async fn insert_if_absent<C: ConnectionTrait + ?Sized>(
    conn: &C,
    sql: String,
    values: Vec<Value>,
    context: String,
) -> Result<bool> {
    on_engine!(Dialect::of(conn)?, E => E::insert_if_absent(conn, sql, values, context).await)
}

/// Connection settings [`tune`] applies where the engine has them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    pub(crate) full_sync: bool,
    pub(crate) busy_timeout: Duration,
}

/// Applies the settings of the engine `url` names to a pool's options; an unsupported scheme is refused.
pub(crate) fn tune(url: &str, options: &mut ConnectOptions, settings: &Tuning) -> Result<()> {
    let Tuning { full_sync, busy_timeout } = *settings;
    on_engine!(Dialect::of_url(url)?, E => E::tune(options, full_sync, busy_timeout));
    Ok(())
}

/// Opens a transaction that may write ([`Engine::begin_write`]).
pub(crate) async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    on_engine!(Dialect::of(db)?, E => E::begin_write(db).await)
}

/// Opens a read-only snapshot for scans.
pub(crate) async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    on_engine!(Dialect::of(db)?, E => E::begin_read(db).await)
}

/// What of a valid payload the engine cannot store, each at its JSON path (empty: all of it). `text` is the
/// payload as enqueue serialized it, for checks that can rule most payloads out without a walk.
pub(crate) fn unstorable(dialect: Dialect, payload: &serde_json::Value, text: &str) -> Vec<Violation> {
    on_engine!(dialect, E => E::unstorable(payload, text))
}

/// Opens the worker's own connection(s) for claims, completions, renewals, rescues and wake-ups; tasks it
/// needs run on `bg`, the worker's background runtime.
pub(crate) async fn open_worker_store(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    bg: &tokio::runtime::Handle,
) -> Result<Store> {
    on_engine!(Dialect::of(db)?, E => E::open_worker_store(db, opts, bg).await)
}

/// A watch that wakes this process when other processes commit: see [`crate::wake::Watch`].
pub(crate) async fn watch(db: &DatabaseConnection) -> Result<crate::wake::Watch> {
    on_engine!(Dialect::of(db)?, E => E::watch(db).await)
}

/// A watch of what `conn` works on, for a wait without a pool of its own ([`Engine::watch_connection`]).
pub(crate) async fn watch_connection<C: ConnectionTrait + ?Sized>(conn: &C) -> crate::wake::Watch {
    match Dialect::of(conn) {
        Ok(d) => on_engine!(d, E => E::watch_connection(conn).await),
        Err(_) => crate::wake::Watch::default(),
    }
}

/// How many connections a worker's own pool for its background chores opens at most.
const OWN_POOL: u32 = 2;

/// A small pool of a worker's own to `app`'s database, on `app`'s connection options, for the chores its
/// background thread runs (retention, schedules, its registry entry). Opened lazily: call it inside the
/// runtime that will use it, which the pool's housekeeping tasks join.
pub(crate) fn own_pool(app: &DatabaseConnection, worker_id: &str) -> Result<DatabaseConnection> {
    Ok(on_engine!(Dialect::of(app)?, E => E::own_pool(app, worker_id, OWN_POOL)))
}
