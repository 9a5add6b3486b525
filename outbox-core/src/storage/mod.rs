//! The storage seam, written down once: [`Driver`] lists every operation the rest of the crate asks of a
//! database, and each backend is a folder implementing it with its own SQL, schema (migrations up and down),
//! worker store and wake-ups. Nothing outside this module names a backend; callers reach storage through
//! [`dispatch!`], the functions below, and the row types of this file.
//!
//! Not an extension point: users bring a sea-orm connection and never implement storage.

mod postgres;
mod rows;
mod sqlite;
pub(crate) mod transient;
mod worker_store;

use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, Value};

pub(crate) use worker_store::{Store, WorkerStoreOpts};

use crate::error::{Error, Result};
use crate::job::Violation;
use crate::record::{
    FeedEvent, JobEvent, JobFilter, JobRecord, JobStatus, KindRecord, ReconciliationRecord, ScheduleRecord,
    WorkerRecord,
};
use crate::stats::{BlockedSequence, DuplicateKey, FailureGroup, KindDurations, QueueCounts, StatusCount};

/// Every storage operation. Each backend implements it on a unit type (`sqlite::Sqlite`,
/// `postgres::Postgres`); [`dispatch!`] picks the implementation of a connection's backend.
///
/// Times cross the seam as integer milliseconds since the Unix epoch, JSON as text going in and as values
/// coming out; every function maps its database errors to [`Error`] with what it was doing.
pub(crate) trait Driver {
    /// The schema: one entry per [`MIGRATION_NAMES`], each with its undo.
    const MIGRATIONS: [Migration; 9];

    /// Applies the backend's connection settings (journal mode, durability, busy timeout) to a pool's options.
    fn tune(options: &mut ConnectOptions, settings: &Tuning);

    /// Opens a transaction that may write: it holds the write lock from its first statement where the engine
    /// would otherwise fail a reader turning writer, and waits out other writers.
    async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction>;

    /// Opens a read-only snapshot for scans.
    async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction>;

    /// What of a valid payload the backend cannot store, each at its JSON path (empty: all of it). `text` is
    /// the payload as enqueue serialized it, for checks that can rule most payloads out without a walk.
    fn unstorable(payload: &serde_json::Value, text: &str) -> Vec<Violation>;

    /// Opens the worker's own connection(s) for claims, completions, renewals, rescues and wake-ups; tasks it
    /// needs run on `bg`, the worker's background runtime.
    async fn open_worker_store(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        bg: &tokio::runtime::Handle,
    ) -> Result<Store>;

    /// Inserts one job unless an active job of its kind holds its key. True when the row was written.
    async fn insert_job<C: ConnectionTrait + ?Sized>(conn: &C, job: &NewJob) -> Result<bool>;

    /// Inserts many jobs in as few statements as the parameter limit allows; returns the ids written.
    async fn insert_jobs<C: ConnectionTrait + ?Sized>(conn: &C, jobs: &[NewJob]) -> Result<Vec<String>>;

    /// The id of the active (pending or claimed) job of `kind` holding `key`.
    async fn find_active<C: ConnectionTrait + ?Sized>(conn: &C, kind: &str, key: &str) -> Result<Option<String>>;

    /// One job by id.
    async fn get<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Option<JobRecord>>;

    /// Jobs matching a filter, newest first.
    async fn list<C: ConnectionTrait + ?Sized>(conn: &C, filter: &JobFilter) -> Result<Vec<JobRecord>>;

    /// Claimed jobs whose lease ran out before `now`.
    async fn stuck<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<JobRecord>>;

    /// Job counts by kind and status, with the oldest enqueue time of each group.
    async fn counts<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<StatusCount>>;

    /// Jobs that finished since `since`, by kind and status.
    async fn finished_since<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<Vec<StatusCount>>;

    /// Jobs completed and failed since `since`, counted per `bucket_ms` of their last change: each bucket's
    /// start (ms), completed, failed; buckets with neither are left out.
    async fn activity<C: ConnectionTrait + ?Sized>(
        conn: &C,
        since: i64,
        bucket_ms: i64,
    ) -> Result<Vec<(i64, u64, u64)>>;

    /// Failed jobs grouped by kind and last error, largest group first.
    async fn failure_groups<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<Vec<FailureGroup>>;

    /// Run and wait times of jobs completed since `since`, by kind.
    async fn durations<C: ConnectionTrait + ?Sized>(conn: &C, since: i64) -> Result<Vec<KindDurations>>;

    /// Idempotency keys held by more than one job, most repeated first.
    async fn duplicates<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<Vec<DuplicateKey>>;

    /// Failed or cancelled back to pending with its attempts reset; `Ok(false)` when not in such a status.
    async fn retry<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool>;

    /// Every failed job (of `kind`, with `error` as its last error) back to pending: of several sharing a key
    /// only the latest (by last change, then id), and none whose key an active job holds.
    async fn retry_failed<C: ConnectionTrait + ?Sized>(
        conn: &C,
        kind: Option<&str>,
        error: Option<&str>,
        now: i64,
    ) -> Result<u64>;

    /// Pending to cancelled; `Ok(false)` when the job is not pending.
    async fn cancel<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<bool>;

    /// Deletes terminal jobs of the given statuses last changed before `before`.
    async fn purge<C: ConnectionTrait + ?Sized>(conn: &C, statuses: &[JobStatus], before: i64) -> Result<u64>;

    /// Deletes one finished (completed, failed, cancelled) job that does not hold its sequence; `Ok(false)`
    /// when there is no such job.
    async fn delete<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<bool>;

    /// The stored history of one job, oldest first.
    async fn history<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Vec<StoredEvent>>;

    /// Materializes the latest completed job per path into a scratch table of the transaction `conn` and
    /// returns (completed jobs, distinct paths). `fields` are (kind, JSON path of its path field).
    async fn open_path_scan<C: ConnectionTrait + ?Sized>(conn: &C, fields: &[(&str, &str)]) -> Result<(u64, u64)>;

    /// Same, keyed by the JSON array of the values at `json_paths` of jobs of `kind`.
    async fn open_key_scan<C: ConnectionTrait + ?Sized>(
        conn: &C,
        kind: &str,
        json_paths: &[&str],
    ) -> Result<(u64, u64)>;

    /// The scratch table's entries numbered after `after`, at most `limit`.
    async fn path_scan_page<C: ConnectionTrait + ?Sized>(conn: &C, after: i64, limit: u64) -> Result<Vec<ScanRow>>;

    /// Records (or refreshes) each kind's schema and options.
    async fn record_kinds<C: ConnectionTrait + ?Sized>(
        conn: &C,
        kinds: &[KindRow],
        worker: &str,
        now: i64,
    ) -> Result<()>;

    /// The recorded kinds, by name; only `name` when given.
    async fn kinds<C: ConnectionTrait + ?Sized>(conn: &C, name: Option<&str>) -> Result<Vec<KindRecord>>;

    /// Job counts of every queue by state, with the oldest due pending job.
    async fn queues<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<QueueCounts>>;

    /// How many sequences a failed or cancelled job holds, and the first `limit` such heads (longest held
    /// first), each with the number of jobs waiting behind it.
    async fn blocked<C: ConnectionTrait + ?Sized>(conn: &C, limit: u64) -> Result<(u64, Vec<BlockedSequence>)>;

    /// Up to `limit` events of the feed after the position `after` (an event id, or a head), in commit order;
    /// only events that no transaction still running can come before.
    async fn feed<C: ConnectionTrait + ?Sized>(conn: &C, after: &str, limit: u64) -> Result<Vec<FeedEvent>>;

    /// The feed's current end: reading after it returns only events committed later.
    async fn feed_head<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<String>;

    /// Records a worker's presence (or refreshes it: `started_at` stays), and forgets workers whose presence
    /// expired.
    async fn upsert_worker<C: ConnectionTrait + ?Sized>(conn: &C, worker: &WorkerRow) -> Result<()>;

    /// Forgets a worker that stopped.
    async fn remove_worker<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<()>;

    /// The workers whose presence has not expired at `now`.
    async fn workers<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<WorkerRecord>>;

    /// A claim for a worker that is not in this process (over HTTP): what an in-process worker of the same
    /// kinds and queues would claim, with the same limits.
    async fn remote_claim(
        db: &DatabaseConnection,
        opts: WorkerStoreOpts,
        limit: usize,
        now: i64,
        lease_until: i64,
    ) -> Result<Vec<ClaimedJob>>;

    /// Writes one outcome of such a worker, fenced like the in-process worker's; false when the fence held
    /// (the claim is not this worker's attempt any more).
    async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool>;

    /// Extends one claim's lease to `until`, fenced the same way; false when the fence held.
    async fn remote_extend(db: &DatabaseConnection, owner: &str, id: &str, attempt: i32, until: i64) -> Result<bool>;

    /// Records a schedule's definition (its last tick stays) and returns its last tick.
    async fn register_schedule<C: ConnectionTrait + ?Sized>(
        conn: &C,
        row: &ScheduleRow,
        now: i64,
    ) -> Result<Option<i64>>;

    /// Moves a schedule's last tick to `tick` if it is earlier (compare-and-set): true for the one caller
    /// that moved it, who then enqueues the tick's job in the same transaction and names it with
    /// [`Driver::set_tick_job`].
    async fn claim_tick<C: ConnectionTrait + ?Sized>(conn: &C, row: &ScheduleRow, tick: i64, now: i64) -> Result<bool>;

    /// Names the job a schedule's last tick enqueued.
    async fn set_tick_job<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, job_id: &str) -> Result<()>;

    /// Every schedule any worker registered, by name.
    async fn schedules<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ScheduleRecord>>;

    /// Takes (or renews) the named lease for `holder` until `until` unless another holder's is unexpired.
    async fn take_lock<C: ConnectionTrait + ?Sized>(
        conn: &C,
        name: &str,
        holder: &str,
        now: i64,
        until: i64,
    ) -> Result<bool>;

    /// Gives the named lease up if `holder` has it.
    async fn release_lock<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, holder: &str) -> Result<()>;

    /// Deletes at most `batch` finished jobs (with their history) that [`PruneRules`] says are due, and
    /// returns how many.
    async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, batch: u64) -> Result<u64>;

    /// Deletes at most `batch` workers' feed rows older than `before`.
    async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64>;

    /// Replaces the latest report of one reconciler.
    async fn record_reconciliation<C: ConnectionTrait + ?Sized>(conn: &C, rec: &ReconciliationRecord) -> Result<()>;

    /// The latest report of every reconciler, by name.
    async fn reconciliations<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ReconciliationRecord>>;
}

/// A schedule's definition as stored: what `outbox schedules` needs to show it and compute its next tick.
#[derive(Debug, Clone)]
pub(crate) struct ScheduleRow {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) spec: String,
    pub(crate) time_zone: String,
    pub(crate) missed: String,
}

impl ScheduleRow {
    /// `name, kind, spec, time_zone, missed` and `now`, in the order both backends' statements take them.
    pub(crate) fn values(&self, now: i64) -> Vec<Value> {
        vec![
            self.name.clone().into(),
            self.kind.clone().into(),
            self.spec.clone().into(),
            self.time_zone.clone().into(),
            self.missed.clone().into(),
            now.into(),
        ]
    }
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

impl PruneRules {
    /// The latest cutoff of all: no job updated after it is due.
    pub(crate) fn newest(&self) -> i64 {
        self.statuses
            .iter()
            .flat_map(|(_, default, kinds)| std::iter::once(*default).chain(kinds.iter().map(|(_, c)| *c)))
            .max()
            .unwrap_or(0)
    }

    /// The condition on `j` (with `mark(n)` the placeholder of the n-th value from 1, `time(p)` the cutoff
    /// placeholder `p` as the column's type) and its values.
    pub(crate) fn condition(
        &self,
        mark: impl Fn(usize) -> String,
        time: impl Fn(&str) -> String,
    ) -> (String, Vec<Value>) {
        let mut values: Vec<Value> = Vec::new();
        let push = |v: Value, values: &mut Vec<Value>| {
            values.push(v);
            mark(values.len())
        };
        let mut parts = Vec::new();
        for (status, default, kinds) in &self.statuses {
            let status_mark = push(status.as_str().into(), &mut values);
            let mut cutoff = String::new();
            for (kind, kind_cutoff) in kinds {
                let k = push(kind.as_str().into(), &mut values);
                let c = push((*kind_cutoff).into(), &mut values);
                cutoff.push_str(&format!(" WHEN {k} THEN {c}"));
            }
            let d = push((*default).into(), &mut values);
            // A `CASE` needs one `WHEN` at least.
            let cutoff = if cutoff.is_empty() { d } else { format!("CASE j.kind{cutoff} ELSE {d} END") };
            parts.push(format!("(j.status = {status_mark} AND j.updated_at < {})", time(&cutoff)));
        }
        let newest = push(self.newest().into(), &mut values);
        // Values go in the order their marks appear (SQLite's `?` are positional).
        let sql = format!(
            "j.status IN ('completed', 'failed', 'cancelled') AND ({}) AND j.updated_at < {} {HELD_KEPT} \
             AND NOT (j.status = 'completed' AND j.sequence_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM \
             outbox_jobs l WHERE l.sequence_key = j.sequence_key AND l.sequence_no > j.sequence_no \
             AND l.status = 'completed'))",
            if parts.is_empty() { "FALSE".to_owned() } else { parts.join(" OR ") },
            time(&newest),
        );
        (sql, values)
    }
}

/// A worker's presence, as [`Driver::upsert_worker`] writes it.
#[derive(Debug, Clone)]
pub(crate) struct WorkerRow {
    pub(crate) id: String,
    pub(crate) host: String,
    pub(crate) pid: Option<i64>,
    /// JSON array, or `None` for every queue.
    pub(crate) queues: Option<String>,
    /// JSON array.
    pub(crate) kinds: String,
    pub(crate) concurrency: Option<i64>,
    pub(crate) running: i64,
    pub(crate) remote: bool,
    pub(crate) now: i64,
    pub(crate) expires_at: i64,
}

/// Whether the row `$r` (`NEW`, `OLD`, a table alias) holds back the later jobs of its sequence: it has not
/// run yet, is running, or failed for good or was cancelled under the hold policy (`sequence_hold = 1`;
/// 0 is the continue policy, 2 a hold an operator released). The same SQL on every backend.
macro_rules! blocking {
    ($r:literal) => {
        concat!(
            "(",
            $r,
            ".status IN ('pending', 'claimed') OR (",
            $r,
            ".status IN ('failed', 'cancelled') AND ",
            $r,
            ".sequence_hold = 1))"
        )
    };
}
pub(crate) use blocking;

/// The values of the event the transition trigger writes for a change of the row `NEW` (from `OLD`): job,
/// kind, queue, time, event name, attempt, worker, error. The same SQL on every backend.
macro_rules! transition_event {
    () => {
        "NEW.id, NEW.kind, NEW.queue, NEW.updated_at,
            CASE
                WHEN NEW.status = 'claimed' THEN 'claimed'
                WHEN NEW.status = 'completed' THEN 'completed'
                WHEN NEW.status = 'cancelled' THEN 'cancelled'
                WHEN OLD.status IN ('failed', 'cancelled', 'completed') THEN 'retried_by_operator'
                WHEN OLD.status = 'claimed' AND NEW.attempts = OLD.attempts
                    AND NEW.last_error LIKE 'lease expired%' THEN
                    CASE WHEN NEW.status = 'failed' THEN 'rescued_failed' ELSE 'rescued' END
                WHEN NEW.status = 'failed' THEN 'failed'
                WHEN NEW.attempts < OLD.attempts THEN
                    CASE WHEN NEW.run_at > NEW.updated_at THEN 'snoozed' ELSE 'released' END
                ELSE 'retried'
            END,
            CASE WHEN NEW.attempts < OLD.attempts THEN OLD.attempts ELSE NEW.attempts END,
            NEW.locked_by,
            CASE WHEN NEW.status IN ('pending', 'failed') AND OLD.status = 'claimed'
                AND NEW.attempts >= OLD.attempts THEN NEW.last_error END"
    };
}
pub(crate) use transition_event;

/// The claim (and completion) a transition recorded by the trigger ended, for the history: the claim time
/// when the row leaves `claimed` or `completed`, the completion time when it leaves `completed`. A worker
/// records its claims and completions as one feed row per statement (`job_id` empty, which no job has; the
/// jobs listed in `jobs` as `[id, kind, queue, attempt]` arrays), which the history of one job does not
/// read; an attempt that ends any other way leaves these, and the history shows that claim (and completion)
/// from them.
macro_rules! ended_claim {
    () => {
        "CASE WHEN OLD.status IN ('claimed', 'completed') THEN OLD.claimed_at END,
            CASE WHEN OLD.status = 'completed' THEN OLD.completed_at END"
    };
}
pub(crate) use ended_claim;

/// The transition trigger's insert of one history row (migration 7 on), the same on every backend.
macro_rules! record_transition {
    () => {
        concat!(
            "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, error, claimed_at, \
             completed_at) VALUES (",
            crate::storage::transition_event!(),
            ", ",
            crate::storage::ended_claim!(),
            ")"
        )
    };
}
pub(crate) use record_transition;

/// One row of a job's history as stored, with the claim (and completion) it ended, if the trigger noted
/// them (see [`ended_claim`]).
#[derive(Debug, Clone)]
pub(crate) struct StoredEvent {
    pub(crate) event: JobEvent,
    pub(crate) ended_claim: Option<chrono::DateTime<chrono::Utc>>,
    pub(crate) ended_completion: Option<chrono::DateTime<chrono::Utc>>,
}

/// A feed position split into the row's position and, for an event of a batch row, its place in the batch:
/// `<row>.<n>`.
pub(crate) fn split_position(after: &str) -> Result<(&str, Option<usize>)> {
    match after.rsplit_once('.') {
        None => Ok((after, None)),
        Some((row, n)) => n.parse::<usize>().ok().map(|n| (row, Some(n))).ok_or_else(|| {
            Error::Invalid(format!(
                "invalid event id `{after}`: after the `.` comes the event's place in its batch, a whole number"
            ))
        }),
    }
}

/// The condition of a held head of a sequence, for [`Driver::blocked`]: failed or cancelled under the hold
/// policy, with nothing earlier in its sequence holding it.
const HELD_HEAD: &str = concat!(
    "sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1 \
     AND NOT EXISTS (SELECT 1 FROM outbox_jobs e WHERE e.sequence_key = outbox_jobs.sequence_key \
     AND e.sequence_no < outbox_jobs.sequence_no AND ",
    blocking!("e"),
    ")"
);

/// [`Driver::blocked`] on the shared statements: `record_columns` are the backend's job record columns and
/// `limit_mark` its placeholder for the one bound value.
async fn blocked<C: ConnectionTrait + ?Sized>(
    conn: &C,
    backend: DbBackend,
    record_columns: &str,
    limit_mark: &str,
    limit: u64,
) -> Result<(u64, Vec<BlockedSequence>)> {
    let ctx = || Error::db("listing blocked sequences");
    let count_sql = format!("SELECT COUNT(*) FROM outbox_jobs WHERE {HELD_HEAD}");
    let count = conn
        .query_one_raw(sea_orm::Statement::from_string(backend, count_sql))
        .await
        .map_err(ctx())?
        .map(|r| r.try_get_by_index::<i64>(0))
        .transpose()
        .map_err(ctx())?
        .unwrap_or(0);
    // `w.waiting` is a boolean on one backend and 0 or 1 on the other; both read it as a condition.
    let sql = format!(
        "SELECT {record_columns}, (SELECT COUNT(*) FROM outbox_jobs w \
         WHERE w.sequence_key = outbox_jobs.sequence_key AND w.status = 'pending' AND w.waiting) \
         FROM outbox_jobs WHERE {HELD_HEAD} ORDER BY updated_at LIMIT {limit_mark}"
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn
        .query_all_raw(sea_orm::Statement::from_sql_and_values(backend, sql, [Value::from(limit)]))
        .await
        .map_err(ctx())?;
    let mut heads = Vec::with_capacity(rows.len());
    for row in &rows {
        let head = rows::record(row)?;
        let waiting = row.try_get_by_index::<i64>(25).map_err(ctx())?.max(0).unsigned_abs();
        let Some(sequence_key) = head.sequence_key.clone() else { continue };
        heads.push(BlockedSequence { sequence_key, head, waiting });
    }
    Ok((count.max(0).unsigned_abs(), heads))
}

/// The database engines the framework runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// The backend of a connection, when the framework supports it.
pub(crate) fn backend<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Backend> {
    match conn.get_database_backend() {
        DbBackend::Sqlite => Ok(Backend::Sqlite),
        DbBackend::Postgres => Ok(Backend::Postgres),
        other => Err(Error::Unsupported(format!("{other:?} is not supported; use SQLite or PostgreSQL"))),
    }
}

/// Runs the [`Driver`] operation `f` of the connection's backend: `dispatch!(conn, get(conn, id))`.
macro_rules! dispatch {
    ($conn:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $crate::storage::backend($conn)? {
            $crate::storage::Backend::Sqlite => {
                <$crate::storage::Sqlite as $crate::storage::Driver>::$f($($arg),*).await
            }
            $crate::storage::Backend::Postgres => {
                <$crate::storage::Postgres as $crate::storage::Driver>::$f($($arg),*).await
            }
        }
    };
}
pub(crate) use dispatch;
pub(crate) use postgres::Postgres;
pub(crate) use sqlite::Sqlite;

/// A row limit as a statement value; past `i64::MAX` it is as good as none.
pub(crate) fn limit_value(n: u64) -> sea_orm::Value {
    i64::try_from(n).unwrap_or(i64::MAX).into()
}

/// Connection settings [`Driver::tune`] applies where its backend has them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    pub(crate) full_sync: bool,
    pub(crate) busy_timeout: Duration,
}

/// Applies the settings of the backend `url` names.
pub(crate) fn tune(url: &str, options: &mut ConnectOptions, settings: &Tuning) {
    if url.starts_with("sqlite:") {
        Sqlite::tune(options, settings);
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Postgres::tune(options, settings);
    }
}

/// See [`Driver::begin_write`].
pub(crate) async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    dispatch!(db, begin_write(db))
}

/// See [`Driver::begin_read`].
pub(crate) async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    dispatch!(db, begin_read(db))
}

/// See [`Driver::unstorable`].
pub(crate) fn unstorable(backend: Backend, payload: &serde_json::Value, text: &str) -> Vec<Violation> {
    match backend {
        Backend::Sqlite => Sqlite::unstorable(payload, text),
        Backend::Postgres => Postgres::unstorable(payload, text),
    }
}

/// See [`Driver::open_worker_store`].
pub(crate) async fn open_worker_store(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    bg: &tokio::runtime::Handle,
) -> Result<Store> {
    dispatch!(db, open_worker_store(db, opts, bg))
}

/// How many connections a worker's own pool for its background chores opens at most.
const OWN_POOL: u32 = 2;

/// A small pool of a worker's own to `app`'s database, on `app`'s connection options, for the chores its
/// background thread runs (retention, schedules, its registry entry). Opened lazily: call it inside the
/// runtime that will use it, which the pool's housekeeping tasks join.
pub(crate) fn own_pool(app: &DatabaseConnection, worker_id: &str) -> Result<DatabaseConnection> {
    Ok(match backend(app)? {
        Backend::Sqlite => sqlite::own_pool(app, OWN_POOL),
        Backend::Postgres => postgres::own_pool(app, worker_id, OWN_POOL),
    })
}

/// One migration of one backend: its statements and how to undo them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    pub(crate) up: &'static [&'static str],
    pub(crate) down: &'static [&'static str],
}

/// The migrations' names, shared by every backend (each backend's [`Driver::MIGRATIONS`] in this order).
pub(crate) const MIGRATION_NAMES: [&str; 9] = [
    "m20261122_000001_create_outbox_jobs",
    "m20261122_000002_create_outbox_job_events",
    "m20261122_000003_create_outbox_kinds",
    "m20261123_000004_sequences_and_limits",
    "m20261123_000005_enforced_types",
    "m20261124_000006_event_feed_and_workers",
    "m20261125_000007_batched_worker_events",
    "m20261126_000008_inline_feed_rows",
    "m20261127_000009_schedules_locks_reconciliations",
];

/// Migration `index` of `backend`, when the framework supports the backend.
pub(crate) fn migration(backend: DbBackend, index: usize) -> Option<Migration> {
    match backend {
        DbBackend::Sqlite => Sqlite::MIGRATIONS.get(index).copied(),
        DbBackend::Postgres => Postgres::MIGRATIONS.get(index).copied(),
        _ => None,
    }
}

/// The condition purge adds: a failed or cancelled job that holds its sequence stays until an operator
/// retries or releases it, so a purge never lets a held sequence go on its own.
const HELD_KEPT: &str =
    "AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled'))";

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
    pub(crate) key: Option<String>,
    pub(crate) schema_hash: String,
    pub(crate) created_at: i64,
    /// The sequence the job runs in, if any.
    pub(crate) sequence_key: Option<String>,
    /// Whether the job holds its sequence when it fails for good or is cancelled.
    pub(crate) hold: bool,
}

impl NewJob {
    /// The row's values in the order of [`INSERT_COLUMNS`]: id, kind, queue, payload, priority, max attempts,
    /// run at, key, schema hash, created at, updated at, sequence key, sequence hold.
    fn push_values(&self, values: &mut Vec<Value>) {
        values.extend([
            self.id.clone().into(),
            self.kind.clone().into(),
            self.queue.clone().into(),
            self.payload.clone().into(),
            self.priority.into(),
            self.max_attempts.into(),
            self.run_at.into(),
            self.key.clone().into(),
            self.schema_hash.clone().into(),
            self.created_at.into(),
            self.created_at.into(),
            self.sequence_key.clone().into(),
            i16::from(self.hold).into(),
        ]);
    }
}

/// The columns enqueue writes on every backend; a backend may append its own ([`Insert::columns`]).
const INSERT_COLUMNS: &str = "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, \
     max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold";
/// Values per row ([`NewJob::push_values`]) at most, a backend's own included.
const VALUES_PER_ROW: usize = 16;
/// Rows per batch statement: 32,000 values at most, under every backend's parameter limit (32,766 and 65,535).
const ROWS_PER_INSERT: usize = 2_000;

/// How a backend writes enqueue's INSERT.
pub(crate) struct Insert {
    /// Columns after [`INSERT_COLUMNS`], each starting with `, `.
    pub(crate) columns: &'static str,
    /// Writes one row's placeholders (numbered from `values.len() + 1` where the backend numbers them) and
    /// pushes its values.
    pub(crate) push_row: fn(&mut String, &mut Vec<Value>, &NewJob),
}

/// Maps an enqueue's error; on SQLite a locked database's names its cause ([`sqlite::write_failed`]).
async fn insert_failed<C: ConnectionTrait + ?Sized>(
    conn: &C,
    context: String,
    err: sea_orm::DbErr,
    started: std::time::Instant,
) -> Error {
    match conn.get_database_backend() {
        DbBackend::Sqlite => sqlite::write_failed(conn, context, err, started).await,
        _ => Error::db(context)(err),
    }
}

/// The enqueue INSERT of `jobs`, skipping any whose key an active job holds, with its values.
fn insert_statement(backend: DbBackend, jobs: &[&NewJob], insert: &Insert, returning: &str) -> sea_orm::Statement {
    let mut sql = String::with_capacity(INSERT_COLUMNS.len() + jobs.len() * 112 + 96);
    sql.push_str(INSERT_COLUMNS);
    sql.push_str(insert.columns);
    sql.push_str(") VALUES ");
    let mut values = Vec::with_capacity(jobs.len() * VALUES_PER_ROW);
    for (i, job) in jobs.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        (insert.push_row)(&mut sql, &mut values, job);
    }
    sql.push_str(" ON CONFLICT DO NOTHING");
    sql.push_str(returning);
    sea_orm::Statement::from_sql_and_values(backend, sql, values)
}

/// [`Driver::insert_job`] on the shared statement.
async fn insert_job<C: ConnectionTrait + ?Sized>(
    conn: &C,
    backend: DbBackend,
    job: &NewJob,
    insert: &Insert,
) -> Result<bool> {
    let started = std::time::Instant::now();
    match conn.execute_raw(insert_statement(backend, &[job], insert, "")).await {
        Ok(res) => Ok(res.rows_affected() == 1),
        Err(e) => Err(insert_failed(conn, format!("enqueuing a job of kind `{}`", job.kind), e, started).await),
    }
}

/// [`Driver::insert_jobs`] on the shared statement, `per_row` jobs (those for which it says so) written one
/// statement each, in order. Sequenced jobs go in order of their keys, so that two batches never wait for
/// each other's sequences in opposite orders.
async fn insert_jobs<C: ConnectionTrait + ?Sized>(
    conn: &C,
    backend: DbBackend,
    jobs: &[NewJob],
    insert: &Insert,
    per_row: fn(&NewJob) -> bool,
) -> Result<Vec<String>> {
    let mut order: Vec<&NewJob> = jobs.iter().collect();
    order.sort_by(|a, b| a.sequence_key.cmp(&b.sequence_key));
    let (single, batched): (Vec<&NewJob>, Vec<&NewJob>) = order.into_iter().partition(|j| per_row(j));
    let mut written = Vec::with_capacity(jobs.len());
    let chunks = batched.chunks(ROWS_PER_INSERT).chain(single.chunks(1));
    for chunk in chunks {
        let statement = insert_statement(backend, chunk, insert, " RETURNING id");
        let started = std::time::Instant::now();
        let rows = match conn.query_all_raw(statement).await {
            Ok(rows) => rows,
            Err(e) => return Err(insert_failed(conn, "enqueuing a batch of jobs".into(), e, started).await),
        };
        for row in rows {
            written.push(row.try_get_by_index::<String>(0).map_err(Error::db("reading enqueued job ids"))?);
        }
    }
    Ok(written)
}

/// A kind as the kinds table stores it.
#[derive(Debug, Clone)]
pub(crate) struct KindRow {
    pub(crate) name: String,
    /// The JSON Schema as text.
    pub(crate) schema: String,
    pub(crate) schema_hash: String,
    pub(crate) queue: String,
    pub(crate) priority: i32,
    pub(crate) max_attempts: i32,
    pub(crate) unique: bool,
    /// The key fields as a JSON array.
    pub(crate) key_fields: String,
    /// The sequence template.
    pub(crate) sequence: Option<String>,
    /// `hold` or `continue`.
    pub(crate) on_sequence_failure: &'static str,
    /// The fleet-wide limit on running jobs.
    pub(crate) concurrency: Option<i64>,
}

impl KindRow {
    /// The row's values: name, schema, schema hash, queue, priority, max attempts, uniqueness, key fields,
    /// recording worker, `now` once per time column the statement binds, then sequence template, sequence
    /// failure policy and concurrency limit.
    fn values(&self, worker: &str, now: i64, times: usize) -> Vec<Value> {
        let mut values: Vec<Value> = vec![
            self.name.clone().into(),
            self.schema.clone().into(),
            self.schema_hash.clone().into(),
            self.queue.clone().into(),
            self.priority.into(),
            self.max_attempts.into(),
            self.unique.into(),
            self.key_fields.clone().into(),
            worker.into(),
        ];
        values.extend(std::iter::repeat_n(Value::from(now), times));
        values.extend([self.sequence.clone().into(), self.on_sequence_failure.into(), self.concurrency.into()]);
        values
    }
}

/// One entry of an open path scan.
#[derive(Debug, Clone)]
pub(crate) struct ScanRow {
    /// Its number in path order; pages continue after the last one read.
    pub(crate) seq: i64,
    pub(crate) path: Option<String>,
    pub(crate) job_id: String,
    pub(crate) kind: String,
    pub(crate) output: Option<serde_json::Value>,
    pub(crate) completed_at: Option<i64>,
    pub(crate) jobs: u64,
}

/// A job just claimed by a worker.
#[derive(Debug, Clone)]
pub(crate) struct ClaimedJob {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) payload: String,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) schema_hash: String,
    /// How many times the job has been claimed, this claim included; never given back.
    pub(crate) run: i32,
    /// Whether it runs in a sequence.
    pub(crate) sequenced: bool,
}

/// A claimed row the worker cannot read (a value of the wrong SQL type or text that is not UTF-8, written
/// behind the framework's back): it is failed by itself, without running, and the rest of the claim goes on.
#[derive(Debug, Clone)]
pub(crate) struct Unreadable {
    /// The job's id, or what could be read of it.
    pub(crate) id: String,
    /// The job's kind, or what could be read of it.
    pub(crate) kind: String,
    /// The first column that could not be read.
    pub(crate) column: &'static str,
    /// What it holds instead of what belongs there: `a BLOB of 12 bytes`, `text that is not UTF-8`, ...
    pub(crate) found: String,
}

impl Unreadable {
    /// The error recorded on the job.
    pub(crate) fn error(&self) -> String {
        format!(
            "job `{}` cannot be read: its `{}` column holds {}; failed without running",
            self.id, self.column, self.found
        )
    }

    pub(crate) fn log(&self, worker: &str) {
        tracing::error!(
            job_id = %self.id, kind = %self.kind, column = self.column, found = %self.found, worker,
            "claimed a job that cannot be read; failed it without running"
        );
    }
}

/// How a claimed job ends its attempt.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// Handler succeeded.
    Completed { output: Option<String> },
    /// Back to pending after `run_at`, the attempt used.
    Retry { run_at: i64, error: String },
    /// Terminal failure.
    Failed { error: String },
    /// Back to pending after `run_at`, the attempt given back.
    Snoozed { run_at: i64 },
    /// Back to pending now, the attempt given back (shutdown).
    Released,
}

/// How an outcome changes its job's row, as every batched completion writes it: the new status, the attempts
/// given back, the output, the error and the next run.
pub(crate) struct OutcomeColumns<'a> {
    pub(crate) status: &'static str,
    pub(crate) give_back: i32,
    pub(crate) output: Option<&'a str>,
    pub(crate) error: Option<&'a str>,
    pub(crate) run_at: Option<i64>,
}

impl Outcome {
    /// The columns this outcome writes; a released job runs again at `now`.
    pub(crate) fn columns(&self, now: i64) -> OutcomeColumns<'_> {
        let (status, give_back, output, error, run_at) = match self {
            Outcome::Completed { output } => ("completed", 0, output.as_deref(), None, None),
            Outcome::Retry { run_at, error } => ("pending", 0, None, Some(error.as_str()), Some(*run_at)),
            Outcome::Failed { error } => ("failed", 0, None, Some(error.as_str()), None),
            Outcome::Snoozed { run_at } => ("pending", 1, None, None, Some(*run_at)),
            Outcome::Released => ("pending", 1, None, None, Some(now)),
        };
        OutcomeColumns { status, give_back, output, error, run_at }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Retry { .. } => "retried",
            Outcome::Failed { .. } => "failed",
            Outcome::Snoozed { .. } => "snoozed",
            Outcome::Released => "released",
        }
    }
}

/// The end of one attempt, fenced by the claim it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Finished {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) attempt: i32,
    pub(crate) outcome: Outcome,
}

/// A claim returned to pending or failed by the rescuer.
#[derive(Debug, Clone)]
pub(crate) struct Rescued {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) attempt: i32,
    pub(crate) status: String,
    pub(crate) previous_owner: Option<String>,
}

/// Milliseconds since the Unix epoch, the unit of every stored timestamp.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Logs a written (or discarded) outcome; every backend's completion writer calls it.
fn log_finished(f: &Finished, applied: bool, worker: &str) {
    let (job_id, kind, queue, attempt) = (f.id.as_str(), f.kind.as_str(), f.queue.as_str(), f.attempt);
    if !applied {
        tracing::warn!(
            job_id,
            kind,
            queue,
            attempt,
            worker,
            outcome = f.outcome.name(),
            "discarded a stale result: the job's claim had expired and was rescued"
        );
        return;
    }
    match &f.outcome {
        Outcome::Completed { .. } => tracing::debug!(job_id, kind, queue, attempt, "job completed"),
        Outcome::Retry { run_at, error } => {
            tracing::warn!(job_id, kind, queue, attempt, run_at, error = %error, "job failed; will retry")
        }
        Outcome::Failed { error } => tracing::error!(job_id, kind, queue, attempt, error = %error, "job failed"),
        Outcome::Snoozed { run_at } => tracing::debug!(job_id, kind, queue, attempt, run_at, "job snoozed"),
        Outcome::Released => tracing::info!(job_id, kind, queue, attempt, "job released at shutdown"),
    }
}
