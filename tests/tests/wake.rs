//! Commits of other processes wake this one at once on SQLite: a program that is not outbox (Python's
//! `sqlite3` module) makes a job due, and a worker whose poll would not come for an hour runs it.
//!
//! This file holds the only test of its binary, so no enqueue of another test in the same process can wake the
//! worker in its place.

use std::time::Duration;

use outbox::{EnqueueOpts, JobError, Retention, Worker};
use outbox_tests::{ClaimLog, Probe, sqlite_url};

/// On a current-thread runtime, so that the claim log hears the worker's claims.
#[tokio::test(flavor = "current_thread")]
async fn a_commit_by_another_program_wakes_an_idle_worker_at_once() {
    let log = ClaimLog::default();
    let _recording = log.record();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("queue.db");
    let db = outbox::connect(&sqlite_url(&path)).await.expect("connect");
    outbox::migrate(&db).await.expect("migrate");
    // Not due for an hour: the worker's first claim leaves it alone.
    let job = outbox::enqueue(&db, &Probe { n: 1 }, EnqueueOpts::new().delay(Duration::from_secs(3_600)))
        .await
        .expect("enqueue");
    let (ran_tx, mut ran) = tokio::sync::mpsc::unbounded_channel();
    let hour = Duration::from_secs(3_600);
    // Nothing of this process writes to the database once the worker has registered: its registry refresh
    // (heard by the same watch, so its claim says `heard` too) is an hour away, and so are its poll, its rescue
    // (which writes only expired claims) and its retention.
    let worker = Worker::builder(&db)
        .poll_interval(hour)
        .presence_interval(hour)
        .rescue_interval(hour)
        .retention(Retention::off())
        .register(move |p: Probe, _| {
            let ran_tx = ran_tx.clone();
            async move {
                let _ = ran_tx.send(p.n);
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("worker")
        .start();
    // Its first claim has run once it is in the registry; only a wake-up makes it claim again.
    let registered = outbox_tests::eventually(Duration::from_secs(30), || async {
        !outbox::ops::workers(&db).await.expect("workers").is_empty() && !log.claims().is_empty()
    })
    .await;
    assert!(registered, "the worker never registered");
    assert!(ran.try_recv().is_err(), "the job ran before it was due");

    let script = "import sqlite3, sys\n\
                  c = sqlite3.connect(sys.argv[1])\n\
                  c.execute('UPDATE outbox_jobs SET run_at = 0, scheduled = 0 WHERE id = ?', (sys.argv[2],))\n\
                  c.commit()\n";
    // Awaited, not blocking: the worker runs on this thread meanwhile.
    let out = tokio::process::Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .arg(job.id())
        .output()
        .await
        .expect("run python3");
    assert!(out.status.success(), "python3 failed: {}", String::from_utf8_lossy(&out.stderr));

    // A generous bound: nothing but the watch's wake-up can run the job before the hour is up.
    let n = tokio::time::timeout(Duration::from_secs(30), ran.recv()).await;
    assert_eq!(n.expect("the worker was not woken by the other program's commit"), Some(1));
    worker.shutdown().await.expect("shutdown");
    let claims = log.claims();
    let taken = claims.iter().find(|c| c.claimed > 0).map(|c| c.reason.as_str());
    assert_eq!(taken, Some("heard"), "the job is taken by a claim the watch called for: {claims:?}");
}
