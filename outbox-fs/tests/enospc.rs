//! A full disk is a delay, not a failure: on a real, small filesystem (a `tmpfs`, mounted as root) filled to
//! the last byte, a `create_file` job keeps failing with ENOSPC as a retryable error, stays pending, and
//! completes by itself once space returns; no operator retry, no temp file left.
//!
//! The worker retries every 100 ms here. The default policy's schedule (about 30 s, then a minute, ...) is the
//! retry module's own test; waiting it out took this test 85 s.

mod common;

use std::time::{Duration, Instant};

use outbox::{EnqueueOpts, JobEventKind, JobStatus, RetryPolicy, Worker};
use outbox_fs::{CreateFile, Root};

const ENOSPC: &str = "No space left on device (ENOSPC)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_delays_create_file_until_space_returns() {
    let test = "enospc::a_full_disk_delays_create_file_until_space_returns";
    let Some(fs) = outbox_tests::Tmpfs::mount(test, "256k") else { return };
    let t = outbox_tests::fresh_db().await;
    let root = Root::open(fs.path()).expect("root");
    let filler = fs.fill("filler");
    let probe = std::fs::write(fs.path().join("probe"), [0u8; 4096]).expect_err("the filesystem is full");
    assert_eq!(probe.raw_os_error(), Some(libc::ENOSPC), "{probe}");
    std::fs::remove_file(fs.path().join("probe")).expect("remove the empty probe");

    let content: String = (0..100).map(|i| format!("line {i:03} of the report, kept whole\n")).collect();
    assert!(content.len() > 3000, "a few KB: {}", content.len());
    let job = CreateFile { path: "report.txt".into(), content: content.clone(), overwrite: false };
    // Attempts to spare: however many retries the full disk costs before the space returns, none is the last.
    let opts = EnqueueOpts::new().max_attempts(1_000);
    let id = outbox::enqueue(&t.db, &job, opts).await.expect("enqueue").id().to_owned();
    let started = Instant::now();
    let retry = RetryPolicy { base: Duration::from_millis(100), max: Duration::from_millis(100), jitter: 0.0 };
    let builder = Worker::builder(&t.db).poll_interval(Duration::from_millis(50)).retry_policy(retry);
    let worker = outbox_fs::register_handlers(builder, &root, None).build().await.expect("build").start();

    let failed_once =
        common::eventually(Duration::from_secs(10), || async { common::job(&t.db, &id).await.last_error.is_some() })
            .await;
    assert!(failed_once, "the first attempt did not fail");
    let j = common::job(&t.db, &id).await;
    let error = j.last_error.clone().unwrap_or_default();
    assert!(error.contains(&format!("`report.txt`: {ENOSPC}")), "{error}");

    // The disk stays full through later attempts: the job waits, it never fails.
    let retried_twice = common::eventually(Duration::from_secs(30), || async {
        let j = common::job(&t.db, &id).await;
        assert!(matches!(j.status, JobStatus::Pending | JobStatus::Claimed), "{:?}: {:?}", j.status, j.last_error);
        j.status == JobStatus::Pending && j.attempts >= 2
    })
    .await;
    let j = common::job(&t.db, &id).await;
    assert!(retried_twice, "the second attempt did not fail and go back to pending: {j:?}");
    assert!(j.last_error.as_deref().is_some_and(|e| e.contains(ENOSPC)), "{:?}", j.last_error);

    std::fs::remove_file(&filler).expect("free the space");
    let done = outbox_tests::wait_status(&t.db, &id, JobStatus::Completed, Duration::from_secs(30)).await;
    let took = started.elapsed();
    worker.shutdown().await.expect("shutdown");
    let j = common::job(&t.db, &id).await;
    assert!(done, "not completed after the space returned: {:?} {:?}", j.status, j.last_error);

    assert_eq!(std::fs::read_to_string(fs.path().join("report.txt")).expect("read"), content);
    let mut names: Vec<String> = std::fs::read_dir(fs.path())
        .expect("list")
        .map(|d| d.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["report.txt"], "no temporary file is left behind");

    let history = outbox::ops::history(&t.db, &id).await.expect("history");
    let count = |kind: JobEventKind| history.iter().filter(|e| e.event == kind).count();
    let retried: Vec<_> = history.iter().filter(|e| e.event == JobEventKind::Retried).collect();
    assert!(retried.len() >= 2, "{history:?}");
    assert!(retried.iter().all(|e| e.error.as_deref().is_some_and(|m| m.contains(ENOSPC))), "{history:?}");
    assert_eq!(j.attempts as usize, retried.len() + 1, "every attempt but the last was an ENOSPC retry");
    assert_eq!(count(JobEventKind::Completed), 1, "{history:?}");
    assert_eq!(count(JobEventKind::Failed) + count(JobEventKind::RetriedByOperator), 0, "{history:?}");
    eprintln!("completed {:.1} s after enqueue, after {} ENOSPC retries", took.as_secs_f64(), retried.len());
}
