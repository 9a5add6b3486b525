//! The reconciler on real trees: every discrepancy kind reported once, nothing changed, progress reported,
//! discrepancies logged with structured fields.

mod common;

use std::sync::{Arc, Mutex};

use common::{TestDb, assert_same_tree, conformance, env, insert_raw, sha256_hex, snapshot, worker};
use outbox::EnqueueOpts;
use outbox_fs::{CreateFile, DeleteFile, Discrepancy, DiscrepancyKind, Progress, ReconcileOpts};
use serde_json::json;

async fn create(e: &common::Env, path: &str, content: &str) {
    let job = CreateFile { path: path.into(), content: content.into(), overwrite: true };
    outbox::enqueue(&e.db, &job, EnqueueOpts::new()).await.expect("enqueue");
}

async fn delete(e: &common::Env, path: &str) {
    let job = DeleteFile { path: path.into(), require_exists: false };
    outbox::enqueue(&e.db, &job, EnqueueOpts::new()).await.expect("enqueue");
}

async fn drain(e: &common::Env) {
    worker(e).build().await.expect("build").drain().await.expect("drain");
}

fn find<'a>(report: &'a outbox_fs::Report, path: &str) -> Vec<&'a Discrepancy> {
    report.discrepancies.iter().filter(|d| d.path == path).collect()
}

conformance!(reports_every_kind_of_drift_once_and_changes_nothing, mysql);
async fn reports_every_kind_of_drift_once_and_changes_nothing(t: TestDb) {
    let e = env(t);
    for (path, content) in [
        ("ok.txt", "fine"),
        ("nested/ok.txt", "fine too"),
        ("rewritten.txt", "first"),
        ("missing.txt", "soon gone"),
        ("changed.txt", "original"),
        ("gone.txt", "to delete"),
        ("deleted.txt", "to delete"),
        ("dir_instead.txt", "replaced by a directory"),
    ] {
        create(&e, path, content).await;
    }
    drain(&e).await;
    // Later jobs on the same paths: the latest completed one decides.
    create(&e, "rewritten.txt", "second").await;
    delete(&e, "gone.txt").await;
    delete(&e, "deleted.txt").await;
    delete(&e, "never-existed.txt").await;
    drain(&e).await;
    // An extraction answer (recorded under `targetPath`), and a job whose path leaves the root (written
    // behind enqueue's back).
    std::fs::write(e.root_dir.join("answer.md"), "the answer").expect("answer");
    let answer =
        json!({"prompt": "p", "targetPath": "answer.md", "requirementId": "R", "promptHash": sha256_hex(b"p")});
    insert_raw(
        &e.db,
        "x-answer",
        "claude_extraction",
        &answer,
        "completed",
        Some(&json!({"sha256": sha256_hex(b"the answer")})),
        1,
    )
    .await;
    insert_raw(
        &e.db,
        "x-escape",
        "create_file",
        &json!({"path": "../outside/x", "content": "c"}),
        "completed",
        Some(&json!({"sha256": sha256_hex(b"c")})),
        1,
    )
    .await;

    // Drift, by hand.
    std::fs::remove_file(e.root_dir.join("missing.txt")).expect("remove");
    std::fs::write(e.root_dir.join("changed.txt"), "edited").expect("edit");
    std::fs::write(e.root_dir.join("gone.txt"), "back again").expect("recreate");
    std::fs::remove_file(e.root_dir.join("dir_instead.txt")).expect("remove");
    std::fs::create_dir(e.root_dir.join("dir_instead.txt")).expect("dir");

    let tree_before = snapshot(&e.root_dir);
    let outside_before = snapshot(&e.outside);
    let jobs_before = outbox::ops::counts(&e.db).await.expect("counts");
    let progress = Arc::new(Mutex::new(Vec::<Progress>::new()));
    let seen = Arc::clone(&progress);
    let opts = ReconcileOpts::new().page_size(3).on_progress(move |p| seen.lock().expect("lock").push(p));
    let report = outbox_fs::reconcile(&e.db, &e.root, opts).await.expect("reconcile");

    assert_same_tree(&tree_before, &snapshot(&e.root_dir), "the tree");
    assert_same_tree(&outside_before, &snapshot(&e.outside), "outside the root");
    assert_eq!(outbox::ops::counts(&e.db).await.expect("counts"), jobs_before, "the jobs are unchanged");

    // 8 creates, 1 rewrite and 3 deletes via the worker, 2 raw rows; 11 distinct paths.
    assert_eq!((report.jobs_scanned, report.paths_checked), (14, 11), "{report:#?}");
    assert_eq!(
        (report.missing, report.content_changed, report.should_be_absent, report.unreadable, report.outside_root),
        (1, 1, 1, 1, 1),
        "{report:#?}"
    );
    assert_eq!(report.ok, 6, "ok.txt, nested/ok.txt, rewritten.txt, deleted.txt, never-existed.txt, answer.md");
    assert_eq!(report.discrepancies.len(), 5);
    assert!(!report.is_clean());
    let kinds = |path| find(&report, path).into_iter().map(|d| d.kind.clone()).collect::<Vec<_>>();
    assert_eq!(kinds("missing.txt"), [DiscrepancyKind::Missing]);
    assert_eq!(
        kinds("changed.txt"),
        [DiscrepancyKind::ContentChanged { expected: sha256_hex(b"original"), actual: sha256_hex(b"edited") }]
    );
    assert_eq!(kinds("gone.txt"), [DiscrepancyKind::ShouldBeAbsent]);
    assert!(
        matches!(&kinds("dir_instead.txt")[..], [DiscrepancyKind::Unreadable { error }] if error.contains("directory"))
    );
    assert!(matches!(&kinds("../outside/x")[..], [DiscrepancyKind::OutsideRoot { rule }] if rule.contains("`..`")));
    let escape = find(&report, "../outside/x")[0];
    assert_eq!((escape.job_id.as_str(), escape.job_kind.as_str()), ("x-escape", "create_file"));
    assert_eq!(find(&report, "gone.txt")[0].job_kind, "delete_file");

    let progress = progress.lock().expect("lock").clone();
    assert_eq!(progress.first().map(|p| (p.jobs_done, p.jobs_total)), Some((0, 14)));
    assert_eq!(progress.last().map(|p| (p.jobs_done, p.jobs_total)), Some((14, 14)));
    assert_eq!(progress.len(), 1 + 4, "one report at the start and one per page of 3 paths");
    assert!(progress.windows(2).all(|w| w[0].jobs_done <= w[1].jobs_done));
}

conformance!(fifos_symlinks_out_of_the_root_and_caps_are_handled_without_blocking, mysql);
async fn fifos_symlinks_out_of_the_root_and_caps_are_handled_without_blocking(t: TestDb) {
    let e = env(t);
    for (id, path) in [("j1", "fifo"), ("j2", "evil/x"), ("j3", "a"), ("j4", "b")] {
        insert_raw(
            &e.db,
            id,
            "create_file",
            &json!({"path": path, "content": "c"}),
            "completed",
            Some(&json!({"sha256": sha256_hex(b"c")})),
            1,
        )
        .await;
    }
    insert_raw(&e.db, "j5", "delete_file", &json!({"path": "evil/canary_0"}), "completed", None, 1).await;
    let status = std::process::Command::new("mkfifo").arg(e.root_dir.join("fifo")).status().expect("mkfifo");
    assert!(status.success());
    std::os::unix::fs::symlink(&e.outside, e.root_dir.join("evil")).expect("symlink");
    let outside_before = snapshot(&e.outside);

    let report = outbox_fs::reconcile(&e.db, &e.root, ReconcileOpts::new().max_listed(2)).await.expect("reconcile");
    assert_eq!((report.unreadable, report.outside_root, report.missing), (1, 2, 2), "{report:#?}");
    assert_eq!((report.discrepancies.len(), report.unlisted), (2, 3), "listing capped, counts exact");
    let report = outbox_fs::reconcile(&e.db, &e.root, ReconcileOpts::new()).await.expect("reconcile");
    assert!(matches!(&find(&report, "fifo")[0].kind, DiscrepancyKind::Unreadable { error } if error.contains("fifo")));
    for path in ["evil/x", "evil/canary_0"] {
        assert!(
            matches!(&find(&report, path)[0].kind,
            DiscrepancyKind::OutsideRoot { rule } if rule.contains("outside the root")),
            "{report:#?}"
        );
    }
    assert_same_tree(&outside_before, &snapshot(&e.outside), "outside the root");
}

conformance!(each_discrepancy_is_logged_as_a_warning_with_fields, mysql, flavor = "current_thread");
async fn each_discrepancy_is_logged_as_a_warning_with_fields(t: TestDb) {
    let e = env(t);
    insert_raw(
        &e.db,
        "j-missing",
        "create_file",
        &json!({"path": "lost.txt", "content": "c"}),
        "completed",
        Some(&json!({"sha256": sha256_hex(b"c")})),
        1,
    )
    .await;
    std::fs::write(e.root_dir.join("edited.txt"), "new").expect("write");
    insert_raw(
        &e.db,
        "j-edited",
        "create_file",
        &json!({"path": "edited.txt", "content": "old"}),
        "completed",
        Some(&json!({"sha256": sha256_hex(b"old")})),
        1,
    )
    .await;
    let captured = outbox_tests::Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let report = outbox_fs::reconcile(&e.db, &e.root, ReconcileOpts::new()).await.expect("reconcile");
    assert_eq!((report.missing, report.content_changed), (1, 1));
    let logs = String::from_utf8(captured.bytes()).expect("utf-8");
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(lines.len(), 2, "{logs}");
    assert!(
        lines.iter().any(|l| l.contains("path=\"lost.txt\"")
            && l.contains("job_id=\"j-missing\"")
            && l.contains("discrepancy=\"missing\"")),
        "{logs}"
    );
    assert!(
        lines.iter().any(|l| l.contains("path=\"edited.txt\"")
            && l.contains("discrepancy=\"content_changed\"")
            && l.contains(&format!("expected={}", sha256_hex(b"old")))
            && l.contains(&format!("actual={}", sha256_hex(b"new")))),
        "{logs}"
    );
}

conformance!(a_path_scan_reads_one_snapshot_without_blocking_writers, mysql);
async fn a_path_scan_reads_one_snapshot_without_blocking_writers(t: TestDb) {
    use outbox::scan::{self, PathField};
    let e = env(t);
    let fields = [PathField { kind: "create_file", json_path: "$.path" }];
    for (id, path, at) in [("a1", "a", 1), ("a2", "a", 2), ("b1", "b", 1)] {
        insert_raw(&e.db, id, "create_file", &json!({"path": path, "content": id}), "completed", None, at).await;
    }
    let mut scan = scan::latest_completed_by_path(&e.db, &fields).await.expect("scan");
    assert_eq!((scan.jobs_total(), scan.paths_total()), (3, 2));
    // A writer commits while the scan is open: it is not blocked (it would time out on a held lock), and the
    // scan does not see it.
    insert_raw(&e.db, "c1", "create_file", &json!({"path": "c", "content": "c"}), "completed", None, 1).await;
    let first = scan.next_page(1).await.expect("page");
    let second = scan.next_page(1).await.expect("page");
    assert!(scan.next_page(1).await.expect("page").is_empty());
    scan.close().await.expect("close");
    let seen: Vec<(Option<&str>, &str, u64)> =
        first.iter().chain(&second).map(|j| (j.path.as_deref(), j.job_id.as_str(), j.jobs)).collect();
    assert_eq!(seen, [(Some("a"), "a2", 2), (Some("b"), "b1", 1)], "latest per path, in path order");
    let mut again = scan::latest_completed_by_path(&e.db, &fields).await.expect("scan");
    assert_eq!(again.next_page(10).await.expect("page").len(), 3, "a new scan sees the new job");
    again.close().await.expect("close");
    let err = scan::latest_completed_by_path(&e.db, &[]).await.expect_err("no fields");
    assert!(err.to_string().contains("at least one kind"), "{err}");
}

conformance!(retention_leaves_the_reconcilers_result_unchanged, mysql);
async fn retention_leaves_the_reconcilers_result_unchanged(t: TestDb) {
    let backend = t.backend;
    let e = env(t);
    for round in 0..3 {
        for (path, content) in [("kept.txt", "k"), ("missing.txt", "m"), ("changed.txt", "c"), ("gone.txt", "g")] {
            create(&e, path, &format!("{content}{round}")).await;
        }
        drain(&e).await;
    }
    delete(&e, "gone.txt").await;
    drain(&e).await;
    std::fs::remove_file(e.root_dir.join("missing.txt")).expect("remove");
    std::fs::write(e.root_dir.join("changed.txt"), "edited").expect("edit");
    std::fs::write(e.root_dir.join("gone.txt"), "back").expect("recreate");
    // Every job finished two days ago: past the default day completed jobs are kept.
    let old = outbox_tests::now_ms() - 2 * 86_400_000;
    outbox_tests::exec(&e.db, &format!("UPDATE outbox_jobs SET updated_at = {}", backend.time(old)), vec![]).await;

    let before = outbox_fs::reconcile(&e.db, &e.root, ReconcileOpts::new()).await.expect("reconcile");
    assert_eq!(before.jobs_scanned, 13);
    let handle = worker(&e)
        .retention(outbox::Retention::new().interval(std::time::Duration::from_millis(20)).batch_size(2))
        .build()
        .await
        .expect("build")
        .start();
    let pruned = outbox_tests::eventually(std::time::Duration::from_secs(20), || async {
        outbox_tests::scalar(&e.db, "SELECT COUNT(*) FROM outbox_jobs").await == 4
    })
    .await;
    handle.shutdown().await.expect("shutdown");
    assert!(pruned, "all but the latest job of each path are pruned");
    let after = outbox_fs::reconcile(&e.db, &e.root, ReconcileOpts::new()).await.expect("reconcile");
    assert_eq!(after.jobs_scanned, 4);
    assert_eq!(
        (after.paths_checked, after.ok, after.missing, after.content_changed, after.should_be_absent),
        (before.paths_checked, before.ok, before.missing, before.content_changed, before.should_be_absent)
    );
    assert_eq!(after.discrepancies, before.discrepancies, "the same discrepancies, naming the same jobs");
    assert_eq!((after.missing, after.content_changed, after.should_be_absent, after.ok), (1, 1, 1, 1));
}
