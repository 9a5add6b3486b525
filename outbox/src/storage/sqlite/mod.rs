//! SQLite, the embedded engine: its entries of the engine list ([`Engine`]), each in the file of the same name
//! as PostgreSQL's (`conn.rs`, `enqueue.rs`, `feed.rs`, `retention.rs`, `archive.rs`, `schema.rs`, `wake.rs`,
//! and the worker's own connection in `store/`: `claim.rs`, `complete.rs`, `rescue.rs`, `remote.rs`). Times are
//! stored as integer milliseconds since the Unix epoch, JSON as text.

mod archive;
mod conn;
mod enqueue;
mod feed;
mod retention;
mod schema;
mod store;
#[cfg(target_os = "linux")]
mod wake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::{ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, Value};

use super::archive::{Done, Upkeep};
use super::engine::{Engine, Migration};
use super::enqueue::NewJob;
use super::retention::{PruneRules, Pruned};
use super::{ClaimedJob, Dialect, Finished, Store, WorkerStoreOpts};
use crate::error::{Error, Result};
use crate::job::Violation;
use crate::wake::Watch;
use store::SqliteStore;

/// The SQLite engine.
pub(crate) struct Sqlite;

impl Engine for Sqlite {
    fn tune(options: &mut ConnectOptions, full_sync: bool, busy_timeout: Duration) {
        conn::tune(options, full_sync, busy_timeout)
    }

    async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        conn::begin_write(db).await
    }

    async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        conn::begin_read(db).await
    }

    async fn write_failed<C: ConnectionTrait + ?Sized>(
        conn: &C,
        context: String,
        err: DbErr,
        started: Instant,
    ) -> Error {
        conn::write_failed(conn, context, err, started).await
    }

    fn own_pool(app: &DatabaseConnection, _worker_id: &str, max: u32) -> DatabaseConnection {
        conn::own_pool(app, max)
    }

    /// SQLite stores any valid JSON text.
    fn unstorable(_payload: &serde_json::Value, _text: &str) -> Vec<Violation> {
        Vec::new()
    }

    /// The worker's connection has a thread of its own ([`SqliteStore`]).
    async fn open_worker_store(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        _bg: &tokio::runtime::Handle,
    ) -> Result<Store> {
        Ok(Arc::new(SqliteStore::open(conn::store_config(db, opts).await?)?))
    }

    /// A watch of the pool's database file.
    async fn watch(db: &DatabaseConnection) -> Result<Watch> {
        Ok(watch_file(&conn::database_file(db)?))
    }

    /// The watch of the file `conn` works on (from `PRAGMA database_list`); an empty one for an in-memory
    /// database, or when the file is not known.
    async fn watch_connection<C: ConnectionTrait + ?Sized>(conn: &C) -> Watch {
        match conn::main_file(conn).await {
            Some(file) => watch_file(&file),
            None => Watch::default(),
        }
    }

    async fn remote_claim(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        limit: usize,
        now: i64,
        lease_until: i64,
    ) -> Result<Vec<ClaimedJob>> {
        store::remote::remote_claim(db, opts, limit, now, lease_until).await
    }

    async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
        store::remote::remote_finish(db, owner, finished).await
    }

    #[cfg(test)]
    async fn finish_batch(db: &DatabaseConnection, owner: &str, batch: Vec<Finished>) -> Result<Vec<bool>> {
        store::remote::finish_batch(db, owner, batch).await
    }

    const MIGRATIONS: &'static [Migration] = schema::MIGRATIONS;

    const HAS_MIGRATIONS_TABLE: &'static str = schema::HAS_MIGRATIONS_TABLE;

    const ADOPT_DATED: &'static str = schema::ADOPT_DATED;

    #[cfg(test)]
    const SCHEMA: &'static str = schema::SCHEMA;

    #[cfg(test)]
    const STATEMENTS_FILE: &'static str = "src/storage/sqlite/statements.sql";

    #[cfg(test)]
    fn statements() -> Vec<(&'static str, String)> {
        store::statements::statements()
    }

    async fn before_undo<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<()> {
        archive::drop_partitions(conn).await
    }

    fn insert(jobs: &[&NewJob]) -> Result<(String, Vec<Value>)> {
        Ok(enqueue::insert(jobs))
    }

    const SKIP_HELD_KEYS: &'static str = " ON CONFLICT DO NOTHING";

    const COUNTS_SKIPPED: bool = false;

    async fn insert_if_absent<C: ConnectionTrait + ?Sized>(
        conn: &C,
        sql: String,
        values: Vec<Value>,
        context: String,
    ) -> Result<bool> {
        super::skip_if_present(conn, Dialect::of(conn)?, sql, values, context).await
    }

    /// Nothing: a commit changes the database file, which other processes watch.
    async fn announce<C: ConnectionTrait + ?Sized>(_conn: &C, _id: &str) {}

    fn alone(job: &NewJob) -> bool {
        enqueue::alone(job)
    }

    fn holds_key(j: &str, key: &str) -> String {
        enqueue::holds_key(j, key)
    }

    const FEED_STAMP: Option<&'static str> = None;

    fn feed_after(row: &str, after: &str, rows: i64) -> Result<(String, Vec<Value>, String)> {
        feed::feed_after(row, after, rows)
    }

    const FEED_HEAD: &'static str = feed::FEED_HEAD;

    fn stuck_through(d: Dialect) -> String {
        retention::stuck_through(d)
    }

    async fn after_purge<C: ConnectionTrait + ?Sized>(conn: &C, before: i64) -> Result<()> {
        retention::after_purge(conn, before).await
    }

    async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64> {
        crate::storage::retention::prune_worker_rows(conn, Dialect::Sqlite, before, batch).await
    }

    async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, _now: i64, batch: u64) -> Result<Pruned> {
        retention::prune(conn, rules, batch).await
    }

    async fn jobs_and_archive_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<String> {
        archive::jobs_and_archive_since(conn, since).await
    }

    async fn upkeep<C: ConnectionTrait + ?Sized>(
        conn: &C,
        plan: &Upkeep,
        _ahead: (bool, u64),
        now: i64,
    ) -> Result<Done> {
        archive::upkeep(conn, plan, now).await
    }

    async fn archive_tables<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<String>> {
        archive::archive_tables(conn).await
    }
}

/// A watch of the database file at `path`: on Linux its directory's writes (`wake.rs`); elsewhere nothing, and
/// polling stays.
fn watch_file(path: &std::path::Path) -> Watch {
    #[cfg(target_os = "linux")]
    return Watch::new(wake::watch(path).map(|w| Box::new(w) as _), None);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        Watch::default()
    }
}
