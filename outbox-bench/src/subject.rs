//! The measured side: enqueue and processing through outbox, each run on a fresh database.

use std::sync::Arc;
use std::time::Instant;

use outbox::{EnqueueOpts, Job, JobContext, JobError, KindOpts, Worker};
use schemars::JsonSchema;
use sea_orm::sqlx::{self, Connection};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, SqliteTransactionMode, Statement, TransactionOptions,
    TransactionTrait,
};
use serde::{Deserialize, Serialize};

use crate::engine::SyncMode;
use crate::memory::{WatchedDrain, watch};
use crate::raw::{self, JobRow, KindInfo};
use crate::scratch::{self, Location, Prepared, Scratch, Target};
use crate::stats::Measure;
use crate::work::{self, Work};
use crate::{BoxError, raw_pg};

/// The enqueue cases' kind: unique by default, so each job carries the sha256 payload key.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct OrderPlaced {
    pub(crate) order_id: u64,
}

impl Job for OrderPlaced {
    const KIND: &'static str = "order_placed";
}

/// The process cases' kind: not unique, no idempotency key.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Noop {
    n: u64,
}

impl Noop {
    pub(crate) fn new(n: u64) -> Noop {
        Noop { n }
    }
}

impl Job for Noop {
    const KIND: &'static str = "noop";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

/// The sequenced process cases' kind: jobs sharing `key` run one at a time, in enqueue order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Step {
    key: u64,
    n: u64,
}

impl Job for Step {
    const KIND: &'static str = "step";
    const OPTS: KindOpts = KindOpts { unique: false, sequence: Some("k:{key}"), ..KindOpts::DEFAULT };
}

fn kind_info<J: Job>(field: &'static str) -> Result<KindInfo, BoxError> {
    let kind = outbox::Kind::of::<J>()?;
    Ok(KindInfo { name: J::KIND, field, schema_hash: kind.schema_hash().to_owned(), unique: J::OPTS.unique })
}

/// What the baselines need to write `OrderPlaced` rows.
pub(crate) fn order_kind() -> Result<KindInfo, BoxError> {
    kind_info::<OrderPlaced>("order_id")
}

/// What the baselines need to write `Noop` rows.
pub(crate) fn noop_kind() -> Result<KindInfo, BoxError> {
    kind_info::<Noop>("n")
}

/// An empty, migrated database (same schema as outbox's migration creates) for a baseline.
pub(crate) async fn empty(target: &Target) -> Result<Prepared, BoxError> {
    Scratch::new(target).await?.into_prepared().await
}

/// A migrated database holding `n` pending `Noop` jobs.
pub(crate) async fn backlog(target: &Target, n: u64) -> Result<Prepared, BoxError> {
    let scratch = Scratch::new(target).await?;
    preload(&scratch.db, noops(n)).await?;
    scratch.into_prepared().await
}

/// `n` `Noop` jobs.
pub(crate) fn noops(n: u64) -> Vec<Noop> {
    (0..n).map(|n| Noop { n }).collect()
}

/// `n` `Step` jobs spread over `keys` sequences, enqueued round-robin (job `i` in sequence `i % keys`), as
/// interleaved commits would leave them.
fn steps(n: u64, keys: u64) -> Vec<Step> {
    (0..n).map(|n| Step { key: n % keys, n }).collect()
}

/// A migrated database holding `n` pending `Step` jobs in `keys` sequences ([`steps`]).
pub(crate) async fn sequenced_backlog(target: &Target, n: u64, keys: u64) -> Result<Prepared, BoxError> {
    let scratch = Scratch::new(target).await?;
    preload(&scratch.db, steps(n, keys)).await?;
    scratch.into_prepared().await
}

/// Case `process_sequenced`: `n` pending `Step` jobs in `keys` sequences drained by a no-op worker.
pub(crate) async fn process_sequenced(
    target: &Target,
    n: u64,
    keys: u64,
    concurrency: usize,
) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(target).await?;
    preload(&scratch.db, steps(n, keys)).await?;
    let secs = drain::<Step>(&scratch.db, concurrency).await?;
    scratch.expect_count(COMPLETED, n, "process_sequenced").await?;
    scratch.remove().await?;
    Ok(Measure { jobs: n, secs })
}

/// Enqueues `jobs` with `enqueue_batch` in one transaction.
///
/// On PostgreSQL the table is then analyzed, as autovacuum does within its naptime (a minute) of a bulk
/// load: without statistics the planner takes the backlog for one row and every claim sorts all of it
/// (15 ms instead of 1 ms per claim of 100 with 20,000 pending), which is not the steady state measured here.
pub(crate) async fn preload<J: Job>(db: &DatabaseConnection, jobs: Vec<J>) -> Result<(), BoxError> {
    let jobs = Arc::new(jobs);
    outbox::transaction(db, async |txn| outbox::enqueue_batch(txn, &jobs, EnqueueOpts::new()).await).await?;
    if db.get_database_backend() == DbBackend::Postgres {
        db.execute_unprepared("ANALYZE outbox_jobs").await?;
    }
    Ok(())
}

fn order_statement(backend: DbBackend, i: u64) -> Statement {
    let (id, customer, total) = raw::order_row(i);
    let sql = match backend {
        DbBackend::Postgres => raw_pg::INSERT_ORDER,
        _ => raw::INSERT_ORDER,
    };
    Statement::from_sql_and_values(backend, sql, [id.into(), customer.into(), total.into()])
}

/// Case `enqueue`: per job `outbox::transaction` holding the order INSERT and `outbox::enqueue`.
pub(crate) async fn enqueue(target: &Target, n: u64) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(target).await?;
    let backend = scratch.db.get_database_backend();
    outbox::Kind::of::<OrderPlaced>()?; // compile the schema before timing
    let start = Instant::now();
    for i in 0..n {
        let enqueued = outbox::transaction(&scratch.db, async |txn| {
            txn.execute_raw(order_statement(backend, i)).await?;
            let job = OrderPlaced { order_id: i };
            Ok::<_, BoxError>(outbox::enqueue(txn, &job, EnqueueOpts::new()).await?)
        })
        .await?;
        if !enqueued.is_new() {
            return Err(format!("outbox enqueue: job {i} collapsed onto an existing one").into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    scratch.expect_count("SELECT COUNT(*) FROM outbox_jobs", n, "enqueue").await?;
    scratch.expect_count("SELECT COUNT(*) FROM orders", n, "enqueue").await?;
    scratch.remove().await?;
    Ok(Measure { jobs: n, secs })
}

/// Case `enqueue_orm_ceiling`: the baseline's two INSERTs as raw statements in a sea-orm transaction
/// (`BEGIN IMMEDIATE` on SQLite), without outbox.
pub(crate) async fn enqueue_orm_ceiling(target: &Target, n: u64) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(target).await?;
    let backend = scratch.db.get_database_backend();
    let kind = order_kind()?;
    let (insert_job, options) = match backend {
        DbBackend::Postgres => (raw_pg::insert_job_sql(&kind), TransactionOptions::default()),
        _ => (
            raw::insert_job_sql(&kind),
            TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..TransactionOptions::default()
            },
        ),
    };
    let start = Instant::now();
    for i in 0..n {
        let txn = scratch.db.begin_with_options(options).await?;
        txn.execute_raw(order_statement(backend, i)).await?;
        let row = JobRow::new(&kind, i, raw::now_ms());
        let written = txn.execute_raw(job_statement(backend, &insert_job, row)).await?;
        if written.rows_affected() != 1 {
            return Err(format!("orm ceiling: job {i} was not written").into());
        }
        txn.commit().await?;
    }
    let secs = start.elapsed().as_secs_f64();
    scratch.expect_count("SELECT COUNT(*) FROM outbox_jobs", n, "enqueue_orm_ceiling").await?;
    scratch.remove().await?;
    Ok(Measure { jobs: n, secs })
}

fn job_statement(backend: DbBackend, sql: &str, row: JobRow) -> Statement {
    Statement::from_sql_and_values(
        backend,
        sql,
        [
            row.id.into(),
            row.kind.into(),
            row.queue.into(),
            row.payload.into(),
            row.priority.into(),
            row.max_attempts.into(),
            row.run_at.into(),
            row.key.into(),
            row.schema_hash.into(),
            row.created_at.into(),
            row.created_at.into(),
        ],
    )
}

/// Case `enqueue_batch`: per `per_txn` jobs one `outbox::transaction` holding one `enqueue_batch`.
pub(crate) async fn enqueue_batch(target: &Target, n: u64, per_txn: u64) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(target).await?;
    outbox::Kind::of::<OrderPlaced>()?;
    let start = Instant::now();
    let mut next = 0;
    while next < n {
        let size = per_txn.min(n - next);
        let jobs: Arc<Vec<OrderPlaced>> =
            Arc::new((next..next + size).map(|order_id| OrderPlaced { order_id }).collect());
        let enqueued =
            outbox::transaction(&scratch.db, async |txn| outbox::enqueue_batch(txn, &jobs, EnqueueOpts::new()).await)
                .await?;
        if !enqueued.iter().all(outbox::Enqueued::is_new) {
            return Err("outbox enqueue_batch: a job collapsed onto an existing one".into());
        }
        next += size;
    }
    let secs = start.elapsed().as_secs_f64();
    scratch.expect_count("SELECT COUNT(*) FROM outbox_jobs", n, "enqueue_batch").await?;
    scratch.remove().await?;
    Ok(Measure { jobs: n, secs })
}

/// Builds a worker with a no-op handler for `J` and drains the queue; returns the seconds it took (build
/// included).
pub(crate) async fn drain<J: Job>(db: &DatabaseConnection, concurrency: usize) -> Result<f64, BoxError> {
    let start = Instant::now();
    Worker::builder(db)
        .register(|_: J, _ctx: JobContext| async { Ok::<_, JobError>(()) })
        .concurrency(concurrency)
        .build()
        .await?
        .drain()
        .await?;
    Ok(start.elapsed().as_secs_f64())
}

pub(crate) const COMPLETED: &str = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'";

/// Case `process`: `n` pending `Noop` jobs drained by a worker with a no-op handler, and the database's work
/// for them from enqueue to completed.
pub(crate) async fn process(target: &Target, n: u64, concurrency: usize) -> Result<(Measure, Work), BoxError> {
    drain_measured(target, n, concurrency, false).await
}

/// Case `held_snapshot`: [`process`] while another connection holds a `REPEATABLE READ` snapshot from before
/// the drain to after it (when `hold`; the same drain without it otherwise), as a reporting query or an idle
/// session in a transaction would: nothing the drain leaves dead can be vacuumed meanwhile.
pub(crate) async fn held_snapshot(
    target: &Target,
    n: u64,
    concurrency: usize,
    hold: bool,
) -> Result<(Measure, Work), BoxError> {
    if !matches!(target, Target::Postgres { .. }) {
        return Err("the held_snapshot case runs on PostgreSQL only".into());
    }
    drain_measured(target, n, concurrency, hold).await
}

async fn drain_measured(target: &Target, n: u64, concurrency: usize, hold: bool) -> Result<(Measure, Work), BoxError> {
    let scratch = Scratch::new(target).await?;
    let location = scratch.prepared.location.clone();
    let start = work::mark(&location).await?;
    preload(&scratch.db, noops(n)).await?;
    let mut holder = None;
    if let (true, Location::Url(url)) = (hold, &location) {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ").execute(&mut conn).await?;
        // The first query takes the snapshot, held until COMMIT.
        sqlx::query("SELECT count(*) FROM outbox_jobs").execute(&mut conn).await?;
        holder = Some(conn);
    }
    let drain_from = work::bytes(&location).await?;
    let secs = drain::<Noop>(&scratch.db, concurrency).await?;
    scratch.expect_count(COMPLETED, n, "process").await?;
    let prepared = scratch.into_prepared().await?;
    let end = work::mark(&prepared.location).await;
    if let Some(mut conn) = holder {
        sqlx::raw_sql("COMMIT").execute(&mut conn).await?;
        conn.close().await?;
    }
    prepared.remove().await?;
    Ok((Measure { jobs: n, secs }, Work::of(start, drain_from, end?, n)))
}

/// Case `process_memory`, run in a child process so that the figures hold the worker alone, not the heap
/// of the preload or of earlier cases: drains the `n` pending `Noop` jobs at `location` while watching VmRSS.
pub(crate) async fn drain_watched(
    location: &Location,
    sync: SyncMode,
    n: u64,
    concurrency: usize,
) -> Result<WatchedDrain, BoxError> {
    let db = scratch::connect(location, sync).await?;
    let (secs, memory) = watch(drain::<Noop>(&db, concurrency)).await?;
    scratch::expect_count(&db, COMPLETED, n, "process_memory").await?;
    db.close().await?;
    Ok(WatchedDrain { secs, memory })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baselines' rows must hold what outbox writes, apart from id and timestamps.
    async fn baseline_rows_match_outbox_rows(target: Target) {
        let scratch = Scratch::new(&target).await.expect("test step");
        outbox::enqueue(&scratch.db, &OrderPlaced { order_id: 42 }, EnqueueOpts::new()).await.expect("test step");
        outbox::enqueue(&scratch.db, &Noop { n: 7 }, EnqueueOpts::new()).await.expect("test step");
        let sql = "SELECT kind, queue, CAST(payload AS text), priority, max_attempts, idempotency_key, schema_hash \
                   FROM outbox_jobs ORDER BY kind";
        let rows = scratch
            .db
            .query_all_raw(Statement::from_string(scratch.db.get_database_backend(), sql))
            .await
            .expect("test step");
        let expected = [
            JobRow::new(&noop_kind().expect("test step"), 7, 0),
            JobRow::new(&order_kind().expect("test step"), 42, 0),
        ];
        assert_eq!(rows.len(), 2);
        let json = |text: String| serde_json::from_str::<serde_json::Value>(&text).expect("test step");
        for (row, want) in rows.iter().zip(expected) {
            assert_eq!(row.try_get_by_index::<String>(0).expect("test step"), want.kind);
            assert_eq!(row.try_get_by_index::<String>(1).expect("test step"), want.queue);
            assert_eq!(json(row.try_get_by_index::<String>(2).expect("test step")), json(want.payload));
            assert_eq!(row.try_get_by_index::<i32>(3).expect("test step"), want.priority);
            assert_eq!(row.try_get_by_index::<i32>(4).expect("test step"), want.max_attempts);
            assert_eq!(row.try_get_by_index::<Option<String>>(5).expect("test step"), want.key);
            assert_eq!(row.try_get_by_index::<String>(6).expect("test step"), want.schema_hash);
        }
        scratch.remove().await.expect("test step");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn baseline_rows_match_outbox_rows_on_sqlite() {
        baseline_rows_match_outbox_rows(Target::Sqlite(SyncMode::Normal)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn baseline_rows_match_outbox_rows_on_postgres() {
        let Some(server) = outbox_tests::pg_server("baseline_rows_match_outbox_rows_on_postgres") else { return };
        baseline_rows_match_outbox_rows(Target::Postgres { server, sync: SyncMode::Normal }).await;
    }
}
