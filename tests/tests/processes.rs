//! Real worker processes: a worker killed with SIGKILL mid-handler (SQLite and PostgreSQL), and a claim race
//! on one SQLite file (its PostgreSQL counterpart, eight processes on 20,000 jobs, is `pg_fleet.rs`).

// The shared module also reads the begin and end marks, which these tests do not use.
#[allow(dead_code)]
mod fleet;

use std::path::PathBuf;
use std::time::Duration;

use fleet::{Runs, Spawn};
use outbox::{EnqueueOpts, JobContext, JobError, JobStatus, Worker, ops};
use outbox_tests::{Race, TestDb, conformance, fresh_db, scalar};

conformance!(a_job_of_a_killed_worker_is_rescued_and_completed_by_another, mysql);
async fn a_job_of_a_killed_worker_is_rescued_and_completed_by_another(t: TestDb) {
    let job = outbox::enqueue(&t.db, &Race { n: 1, sleep_ms: 0 }, EnqueueOpts::new()).await.expect("enqueue");
    let log = t.dir.path().join("hang.log");
    let spawn = Spawn { url: &t.url, log: &log, mode: "hang", lease_ms: 1_000, concurrency: 8, stderr: None };
    let mut child = spawn.start();
    let started = outbox_tests::eventually(Duration::from_secs(30), || {
        let log = log.clone();
        async move { std::fs::read_to_string(&log).map(|s| !s.is_empty()).unwrap_or(false) }
    })
    .await;
    assert!(started, "the child never started the job");
    // SIGKILL in the middle of the handler: no chance to release anything.
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let claimed = ops::get(&t.db, job.id()).await.expect("get");
    assert_eq!(claimed.status, JobStatus::Claimed);
    let dead_owner = claimed.locked_by.clone().expect("owner");

    let handle = Worker::builder(&t.db)
        .id("survivor")
        .poll_interval(Duration::from_millis(50))
        .rescue_interval(Duration::from_millis(100))
        .register(|_: Race, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    let completed = outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(30)).await;
    handle.shutdown().await.expect("shutdown");
    assert!(completed, "the job was not rescued and completed");
    let done = ops::get(&t.db, job.id()).await.expect("get");
    assert_eq!(done.attempts, 2);
    assert_eq!(done.locked_by.as_deref(), Some("survivor"));
    let error = done.last_error.expect("the rescue is recorded");
    assert!(error.contains("lease expired") && error.contains(&dead_owner), "{error}");
    let events: Vec<(String, Option<String>)> = ops::history(&t.db, job.id())
        .await
        .expect("history")
        .into_iter()
        .map(|e| (e.event.to_string(), e.worker))
        .collect();
    assert_eq!(
        events,
        vec![
            ("enqueued".to_owned(), None),
            ("claimed".to_owned(), Some(dead_owner.clone())),
            ("rescued".to_owned(), Some(dead_owner.clone())),
            ("claimed".to_owned(), Some("survivor".to_owned())),
            ("completed".to_owned(), Some("survivor".to_owned())),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_drain_five_thousand_jobs_exactly_once() {
    const JOBS: u64 = 5_000;
    const WORKERS: usize = 4;
    let t = fresh_db().await;
    let jobs: Vec<Race> = (0..JOBS).map(|n| Race { n, sleep_ms: n % 3 }).collect();
    for chunk in jobs.chunks(1_000) {
        outbox::enqueue_batch(&t.db, chunk, EnqueueOpts::new()).await.expect("enqueue");
    }
    let logs: Vec<PathBuf> = (0..WORKERS).map(|i| t.dir.path().join(format!("runs-{i}.log"))).collect();
    let mut children: Vec<_> = logs
        .iter()
        .map(|log| Spawn { url: &t.url, log, mode: "drain", lease_ms: 30_000, concurrency: 8, stderr: None }.start())
        .collect();
    for status in fleet::wait_all(&mut children, Duration::from_secs(300)).await {
        assert!(status.success(), "a worker process failed: {status}");
    }
    let runs = Runs::read(&logs);
    let twice = runs.twice();
    assert!(twice.is_empty(), "executed more than once: {twice:?}");
    assert_eq!(runs.by_job.len() as u64, JOBS, "runs per worker: {:?}", runs.per_log);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, JOBS as i64);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE attempts <> 1").await, 0);
    eprintln!("runs per worker process: {:?}", runs.per_log);
}
