//! Real worker processes on one SQLite file: a worker killed with SIGKILL mid-handler, and a claim race.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use outbox_core::{EnqueueOpts, JobContext, JobError, JobStatus, Worker, ops};
use outbox_tests::{Race, fresh_db, scalar};

fn spawn_worker(db: &Path, log: &Path, mode: &str, lease_ms: u64) -> Child {
    Command::new(env!("CARGO_BIN_EXE_outbox-test-worker"))
        .arg(db)
        .arg(log)
        .arg(mode)
        .arg(lease_ms.to_string())
        .spawn()
        .expect("spawn worker process")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_a_killed_worker_is_rescued_and_completed_by_another() {
    let t = fresh_db().await;
    let job = outbox_core::enqueue(&t.db, &Race { n: 1, sleep_ms: 0 }, EnqueueOpts::new()).await.expect("enqueue");
    let log = t.dir.path().join("hang.log");
    let mut child = spawn_worker(&t.path, &log, "hang", 1_000);
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
    let events: Vec<(String, Option<String>)> =
        ops::history(&t.db, job.id()).await.expect("history").into_iter().map(|e| (e.event, e.worker)).collect();
    assert_eq!(
        events,
        vec![
            ("enqueued".to_owned(), None),
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
        outbox_core::enqueue_batch(&t.db, chunk, EnqueueOpts::new()).await.expect("enqueue");
    }
    let logs: Vec<_> = (0..WORKERS).map(|i| t.dir.path().join(format!("runs-{i}.log"))).collect();
    let mut children: Vec<Child> = logs.iter().map(|log| spawn_worker(&t.path, log, "drain", 30_000)).collect();
    for child in &mut children {
        let status = child.wait().expect("wait");
        assert!(status.success(), "a worker process failed: {status}");
    }
    let mut runs: HashMap<String, usize> = HashMap::new();
    let mut per_worker = Vec::new();
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        per_worker.push(text.lines().count());
        for line in text.lines() {
            let id = line.split_whitespace().next().expect("job id").to_owned();
            *runs.entry(id).or_default() += 1;
        }
    }
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "executed more than once: {twice:?}");
    assert_eq!(runs.len() as u64, JOBS, "runs per worker: {per_worker:?}");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, JOBS as i64);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE attempts <> 1").await, 0);
    eprintln!("runs per worker process: {per_worker:?}");
}
