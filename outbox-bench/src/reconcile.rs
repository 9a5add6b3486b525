//! The `reconcile` case: outbox-fs's reconciler over `n` completed `create_file` jobs whose files are on
//! disk, run in a child process so its memory figures hold the reconciler alone.

use std::path::{Path, PathBuf};
use std::time::Instant;

use outbox::{EnqueueOpts, Job};
use outbox_fs::{CreateFile, ReconcileOpts, Root};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

use crate::BoxError;
use crate::engine::SyncMode;
use crate::memory::{Memory, WatchedDrain, watch};
use crate::runner::Runner;
use crate::scratch::{self, Location, Scratch, Target};
use crate::stats::Measure;

/// Every file holds this (a small text file; the reconciler's cost per file is an open, a stat and a hash).
const CONTENT: &str = "reconcile benchmark file: the job that wrote it recorded its sha256.\n";
/// Jobs enqueued per transaction while preparing.
const PREPARE_BATCH: u64 = 10_000;
/// Files per directory.
const PER_DIR: u64 = 1_000;

/// A database of `n` completed `create_file` jobs and the tree they wrote; the tree is removed on drop, the
/// database by [`scratch::Prepared::remove`].
pub(crate) struct Prepared {
    _dir: TempDir,
    /// The database.
    pub(crate) db: scratch::Prepared,
    /// The root the jobs wrote beneath.
    pub(crate) root: PathBuf,
}

fn path_of(i: u64) -> String {
    format!("d{:04}/f{i:07}.txt", i / PER_DIR)
}

/// Writes the files and the job rows as a worker would have left them (completed, output with `sha256`),
/// without running `n` fsyncing jobs first.
pub(crate) async fn prepare(target: &Target, n: u64) -> Result<Prepared, BoxError> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("tree");
    for i in 0..n {
        if i % PER_DIR == 0 {
            std::fs::create_dir_all(root.join(format!("d{:04}", i / PER_DIR)))?;
        }
        std::fs::write(root.join(path_of(i)), CONTENT)?;
    }
    let scratch = Scratch::new(target).await?;
    let db = &scratch.db;
    let mut next = 0;
    while next < n {
        let jobs: Vec<CreateFile> = (next..n.min(next + PREPARE_BATCH))
            .map(|i| CreateFile { path: path_of(i), content: CONTENT.into(), overwrite: false })
            .collect();
        let jobs = std::sync::Arc::new(jobs);
        outbox::transaction(db, async |txn| outbox::enqueue_batch(txn, &jobs, EnqueueOpts::new()).await).await?;
        next += PREPARE_BATCH;
    }
    let sha256 = hex::encode(Sha256::digest(CONTENT.as_bytes()));
    let now = crate::raw::now_ms();
    let size = CONTENT.len() as i64;
    let statement = match db.get_database_backend() {
        DbBackend::Postgres => Statement::from_sql_and_values(
            DbBackend::Postgres,
            "WITH t AS (SELECT TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond' AS now) \
             UPDATE outbox_jobs SET status = 'completed', attempts = 1, claimed_at = t.now, completed_at = t.now, \
             updated_at = t.now, output = jsonb_build_object('path', payload->'path', 'sha256', $2::text, \
             'size', $3::int8, 'written', true) FROM t WHERE kind = $4",
            [now.into(), sha256.into(), size.into(), CreateFile::KIND.into()],
        ),
        backend => Statement::from_sql_and_values(
            backend,
            "UPDATE outbox_jobs SET status = 'completed', attempts = 1, claimed_at = ?, completed_at = ?, \
             updated_at = ?, output = json_object('path', json_extract(payload, '$.path'), 'sha256', ?, \
             'size', ?, 'written', json('true')) WHERE kind = ?",
            [now.into(), now.into(), now.into(), sha256.into(), size.into(), CreateFile::KIND.into()],
        ),
    };
    db.execute_raw(statement).await?;
    Ok(Prepared { _dir: dir, db: scratch.into_prepared().await?, root })
}

/// Reconciles the prepared tree while watching VmRSS; checks that every job was scanned and found in place.
pub(crate) async fn reconcile_watched(location: &Location, root: &Path, n: u64) -> Result<WatchedDrain, BoxError> {
    let db = scratch::connect(location, SyncMode::Full).await?;
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

/// The hidden first argument that makes this binary the child of a `reconcile` run:
/// `--reconcile-child <db file or URL> <root dir> <jobs>`; it prints one [`WatchedDrain`] as JSON.
pub(crate) const RECONCILE_CHILD: &str = "--reconcile-child";

pub(crate) fn reconcile_child(argv: &[String]) -> Result<(), BoxError> {
    let [location, root, jobs] = argv else {
        return Err(format!("usage: {RECONCILE_CHILD} <db file or URL> <root dir> <jobs>").into());
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (location, root) = (Location::parse(location), std::path::Path::new(root));
    let report = rt.block_on(reconcile_watched(&location, root, jobs.parse()?))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

impl Runner {
    /// Prepares a tree and its completed jobs here, then reconciles it in a fresh child process.
    pub(crate) fn reconcile_run(&self, target: &Target, n: u64) -> Result<(Measure, Memory), BoxError> {
        let prepared = self.rt.block_on(prepare(target, n))?;
        let output = std::process::Command::new(std::env::current_exe()?)
            .arg(RECONCILE_CHILD)
            .arg(prepared.db.location.arg())
            .arg(&prepared.root)
            .arg(n.to_string())
            .stderr(std::process::Stdio::inherit())
            .output()?;
        self.rt.block_on(prepared.db.remove())?;
        if !output.status.success() {
            return Err(format!("the reconcile child failed: {}", output.status).into());
        }
        let report: WatchedDrain = serde_json::from_slice(&output.stdout)?;
        Ok((Measure { jobs: n, secs: report.secs }, report.memory))
    }
}
