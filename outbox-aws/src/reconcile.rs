//! The reconciler hook: the latest completed `sync_aws` job of every resource says whether it must exist;
//! every difference is logged and returned, and nothing is ever changed.

use outbox::Job;
use outbox::scan::{self, PathJob};
use sea_orm::DatabaseConnection;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::config::Aws;
use crate::error::Result;
use crate::registry;
use crate::sync_aws::SyncAws;

/// How [`reconcile`] runs.
#[derive(Debug, Clone)]
pub struct ReconcileOpts {
    page_size: u64,
    concurrency: usize,
    max_listed: Option<usize>,
}

impl Default for ReconcileOpts {
    fn default() -> Self {
        ReconcileOpts { page_size: 500, concurrency: 8, max_listed: None }
    }
}

impl ReconcileOpts {
    /// Pages of 500 resources, 8 checks in flight, every discrepancy listed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resources read from the database at a time (default 500).
    pub fn page_size(mut self, n: u64) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// AWS calls in flight at once (default 8).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// List at most `n` discrepancies (default: all); counts stay exact and every one is still logged.
    pub fn max_listed(mut self, n: usize) -> Self {
        self.max_listed = Some(n);
        self
    }
}

/// What is wrong with one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DiscrepancyKind {
    /// The latest job created or updated it, and it does not exist.
    Missing,
    /// The latest job deleted it, and it exists.
    ShouldBeAbsent,
    /// It could not be checked (access denied, unreachable, unknown resource type); `detail` says why.
    CheckFailed,
}

/// One resource that does not match its latest completed job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Discrepancy {
    /// The resource type (`s3_bucket`).
    pub resource_type: String,
    /// The resource id.
    pub resource_id: String,
    /// The latest completed job of the resource.
    pub job_id: String,
    /// What is wrong.
    pub kind: DiscrepancyKind,
    /// Why a check failed.
    pub detail: Option<String>,
}

/// The outcome of a [`reconcile`] run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// Completed `sync_aws` jobs accounted for.
    pub jobs_scanned: u64,
    /// Distinct resources checked.
    pub resources_checked: u64,
    /// Resources as their latest job left them.
    pub ok: u64,
    /// Resources missing.
    pub missing: u64,
    /// Resources that should be absent.
    pub should_be_absent: u64,
    /// Resources that could not be checked.
    pub check_failed: u64,
    /// The discrepancies, up to the listing cap.
    pub discrepancies: Vec<Discrepancy>,
    /// Discrepancies counted but left out of the list.
    pub unlisted: u64,
}

impl Report {
    /// True when every resource matched.
    pub fn is_clean(&self) -> bool {
        self.missing + self.should_be_absent + self.check_failed == 0
    }

    fn record(&mut self, d: Option<Discrepancy>, max_listed: Option<usize>) {
        self.resources_checked += 1;
        let Some(d) = d else {
            self.ok += 1;
            return;
        };
        match d.kind {
            DiscrepancyKind::Missing => self.missing += 1,
            DiscrepancyKind::ShouldBeAbsent => self.should_be_absent += 1,
            DiscrepancyKind::CheckFailed => self.check_failed += 1,
        }
        tracing::warn!(resource_type = %d.resource_type, resource_id = %d.resource_id, job_id = %d.job_id,
            kind = ?d.kind, detail = d.detail.as_deref().unwrap_or(""), "aws resource differs from its latest job");
        if max_listed.is_some_and(|n| self.discrepancies.len() >= n) {
            self.unlisted += 1;
        } else {
            self.discrepancies.push(d);
        }
    }
}

/// Checks every resource named by a completed `sync_aws` job against its latest such job (by completion
/// time): after a create or update it must exist, after a delete it must not. Every discrepancy is logged
/// (`tracing::warn!`) and returned; nothing is changed. Jobs are read from one database snapshot a page
/// at a time.
pub async fn reconcile(db: &DatabaseConnection, aws: &Aws, opts: ReconcileOpts) -> Result<Report> {
    let started = std::time::Instant::now();
    let mut scan = scan::latest_completed_by_key(db, SyncAws::KIND, &["$.resourceType", "$.resourceId"]).await?;
    tracing::info!(jobs = scan.jobs_total(), resources = scan.paths_total(), "reconciling aws resources");
    let mut report = Report::default();
    loop {
        let page = scan.next_page(opts.page_size).await?;
        if page.is_empty() {
            break;
        }
        let mut rest = page.into_iter();
        loop {
            let chunk: Vec<PathJob> = rest.by_ref().take(opts.concurrency).collect();
            if chunk.is_empty() {
                break;
            }
            let mut checks = JoinSet::new();
            for (i, job) in chunk.into_iter().enumerate() {
                let aws = aws.clone();
                checks.spawn(async move { (i, job.jobs, check(&aws, job).await) });
            }
            let mut results = checks.join_all().await;
            results.sort_by_key(|(i, _, _)| *i);
            for (_, jobs, found) in results {
                report.jobs_scanned += jobs;
                report.record(found, opts.max_listed);
            }
        }
    }
    scan.close().await?;
    tracing::info!(
        jobs = report.jobs_scanned,
        resources = report.resources_checked,
        ok = report.ok,
        missing = report.missing,
        should_be_absent = report.should_be_absent,
        check_failed = report.check_failed,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "reconciled aws resources"
    );
    Ok(report)
}

/// The discrepancy of one resource, if any.
async fn check(aws: &Aws, job: PathJob) -> Option<Discrepancy> {
    let key: (Option<String>, Option<String>) =
        job.path.as_deref().and_then(|p| serde_json::from_str(p).ok()).unwrap_or_default();
    let (resource_type, resource_id) = (key.0.unwrap_or_default(), key.1.unwrap_or_default());
    let present = job.output.as_ref().and_then(|o| o.get("present")).and_then(serde_json::Value::as_bool);
    let failed = |detail: String| Discrepancy {
        resource_type: resource_type.clone(),
        resource_id: resource_id.clone(),
        job_id: job.job_id.clone(),
        kind: DiscrepancyKind::CheckFailed,
        detail: Some(detail),
    };
    let Some(present) = present else {
        return Some(failed("the job's output does not record whether the resource should exist".into()));
    };
    let exists = match registry::provider(&resource_type) {
        Ok(p) => p.exists(aws, &resource_id).await,
        Err(e) => Err(e),
    };
    let kind = match exists {
        Ok(true) if !present => DiscrepancyKind::ShouldBeAbsent,
        Ok(false) if present => DiscrepancyKind::Missing,
        Ok(_) => return None,
        Err(e) => return Some(failed(e.to_string())),
    };
    Some(Discrepancy { resource_type, resource_id, job_id: job.job_id, kind, detail: None })
}

/// Adds a start-up step to `builder` that runs [`reconcile`] before the worker's first claim, logs the report
/// and records its counts (shown by `outbox stats`). Nothing is changed in AWS.
pub fn reconcile_at_start(builder: outbox::WorkerBuilder, aws: &Aws) -> outbox::WorkerBuilder {
    let aws = aws.clone();
    builder.on_start("reconcile AWS", move |db, worker| async move {
        let report = reconcile(&db, &aws, ReconcileOpts::new())
            .await
            .map_err(|e| outbox::Error::Internal(format!("reconciling AWS resources: {e}")))?;
        if !report.is_clean() {
            tracing::warn!(
                resources = report.resources_checked,
                missing = report.missing,
                should_be_absent = report.should_be_absent,
                check_failed = report.check_failed,
                "AWS resources differ from their jobs"
            );
        }
        let counts = serde_json::json!({
            "jobs_scanned": report.jobs_scanned,
            "resources_checked": report.resources_checked,
            "ok": report.ok,
            "missing": report.missing,
            "should_be_absent": report.should_be_absent,
            "check_failed": report.check_failed,
        });
        let record = outbox::ReconciliationRecord::new("aws", Some(worker), counts);
        outbox::ops::record_reconciliation(&db, &record).await
    })
}
