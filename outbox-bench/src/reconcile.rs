//! The `reconcile` case: outbox-fs's reconciler over `n` completed `create_file` jobs whose files are on
//! disk, run in a child process so its memory figures hold the reconciler alone.

use std::path::{Path, PathBuf};
use std::time::Instant;

use outbox_core::{EnqueueOpts, Job};
use outbox_fs::{CreateFile, ReconcileOpts, Root};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

use crate::outbox::{WatchedDrain, connect, watch};
use crate::{BoxError, SyncMode};

/// Every file holds this (a small text file; the reconciler's cost per file is an open, a stat and a hash).
const CONTENT: &str = "reconcile benchmark file: the job that wrote it recorded its sha256.\n";
/// Jobs enqueued per transaction while preparing.
const PREPARE_BATCH: u64 = 10_000;
/// Files per directory.
const PER_DIR: u64 = 1_000;

/// A database of `n` completed `create_file` jobs and the tree they wrote; removed on drop.
pub(crate) struct Prepared {
    _dir: TempDir,
    /// The SQLite file.
    pub(crate) db_path: PathBuf,
    /// The root the jobs wrote beneath.
    pub(crate) root: PathBuf,
}

fn path_of(i: u64) -> String {
    format!("d{:04}/f{i:07}.txt", i / PER_DIR)
}

/// Writes the files and the job rows as a worker would have left them (completed, output with `sha256`),
/// without running `n` fsyncing jobs first.
pub(crate) async fn prepare(n: u64) -> Result<Prepared, BoxError> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("tree");
    for i in 0..n {
        if i % PER_DIR == 0 {
            std::fs::create_dir_all(root.join(format!("d{:04}", i / PER_DIR)))?;
        }
        std::fs::write(root.join(path_of(i)), CONTENT)?;
    }
    let db_path = dir.path().join("bench.db");
    let db = connect(&db_path, SyncMode::Normal).await?;
    let mut next = 0;
    while next < n {
        let jobs: Vec<CreateFile> = (next..n.min(next + PREPARE_BATCH))
            .map(|i| CreateFile { path: path_of(i), content: CONTENT.into(), overwrite: false })
            .collect();
        let jobs = std::sync::Arc::new(jobs);
        outbox_core::transaction(&db, |txn| {
            let jobs = std::sync::Arc::clone(&jobs);
            Box::pin(async move { outbox_core::enqueue_batch(txn, &jobs, EnqueueOpts::new()).await })
        })
        .await?;
        next += PREPARE_BATCH;
    }
    let sha256: String = Sha256::digest(CONTENT.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let now = crate::raw::now_ms();
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "UPDATE outbox_jobs SET status = 'completed', attempts = 1, claimed_at = ?, completed_at = ?, \
         updated_at = ?, output = json_object('path', json_extract(payload, '$.path'), 'sha256', ?, \
         'size', ?, 'written', json('true')) WHERE kind = ?",
        [now.into(), now.into(), now.into(), sha256.into(), (CONTENT.len() as i64).into(), CreateFile::KIND.into()],
    ))
    .await?;
    db.close().await?;
    Ok(Prepared { _dir: dir, db_path, root })
}

/// Reconciles the prepared tree while watching VmRSS; checks that every job was scanned and found in place.
pub(crate) async fn reconcile_watched(db_path: &Path, root: &Path, n: u64) -> Result<WatchedDrain, BoxError> {
    let db = connect(db_path, SyncMode::Full).await?;
    let root = Root::open(root)?;
    let (secs, memory) = watch(async {
        let start = Instant::now();
        let report = outbox_fs::reconcile(&db, &root, ReconcileOpts::new()).await?;
        let secs = start.elapsed().as_secs_f64();
        if report.jobs_scanned != n || report.ok != n {
            let (jobs, ok, paths) = (report.jobs_scanned, report.ok, report.paths_checked);
            return Err(
                format!("reconcile: expected {n} jobs all ok, found {jobs} jobs, {paths} paths, {ok} ok").into()
            );
        }
        Ok(secs)
    })
    .await?;
    Ok(WatchedDrain { secs, memory })
}
