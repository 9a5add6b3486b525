//! Shared pieces of the outbox-fs tests: a test database (on the backend the conformance macro picks), a root
//! and an outside directory in its temp dir, a quick worker, raw job rows, tree snapshots to prove nothing
//! changed, and a small real filesystem to fill up.

#![allow(dead_code, unreachable_pub, unused_imports)]

pub use outbox_tests::{Backend, TestDb, conformance, eventually, exec, http};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outbox::{JobRecord, RetryPolicy, Worker, WorkerBuilder};
use outbox_fs::Root;
use sea_orm::DatabaseConnection;
use sha2::{Digest, Sha256};

/// A database, and a root and a directory outside it in the test's temp dir.
pub struct Env {
    /// The test's database and temp dir (on SQLite, the database file is in it too).
    pub t: TestDb,
    pub db: DatabaseConnection,
    pub backend: Backend,
    /// `<tmp>/root`
    pub root_dir: PathBuf,
    /// `<tmp>/outside`, holding canary files.
    pub outside: PathBuf,
    pub root: Root,
}

pub fn env(t: TestDb) -> Env {
    let (db, backend) = (t.db.clone(), t.backend);
    let root_dir = t.dir.path().join("root");
    let outside = t.dir.path().join("outside");
    std::fs::create_dir(&root_dir).expect("root dir");
    std::fs::create_dir(&outside).expect("outside dir");
    for i in 0..10 {
        std::fs::write(outside.join(format!("canary_{i}")), format!("canary {i}\n")).expect("canary");
        std::fs::write(outside.join(format!("victim_{i}")), format!("victim {i}\n")).expect("victim");
    }
    std::fs::write(outside.join("x"), "outside x\n").expect("canary x");
    let root = Root::open(&root_dir).expect("open root");
    Env { t, db, backend, root_dir, outside, root }
}

/// A worker that polls often and retries fast, with the filesystem handlers of `root`.
pub fn worker(env: &Env) -> WorkerBuilder {
    let builder = Worker::builder(&env.db).poll_interval(Duration::from_millis(20)).retry_policy(RetryPolicy {
        base: Duration::from_millis(10),
        max: Duration::from_millis(100),
        jitter: 0.0,
    });
    outbox_fs::register_handlers(builder, &env.root, None)
}

pub async fn job(db: &DatabaseConnection, id: &str) -> JobRecord {
    outbox::ops::get(db, id).await.expect("get job")
}

/// The job's output as JSON.
pub fn output(job: &JobRecord) -> serde_json::Value {
    job.output.clone().expect("job output")
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Every entry beneath `dir` (not following symlinks): relative path -> `dir`, `symlink -> target`,
/// `fifo`, or `file <sha256>`.
pub fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let entry = entry.expect("dir entry");
            let path = entry.path();
            let rel = path.strip_prefix(base).expect("beneath base").display().to_string();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            let kind = meta.file_type();
            if kind.is_symlink() {
                out.insert(rel, format!("symlink -> {}", std::fs::read_link(&path).expect("link").display()));
            } else if kind.is_dir() {
                out.insert(rel, "dir".into());
                walk(base, &path, out);
            } else if kind.is_file() {
                out.insert(rel, format!("file {}", sha256_hex(&std::fs::read(&path).expect("read"))));
            } else {
                out.insert(rel, "special".into());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Writes a job row directly, bypassing enqueue's validation (what a foreign producer or a hand edit could
/// leave). `at` (ms after the epoch) is its creation and update time; `status` completed also sets
/// `completed_at` (`at`) and `output`.
pub async fn insert_raw(
    db: &DatabaseConnection,
    id: &str,
    kind: &str,
    payload: &serde_json::Value,
    status: &str,
    output: Option<&serde_json::Value>,
    at: i64,
) {
    let schema_hash = match kind {
        "create_file" => outbox::Kind::of::<outbox_fs::CreateFile>().expect("kind").schema_hash().to_owned(),
        "delete_file" => outbox::Kind::of::<outbox_fs::DeleteFile>().expect("kind").schema_hash().to_owned(),
        _ => outbox::Kind::of::<outbox_fs::ClaudeExtraction>().expect("kind").schema_hash().to_owned(),
    };
    let backend = Backend::of(db);
    let (at, json) = (backend.time(at), backend.json_param());
    let completed_at = if status == "completed" { at.as_str() } else { "NULL" };
    let sql = format!(
        "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, \
         schema_hash, output, created_at, completed_at, updated_at) \
         VALUES (?, ?, 'default', {json}, ?, 0, 0, 3, {long_ago}, ?, {json}, {at}, {completed_at}, {at})",
        long_ago = backend.time(0),
    );
    let values = vec![
        id.into(),
        kind.into(),
        payload.to_string().into(),
        status.into(),
        schema_hash.into(),
        output.map(|o| o.to_string()).into(),
    ];
    exec(db, &sql, values).await;
}

/// Asserts two snapshots are equal, naming only the entries that differ.
#[track_caller]
pub fn assert_same_tree(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>, what: &str) {
    let mut diff = Vec::new();
    for (path, was) in before {
        match after.get(path) {
            None => diff.push(format!("deleted {path} ({was})")),
            Some(now) if now != was => diff.push(format!("changed {path}: {was} -> {now}")),
            Some(_) => {}
        }
    }
    diff.extend(after.keys().filter(|p| !before.contains_key(*p)).map(|p| format!("created {p}")));
    assert!(diff.is_empty(), "{what}: {} difference(s), first: {:?}", diff.len(), &diff[..diff.len().min(10)]);
}

/// A scripted response body from `tests/fixtures/extract`.
pub fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/extract").join(name);
    std::fs::read_to_string(path).expect("fixture")
}
