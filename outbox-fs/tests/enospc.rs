//! A full disk is a delay, not a failure: on a real, small filesystem (a `tmpfs`, mounted as root) filled to
//! the last byte, a `create_file` job under the default retry policy keeps failing with ENOSPC, stays
//! pending, and completes by itself once space returns after two failed attempts; no operator retry, no temp
//! file left.
//!
//! Takes 75 to 110 s: the default policy waits about 30 s, then a minute, between the three attempts.

mod common;

use std::time::{Duration, Instant};

use outbox_core::{EnqueueOpts, JobEventKind, JobStatus, Worker};
use outbox_fs::{CreateFile, Root};

const ENOSPC: &str = "No space left on device (ENOSPC)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_delays_create_file_until_space_returns_under_the_default_retry_policy() {
    let test = "enospc::a_full_disk_delays_create_file_until_space_returns_under_the_default_retry_policy";
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
    let id = outbox_core::enqueue(&t.db, &job, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    let started = Instant::now();
    // The default retry policy: nothing but a short poll is configured.
    let builder = Worker::builder(&t.db).poll_interval(Duration::from_millis(100));
    let worker = outbox_fs::register_handlers(builder, &root, None).build().await.expect("build").start();

    let failed_once =
        common::eventually(Duration::from_secs(10), || async { common::job(&t.db, &id).await.last_error.is_some() })
            .await;
    assert!(failed_once, "the first attempt did not fail");
    let j = common::job(&t.db, &id).await;
    let error = j.last_error.clone().unwrap_or_default();
    assert!(error.contains(&format!("`report.txt`: {ENOSPC}")), "{error}");

    // The disk stays full through the second attempt (about 30 s later): the job waits, it never fails.
    let retried_twice = common::eventually(Duration::from_secs(90), || async {
        let j = common::job(&t.db, &id).await;
        assert!(matches!(j.status, JobStatus::Pending | JobStatus::Claimed), "{:?}: {:?}", j.status, j.last_error);
        j.status == JobStatus::Pending && j.attempts == 2
    })
    .await;
    let j = common::job(&t.db, &id).await;
    assert!(retried_twice, "the second attempt did not fail and go back to pending: {j:?}");
    assert_eq!((j.status, j.attempts), (JobStatus::Pending, 2), "{:?}", j.last_error);
    assert!(j.last_error.as_deref().is_some_and(|e| e.contains(ENOSPC)), "{:?}", j.last_error);
    let history = outbox_core::ops::history(&t.db, &id).await.expect("history");
    let retried: Vec<_> = history.iter().filter(|e| e.event == JobEventKind::Retried).collect();
    assert_eq!(retried.len(), 2, "{history:?}");
    assert!(retried.iter().all(|e| e.error.as_deref().is_some_and(|m| m.contains(ENOSPC))), "{history:?}");

    std::fs::remove_file(&filler).expect("free the space");
    let done = outbox_tests::wait_status(&t.db, &id, JobStatus::Completed, Duration::from_secs(120)).await;
    let took = started.elapsed();
    worker.shutdown().await.expect("shutdown");
    let j = common::job(&t.db, &id).await;
    assert!(done, "not completed after the space returned: {:?} {:?}", j.status, j.last_error);
    assert_eq!(j.attempts, 3);

    assert_eq!(std::fs::read_to_string(fs.path().join("report.txt")).expect("read"), content);
    let mut names: Vec<String> = std::fs::read_dir(fs.path())
        .expect("list")
        .map(|d| d.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["report.txt"], "no temporary file is left behind");

    let history = outbox_core::ops::history(&t.db, &id).await.expect("history");
    let count = |kind: JobEventKind| history.iter().filter(|e| e.event == kind).count();
    assert_eq!((count(JobEventKind::Retried), count(JobEventKind::Completed)), (2, 1), "{history:?}");
    assert_eq!(count(JobEventKind::RetriedByOperator), 0, "no operator retry: {history:?}");
    // The third attempt started 72 to 108 s after the first (30 s, then 60 s, each ±20%), plus a poll: each
    // attempt takes milliseconds, so the first failure and the completion mark the two starts.
    let at = |kind: JobEventKind| history.iter().find(|e| e.event == kind).map(|e| e.at).expect("event");
    let span = (at(JobEventKind::Completed) - at(JobEventKind::Retried)).to_std().expect("ordered");
    assert!(span >= Duration::from_secs(72) && span <= Duration::from_secs(110), "{span:?}");
    eprintln!(
        "completed {:.1} s after enqueue, third attempt {:.1} s after the first",
        took.as_secs_f64(),
        span.as_secs_f64()
    );
}
