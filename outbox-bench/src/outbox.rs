//! The measured side: enqueue and processing through outbox-core, each run on a fresh SQLite file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use outbox_core::{ConnectOpts, EnqueueOpts, Job, JobContext, JobError, KindOpts, Worker};
use schemars::JsonSchema;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, SqliteTransactionMode, Statement, TransactionOptions,
    TransactionTrait,
};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;

use crate::raw::{self, JobRow, KindInfo};
use crate::{BoxError, Measure, SyncMode};

/// The enqueue cases' kind: unique by default, so each job carries the sha256 payload key.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct OrderPlaced {
    order_id: u64,
}

impl Job for OrderPlaced {
    const KIND: &'static str = "order_placed";
}

/// The process cases' kind: not unique, no idempotency key.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Noop {
    n: u64,
}

impl Job for Noop {
    const KIND: &'static str = "noop";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

fn kind_info<J: Job>(field: &'static str) -> Result<KindInfo, BoxError> {
    let kind = outbox_core::Kind::of::<J>()?;
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

/// A fresh database file in its own temporary directory, migrated, with the `orders` table.
pub(crate) struct Scratch {
    dir: TempDir,
    path: PathBuf,
    db: DatabaseConnection,
}

/// Opens (creating it if needed) the database file at `path` and brings the outbox tables up to date.
pub(crate) async fn connect(path: &Path, sync: SyncMode) -> Result<DatabaseConnection, BoxError> {
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let db = outbox_core::connect_with(&url, ConnectOpts { full_sync: sync.is_full(), ..Default::default() }).await?;
    outbox_core::migrate(&db).await?;
    Ok(db)
}

impl Scratch {
    async fn new(sync: SyncMode) -> Result<Scratch, BoxError> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("bench.db");
        let db = connect(&path, sync).await?;
        db.execute_unprepared("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total INTEGER)").await?;
        Ok(Scratch { dir, path, db })
    }

    /// Closes the pool, leaving the file to a baseline.
    async fn into_file(self) -> Result<ScratchFile, BoxError> {
        self.db.close().await?;
        Ok(ScratchFile { _dir: self.dir, path: self.path })
    }

    async fn expect_count(&self, sql: &str, want: u64, what: &str) -> Result<(), BoxError> {
        expect_count(&self.db, sql, want, what).await
    }
}

async fn expect_count(db: &DatabaseConnection, sql: &str, want: u64, what: &str) -> Result<(), BoxError> {
    let row = db.query_one_raw(Statement::from_string(DbBackend::Sqlite, sql)).await?;
    let got: i64 = row.ok_or("COUNT returned no row")?.try_get_by_index(0)?;
    if u64::try_from(got)? != want {
        return Err(format!("outbox {what}: expected {want} rows, found {got}").into());
    }
    Ok(())
}

/// A prepared database file for a baseline; removed on drop.
pub(crate) struct ScratchFile {
    _dir: TempDir,
    /// The SQLite file.
    pub(crate) path: PathBuf,
}

/// An empty, migrated database file (same schema as outbox-core's migration creates).
pub(crate) async fn empty_file(sync: SyncMode) -> Result<ScratchFile, BoxError> {
    Scratch::new(sync).await?.into_file().await
}

/// A migrated database file holding `n` pending `Noop` jobs.
pub(crate) async fn backlog_file(sync: SyncMode, n: u64) -> Result<ScratchFile, BoxError> {
    let scratch = Scratch::new(sync).await?;
    preload(&scratch.db, n).await?;
    scratch.into_file().await
}

/// Enqueues `n` `Noop` jobs with `enqueue_batch` in one transaction.
async fn preload(db: &DatabaseConnection, n: u64) -> Result<(), BoxError> {
    let jobs: Arc<Vec<Noop>> = Arc::new((0..n).map(|n| Noop { n }).collect());
    outbox_core::transaction(db, |txn| {
        let jobs = Arc::clone(&jobs);
        Box::pin(async move { outbox_core::enqueue_batch(txn, &jobs, EnqueueOpts::new()).await })
    })
    .await?;
    Ok(())
}

fn order_statement(i: u64) -> Statement {
    let (id, customer, total) = raw::order_row(i);
    Statement::from_sql_and_values(DbBackend::Sqlite, raw::INSERT_ORDER, [id.into(), customer.into(), total.into()])
}

/// Case `enqueue`: per job `outbox_core::transaction` holding the order INSERT and `outbox_core::enqueue`.
pub(crate) async fn enqueue(sync: SyncMode, n: u64) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(sync).await?;
    outbox_core::Kind::of::<OrderPlaced>()?; // compile the schema before timing
    let start = Instant::now();
    for i in 0..n {
        let enqueued = outbox_core::transaction(&scratch.db, |txn| {
            Box::pin(async move {
                txn.execute_raw(order_statement(i)).await?;
                let job = OrderPlaced { order_id: i };
                Ok::<_, BoxError>(outbox_core::enqueue(txn, &job, EnqueueOpts::new()).await?)
            })
        })
        .await?;
        if !enqueued.is_new() {
            return Err(format!("outbox enqueue: job {i} collapsed onto an existing one").into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    scratch.expect_count("SELECT COUNT(*) FROM outbox_jobs", n, "enqueue").await?;
    scratch.expect_count("SELECT COUNT(*) FROM orders", n, "enqueue").await?;
    Ok(Measure { jobs: n, secs })
}

/// Case `enqueue_orm_ceiling`: the baseline's two INSERTs as raw statements in a sea-orm `BEGIN IMMEDIATE`
/// transaction, without outbox-core.
pub(crate) async fn enqueue_orm_ceiling(sync: SyncMode, n: u64) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(sync).await?;
    let kind = order_kind()?;
    let insert_job = raw::insert_job_sql();
    let options = TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..TransactionOptions::default()
    };
    let start = Instant::now();
    for i in 0..n {
        let txn = scratch.db.begin_with_options(options).await?;
        txn.execute_raw(order_statement(i)).await?;
        let written = txn.execute_raw(job_statement(&insert_job, JobRow::new(&kind, i, raw::now_ms()))).await?;
        if written.rows_affected() != 1 {
            return Err(format!("orm ceiling: job {i} was not written").into());
        }
        txn.commit().await?;
    }
    let secs = start.elapsed().as_secs_f64();
    scratch.expect_count("SELECT COUNT(*) FROM outbox_jobs", n, "enqueue_orm_ceiling").await?;
    Ok(Measure { jobs: n, secs })
}

fn job_statement(sql: &str, row: JobRow) -> Statement {
    Statement::from_sql_and_values(
        DbBackend::Sqlite,
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

/// Case `enqueue_batch`: per `per_txn` jobs one `outbox_core::transaction` holding one `enqueue_batch`.
pub(crate) async fn enqueue_batch(sync: SyncMode, n: u64, per_txn: u64) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(sync).await?;
    outbox_core::Kind::of::<OrderPlaced>()?;
    let start = Instant::now();
    let mut next = 0;
    while next < n {
        let size = per_txn.min(n - next);
        let jobs: Arc<Vec<OrderPlaced>> =
            Arc::new((next..next + size).map(|order_id| OrderPlaced { order_id }).collect());
        let enqueued = outbox_core::transaction(&scratch.db, |txn| {
            let jobs = Arc::clone(&jobs);
            Box::pin(async move { outbox_core::enqueue_batch(txn, &jobs, EnqueueOpts::new()).await })
        })
        .await?;
        if !enqueued.iter().all(outbox_core::Enqueued::is_new) {
            return Err("outbox enqueue_batch: a job collapsed onto an existing one".into());
        }
        next += size;
    }
    let secs = start.elapsed().as_secs_f64();
    scratch.expect_count("SELECT COUNT(*) FROM outbox_jobs", n, "enqueue_batch").await?;
    Ok(Measure { jobs: n, secs })
}

/// Builds the no-op worker and drains the queue; returns the seconds it took (build included).
async fn drain(db: &DatabaseConnection, concurrency: usize) -> Result<f64, BoxError> {
    let start = Instant::now();
    Worker::builder(db)
        .register(|_: Noop, _ctx: JobContext| async { Ok::<_, JobError>(()) })
        .concurrency(concurrency)
        .build()
        .await?
        .drain()
        .await?;
    Ok(start.elapsed().as_secs_f64())
}

const COMPLETED: &str = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'";

/// Case `process`: `n` pending `Noop` jobs drained by a worker with a no-op handler.
pub(crate) async fn process(sync: SyncMode, n: u64, concurrency: usize) -> Result<Measure, BoxError> {
    let scratch = Scratch::new(sync).await?;
    preload(&scratch.db, n).await?;
    let secs = drain(&scratch.db, concurrency).await?;
    scratch.expect_count(COMPLETED, n, "process").await?;
    Ok(Measure { jobs: n, secs })
}

/// Resident-set figures of one `process_memory` run, in MiB.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Memory {
    /// VmRSS with the database open, before the worker starts.
    pub(crate) rss_before_mb: f64,
    /// Highest VmRSS sampled every 50 ms during the drain.
    pub(crate) peak_rss_mb: f64,
    /// VmRSS after the drain.
    pub(crate) rss_after_mb: f64,
    /// VmHWM after the drain (reset before it when the kernel allows, see `hwm_reset`).
    pub(crate) vm_hwm_mb: f64,
    /// Whether VmHWM was reset before the drain (`/proc/self/clear_refs`); if not it is the process's peak.
    pub(crate) hwm_reset: bool,
}

/// A `/proc/self/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()
}

fn status_mb(field: &str) -> Result<f64, BoxError> {
    let kb = status_kb(field).ok_or_else(|| format!("cannot read {field} from /proc/self/status"))?;
    Ok(kb as f64 / 1024.0)
}

/// Samples VmRSS every 50 ms on its own thread until stopped; yields the highest sample in KiB.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl RssSampler {
    fn start() -> Result<RssSampler, BoxError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("rss-sampler".into()).spawn(move || {
            let mut peak = 0;
            loop {
                peak = peak.max(status_kb("VmRSS").unwrap_or(0));
                if flag.load(Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })?;
        Ok(RssSampler { stop, thread })
    }

    fn finish(self) -> Result<f64, BoxError> {
        self.stop.store(true, Ordering::Relaxed);
        let peak = self.thread.join().map_err(|_| "the RSS sampler panicked")?;
        Ok(peak as f64 / 1024.0)
    }
}

/// What a run in a child process reports: [`drain_watched`] and the `reconcile` case.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct WatchedDrain {
    /// Seconds the measured work took (for a drain, the worker build included).
    pub(crate) secs: f64,
    /// The resident set around and during it.
    pub(crate) memory: Memory,
}

/// Runs `work` while sampling VmRSS (VmHWM reset first where the kernel allows); returns its result and the
/// memory figures.
pub(crate) async fn watch<T>(
    work: impl std::future::Future<Output = Result<T, BoxError>>,
) -> Result<(T, Memory), BoxError> {
    let rss_before_mb = status_mb("VmRSS")?;
    // Writing 5 resets VmHWM to the current RSS (Linux 4.0+).
    let hwm_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let sampler = RssSampler::start()?;
    let done = work.await;
    let peak_rss_mb = sampler.finish()?;
    let value = done?;
    let rss_after_mb = status_mb("VmRSS")?;
    let vm_hwm_mb = status_mb("VmHWM")?;
    let memory =
        Memory { rss_before_mb, peak_rss_mb: peak_rss_mb.max(rss_after_mb), rss_after_mb, vm_hwm_mb, hwm_reset };
    Ok((value, memory))
}

/// Case `process_memory`, run in a child process so that the figures hold the worker alone, not the heap
/// of the preload or of earlier cases: drains the `n` pending `Noop` jobs of the file at `path` while
/// watching VmRSS.
pub(crate) async fn drain_watched(
    path: &Path,
    sync: SyncMode,
    n: u64,
    concurrency: usize,
) -> Result<WatchedDrain, BoxError> {
    let db = connect(path, sync).await?;
    let (secs, memory) = watch(drain(&db, concurrency)).await?;
    expect_count(&db, COMPLETED, n, "process_memory").await?;
    Ok(WatchedDrain { secs, memory })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baselines' rows must hold what outbox-core writes, apart from id and timestamps.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn baseline_rows_match_outbox_rows() {
        let scratch = Scratch::new(SyncMode::Normal).await.expect("test step");
        outbox_core::enqueue(&scratch.db, &OrderPlaced { order_id: 42 }, EnqueueOpts::new()).await.expect("test step");
        outbox_core::enqueue(&scratch.db, &Noop { n: 7 }, EnqueueOpts::new()).await.expect("test step");
        let sql = "SELECT kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash \
                   FROM outbox_jobs ORDER BY kind";
        let rows = scratch.db.query_all_raw(Statement::from_string(DbBackend::Sqlite, sql)).await.expect("test step");
        let expected = [
            JobRow::new(&noop_kind().expect("test step"), 7, 0),
            JobRow::new(&order_kind().expect("test step"), 42, 0),
        ];
        assert_eq!(rows.len(), 2);
        for (row, want) in rows.iter().zip(expected) {
            assert_eq!(row.try_get_by_index::<String>(0).expect("test step"), want.kind);
            assert_eq!(row.try_get_by_index::<String>(1).expect("test step"), want.queue);
            assert_eq!(row.try_get_by_index::<String>(2).expect("test step"), want.payload);
            assert_eq!(row.try_get_by_index::<i32>(3).expect("test step"), want.priority);
            assert_eq!(row.try_get_by_index::<i32>(4).expect("test step"), want.max_attempts);
            assert_eq!(row.try_get_by_index::<Option<String>>(5).expect("test step"), want.key);
            assert_eq!(row.try_get_by_index::<String>(6).expect("test step"), want.schema_hash);
        }
    }
}
