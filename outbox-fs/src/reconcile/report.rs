//! What a reconcile run found: counts, and each discrepancy with the job that makes it one.

use outbox::scan::PathJob;
use serde::Serialize;

/// What is wrong at a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum DiscrepancyKind {
    /// A file should be there and nothing is.
    Missing,
    /// The file is there with other content than the job recorded.
    ContentChanged {
        /// sha256 the job recorded.
        expected: String,
        /// sha256 found.
        actual: String,
    },
    /// The latest job deleted the path, yet something is there.
    ShouldBeAbsent,
    /// The path cannot be checked: a directory or FIFO stands where the file should be, or reading failed.
    Unreadable {
        /// What stood in the way.
        error: String,
    },
    /// The path leaves the root, by its text or through a symlink.
    OutsideRoot {
        /// The rule it breaks.
        rule: String,
    },
}

impl DiscrepancyKind {
    /// A stable name: `missing`, `content_changed`, `should_be_absent`, `unreadable`, `outside_root`.
    pub fn name(&self) -> &'static str {
        match self {
            DiscrepancyKind::Missing => "missing",
            DiscrepancyKind::ContentChanged { .. } => "content_changed",
            DiscrepancyKind::ShouldBeAbsent => "should_be_absent",
            DiscrepancyKind::Unreadable { .. } => "unreadable",
            DiscrepancyKind::OutsideRoot { .. } => "outside_root",
        }
    }
}

impl std::fmt::Display for DiscrepancyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiscrepancyKind::Missing => f.write_str("missing"),
            DiscrepancyKind::ContentChanged { expected, actual } => {
                write!(f, "content changed: expected sha256 {expected}, found {actual}")
            }
            DiscrepancyKind::ShouldBeAbsent => f.write_str("present, but the latest job deleted it"),
            DiscrepancyKind::Unreadable { error } => write!(f, "unreadable: {error}"),
            DiscrepancyKind::OutsideRoot { rule } => write!(f, "outside the root: {rule}"),
        }
    }
}

/// One path whose state on disk contradicts its latest completed job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Discrepancy {
    /// The path as the job named it (control characters escaped).
    pub path: String,
    /// The latest completed job of the path.
    pub job_id: String,
    /// Its kind.
    pub job_kind: String,
    /// What is wrong (serialized flat: `"kind": "content_changed", "expected": ..., "actual": ...`).
    #[serde(flatten)]
    pub kind: DiscrepancyKind,
}

impl std::fmt::Display for Discrepancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` ({} job {}): {}", self.path, self.job_kind, self.job_id, self.kind)
    }
}

/// What a reconcile run found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// Completed file jobs read.
    pub jobs_scanned: u64,
    /// Distinct paths checked.
    pub paths_checked: u64,
    /// Paths as their latest job left them.
    pub ok: u64,
    /// Paths with a [`DiscrepancyKind::Missing`] file.
    pub missing: u64,
    /// Paths with [`DiscrepancyKind::ContentChanged`].
    pub content_changed: u64,
    /// Paths with [`DiscrepancyKind::ShouldBeAbsent`].
    pub should_be_absent: u64,
    /// Paths with [`DiscrepancyKind::Unreadable`].
    pub unreadable: u64,
    /// Paths with [`DiscrepancyKind::OutsideRoot`].
    pub outside_root: u64,
    /// Discrepancies counted and logged but left out of `discrepancies` ([`crate::ReconcileOpts::max_listed`]).
    pub unlisted: u64,
    /// The discrepancies, in path order.
    pub discrepancies: Vec<Discrepancy>,
}

impl Report {
    /// Whether the tree matches every path's latest completed job.
    pub fn is_clean(&self) -> bool {
        self.paths_checked == self.ok
    }

    pub(super) fn record(&mut self, job: &PathJob, found: Option<DiscrepancyKind>, max_listed: Option<usize>) {
        self.paths_checked += 1;
        self.jobs_scanned += job.jobs;
        let Some(kind) = found else {
            self.ok += 1;
            return;
        };
        *match kind {
            DiscrepancyKind::Missing => &mut self.missing,
            DiscrepancyKind::ContentChanged { .. } => &mut self.content_changed,
            DiscrepancyKind::ShouldBeAbsent => &mut self.should_be_absent,
            DiscrepancyKind::Unreadable { .. } => &mut self.unreadable,
            DiscrepancyKind::OutsideRoot { .. } => &mut self.outside_root,
        } += 1;
        let d = Discrepancy {
            path: crate::root::shown(job.path.as_deref().unwrap_or_default()),
            job_id: job.job_id.clone(),
            job_kind: job.kind.clone(),
            kind,
        };
        warn(&d);
        if max_listed.is_some_and(|max| self.discrepancies.len() >= max) {
            self.unlisted += 1;
        } else {
            self.discrepancies.push(d);
        }
    }
}

fn warn(d: &Discrepancy) {
    let (path, job_id, job_kind, discrepancy) =
        (d.path.as_str(), d.job_id.as_str(), d.job_kind.as_str(), d.kind.name());
    match &d.kind {
        DiscrepancyKind::ContentChanged { expected, actual } => {
            tracing::warn!(path, job_id, job_kind, discrepancy, expected = %expected, actual = %actual,
                "file content differs from what its latest job wrote");
        }
        DiscrepancyKind::Unreadable { error } => {
            tracing::warn!(path, job_id, job_kind, discrepancy, error = %error, "file cannot be checked");
        }
        DiscrepancyKind::OutsideRoot { rule } => {
            tracing::warn!(path, job_id, job_kind, discrepancy, rule = %rule, "job path leaves the root");
        }
        DiscrepancyKind::Missing => tracing::warn!(path, job_id, job_kind, discrepancy, "file is missing"),
        DiscrepancyKind::ShouldBeAbsent => {
            tracing::warn!(path, job_id, job_kind, discrepancy, "file is present although its latest job deleted it");
        }
    }
}
