//! The reconciler: for every path, the latest completed job that touched it says what must be on disk;
//! every difference is logged and returned, and nothing is ever changed.

mod check;
mod report;

use outbox::Job;
use outbox::scan::{self, PathField, PathJob};
use sea_orm::DatabaseConnection;
use serde::Serialize;

use crate::claude_extraction::ClaudeExtraction;
use crate::create_file::CreateFile;
use crate::delete_file::DeleteFile;
use crate::error::{Error, Result};
use crate::root::Root;
use check::Expect;
pub use report::{Discrepancy, DiscrepancyKind, Report};

/// The kinds that touch files, and where their payloads name the path.
const PATH_FIELDS: [PathField<'static>; 3] = [
    PathField { kind: CreateFile::KIND, json_path: "$.path" },
    PathField { kind: DeleteFile::KIND, json_path: "$.path" },
    PathField { kind: ClaudeExtraction::KIND, json_path: "$.targetPath" },
];

/// How far a reconcile run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Progress {
    /// Completed jobs accounted for so far.
    pub jobs_done: u64,
    /// Completed file jobs in the database when the run started.
    pub jobs_total: u64,
}

/// How [`reconcile`] runs.
pub struct ReconcileOpts {
    page_size: u64,
    max_listed: Option<usize>,
    on_progress: Option<Box<dyn FnMut(Progress) + Send>>,
}

impl std::fmt::Debug for ReconcileOpts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileOpts")
            .field("page_size", &self.page_size)
            .field("max_listed", &self.max_listed)
            .field("on_progress", &self.on_progress.is_some())
            .finish()
    }
}

impl Default for ReconcileOpts {
    fn default() -> Self {
        ReconcileOpts { page_size: 1_000, max_listed: None, on_progress: None }
    }
}

impl ReconcileOpts {
    /// Pages of 1,000 paths, every discrepancy listed, no progress callback.
    pub fn new() -> Self {
        Self::default()
    }

    /// Paths read from the database and checked at a time (default 1,000); memory grows with this, not with
    /// the number of jobs.
    pub fn page_size(mut self, n: u64) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// List at most `n` discrepancies in the report (default: all). Counts stay exact and every discrepancy
    /// is still logged; [`Report::unlisted`] says how many were left out.
    pub fn max_listed(mut self, n: usize) -> Self {
        self.max_listed = Some(n);
        self
    }

    /// Called after each page (and once at the start) with how far the run is, to draw a progress bar.
    pub fn on_progress(mut self, f: impl FnMut(Progress) + Send + 'static) -> Self {
        self.on_progress = Some(Box::new(f));
        self
    }
}

/// What the latest completed job of a path says must be true there.
fn expectation(job: &PathJob) -> Expect {
    if job.kind == DeleteFile::KIND {
        return Expect::Absent;
    }
    let sha256 = job.output.as_ref().and_then(|o| o.get("sha256")).and_then(|s| s.as_str()).map(str::to_owned);
    Expect::Present(sha256)
}

/// Checks every path named by a completed `create_file`, `delete_file` or `claude_extraction` job against
/// its latest such job: after a create or an extraction the file must exist with the sha256 the job
/// recorded (a job without a recorded sha256 only needs the file to exist); after a delete nothing may be
/// there. Every discrepancy is logged (`tracing::warn!`) and returned; nothing is changed.
///
/// Jobs are read from one database snapshot a page at a time, so memory does not grow with their number;
/// the files of each page are checked on the blocking thread pool.
pub async fn reconcile(db: &DatabaseConnection, root: &Root, mut opts: ReconcileOpts) -> Result<Report> {
    let started = std::time::Instant::now();
    let mut scan = scan::latest_completed_by_path(db, &PATH_FIELDS).await?;
    let mut progress = Progress { jobs_done: 0, jobs_total: scan.jobs_total() };
    tracing::info!(root = %root.path().display(), jobs = progress.jobs_total, paths = scan.paths_total(),
        "reconciling the filesystem");
    if let Some(f) = opts.on_progress.as_mut() {
        f(progress);
    }
    let mut report = Report::default();
    loop {
        let page = scan.next_page(opts.page_size).await?;
        if page.is_empty() {
            break;
        }
        for (job, found) in check_page(root, page).await? {
            progress.jobs_done += job.jobs;
            report.record(&job, found, opts.max_listed);
        }
        if let Some(f) = opts.on_progress.as_mut() {
            f(progress);
        }
    }
    scan.close().await?;
    tracing::info!(
        jobs = report.jobs_scanned,
        paths = report.paths_checked,
        ok = report.ok,
        missing = report.missing,
        content_changed = report.content_changed,
        should_be_absent = report.should_be_absent,
        unreadable = report.unreadable,
        outside_root = report.outside_root,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "reconciled"
    );
    Ok(report)
}

/// Checks a page on the blocking pool, split across the available cores: the cost is one open, stat and
/// hash per path, and the files of one page are independent.
async fn check_page(root: &Root, mut page: Vec<PathJob>) -> Result<Vec<(PathJob, Option<DiscrepancyKind>)>> {
    let parts = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let size = page.len().div_ceil(parts).max(1);
    let mut tasks = Vec::with_capacity(parts);
    while !page.is_empty() {
        let rest = page.split_off(size.min(page.len()));
        let (root, part) = (root.clone(), std::mem::replace(&mut page, rest));
        tasks.push(tokio::task::spawn_blocking(move || {
            part.into_iter()
                .map(|job| {
                    let found = check::check(&root, job.path.as_deref().unwrap_or_default(), &expectation(&job));
                    (job, found)
                })
                .collect::<Vec<_>>()
        }));
    }
    let mut checked = Vec::new();
    for task in tasks {
        checked.extend(task.await.map_err(|e| Error::Internal(format!("a reconcile task died: {e}")))?);
    }
    Ok(checked)
}
