//! The one list of what an engine does that a statement written once cannot. Each engine implements it in its
//! folder (`sqlite/mod.rs`, `postgres/mod.rs`), each entry in the file of the same name in both folders;
//! `storage/mod.rs` holds the one match that picks the engine of a connection ([`super::on_engine`]). Everything
//! else in `storage/` is written once, over the [`Dialect`] of its connection.
//!
//! A third engine is a folder that implements this trait, a variant of [`Dialect`] with its spellings, and an arm
//! in `on_engine`.

use std::time::{Duration, Instant};

use sea_orm::{ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, Value};

use super::{ClaimedJob, Dialect, Finished, Store, WorkerStoreOpts};
use crate::error::{Error, Result};
use crate::job::Violation;
use crate::record::JobStatus;
use crate::wake::Watch;

/// One migration of an engine's schema (its name is the same on every engine: `schema.rs`): the statements
/// applying it and those undoing it.
pub(crate) struct Migration {
    pub(crate) up: &'static str,
    pub(crate) down: &'static str,
}

/// What an engine does its own way. Implemented by a unit type per engine; called through
/// [`super::on_engine`], never through a trait object.
pub(crate) trait Engine {
    // Connections (`conn.rs`).

    /// Applies the engine's settings to a pool's options: durability (`full_sync`: every commit synced) and how
    /// long a statement waits for another writer's lock.
    fn tune(options: &mut ConnectOptions, full_sync: bool, busy_timeout: Duration);

    /// Opens a transaction that may write: it holds the write lock from its first statement where the engine
    /// would otherwise fail a reader turning writer, and waits out other writers.
    async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction>;

    /// Opens a read-only snapshot for scans.
    async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction>;

    /// The error of a write through the caller's connection that began at `started`, with its cause and fix
    /// where the engine can tell them.
    async fn write_failed<C: ConnectionTrait + ?Sized>(
        conn: &C,
        context: String,
        err: DbErr,
        started: Instant,
    ) -> Error;

    /// A small pool of a worker's own to `app`'s database, on `app`'s options, opened lazily.
    fn own_pool(app: &DatabaseConnection, worker_id: &str, max: u32) -> DatabaseConnection;

    /// What of a valid payload the engine cannot store, each at its JSON path; `text` is its JSON text.
    fn unstorable(payload: &serde_json::Value, text: &str) -> Vec<Violation>;

    // The worker (`store/`) and its wake-ups (`wake.rs`).

    /// Opens the worker's own connection(s) for claims, completions, renewals and rescues; tasks it needs run
    /// on `bg`, the worker's background runtime.
    async fn open_worker_store(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        bg: &tokio::runtime::Handle,
    ) -> Result<Store>;

    /// A watch that wakes this process when other processes commit to `db`'s database.
    async fn watch(db: &DatabaseConnection) -> Result<Watch>;

    /// A watch of what `conn` works on for a wait that has no pool of its own; empty where the engine needs a
    /// connection of its own to hear other processes.
    async fn watch_connection<C: ConnectionTrait + ?Sized>(conn: &C) -> Watch;

    // Remote workers (`store/remote.rs`).

    /// Claims up to `limit` due jobs for the remote worker `opts` describes, through the worker's statements.
    async fn remote_claim(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        limit: usize,
        now: i64,
        lease_until: i64,
    ) -> Result<Vec<ClaimedJob>>;

    /// Writes one outcome of a remote worker, fenced like the in-process worker's; false when the fence held.
    async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool>;

    /// Writes `batch` in one statement of the worker's batched form, fenced by `owner`; which it wrote.
    #[cfg(test)]
    async fn finish_batch(db: &DatabaseConnection, owner: &str, batch: Vec<Finished>) -> Result<Vec<bool>>;

    // The schema (`schema.sql`, `migrations/`).

    /// The migrations, in the order of `schema::MIGRATIONS`.
    const MIGRATIONS: &'static [Migration];

    /// A query of one count: whether the database has the table `outbox_migrations` where outbox looks for it.
    const HAS_MIGRATIONS_TABLE: &'static str;

    /// What taking over a database that the dated migrations of earlier builds made changes beyond their records
    /// (`schema.rs`).
    const ADOPT_DATED: &'static str;

    /// The current schema, whole (`schema.sql`), which a test holds equal to what the migrations make.
    #[cfg(test)]
    const SCHEMA: &'static str;

    /// The catalogue of the statements the engine sends (`statements.sql`), from the crate's directory.
    #[cfg(test)]
    const STATEMENTS_FILE: &'static str;

    /// The statements the worker's own connections send past sea-orm, by name (`store/statements.rs`).
    #[cfg(test)]
    fn statements() -> Vec<(&'static str, String)>;

    /// What undoing the schema must do first that its statements cannot say (tables made at run time).
    async fn before_undo<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<()>;

    // Enqueue (`enqueue.rs`).

    /// The INSERT of `jobs` (without its conflict clause) and its values; refused for jobs the engine cannot take
    /// yet.
    fn insert(jobs: &[&NewJob]) -> Result<(String, Vec<Value>)>;

    /// What ends an INSERT of keyed jobs so that it skips a job whose key an active job of its kind holds.
    const SKIP_HELD_KEYS: &'static str;

    /// Whether an INSERT's count of rows counts the rows [`Engine::SKIP_HELD_KEYS`] skipped too: then which went
    /// in is read back.
    const COUNTS_SKIPPED: bool;

    /// Runs `sql`, the INSERT of one row, unless a row of the same primary key is there, and tells whether it
    /// wrote; the caller's transaction goes on either way (a compare-and-set's second half: `locks.rs`,
    /// `schedules.rs`).
    async fn insert_if_absent<C: ConnectionTrait + ?Sized>(
        conn: &C,
        sql: String,
        values: Vec<Value>,
        context: String,
    ) -> Result<bool>;

    /// Tells other processes that the job `id`, just written in `conn`'s transaction, may be claimable once that
    /// commits: nothing where the database tells them itself (SQLite's watched file, PostgreSQL's `NOTIFY` at
    /// commit). One job of a statement is enough: its jobs commit together.
    async fn announce<C: ConnectionTrait + ?Sized>(conn: &C, id: &str);

    /// Whether `job` goes in a statement of its own (a statement's subqueries may read the table before any of
    /// its rows is written, and a sequenced job's place is read so).
    fn alone(job: &NewJob) -> bool;

    /// The condition that the job `j` holds the idempotency key `key` (an SQL expression), as the unique index
    /// of active keys reads it.
    fn holds_key(j: &str, key: &str) -> String;

    // The event feed (`feed.rs`).

    /// What a reader runs before it reads the feed, where rows enter the feed's order only once a reader orders
    /// them (MariaDB stamps the rows committed since the last stamp); `None` where commit order is readable.
    const FEED_STAMP: Option<&'static str>;

    /// The feed's query from the row `row` of the position `after` (as [`Engine::FEED_HEAD`] or a row writes it),
    /// `rows` rows at most: its statement, its values, and the position of its first row.
    fn feed_after(row: &str, after: &str, rows: i64) -> Result<(String, Vec<Value>, String)>;

    /// A query of the feed's current end.
    const FEED_HEAD: &'static str;

    // Jobs and retention (`retention.rs`).

    /// What narrows the claimed jobs whose lease ran out before `$1` to those the engine can find fast, as a
    /// condition followed by `AND`; empty where the condition on the jobs alone is fast.
    fn stuck_through(d: Dialect) -> String;

    /// What a purge of finished jobs last updated before `before` also deletes, beyond the jobs.
    async fn after_purge<C: ConnectionTrait + ?Sized>(conn: &C, before: i64) -> Result<()>;

    /// Deletes at most `batch` of the feed's rows older than `before` that belong to no job, with the events of
    /// the jobs deleted as they completed that outlived them for the feed's readers; how many.
    async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64>;

    /// Deletes the finished jobs (with their history) that `rules` says are due, about `batch` at a time, in a
    /// pass at `now`.
    async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, now: i64, batch: u64) -> Result<Pruned>;

    // The archive (`archive.rs`).

    /// `outbox_jobs` and the archive read as one relation named `outbox_jobs`, for readers of jobs finished
    /// since `since` (ms).
    async fn jobs_and_archive_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<String>;

    /// One round of the archive's upkeep at `now`, in the caller's transaction. `ahead` is what of `plan` only an
    /// engine that makes partitions ahead reads: whether to make them, and how many rows of the default partition
    /// a round deletes.
    async fn upkeep<C: ConnectionTrait + ?Sized>(conn: &C, plan: &Upkeep, ahead: (bool, u64), now: i64)
    -> Result<Done>;

    /// The tables holding archived jobs that a delete names.
    async fn archive_tables<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<String>>;
}

// What crosses the list beside the worker's types (`worker_store.rs`).

/// A job row about to be written by enqueue.
#[derive(Debug, Clone)]
pub(crate) struct NewJob {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) payload: String,
    pub(crate) priority: i32,
    pub(crate) max_attempts: i32,
    pub(crate) run_at: i64,
    /// Whether `run_at` was still ahead when the job was prepared: then it waits off the ready indexes.
    pub(crate) scheduled: bool,
    pub(crate) key: Option<String>,
    pub(crate) schema_hash: String,
    pub(crate) created_at: i64,
    /// The sequence the job runs in, if any.
    pub(crate) sequence_key: Option<String>,
    /// Whether the job holds its sequence when it fails for good or is cancelled.
    pub(crate) hold: bool,
    /// Its key for its kind's per-key rate, pauses and fair share.
    pub(crate) flow_key: Option<String>,
    /// What it counts against its kind's rate (`None`: 1).
    pub(crate) cost: Option<u32>,
    /// The domain row it is about (`order:42`).
    pub(crate) subject: Option<String>,
    /// The enqueuer's trace context: a `traceparent`, then a space and the `tracestate` when there is one.
    pub(crate) trace: Option<String>,
}

/// Which finished jobs retention deletes: those last updated before their status's cutoff (integer
/// milliseconds; 0 keeps them), a kind's own cutoff where it has one. Never a failed or cancelled job that
/// holds its sequence, nor the latest completed job of a sequence (the reconcilers' evidence).
#[derive(Debug, Clone)]
pub(crate) struct PruneRules {
    /// Per status (`completed`, `failed`, `cancelled`): the default cutoff and the kinds' own.
    pub(crate) statuses: Vec<StatusCutoffs>,
}

/// One status's default cutoff and the kinds' own, for [`PruneRules`].
pub(crate) type StatusCutoffs = (JobStatus, i64, Vec<(String, i64)>);

/// What one call of [`Engine::prune`] did: the jobs it deleted, and whether there may be more to look at now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pruned {
    /// Finished jobs deleted, with their history.
    pub(crate) jobs: u64,
    /// Whether the call stopped at its batch: call again for the rest.
    pub(crate) more: bool,
}

/// What one round of upkeep is to do: spans of `span` milliseconds, partitions whose end is at or before
/// `cutoff` dropped (none without one), and new ones made (PostgreSQL) when `ahead`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upkeep {
    pub(crate) span: i64,
    pub(crate) cutoff: Option<i64>,
    pub(crate) ahead: bool,
    /// Rows of PostgreSQL's default partition deleted per round, past the cutoff.
    pub(crate) batch: u64,
}

/// What a round of upkeep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Done {
    /// Partitions made (PostgreSQL) or tables renamed into partitions (SQLite).
    pub(crate) made: u64,
    pub(crate) dropped: u64,
    /// Jobs deleted from PostgreSQL's default partition (those of dropped partitions are not counted).
    pub(crate) pruned: u64,
}
