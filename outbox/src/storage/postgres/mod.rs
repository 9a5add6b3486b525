//! PostgreSQL, for several machines sharing one queue: its entries of the engine list ([`Engine`]), each in the
//! file of the same name as SQLite's (`conn.rs`, `enqueue.rs`, `feed.rs`, `retention.rs`, `archive.rs`,
//! `schema.rs`, `wake.rs`, and the worker's own connections in `store/`: `claim.rs`, `complete.rs`,
//! `rescue.rs`, `remote.rs`). The columns use PostgreSQL's own types (`timestamptz`, `jsonb`); shared statements
//! convert at their edges ([`Dialect`]).

mod archive;
mod conn;
mod enqueue;
mod feed;
mod retention;
mod schema;
mod store;
mod wake;

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
use store::PgStore;
#[cfg(test)]
pub(super) use store::remote::release_sequences;

/// The channel enqueues notify on commit; the payload is the schema of the jobs table, so workers of other
/// schemas in the same database ignore it.
pub(crate) const CHANNEL: &str = "outbox_jobs";

/// `timestamptz` of the integer milliseconds in SQL expression `ms` (exact, unlike `to_timestamp`), for the
/// worker's statements, which are constants.
macro_rules! ts {
    ($ms:literal) => {
        concat!("(TIMESTAMPTZ 'epoch' + (", $ms, ")::int8 * INTERVAL '1 millisecond')")
    };
}
use ts;

/// The PostgreSQL engine.
pub(crate) struct Postgres;

impl Engine for Postgres {
    /// Nothing to set: the server keeps its own settings.
    fn tune(_options: &mut ConnectOptions, _full_sync: bool, _busy_timeout: Duration) {}

    async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        sea_orm::TransactionTrait::begin(db).await.map_err(Error::db("beginning a write transaction"))
    }

    async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
        sea_orm::TransactionTrait::begin(db).await.map_err(Error::db("beginning a read transaction"))
    }

    async fn write_failed<C: ConnectionTrait + ?Sized>(
        _conn: &C,
        context: String,
        err: DbErr,
        _started: Instant,
    ) -> Error {
        Error::db(context)(err)
    }

    fn own_pool(app: &DatabaseConnection, worker_id: &str, max: u32) -> DatabaseConnection {
        conn::own_pool(app, worker_id, max)
    }

    fn unstorable(payload: &serde_json::Value, text: &str) -> Vec<Violation> {
        conn::unstorable(payload, text)
    }

    async fn open_worker_store(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        bg: &tokio::runtime::Handle,
    ) -> Result<Store> {
        let config = conn::store_config(db, opts).await?;
        Ok(std::sync::Arc::new(PgStore::open(db.get_postgres_connection_pool(), config, bg)))
    }

    /// A `LISTEN` connection of its own that wakes this process on every enqueue into the connection's schema.
    async fn watch(db: &DatabaseConnection) -> Result<Watch> {
        let schema = conn::current_schema(db).await?;
        let options = db.get_postgres_connection_pool().connect_options().as_ref().clone();
        let pool = wake::pool(options.application_name("outbox-watch"));
        let task = tokio::spawn(wake::listen(pool, schema, "watch".to_owned(), false));
        Ok(Watch::new(None, Some(task)))
    }

    /// Hearing other processes takes a `LISTEN` connection of its own: nothing on the caller's.
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
    const STATEMENTS_FILE: &'static str = "src/storage/postgres/statements.sql";

    #[cfg(test)]
    fn statements() -> Vec<(&'static str, String)> {
        store::statements::statements()
    }

    async fn before_undo<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<()> {
        let _ = conn;
        Ok(())
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

    /// Nothing: the insert trigger notifies at commit.
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
        crate::storage::retention::prune_worker_rows(conn, Dialect::Postgres, before, batch).await
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

    async fn archive_tables<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<String>> {
        archive::archive_tables(conn).await
    }
}
