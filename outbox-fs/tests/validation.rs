//! Payloads the handlers could only fail on, or silently misread, are refused at enqueue with a violation
//! naming the field: unknown (misspelt) fields, and paths longer than the filesystem allows. Lengths are
//! bytes of UTF-8, so the cases use multi-byte characters.

mod common;

use common::{TestDb, conformance, env, job, output, sha256_hex, worker};
use outbox::{EnqueueOpts, Error, JobStatus, Kind, Violation};
use outbox_fs::{ClaudeExtraction, CreateFile, DeleteFile};
use serde_json::{Value, json};

/// The violations of a refused raw enqueue.
async fn refused(db: &sea_orm::DatabaseConnection, kind: &Kind, payload: Value) -> Vec<Violation> {
    match outbox::enqueue_raw(db, kind, payload.clone(), EnqueueOpts::new()).await {
        Err(Error::InvalidPayload { violations, .. }) => violations,
        other => panic!("{payload}: expected an invalid payload, got {other:?}"),
    }
}

/// Whether one of `violations` is at `path` and says every one of `words`.
fn names(violations: &[Violation], path: &str, words: &[&str]) -> bool {
    violations.iter().any(|v| v.path == path && words.iter().all(|w| v.message.contains(w)))
}

async fn jobs(db: &sea_orm::DatabaseConnection) -> i64 {
    outbox_tests::scalar(db, "SELECT COUNT(*) FROM outbox_jobs").await
}

conformance!(unknown_fields_are_refused_at_enqueue_naming_them, mysql);
async fn unknown_fields_are_refused_at_enqueue_naming_them(t: TestDb) {
    let e = env(t);
    let extraction = serde_json::to_value(ClaudeExtraction::new("Extract R-1.", "answers/r1.md", "R-1")).expect("json");
    let mut misspelt_extraction = extraction.clone();
    misspelt_extraction["targetPth"] = json!("answers/r1.md");
    let cases = [
        (Kind::of::<CreateFile>(), json!({"path": "a.txt", "content": "x", "overwite": true}), "overwite"),
        (Kind::of::<DeleteFile>(), json!({"path": "a.txt", "requireExist": true}), "requireExist"),
        (Kind::of::<ClaudeExtraction>(), misspelt_extraction, "targetPth"),
    ];
    for (kind, payload, field) in cases {
        let kind = kind.expect("kind");
        let v = refused(&e.db, &kind, payload).await;
        assert!(names(&v, "", &[field]), "{}: the violation names `{field}`: {v:?}", kind.name());
    }
    // The same payloads without the stray field are fine: it is the field that is refused.
    let create = Kind::of::<CreateFile>().expect("kind");
    let fine = json!({"path": "a.txt", "content": "x", "overwrite": true});
    outbox::enqueue_raw(&e.db, &create, fine, EnqueueOpts::new()).await.expect("a known field");
    let claude = Kind::of::<ClaudeExtraction>().expect("kind");
    outbox::enqueue_raw(&e.db, &claude, extraction, EnqueueOpts::new()).await.expect("a known field");
    assert_eq!(jobs(&e.db).await, 2, "nothing refused was enqueued");
}

/// A name of `bytes` bytes, made of three-byte characters and ASCII.
fn name(bytes: usize) -> String {
    let mut s = "€".repeat(bytes / 3);
    s.push_str(&"a".repeat(bytes % 3));
    assert_eq!(s.len(), bytes);
    s
}

/// A path of `bytes` bytes, every component at most 240 bytes.
fn path(bytes: usize) -> String {
    let mut parts = Vec::new();
    let mut left = bytes;
    while left > 241 {
        parts.push(name(240));
        left -= 241;
    }
    parts.push(name(left));
    let p = parts.join("/");
    assert_eq!(p.len(), bytes);
    p
}

conformance!(paths_over_the_filesystem_limits_are_refused_at_enqueue_naming_the_limit, mysql);
async fn paths_over_the_filesystem_limits_are_refused_at_enqueue_naming_the_limit(t: TestDb) {
    let e = env(t);
    let name_256 = format!("dir/{}", name(256));
    let path_4097 = path(4097);
    assert!(name(256).chars().count() < 100 && path_4097.chars().count() < 1500, "counted in chars, they fit");
    let limits = [(&name_256, "255 bytes"), (&path_4097, "4096 bytes")];
    for (p, limit) in limits {
        let create = CreateFile { path: p.clone(), content: "x".into(), overwrite: false };
        let err = outbox::enqueue(&e.db, &create, EnqueueOpts::new()).await.expect_err("too long");
        let Error::InvalidPayload { violations, .. } = &err else { panic!("{err}") };
        assert!(names(violations, "/path", &["is refused", limit]), "{violations:?}");
        let delete = DeleteFile { path: p.clone(), require_exists: false };
        let err = outbox::enqueue(&e.db, &delete, EnqueueOpts::new()).await.expect_err("too long");
        let Error::InvalidPayload { violations, .. } = &err else { panic!("{err}") };
        assert!(names(violations, "/path", &["is refused", limit]), "{violations:?}");
        let extraction = ClaudeExtraction::new("Extract R-1.", p.as_str(), "R-1");
        let err = outbox::enqueue(&e.db, &extraction, EnqueueOpts::new()).await.expect_err("too long");
        let Error::InvalidPayload { violations, .. } = &err else { panic!("{err}") };
        assert!(names(violations, "/targetPath", &["is refused", limit]), "{violations:?}");
    }
    // The refusal shows the ends of a long path and its length, not 4 KB of it.
    let create = CreateFile { path: "x".repeat(5000), content: "x".into(), overwrite: false };
    let err = outbox::enqueue(&e.db, &create, EnqueueOpts::new()).await.expect_err("5,000 bytes");
    assert!(err.to_string().contains("(5000 bytes)") && err.to_string().len() < 400, "{err}");
    // An answer's sidecar must fit too: its name, and its whole path.
    for target in [format!("dir/{}", name(250)), path(4090)] {
        let extraction = ClaudeExtraction::new("Extract R-1.", target, "R-1");
        let err = outbox::enqueue(&e.db, &extraction, EnqueueOpts::new()).await.expect_err("no room");
        assert!(err.to_string().contains("no room for the `.extraction.json` sidecar"), "{err}");
    }
    assert_eq!(jobs(&e.db).await, 0, "nothing refused was enqueued");
}

/// Runs `script` with the directory and the name of `path` as `$1` and `$2`, in `root`: whole, the path and
/// the root's own exceed what one system call takes, so the script goes a directory at a time.
fn beside(root: &std::path::Path, path: &str, script: &str) -> std::process::Output {
    let (dir, file) = path.rsplit_once('/').expect("a directory");
    let script = format!("cd \"$1\" && {script}");
    std::process::Command::new("sh").args(["-c", &script, "sh", dir, file]).current_dir(root).output().expect("sh")
}

conformance!(paths_at_the_filesystem_limits_are_accepted_written_and_deleted, mysql);
async fn paths_at_the_filesystem_limits_are_accepted_written_and_deleted(t: TestDb) {
    let e = env(t);
    let paths = [format!("dir/{}", name(255)), path(4096)];
    let mut ids = Vec::new();
    for p in &paths {
        let create = CreateFile { path: p.clone(), content: format!("{} bytes\n", p.len()), overwrite: false };
        ids.push(outbox::enqueue(&e.db, &create, EnqueueOpts::new()).await.expect("at the limit").id().to_owned());
    }
    let extraction = ClaudeExtraction::new("Extract R-1.", path(4096 - ".extraction.json".len()), "R-1");
    outbox::enqueue(&e.db, &extraction, EnqueueOpts::new()).await.expect("room for the sidecar");
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    for (id, p) in ids.iter().zip(&paths) {
        let j = job(&e.db, id).await;
        assert_eq!(j.status, JobStatus::Completed, "{:?}", j.last_error);
        let content = format!("{} bytes\n", p.len());
        assert_eq!(output(&j)["sha256"], sha256_hex(content.as_bytes()));
        let read = beside(&e.root_dir, p, "cat \"$2\"");
        assert_eq!(String::from_utf8_lossy(&read.stdout), content, "{}", String::from_utf8_lossy(&read.stderr));
    }
    ids.clear();
    for p in &paths {
        let delete = DeleteFile { path: p.clone(), require_exists: true };
        ids.push(outbox::enqueue(&e.db, &delete, EnqueueOpts::new()).await.expect("at the limit").id().to_owned());
    }
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    for (id, p) in ids.iter().zip(&paths) {
        let j = job(&e.db, id).await;
        assert_eq!(
            (j.status, output(&j)["deleted"].as_bool()),
            (JobStatus::Completed, Some(true)),
            "{:?}",
            j.last_error
        );
        assert!(beside(&e.root_dir, p, "test ! -e \"$2\"").status.success(), "the file is gone");
    }
}
