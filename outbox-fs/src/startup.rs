//! Reconciliation at a worker's start: leftover temp files are removed, the filesystem reconciler runs before
//! the first claim, and its counts are recorded for `outbox stats`.

use std::time::{Duration, SystemTime};

use cap_std::fs::Dir;
use outbox::{ReconciliationRecord, WorkerBuilder};
use serde_json::json;

use crate::reconcile::{ReconcileOpts, reconcile};
use crate::root::Root;

/// Temp files younger than this may belong to a write in progress in another process.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(3_600);

/// How many discrepancies the start-up report lists in the log (all are counted).
const LISTED: usize = 20;

/// Adds a start-up step to `builder` that, before the worker's first claim, removes the `.outbox-*.tmp`
/// files a crash left under `root` (older than an hour), runs [`reconcile`], logs the report and records its
/// counts (shown by `outbox stats` and [`outbox::ops::reconciliations`]). Nothing else is changed.
pub fn reconcile_at_start(builder: WorkerBuilder, root: &Root) -> WorkerBuilder {
    let root = root.clone();
    builder.on_start("reconcile the filesystem", move |db, worker| async move {
        let dir = root.dir().try_clone().map_err(|e| internal(&root, "opening", e))?;
        let (removed, failed) = tokio::task::spawn_blocking(move || remove_stale_temps(&dir, SystemTime::now()))
            .await
            .map_err(|e| outbox::Error::Internal(format!("removing leftover temp files: {e}")))?;
        if removed > 0 || failed > 0 {
            tracing::info!(root = %root.path().display(), removed, failed, "leftover temp files removed");
        }
        let report = reconcile(&db, &root, ReconcileOpts::new().max_listed(LISTED))
            .await
            .map_err(|e| outbox::Error::Internal(format!("reconciling {}: {e}", root.path().display())))?;
        if report.is_clean() {
            tracing::info!(root = %root.path().display(), paths = report.paths_checked, "the filesystem matches its jobs");
        } else {
            tracing::warn!(root = %root.path().display(), paths = report.paths_checked,
                discrepancies = report.paths_checked - report.ok, "the filesystem differs from its jobs");
        }
        let counts = json!({
            "root": root.path().display().to_string(),
            "jobs_scanned": report.jobs_scanned,
            "paths_checked": report.paths_checked,
            "ok": report.ok,
            "missing": report.missing,
            "content_changed": report.content_changed,
            "should_be_absent": report.should_be_absent,
            "unreadable": report.unreadable,
            "outside_root": report.outside_root,
            "temp_files_removed": removed,
            "temp_files_not_removed": failed,
        });
        let record = ReconciliationRecord::new("fs", Some(worker), counts);
        outbox::ops::record_reconciliation(&db, &record).await
    })
}

fn internal(root: &Root, what: &str, e: std::io::Error) -> outbox::Error {
    outbox::Error::Internal(format!("{what} {}: {e}", root.path().display()))
}

/// Whether `name` is one of our temp files (`.outbox-<pid>-<n>.tmp`).
fn is_temp(name: &str) -> bool {
    name.starts_with(".outbox-") && name.ends_with(".tmp")
}

/// Removes our temp files older than [`STALE_TEMP_AGE`] in `dir` and beneath it (symlinks are not
/// followed); returns how many were removed and how many could not be.
fn remove_stale_temps(dir: &Dir, now: SystemTime) -> (u64, u64) {
    let (mut removed, mut failed) = (0, 0);
    let Ok(entries) = dir.entries() else { return (0, 1) };
    for entry in entries.flatten() {
        let Ok(file_type) = entry.file_type() else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        if file_type.is_dir() {
            if let Ok(sub) = entry.open_dir() {
                let (r, f) = remove_stale_temps(&sub, now);
                removed += r;
                failed += f;
            }
        } else if file_type.is_file() && is_temp(&name) {
            let modified = entry.metadata().and_then(|m| m.modified()).map(|m| m.into_std());
            let old = modified.is_ok_and(|m| now.duration_since(m).is_ok_and(|age| age >= STALE_TEMP_AGE));
            if !old {
                continue;
            }
            match dir.remove_file(&name) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(file = %name, error = %e, "removing a leftover temp file failed");
                    failed += 1;
                }
            }
        }
    }
    (removed, failed)
}
