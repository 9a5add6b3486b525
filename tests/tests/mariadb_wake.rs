//! Commits of other processes wake this one at once on MariaDB, which has no `LISTEN`: another process enqueues a
//! job, and a worker whose poll would not come for an hour runs it, woken by its watch of the wake-up ring.
//!
//! This file holds the only test of its binary, so no enqueue or watch of another test in the same process can wake
//! the worker in its place.

use std::time::Duration;

use outbox::{JobError, Retention, Worker};
use outbox_tests::{ClaimLog, Race, TestMariaDb};

/// On a current-thread runtime, so that the claim log hears the worker's claims.
#[tokio::test(flavor = "current_thread")]
async fn an_enqueue_by_another_process_wakes_an_idle_worker_at_once_on_mariadb() {
    let log = ClaimLog::default();
    let _recording = log.record();
    let Some(t) = TestMariaDb::fresh("wake").await else { return };
    outbox::migrate(&t.db).await.expect("migrate");
    let (ran_tx, mut ran) = tokio::sync::mpsc::unbounded_channel();
    let hour = Duration::from_secs(3_600);
    // Nothing of this process writes a job once the worker has registered: its poll, its registry refresh and its
    // rescue are an hour away.
    let worker = Worker::builder(&t.db)
        .poll_interval(hour)
        .presence_interval(hour)
        .rescue_interval(hour)
        .retention(Retention::off())
        .register(move |r: Race, _| {
            let ran_tx = ran_tx.clone();
            async move {
                let _ = ran_tx.send(r.n);
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("worker")
        .start();
    let registered = outbox_tests::eventually(Duration::from_secs(30), || async {
        !outbox::ops::workers(&t.db).await.expect("workers").is_empty() && !log.claims().is_empty()
    })
    .await;
    assert!(registered, "the worker never registered");

    let dir = tempfile::tempdir().expect("temp dir");
    let id_file = dir.path().join("enqueued");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox-test-worker"))
        .arg(&t.url)
        .arg(&id_file)
        .args(["enqueue", "7"])
        .output()
        .await
        .expect("run the enqueuing process");
    assert!(out.status.success(), "the enqueuing process failed: {}", String::from_utf8_lossy(&out.stderr));

    // A generous bound: nothing but the watch's wake-up can run the job before the hour is up.
    let n = tokio::time::timeout(Duration::from_secs(30), ran.recv()).await;
    assert_eq!(n.expect("the worker was not woken by the other process's enqueue"), Some(7));
    worker.shutdown().await.expect("shutdown");
    let claims = log.claims();
    let taken = claims.iter().find(|c| c.claimed > 0).map(|c| c.reason.as_str());
    assert_eq!(taken, Some("heard"), "the job is taken by a claim the watch called for: {claims:?}");
    let id = std::fs::read_to_string(&id_file).expect("the enqueued id");
    let job = outbox::ops::get(&t.db, &id).await.expect("the job");
    assert_eq!(job.status, outbox::JobStatus::Completed);
}
