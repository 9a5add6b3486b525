//! The scans the reconcilers use: the latest completed job of every path or resource, from one snapshot, a
//! page at a time.

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::storage;
use crate::time::from_ms;

/// Where jobs of one kind name the file (or other resource) they touch: the kind, and the JSON path of the
/// payload field holding the path (`$.path`, `$.targetPath`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathField<'a> {
    /// Kind name.
    pub kind: &'a str,
    /// JSON path into the payload, starting with `$`.
    pub json_path: &'a str,
}

/// The latest completed job that touched one path.
#[derive(Debug, Clone, PartialEq)]
pub struct PathJob {
    /// The path as stored in the payload; `None` when the payload has no string at the field's JSON path
    /// (all such jobs share one entry).
    pub path: Option<String>,
    /// Id of the latest completed job for the path (by place in its sequence, then completion time, then id).
    pub job_id: String,
    /// Its kind.
    pub kind: String,
    /// Its recorded output.
    pub output: Option<serde_json::Value>,
    /// When it completed.
    pub completed_at: Option<DateTime<Utc>>,
    /// How many completed jobs touched the path, the latest included.
    pub jobs: u64,
}

/// A scan over the latest completed job of every path, opened by [`latest_completed_by_path`].
///
/// The scan reads one snapshot of the database (a read transaction) and hands out its paths a page at a
/// time, so the caller's memory does not grow with the number of jobs. It holds one pooled connection until
/// [`PathScan::close`] or drop; while it is open, an embedded database cannot checkpoint its log past the snapshot.
pub struct PathScan {
    txn: sea_orm::DatabaseTransaction,
    after: i64,
    jobs_total: u64,
    paths_total: u64,
}

impl std::fmt::Debug for PathScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PathScan")
            .field("after", &self.after)
            .field("jobs_total", &self.jobs_total)
            .field("paths_total", &self.paths_total)
            .finish_non_exhaustive()
    }
}

impl PathScan {
    /// Completed jobs of the scanned kinds in the snapshot.
    pub fn jobs_total(&self) -> u64 {
        self.jobs_total
    }

    /// Distinct paths in the snapshot (the entries the scan will hand out).
    pub fn paths_total(&self) -> u64 {
        self.paths_total
    }

    /// The next at most `limit` paths, ordered by path; empty when the scan is done.
    pub async fn next_page(&mut self, limit: u64) -> Result<Vec<PathJob>> {
        let page = storage::scan::page(&self.txn, self.after, limit.max(1)).await?;
        if let Some(row) = page.last() {
            self.after = row.seq;
        }
        Ok(page
            .into_iter()
            .map(|row| PathJob {
                path: row.path,
                job_id: row.job_id,
                kind: row.kind,
                output: row.output,
                completed_at: row.completed_at.map(from_ms),
                jobs: row.jobs,
            })
            .collect())
    }

    /// Ends the scan and releases its connection. Dropping the scan does the same, without reporting errors.
    pub async fn close(self) -> Result<()> {
        // Read-only work: rolling back discards the scratch table with the snapshot.
        self.txn.rollback().await.map_err(Error::db("closing a path scan"))
    }
}

/// For every path named by a completed job of the given kinds, the latest such job (by place in its
/// sequence, then completion time,
/// then id). The "latest completed per path" decision is made by the database in one pass over the jobs;
/// the result is paged out of a scratch table, so neither side holds all jobs in memory.
///
/// ```
/// # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), outbox::Error> {
/// use outbox::scan::{self, PathField};
/// let fields = [PathField { kind: "create_file", json_path: "$.path" }];
/// let mut scan = scan::latest_completed_by_path(db, &fields).await?;
/// loop {
///     let page = scan.next_page(1_000).await?;
///     if page.is_empty() {
///         break;
///     }
///     for job in page {
///         println!("{:?} was last written by job {}", job.path, job.job_id);
///     }
/// }
/// scan.close().await?;
/// # Ok(()) }
/// ```
pub async fn latest_completed_by_path(db: &sea_orm::DatabaseConnection, fields: &[PathField<'_>]) -> Result<PathScan> {
    storage::Dialect::of(db)?;
    if fields.is_empty() {
        return Err(Error::Invalid("a path scan needs at least one kind and path field".into()));
    }
    if let Some(bad) = fields.iter().find(|f| !f.json_path.starts_with('$') || f.kind.is_empty()) {
        return Err(Error::Invalid(format!(
            "invalid path field `{}` of kind `{}`: the kind must be named and the JSON path start with `$`",
            bad.json_path, bad.kind
        )));
    }
    let txn = storage::begin_read(db).await?;
    let fields: Vec<(&str, &str)> = fields.iter().map(|f| (f.kind, f.json_path)).collect();
    let (jobs_total, paths_total) = storage::scan::open_path_scan(&txn, &fields).await?;
    Ok(PathScan { txn, after: 0, jobs_total, paths_total })
}

/// For every resource named by a completed job of `kind`, the latest such job (by place in its sequence,
/// then completion time, then
/// id), where a job's resource is the combination of the payload values at `json_paths` (for example
/// `["$.resourceType", "$.resourceId"]`). Each [`PathJob::path`] holds that combination as a JSON array
/// (`["s3_bucket","invoices"]`). Same snapshot and paging as [`latest_completed_by_path`].
pub async fn latest_completed_by_key(
    db: &sea_orm::DatabaseConnection,
    kind: &str,
    json_paths: &[&str],
) -> Result<PathScan> {
    storage::Dialect::of(db)?;
    if kind.is_empty() || json_paths.is_empty() {
        return Err(Error::Invalid("a key scan needs a kind and at least one JSON path".into()));
    }
    if let Some(bad) = json_paths.iter().find(|p| !p.starts_with('$')) {
        return Err(Error::Invalid(format!(
            "invalid JSON path `{bad}` for kind `{kind}`: a JSON path starts with `$`"
        )));
    }
    let txn = storage::begin_read(db).await?;
    let (jobs_total, paths_total) = storage::scan::open_key_scan(&txn, kind, json_paths).await?;
    Ok(PathScan { txn, after: 0, jobs_total, paths_total })
}
