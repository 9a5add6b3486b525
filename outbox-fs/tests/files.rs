//! `create_file` and `delete_file` on a real worker: atomic, idempotent writes; overwrite rules; deletes that
//! tolerate their own earlier attempts; directories and symlinks.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{TestDb, conformance, env, exec, job, output, sha256_hex, worker};
use outbox::{EnqueueOpts, JobStatus};
use outbox_fs::{CreateFile, DeleteFile};

async fn run(e: &common::Env) {
    worker(e).build().await.expect("build").drain().await.expect("drain");
}

conformance!(create_file_writes_atomically_creating_parents_and_records_the_hash, mysql);
async fn create_file_writes_atomically_creating_parents_and_records_the_hash(t: TestDb) {
    let e = env(t);
    let job_in = CreateFile { path: "a/b/c.txt".into(), content: "hello\n".into(), overwrite: false };
    let id = outbox::enqueue(&e.db, &job_in, EnqueueOpts::new()).await.expect("enqueue");
    run(&e).await;
    let j = job(&e.db, id.id()).await;
    assert_eq!(j.status, JobStatus::Completed, "{:?}", j.last_error);
    assert_eq!(std::fs::read_to_string(e.root_dir.join("a/b/c.txt")).expect("read"), "hello\n");
    let out = output(&j);
    assert_eq!(out["sha256"], sha256_hex(b"hello\n"));
    assert_eq!(
        (out["size"].as_u64(), out["path"].as_str(), out["written"].as_bool()),
        (Some(6), Some("a/b/c.txt"), Some(true))
    );
    let names: Vec<String> = std::fs::read_dir(e.root_dir.join("a/b"))
        .expect("list")
        .map(|d| d.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["c.txt"], "no temporary file is left behind");
}

conformance!(create_file_rerun_after_a_crash_between_rename_and_completion_succeeds_unchanged, mysql);
async fn create_file_rerun_after_a_crash_between_rename_and_completion_succeeds_unchanged(t: TestDb) {
    let e = env(t);
    // The rename happened, the completion was never recorded: the file is there, the job runs again.
    std::fs::create_dir(e.root_dir.join("docs")).expect("dir");
    std::fs::write(e.root_dir.join("docs/readme.md"), "# same\n").expect("write");
    let before = std::fs::metadata(e.root_dir.join("docs/readme.md")).expect("meta");
    let job_in = CreateFile { path: "docs/readme.md".into(), content: "# same\n".into(), overwrite: false };
    let id = outbox::enqueue(&e.db, &job_in, EnqueueOpts::new()).await.expect("enqueue");
    run(&e).await;
    let j = job(&e.db, id.id()).await;
    assert_eq!((j.status, j.attempts), (JobStatus::Completed, 1), "{:?}", j.last_error);
    let out = output(&j);
    assert_eq!(out["sha256"], sha256_hex(b"# same\n"));
    assert_eq!(out["written"], false);
    let after = std::fs::metadata(e.root_dir.join("docs/readme.md")).expect("meta");
    assert_eq!(
        (after.ino(), after.mtime_nsec(), after.mtime()),
        (before.ino(), before.mtime_nsec(), before.mtime()),
        "the file was not rewritten"
    );
}

conformance!(create_file_without_overwrite_fails_permanently_on_other_content_and_leaves_it, mysql);
async fn create_file_without_overwrite_fails_permanently_on_other_content_and_leaves_it(t: TestDb) {
    let e = env(t);
    std::fs::write(e.root_dir.join("config.toml"), "mine = true\n").expect("write");
    let job_in = CreateFile { path: "config.toml".into(), content: "theirs = true\n".into(), overwrite: false };
    let id = outbox::enqueue(&e.db, &job_in, EnqueueOpts::new()).await.expect("enqueue");
    run(&e).await;
    let j = job(&e.db, id.id()).await;
    assert_eq!((j.status, j.attempts), (JobStatus::Failed, 1));
    let error = j.last_error.expect("error");
    assert!(
        error.contains("`config.toml` already holds other content") && error.contains("overwrite is false"),
        "{error}"
    );
    assert!(error.contains(&sha256_hex(b"mine = true\n")), "{error}");
    assert_eq!(std::fs::read_to_string(e.root_dir.join("config.toml")).expect("read"), "mine = true\n");
}

conformance!(create_file_with_overwrite_replaces_files_and_symlinks_but_not_directories, mysql);
async fn create_file_with_overwrite_replaces_files_and_symlinks_but_not_directories(t: TestDb) {
    let e = env(t);
    std::fs::write(e.root_dir.join("config.toml"), "mine = true\n").expect("write");
    std::os::unix::fs::symlink(e.outside.join("x"), e.root_dir.join("link")).expect("symlink");
    std::fs::create_dir(e.root_dir.join("dir")).expect("dir");
    let mut ids = Vec::new();
    for path in ["config.toml", "link", "dir"] {
        let job_in = CreateFile { path: path.into(), content: "theirs = true\n".into(), overwrite: true };
        ids.push(outbox::enqueue(&e.db, &job_in, EnqueueOpts::new()).await.expect("enqueue"));
    }
    run(&e).await;
    for (id, path) in ids.iter().take(2).zip(["config.toml", "link"]) {
        let j = job(&e.db, id.id()).await;
        assert_eq!(j.status, JobStatus::Completed, "{path}: {:?}", j.last_error);
        assert_eq!(output(&j)["written"], true);
        let meta = std::fs::symlink_metadata(e.root_dir.join(path)).expect("meta");
        assert!(meta.is_file(), "{path} is now a regular file");
        assert_eq!(std::fs::read_to_string(e.root_dir.join(path)).expect("read"), "theirs = true\n");
    }
    assert_eq!(std::fs::read_to_string(e.outside.join("x")).expect("read"), "outside x\n", "the link target is intact");
    let j = job(&e.db, ids[2].id()).await;
    assert_eq!((j.status, j.attempts), (JobStatus::Failed, 1));
    assert!(j.last_error.expect("error").contains("`dir` is a directory"));
    assert!(e.root_dir.join("dir").is_dir());
}

async fn delete(e: &common::Env, path: &str, require_exists: bool) -> String {
    let job_in = DeleteFile { path: path.into(), require_exists };
    outbox::enqueue(&e.db, &job_in, EnqueueOpts::new()).await.expect("enqueue").id().to_owned()
}

conformance!(delete_file_removes_files_and_symlinks_but_never_directories_or_link_targets, mysql);
async fn delete_file_removes_files_and_symlinks_but_never_directories_or_link_targets(t: TestDb) {
    let e = env(t);
    std::fs::create_dir_all(e.root_dir.join("a/dir")).expect("dirs");
    std::fs::write(e.root_dir.join("a/file"), "bye").expect("write");
    std::fs::write(e.root_dir.join("target"), "stay").expect("write");
    std::os::unix::fs::symlink("../target", e.root_dir.join("a/link")).expect("symlink");
    let file = delete(&e, "a/file", true).await;
    let link = delete(&e, "a/link", true).await;
    let dir = delete(&e, "a/dir", false).await;
    run(&e).await;
    for id in [&file, &link] {
        let j = job(&e.db, id).await;
        assert_eq!(j.status, JobStatus::Completed, "{:?}", j.last_error);
        assert_eq!(output(&j)["deleted"], true);
    }
    assert!(!e.root_dir.join("a/file").exists());
    assert!(std::fs::symlink_metadata(e.root_dir.join("a/link")).is_err(), "the link itself is gone");
    assert_eq!(std::fs::read_to_string(e.root_dir.join("target")).expect("read"), "stay", "its target is not");
    let j = job(&e.db, &dir).await;
    assert_eq!((j.status, j.attempts), (JobStatus::Failed, 1));
    assert!(j.last_error.expect("error").contains("`a/dir` is a directory"));
    assert!(e.root_dir.join("a/dir").is_dir());
}

conformance!(delete_file_missing_fails_only_on_a_first_run_that_requires_it, mysql);
async fn delete_file_missing_fails_only_on_a_first_run_that_requires_it(t: TestDb) {
    let e = env(t);
    // Attempt 1, requireExists, nothing there: nobody can have deleted it on this job's behalf.
    let strict = delete(&e, "gone/strict", true).await;
    // requireExists false: missing is fine.
    let lenient = delete(&e, "gone/lenient", false).await;
    // Attempt 2 (attempt 1 was claimed, may have deleted the file, and crashed): missing is success.
    let rerun = delete(&e, "gone/rerun", true).await;
    exec(&e.db, "UPDATE outbox_jobs SET attempts = 1, runs = 1 WHERE id = ?", vec![rerun.clone().into()]).await;
    // An earlier run whose attempt was given back at shutdown (attempts 0, runs 1) may have deleted it too.
    let released = delete(&e, "gone/released", true).await;
    exec(&e.db, "UPDATE outbox_jobs SET runs = 1 WHERE id = ?", vec![released.clone().into()]).await;
    run(&e).await;

    let j = job(&e.db, &strict).await;
    assert_eq!((j.status, j.attempts), (JobStatus::Failed, 1));
    assert!(j.last_error.expect("error").contains("`gone/strict` does not exist and requireExists is set"));
    let j = job(&e.db, &lenient).await;
    assert_eq!((j.status, output(&j)["deleted"].as_bool()), (JobStatus::Completed, Some(false)));
    let j = job(&e.db, &rerun).await;
    assert_eq!((j.status, j.attempts), (JobStatus::Completed, 2), "{:?}", j.last_error);
    assert_eq!(output(&j)["deleted"], false);
    let j = job(&e.db, &released).await;
    assert_eq!((j.status, j.attempts), (JobStatus::Completed, 1), "{:?}", j.last_error);
}
