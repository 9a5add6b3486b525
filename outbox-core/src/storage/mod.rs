//! Storage, written once. Every operation the crate asks of a database is a plain function in the file named
//! for what it answers (`enqueue`, `jobs`, `stats`, `events`, `kinds`, `workers`, `schedules`, `locks`,
//! `retention`, `reconciliations`, `scans`, `remote`), with one statement for every backend built from the
//! short list of differences in [`backend`]. `archive` is the table of completed jobs kept in time partitions. What the engines really do differently lives in the backend
//! folders: the schema (`schema.sql`), connections and transaction modes, and the worker's claim and completion
//! path (`store/`), which each engine runs its own way.
//!
//! Not an extension point: users bring a sea-orm connection and never implement storage.

pub(crate) mod archive;
mod backend;
/// The driver-level conformance suite: every operation of this module on every backend. It lives beside the
/// crate's other tests and is compiled in here, where the operations are visible.
#[cfg(test)]
#[path = "../../tests/driver/conformance.rs"]
mod conformance;
pub(crate) mod decode;
pub(crate) mod enqueue;
pub(crate) mod events;
pub(crate) mod jobs;
pub(crate) mod kinds;
pub(crate) mod locks;
pub(crate) mod reconciliations;
pub(crate) mod remote;
pub(crate) mod retention;
pub(crate) mod scans;
pub(crate) mod schedules;
pub(crate) mod schema;
pub(crate) mod stats;
mod store;
pub(crate) mod transient;
pub(crate) mod workers;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::time::{Duration, Instant};

use sea_orm::{ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, ExecResult, Statement};

pub(crate) use backend::Backend;
pub(crate) use store::{
    ClaimedJob, Finished, Keep, Outcome, Rescued, Store, Unreadable, WorkerStore, WorkerStoreOpts, log_finished,
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

/// Maps the error of a write through the caller's connection that began at `started`; on SQLite a locked
/// database's error names its cause and its fix.
#[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
pub(crate) async fn write_failed<C: ConnectionTrait + ?Sized>(
    conn: &C,
    context: String,
    err: DbErr,
    started: Instant,
) -> Error {
    match Backend::of(conn) {
        #[cfg(feature = "sqlite")]
        Ok(Backend::Sqlite) => sqlite::write_failed(conn, context, err, started).await,
        _ => Error::db(context)(err),
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

/// Connection settings [`tune`] applies where the backend has them.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) struct Tuning {
    pub(crate) full_sync: bool,
    pub(crate) busy_timeout: Duration,
}

/// Applies the settings of the backend `url` names (journal mode, durability, busy timeout) to a pool's
/// options; an unsupported scheme is refused.
#[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
pub(crate) fn tune(url: &str, options: &mut ConnectOptions, settings: &Tuning) -> Result<()> {
    match Backend::of_url(url)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::tune(options, settings),
        #[cfg(feature = "postgres")]
        Backend::Postgres => {}
    }
    Ok(())
}

/// Opens a transaction that may write: it holds the write lock from its first statement where the engine
/// would otherwise fail a reader turning writer (SQLite's `BEGIN IMMEDIATE`), and waits out other writers.
pub(crate) async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    match Backend::of(db)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::begin_write(db).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            sea_orm::TransactionTrait::begin(db).await.map_err(Error::db("beginning a write transaction"))
        }
    }
}

/// Opens a read-only snapshot for scans.
pub(crate) async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    match Backend::of(db)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::begin_read(db).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            sea_orm::TransactionTrait::begin(db).await.map_err(Error::db("beginning a read transaction"))
        }
    }
}

/// What of a valid payload the backend cannot store, each at its JSON path (empty: all of it). `text` is the
/// payload as enqueue serialized it, for checks that can rule most payloads out without a walk.
#[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
pub(crate) fn unstorable(backend: Backend, payload: &serde_json::Value, text: &str) -> Vec<Violation> {
    match backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => Vec::new(),
        #[cfg(feature = "postgres")]
        Backend::Postgres => postgres::unstorable(payload, text),
    }
}

/// Opens the worker's own connection(s) for claims, completions, renewals, rescues and wake-ups; tasks it
/// needs run on `bg`, the worker's background runtime.
#[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
pub(crate) async fn open_worker_store(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    bg: &tokio::runtime::Handle,
) -> Result<Store> {
    match Backend::of(db)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::open_worker_store(db, opts).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => postgres::open_worker_store(db, opts, bg).await,
    }
}

/// A watch that wakes this process when other processes commit: see [`crate::wake::Watch`].
pub(crate) async fn watch(db: &DatabaseConnection) -> Result<crate::wake::Watch> {
    match Backend::of(db)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::watch(db),
        #[cfg(feature = "postgres")]
        Backend::Postgres => postgres::watch(db).await,
    }
}

/// How many connections a worker's own pool for its background chores opens at most.
const OWN_POOL: u32 = 2;

/// A small pool of a worker's own to `app`'s database, on `app`'s connection options, for the chores its
/// background thread runs (retention, schedules, its registry entry). Opened lazily: call it inside the
/// runtime that will use it, which the pool's housekeeping tasks join.
#[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
pub(crate) fn own_pool(app: &DatabaseConnection, worker_id: &str) -> Result<DatabaseConnection> {
    Ok(match Backend::of(app)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => sqlite::own_pool(app, OWN_POOL),
        #[cfg(feature = "postgres")]
        Backend::Postgres => postgres::own_pool(app, worker_id, OWN_POOL),
    })
}
