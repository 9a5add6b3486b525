//! Paths never leave the root: lexical escapes are refused at enqueue (and fail permanently if they get in
//! anyway), symlinks out of the root fail the job permanently, and a directory swapped for a symlink while
//! jobs run never lets a file outside be created, changed or deleted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{TestDb, assert_same_tree, conformance, env, insert_raw, job, snapshot, worker};
use outbox::{EnqueueOpts, Error, JobStatus};
use outbox_fs::{CreateFile, DeleteFile};
use serde_json::json;

conformance!(escaping_paths_are_refused_at_enqueue_naming_the_rule, mysql);
async fn escaping_paths_are_refused_at_enqueue_naming_the_rule(t: TestDb) {
    let e = env(t);
    let cases = [
        ("../x", "`..` component"),
        ("a/../../x", "`..` component"),
        ("/etc/passwd", "absolute"),
        ("a/\0b", "NUL byte"),
        ("a\\..\\b", "backslash"),
        ("", "empty"),
        ("a/./b", "not normalized"),
    ];
    for (path, rule) in cases {
        let create = CreateFile { path: path.into(), content: "x".into(), overwrite: true };
        let err = outbox::enqueue(&e.db, &create, EnqueueOpts::new()).await.expect_err(path);
        let Error::InvalidPayload { violations, .. } = &err else { panic!("{path:?}: {err}") };
        assert_eq!(violations.len(), 1, "{err}");
        assert_eq!(violations[0].path, "/path", "{err}");
        assert!(violations[0].message.contains(rule), "{path:?}: {err}");
        let delete = DeleteFile { path: path.into(), require_exists: false };
        let err = outbox::enqueue(&e.db, &delete, EnqueueOpts::new()).await.expect_err(path);
        assert!(err.to_string().contains("at /path") && err.to_string().contains(rule), "{err}");
    }
    let count = outbox::ops::counts(&e.db).await.expect("counts");
    assert!(count.is_empty(), "nothing was enqueued: {count:?}");
}

conformance!(an_escaping_payload_written_behind_enqueue_fails_permanently, mysql);
async fn an_escaping_payload_written_behind_enqueue_fails_permanently(t: TestDb) {
    let e = env(t);
    let (root_before, outside_before) = (snapshot(&e.root_dir), snapshot(&e.outside));
    insert_raw(
        &e.db,
        "raw-1",
        "create_file",
        &json!({"path": "../outside/x", "content": "owned", "overwrite": true}),
        "pending",
        None,
        0,
    )
    .await;
    insert_raw(&e.db, "raw-2", "delete_file", &json!({"path": "/tmp", "requireExists": false}), "pending", None, 0)
        .await;
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    for (id, rule) in [("raw-1", "`..` component"), ("raw-2", "absolute")] {
        let j = job(&e.db, id).await;
        assert_eq!((j.status, j.attempts), (JobStatus::Failed, 1), "{id}");
        let error = j.last_error.expect("error");
        assert!(error.contains("/path") && error.contains(rule), "{id}: {error}");
    }
    assert_same_tree(&root_before, &snapshot(&e.root_dir), "the root");
    assert_same_tree(&outside_before, &snapshot(&e.outside), "outside the root");
}

conformance!(a_symlink_out_of_the_root_fails_permanently_and_touches_nothing_outside, mysql);
async fn a_symlink_out_of_the_root_fails_permanently_and_touches_nothing_outside(t: TestDb) {
    let e = env(t);
    std::os::unix::fs::symlink(&e.outside, e.root_dir.join("evil")).expect("symlink");
    let outside_before = snapshot(&e.outside);
    let jobs = [
        outbox::enqueue(
            &e.db,
            &CreateFile { path: "evil/x".into(), content: "pwned".into(), overwrite: true },
            EnqueueOpts::new(),
        )
        .await
        .expect("enqueue"),
        outbox::enqueue(
            &e.db,
            &CreateFile { path: "evil/new".into(), content: "pwned".into(), overwrite: false },
            EnqueueOpts::new(),
        )
        .await
        .expect("enqueue"),
        outbox::enqueue(
            &e.db,
            &CreateFile { path: "evil/deeper/new".into(), content: "p".into(), overwrite: false },
            EnqueueOpts::new(),
        )
        .await
        .expect("enqueue"),
        outbox::enqueue(&e.db, &DeleteFile { path: "evil/canary_0".into(), require_exists: true }, EnqueueOpts::new())
            .await
            .expect("enqueue"),
    ];
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    for (enqueued, path) in jobs.iter().zip(["evil/x", "evil/new", "evil/deeper/new", "evil/canary_0"]) {
        let j = job(&e.db, enqueued.id()).await;
        let error = j.last_error.clone().unwrap_or_default();
        assert_eq!((j.status, j.attempts), (JobStatus::Failed, 1), "{path}: {error}");
        assert!(error.contains(&format!("`{path}`")) && error.contains("resolves outside the root"), "{error}");
    }
    assert_same_tree(&outside_before, &snapshot(&e.outside), "nothing outside the root changed");
    assert_eq!(std::fs::read_link(e.root_dir.join("evil")).expect("link"), e.outside, "the link itself is intact");
}

/// Replaces `root/d` by a symlink to `outside` and back, over and over, until `stop`. Jobs may recreate `d`
/// in the instant it is missing; such a directory is moved aside (it stays inside the root).
fn swap_until(root: std::path::PathBuf, outside: std::path::PathBuf, stop: Arc<AtomicBool>, swaps: Arc<AtomicU64>) {
    let (d, real, link) = (root.join("d"), root.join("d.real"), root.join("d.link"));
    std::os::unix::fs::symlink(&outside, &link).expect("prepare link");
    let mut strays = 0;
    let mut move_into_place = |from: &std::path::Path| loop {
        match std::fs::rename(from, &d) {
            Ok(()) => return,
            Err(_) => {
                // A job created `d` while it was missing: move that directory aside and try again.
                strays += 1;
                std::fs::rename(&d, root.join(format!("d.stray{strays}"))).expect("move stray aside");
            }
        }
    };
    while !stop.load(Ordering::SeqCst) {
        std::fs::rename(&d, &real).expect("move the directory away");
        move_into_place(&link);
        swaps.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_micros(500));
        std::fs::rename(&d, &link).expect("move the link away");
        move_into_place(&real);
        std::thread::sleep(Duration::from_micros(500));
    }
}

conformance!(a_directory_swapped_for_a_symlink_while_1000_jobs_run_never_leaks_outside, mysql);
async fn a_directory_swapped_for_a_symlink_while_1000_jobs_run_never_leaks_outside(t: TestDb) {
    let e = env(t);
    let d = e.root_dir.join("d");
    std::fs::create_dir(&d).expect("d");
    for k in 0..10 {
        std::fs::write(d.join(format!("victim_{k}")), "inside").expect("inside victim");
    }
    let outside_before = snapshot(&e.outside);
    // Names that exist outside too: an escape would overwrite the canaries, delete the victims, or add files.
    let mut ids = Vec::new();
    for i in 0..1000u32 {
        let k = i % 10;
        // A sequence of its own per job: jobs of one path run side by side, racing the swapper, and an escape
        // that fails a job for good holds nothing behind it.
        let opts =
            EnqueueOpts::new().max_attempts(20).idempotency_key(format!("swap-{i}")).sequence(format!("swap-{i}"));
        let enqueued = match i % 3 {
            0 => {
                outbox::enqueue(
                    &e.db,
                    &CreateFile { path: format!("d/new_{i}"), content: format!("{i}"), overwrite: false },
                    opts,
                )
                .await
            }
            1 => {
                outbox::enqueue(
                    &e.db,
                    &CreateFile { path: format!("d/canary_{k}"), content: format!("{i}"), overwrite: true },
                    opts,
                )
                .await
            }
            _ => {
                outbox::enqueue(&e.db, &DeleteFile { path: format!("d/victim_{k}"), require_exists: false }, opts).await
            }
        };
        ids.push((enqueued.expect("enqueue").id().to_owned(), i));
    }
    let (stop, swaps) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let swapper = {
        let (root, outside, stop, swaps) = (e.root_dir.clone(), e.outside.clone(), stop.clone(), swaps.clone());
        std::thread::spawn(move || swap_until(root, outside, stop, swaps))
    };
    let swapping = common::eventually(Duration::from_secs(10), || async {
        swaps.load(Ordering::SeqCst) > 0 || swapper.is_finished()
    })
    .await;
    assert!(swapping && !swapper.is_finished(), "the swapper did not start swapping (or stopped at once)");
    let handle = worker(&e).concurrency(16).build().await.expect("build").start();
    let db = e.db.clone();
    let settled = common::eventually(Duration::from_secs(120), || {
        let db = db.clone();
        async move {
            let counts = outbox::ops::counts(&db).await.expect("counts");
            counts.iter().filter(|c| c.status.is_terminal()).map(|c| c.count).sum::<u64>() == 1000
        }
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    swapper.join().expect("swapper");
    handle.shutdown().await.expect("shutdown");
    assert!(settled, "all 1000 jobs finished");

    assert_same_tree(
        &outside_before,
        &snapshot(&e.outside),
        "nothing outside the root was created, changed or deleted",
    );
    let (mut completed, mut refused) = (0, 0);
    for (id, i) in &ids {
        let j = job(&e.db, id).await;
        match j.status {
            JobStatus::Completed => completed += 1,
            JobStatus::Failed => {
                let error = j.last_error.as_deref().unwrap_or_default();
                let path: String = j.payload["path"].as_str().expect("path").into();
                // Failed before its 20 attempts were used: failed permanently.
                assert!(
                    j.attempts < 20
                        && error.contains(&format!("`{path}`"))
                        && error.contains("resolves outside the root"),
                    "job {i}: {error}"
                );
                refused += 1;
            }
            other => panic!("job {i} ended {other}"),
        }
    }
    eprintln!("swaps: {}, completed: {completed}, refused at the swap: {refused}", swaps.load(Ordering::SeqCst));
    assert_eq!(completed + refused, 1000);
    // The swapper alternates every half millisecond from before the first claim: jobs do meet the symlink.
    assert!(refused > 0, "no job ran into the swapped directory; the race was not exercised");
}
