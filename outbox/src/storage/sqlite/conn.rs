//! SQLite's connections: the pool's settings (WAL, durability, busy timeout), transaction modes, what a locked
//! database means and how to fix it, and the pools and files a worker opens beside the application's.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, SqliteTransactionMode,
    SqlxSqliteConnector, Statement, TransactionOptions, TransactionTrait,
};

use super::store::StoreConfig;
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::storage::WorkerStoreOpts;

/// Tries at `BEGIN IMMEDIATE` while another writer holds the database past its busy timeout.
const BEGIN_TRIES: u32 = 5;

/// Whether SQLite said the database is locked (`SQLITE_BUSY`, code 5, or one of its extended codes).
fn is_busy(err: &DbErr) -> bool {
    let text = err.to_string();
    text.contains("database is locked") || text.contains("SQLITE_BUSY") || text.contains("(code: 5)")
}

/// `SQLITE_BUSY_SNAPSHOT` (517): a transaction that began by reading cannot become a writer because another
/// writer committed after its snapshot. SQLite reports it at once; no busy timeout can help.
fn is_busy_snapshot(err: &DbErr) -> bool {
    err.to_string().contains("(code: 517)")
}

/// Maps the error of a write through the caller's connection that began at `started`. A locked database
/// has two causes, told apart by how long the statement waited against the connection's busy timeout:
/// SQLite fails at once a transaction that has read and now wants to write while another connection holds
/// (or has since used) the write lock, since waiting could deadlock; otherwise it waits out the busy timeout.
pub(super) async fn write_failed<C: ConnectionTrait + ?Sized>(
    conn: &C,
    context: String,
    err: DbErr,
    started: Instant,
) -> Error {
    let waited = started.elapsed();
    let timeout = if is_busy(&err) && !is_busy_snapshot(&err) { busy_timeout(conn).await } else { None };
    write_error(context, err, waited, timeout)
}

/// The connection's busy timeout, if it can be read.
async fn busy_timeout<C: ConnectionTrait + ?Sized>(conn: &C) -> Option<Duration> {
    let row = conn.query_one_raw(Statement::from_string(DbBackend::Sqlite, "PRAGMA busy_timeout")).await.ok()??;
    let ms = row.try_get_by_index::<i64>(0).ok()?;
    Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

/// How a write failed: see [`write_failed`]. `timeout` is the connection's busy timeout where known.
fn write_error(context: String, err: DbErr, waited: Duration, timeout: Option<Duration>) -> Error {
    const USE_BEGIN: &str = "SQLite cannot turn a transaction that has read into a writer then, and waiting cannot \
        help; open write transactions with `outbox::transaction` or `outbox::begin`, which take the \
        write lock first";
    // Well before the busy timeout: SQLite did not wait. Unknown timeout: a tenth of a second is no wait.
    let spent = match timeout {
        Some(t) => waited >= t.mul_f64(0.9),
        None => waited >= Duration::from_millis(100),
    };
    // A busy timeout this short cannot tell the causes apart: both are named.
    let short = timeout.is_some_and(|t| t < Duration::from_millis(100));
    let context = if is_busy_snapshot(&err) {
        format!("{context} (this transaction began with a read, and another writer committed since: {USE_BEGIN})")
    } else if is_busy(&err) && !spent {
        format!(
            "{context} (this transaction began with a read while another connection held the write lock, and \
             SQLite failed it after {} without waiting: {USE_BEGIN})",
            crate::time::short_duration(waited)
        )
    } else if is_busy(&err) && short {
        format!(
            "{context} (another connection held the write lock, and this connection's busy timeout is only {}: \
             raise `ConnectOpts::busy_timeout`; if this transaction began with a read, {USE_BEGIN})",
            crate::time::short_duration(timeout.unwrap_or_default())
        )
    } else if is_busy(&err) {
        format!(
            "{context} (another connection held the write lock past the busy timeout{}: look for a long write \
             transaction, or raise `ConnectOpts::busy_timeout`)",
            timeout.map(|t| format!(" of {}", crate::time::short_duration(t))).unwrap_or_default()
        )
    } else {
        context
    };
    Error::db(context)(err)
}

/// The database file of a pool; the worker opens its own connection to it.
pub(super) fn database_file(db: &DatabaseConnection) -> Result<PathBuf> {
    let options = db.get_sqlite_connection_pool().connect_options();
    let path = options.get_filename();
    let text = path.to_string_lossy();
    if text.is_empty() || text == ":memory:" || text.starts_with("file:sqlx-in-memory") {
        return Err(Error::Unsupported(
            "the worker needs an SQLite file database (`sqlite://path/to/file.db?mode=rwc`); \
             an in-memory database is private to one connection"
                .into(),
        ));
    }
    Ok(path.to_path_buf())
}

/// The file of the database `conn` works on (`PRAGMA database_list`), when it has one.
pub(super) async fn main_file<C: ConnectionTrait + ?Sized>(conn: &C) -> Option<PathBuf> {
    let list = Statement::from_string(DbBackend::Sqlite, "PRAGMA database_list");
    let rows = conn.query_all_raw(list).await.ok()?;
    let main = rows.iter().find(|r| r.try_get_by_index::<String>(1).is_ok_and(|n| n == "main"))?;
    main.try_get_by_index::<String>(2).ok().filter(|f| !f.is_empty()).map(PathBuf::from)
}

/// See [`crate::storage::own_pool`]: the same file, journal mode, durability and busy timeout as `app`'s pool.
pub(super) fn own_pool(app: &DatabaseConnection, max: u32) -> DatabaseConnection {
    let options = app.get_sqlite_connection_pool().connect_options().as_ref().clone();
    let pool = SqlitePoolOptions::new().max_connections(max).min_connections(0).connect_lazy_with(options);
    SqlxSqliteConnector::from_sqlx_sqlite_pool(pool)
}

/// The pool's `synchronous` setting, which the worker's connection copies.
async fn synchronous_mode(db: &DatabaseConnection) -> Result<String> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Sqlite, "PRAGMA synchronous"))
        .await
        .map_err(Error::db("reading PRAGMA synchronous"))?;
    let level =
        row.map(|r| r.try_get_by_index::<i64>(0)).transpose().map_err(Error::db("reading PRAGMA synchronous"))?;
    Ok(match level {
        Some(0) => "OFF",
        Some(1) => "NORMAL",
        Some(3) => "EXTRA",
        _ => "FULL",
    }
    .to_owned())
}

/// How a worker's own connection to the pool's database file is opened, and what it claims.
pub(super) async fn store_config(db: &DatabaseConnection, opts: WorkerStoreOpts) -> Result<StoreConfig> {
    Ok(StoreConfig {
        path: database_file(db)?,
        synchronous: synchronous_mode(db).await?,
        busy_timeout: Duration::from_secs(10),
        kinds_json: encode_names(&opts.unlimited_kinds())?,
        one_kind: opts.unlimited_kinds().len() == 1,
        flows: opts
            .flows
            .iter()
            .map(|f| Ok((encode_names(std::slice::from_ref(&f.kind))?, f.clone())))
            .collect::<Result<_>>()?,
        queues_json: opts.queues.as_deref().map(encode_names).transpose()?,
        worker_id: opts.worker_id,
    })
}

fn encode_names(names: &[String]) -> Result<String> {
    serde_json::to_string(names).map_err(|e| Error::Internal(format!("encoding kind and queue names: {e}")))
}

/// Applies the durability, journal mode and busy timeout to a pool's options.
pub(super) fn tune(options: &mut ConnectOptions, full_sync: bool, busy: Duration) {
    let synchronous = if full_sync { SqliteSynchronous::Full } else { SqliteSynchronous::Normal };
    options.map_sqlx_sqlite_opts(move |o| {
        o.journal_mode(SqliteJournalMode::Wal).synchronous(synchronous).busy_timeout(busy)
    });
}

/// `BEGIN IMMEDIATE`, retried while another writer holds the database past the busy timeout.
pub(super) async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    let opts = TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..TransactionOptions::default()
    };
    let mut retry = Backoff::new(Duration::from_millis(10), Duration::MAX);
    let mut tries = 0;
    let started = Instant::now();
    loop {
        tries += 1;
        match db.begin_with_options(opts).await {
            Ok(txn) => return Ok(txn),
            Err(e) if is_busy(&e) && tries < BEGIN_TRIES => {
                tracing::debug!(error = %e, tries, "database busy at begin; retrying");
                retry.sleep().await;
            }
            // `BEGIN IMMEDIATE` reads nothing first: a busy one always waited out the busy timeout.
            Err(e) => {
                let timeout = busy_timeout(db).await;
                return Err(write_error("beginning a write transaction".into(), e, started.elapsed(), timeout));
            }
        }
    }
}

/// Deferred: a scan only reads; its scratch table lives in the connection's temp schema.
pub(super) async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    let opts = TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Deferred),
        ..TransactionOptions::default()
    };
    db.begin_with_options(opts).await.map_err(Error::db("beginning a read transaction"))
}
