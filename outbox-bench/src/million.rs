//! Case `million`: a backlog of 1,000,000 pending jobs against small ones: the claim's cost, the drain rate,
//! the worker's memory, and the database's size after the drain and after what reclaims it.

use std::sync::Arc;
use std::time::Duration;

use outbox::{EnqueueOpts, Job, KindOpts};
use schemars::JsonSchema;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde::{Deserialize, Serialize};

use crate::engine::SyncMode;
use crate::scratch::{self, Location, Prepared};
use crate::{BoxError, subject};

/// Pending jobs in the big backlog.
pub(crate) const BIG: u64 = 1_000_000;
/// Pending jobs the big backlog's claim is compared with.
pub(crate) const SMALL_CLAIM: u64 = 10_000;
/// Jobs the big backlog's drain rate is compared with.
pub(crate) const SMALL_DRAIN: u64 = 20_000;
/// Jobs the big backlog's memory is compared with.
pub(crate) const MEMORY_DRAIN: u64 = 100_000;
/// Rows of each kind put at the head of the big backlog before its second claim and its drain.
pub(crate) const HEAD: u64 = 100_000;

/// A job of a kind no worker in the case serves.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Stray {
    n: u64,
}

impl Job for Stray {
    const KIND: &'static str = "stray";
    const OPTS: KindOpts = KindOpts { unique: false, ..KindOpts::DEFAULT };
}

/// Puts [`HEAD`] `noop` jobs due in a day and [`HEAD`] `stray` jobs due now ahead of everything pending: both
/// with a higher priority, so a claim that walks the queue in order meets them first.
pub(crate) async fn add_head(location: &Location, sync: SyncMode) -> Result<(), BoxError> {
    let db = scratch::connect(location, sync).await?;
    let later = EnqueueOpts::new().priority(10).delay(Duration::from_secs(86_400));
    let strays: Arc<Vec<Stray>> = Arc::new((0..HEAD).map(|n| Stray { n }).collect());
    let future = Arc::new(subject::noops(HEAD));
    outbox::transaction(&db, async |txn| {
        outbox::enqueue_batch(txn, &future, later.clone()).await?;
        outbox::enqueue_batch(txn, &strays, EnqueueOpts::new().priority(10)).await
    })
    .await?;
    if db.get_database_backend() == DbBackend::Postgres {
        db.execute_unprepared("ANALYZE outbox_jobs").await?;
    }
    db.close().await?;
    Ok(())
}

/// Deletes what [`add_head`] put in, so the drain meets the million alone.
pub(crate) async fn remove_head(location: &Location, sync: SyncMode) -> Result<(), BoxError> {
    let db = scratch::connect(location, sync).await?;
    let head = db.execute_unprepared("DELETE FROM outbox_jobs WHERE kind = 'stray' OR priority = 10").await?;
    if head.rows_affected() != 2 * HEAD {
        return Err(format!("million: deleted {} head rows, not {}", head.rows_affected(), 2 * HEAD).into());
    }
    db.close().await?;
    Ok(())
}

/// The database's size in MiB: the SQLite file's pages, or the relations of the PostgreSQL schema.
async fn size_mb(db: &DatabaseConnection) -> Result<f64, BoxError> {
    let backend = db.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => {
            "SELECT CAST(COALESCE(SUM(pg_total_relation_size(c.oid)), 0) AS BIGINT) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        }
        _ => "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
    };
    let row = db.query_one_raw(Statement::from_string(backend, sql)).await?.ok_or("size: no row")?;
    Ok(row.try_get_by_index::<i64>(0)? as f64 / (1024.0 * 1024.0))
}

/// The database's size after the drain, then after the completed jobs are deleted (as retention does a day
/// later, with PostgreSQL's rows of the log of finished jobs that list them) and the space is given back
/// (`VACUUM`; `VACUUM FULL` on PostgreSQL), MiB.
pub(crate) async fn sizes(prepared: &Prepared, sync: SyncMode) -> Result<(f64, f64), BoxError> {
    let db = scratch::connect(&prepared.location, sync).await?;
    let drained = size_mb(&db).await?;
    db.execute_unprepared("DELETE FROM outbox_jobs WHERE status = 'completed'").await?;
    let vacuum = match db.get_database_backend() {
        DbBackend::Postgres => {
            db.execute_unprepared(
                "DELETE FROM outbox_finished f WHERE NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = ANY(f.jobs))",
            )
            .await?;
            "VACUUM FULL outbox_jobs, outbox_finished"
        }
        _ => "VACUUM",
    };
    db.execute_unprepared(vacuum).await?;
    let reclaimed = size_mb(&db).await?;
    db.close().await?;
    Ok((drained, reclaimed))
}

/// One run's figures beside the drain rates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    /// Median claim of 100 over [`SMALL_CLAIM`] pending jobs, ms.
    pub(crate) claim_small_ms: f64,
    /// The same over [`BIG`] pending jobs, ms.
    pub(crate) claim_big_ms: f64,
    /// The same with the [`add_head`] rows ahead of them, ms.
    pub(crate) claim_head_ms: f64,
    /// Peak RSS of the worker draining [`MEMORY_DRAIN`] jobs, MiB.
    pub(crate) rss_small_mb: f64,
    /// Peak RSS of the worker draining [`BIG`] jobs, MiB.
    pub(crate) rss_big_mb: f64,
    /// Size after the big drain, MiB.
    pub(crate) drained_mb: f64,
    /// Size after deleting the completed jobs and vacuuming, MiB.
    pub(crate) reclaimed_mb: f64,
}
