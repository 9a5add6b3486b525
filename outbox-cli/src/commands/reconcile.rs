//! `reconcile`: files, and with --aws AWS resources, against their latest completed jobs.

use std::io::{IsTerminal, Write};

use sea_orm::DatabaseConnection;
use serde_json::json;

use crate::cli::ReconcileArgs;
use crate::fail::{Result, code};
use crate::render::{self, Format, short, table};

/// A progress bar on stderr, redrawn in place.
fn draw(p: outbox_fs::Progress) {
    let total = p.jobs_total.max(1);
    let done = p.jobs_done.min(total);
    let filled = usize::try_from(done * 30 / total).unwrap_or(30);
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "\rreconciling [{}{}] {done}/{} jobs {:>3}%",
        "#".repeat(filled),
        ".".repeat(30 - filled),
        p.jobs_total,
        done * 100 / total
    );
    let _ = err.flush();
}

pub(super) async fn reconcile(db: &DatabaseConnection, args: ReconcileArgs, format: Format) -> Result<u8> {
    let files = match &args.root {
        Some(dir) => Some(reconcile_files(db, dir, &args, format).await?),
        None => None,
    };
    let aws = if args.aws {
        let clients = outbox_aws::Aws::connect(outbox_aws::AwsOpts::new()).await?;
        let mut opts = outbox_aws::ReconcileOpts::new();
        if let Some(n) = args.max_listed {
            opts = opts.max_listed(n);
        }
        Some(outbox_aws::reconcile(db, &clients, opts).await?)
    } else {
        None
    };
    match format {
        // Files only: the filesystem report itself; with --aws, both under their names.
        Format::Json if !args.aws => render::json(&files)?,
        Format::Json => render::json(&json!({ "files": files, "aws": aws }))?,
        Format::Table => {
            if let Some(report) = &files {
                print_files(report);
            }
            if let Some(report) = &aws {
                print_aws(report);
            }
        }
    }
    let clean =
        files.as_ref().is_none_or(outbox_fs::Report::is_clean) && aws.as_ref().is_none_or(outbox_aws::Report::is_clean);
    Ok(if clean { code::OK } else { code::DISCREPANCIES })
}

pub(super) async fn reconcile_files(
    db: &DatabaseConnection,
    dir: &std::path::Path,
    args: &ReconcileArgs,
    format: Format,
) -> Result<outbox_fs::Report> {
    let root = outbox_fs::Root::open(dir)?;
    let mut opts = outbox_fs::ReconcileOpts::new();
    if let Some(n) = args.max_listed {
        opts = opts.max_listed(n);
    }
    let bar = args.progress || (format == Format::Table && std::io::stderr().is_terminal());
    if bar {
        opts = opts.on_progress(draw);
    }
    let report = outbox_fs::reconcile(db, &root, opts).await?;
    if bar {
        eprintln!();
    }
    Ok(report)
}

pub(super) fn print_files(report: &outbox_fs::Report) {
    if !report.discrepancies.is_empty() {
        let rows: Vec<Vec<String>> = report
            .discrepancies
            .iter()
            .map(|d| vec![d.path.clone(), d.kind.to_string(), d.job_kind.clone(), d.job_id.clone()])
            .collect();
        print!("{}", table(&["PATH", "PROBLEM", "KIND", "JOB"], &rows));
    }
    println!(
        "files: checked {} path(s) from {} completed job(s): {} ok, {} missing, {} content changed, \
         {} should be absent, {} unreadable, {} outside the root{}",
        report.paths_checked,
        report.jobs_scanned,
        report.ok,
        report.missing,
        report.content_changed,
        report.should_be_absent,
        report.unreadable,
        report.outside_root,
        unlisted(report.unlisted)
    );
}

pub(super) fn print_aws(report: &outbox_aws::Report) {
    if !report.discrepancies.is_empty() {
        let rows: Vec<Vec<String>> = report
            .discrepancies
            .iter()
            .map(|d| {
                let problem =
                    serde_json::to_value(d.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
                let detail = d.detail.as_deref().map(|t| format!(": {}", short(t, 60))).unwrap_or_default();
                vec![format!("{} {}", d.resource_type, d.resource_id), format!("{problem}{detail}"), d.job_id.clone()]
            })
            .collect();
        print!("{}", table(&["RESOURCE", "PROBLEM", "JOB"], &rows));
    }
    println!(
        "aws: checked {} resource(s) from {} completed job(s): {} ok, {} missing, {} should be absent, {} not checkable{}",
        report.resources_checked,
        report.jobs_scanned,
        report.ok,
        report.missing,
        report.should_be_absent,
        report.check_failed,
        unlisted(report.unlisted)
    );
}

pub(super) fn unlisted(n: u64) -> String {
    if n > 0 { format!(" ({n} not listed)") } else { String::new() }
}
