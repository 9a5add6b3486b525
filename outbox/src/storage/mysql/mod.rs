//! MariaDB (10.6 and later) and the MySQL family: its entries of the engine list ([`Engine`]), each in the file of
//! the same name as the other engines'. Times are `BIGINT` milliseconds and JSON is text, as on SQLite; identifiers
//! compare bytewise (`utf8mb4_nopad_bin`), as on the other two.
//!
//! Under construction (`docs/internals/mariadb.md` has the plan, step by step): the connections (`conn.rs`), the
//! schema with its migrations (`schema.rs`), enqueue (`enqueue.rs`), the archive (`archive.rs`), the
//! worker's statements (`store.rs`) and store (`writer.rs`), sequences (`sequences.rs`), wake-ups across
//! processes (`wake.rs`), the event feed (`feed.rs`), flow control in the claim (`flow.rs`), retention
//! (`retention.rs`), the archive's upkeep and workflows (`workflows.rs`) are in.

mod archive;
mod conn;
mod enqueue;
mod feed;
mod flow;
mod retention;
mod schema;
mod sequences;
mod store;
mod wake;
mod workflows;
mod writer;

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

/// Connections of a worker's store: claims, renewals and rescues share it with the writer of outcomes.
const STORE_POOL: u32 = 3;

/// `sql` with MySQL's placeholders for its `$n` ones.
fn stmt(sql: &str, values: Vec<Value>) -> sea_orm::Statement {
    Dialect::MySql.stmt(sql, values)
}

/// `n` placeholders from `$first` on.
fn marks(first: usize, n: usize) -> String {
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// The MariaDB and MySQL engine.
pub(crate) struct MySql;

impl Engine for MySql {
    /// How long a statement waits for a lock. `full_sync` has no session form here: durability is the server's
    /// `innodb_flush_log_at_trx_commit` (1 syncs every commit), which the operator sets.
    fn tune(options: &mut ConnectOptions, _full_sync: bool, busy_timeout: Duration) {
        conn::tune(options, busy_timeout);
    }

    async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        conn::begin_write(db).await
    }

    async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        conn::begin_read(db).await
    }

    async fn write_failed<C: ConnectionTrait + ?Sized>(
        _conn: &C,
        context: String,
        err: DbErr,
        started: Instant,
    ) -> Error {
        conn::write_failed(context, err, started)
    }

    fn own_pool(app: &DatabaseConnection, _worker_id: &str, max: u32) -> DatabaseConnection {
        conn::own_pool(app, max)
    }

    fn unstorable(payload: &serde_json::Value, text: &str) -> Vec<Violation> {
        conn::unstorable(payload, text)
    }

    async fn open_worker_store(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        bg: &tokio::runtime::Handle,
    ) -> Result<Store> {
        let config = store::Config::of(opts)?;
        Ok(std::sync::Arc::new(writer::MyStore::open(conn::own_pool(db, STORE_POOL), config, bg)))
    }

    /// A poll of the wake-up ring on a connection of its own (`wake.rs`).
    async fn watch(db: &DatabaseConnection) -> Result<Watch> {
        Ok(wake::watch(db))
    }

    /// Hearing other processes takes a connection of its own: nothing on the caller's.
    async fn watch_connection<C: ConnectionTrait + ?Sized>(_conn: &C) -> Watch {
        Watch::default()
    }

    async fn remote_claim(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        limit: usize,
        now: i64,
        lease_until: i64,
    ) -> Result<Vec<ClaimedJob>> {
        writer::remote_claim(db, opts, limit, now, lease_until).await
    }

    async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
        writer::remote_finish(db, owner, finished).await
    }

    #[cfg(test)]
    async fn finish_batch(db: &DatabaseConnection, owner: &str, batch: Vec<Finished>) -> Result<Vec<bool>> {
        writer::finish_batch(db, owner, batch).await
    }

    const MIGRATIONS: &'static [Migration] = schema::MIGRATIONS;

    const HAS_MIGRATIONS_TABLE: &'static str = schema::HAS_MIGRATIONS_TABLE;

    const ADOPT_DATED: &'static str = schema::ADOPT_DATED;

    #[cfg(test)]
    const SCHEMA: &'static str = schema::SCHEMA;

    /// Written once the catalogue test runs here, with enqueue.
    #[cfg(test)]
    const STATEMENTS_FILE: &'static str = "src/storage/mysql/statements.sql";

    #[cfg(test)]
    fn statements() -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Nothing: partitions and triggers go with their tables.
    async fn before_undo<C: ConnectionTrait + ?Sized>(_conn: &C) -> Result<()> {
        Ok(())
    }

    fn insert(jobs: &[&NewJob]) -> Result<(String, Vec<Value>)> {
        enqueue::insert(jobs)
    }

    const SKIP_HELD_KEYS: &'static str = enqueue::SKIP_HELD_KEYS;

    const COUNTS_SKIPPED: bool = true;

    async fn insert_if_absent<C: ConnectionTrait + ?Sized>(
        conn: &C,
        sql: String,
        values: Vec<Value>,
        context: String,
    ) -> Result<bool> {
        enqueue::insert_if_absent(conn, sql, values, context).await
    }

    async fn announce<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) {
        wake::announce(conn, id).await;
    }

    fn alone(_job: &NewJob) -> bool {
        false
    }

    fn holds_key(j: &str, key: &str) -> String {
        enqueue::holds_key(j, key)
    }

    const FEED_STAMP: Option<&'static str> = feed::FEED_STAMP;

    fn feed_after(row: &str, after: &str, rows: i64) -> Result<(String, Vec<Value>, String)> {
        feed::feed_after(row, after, rows)
    }

    const FEED_HEAD: &'static str = feed::FEED_HEAD;

    fn stuck_through(_d: Dialect) -> String {
        String::new()
    }

    async fn after_purge<C: ConnectionTrait + ?Sized>(conn: &C, before: i64) -> Result<()> {
        retention::after_purge(conn, before).await
    }

    async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64> {
        retention::prune_feed(conn, before, batch).await
    }

    async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, now: i64, batch: u64) -> Result<Pruned> {
        retention::prune(conn, rules, now, batch).await
    }

    async fn jobs_and_archive_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<String> {
        archive::jobs_and_archive_since(conn, since).await
    }

    async fn upkeep<C: ConnectionTrait + ?Sized>(
        conn: &C,
        plan: &Upkeep,
        ahead: (bool, u64),
        now: i64,
    ) -> Result<Done> {
        archive::upkeep(conn, plan, ahead, now).await
    }

    /// The partitioned table: a delete reaches every partition through it.
    async fn archive_tables<C: ConnectionTrait + ?Sized>(_conn: &C) -> Result<Vec<String>> {
        Ok(vec!["outbox_jobs_done".to_owned()])
    }
}
