//! Worker processes on MariaDB: a job of a worker killed with SIGKILL mid-handler is rescued and completed by
//! another, and 20,000 jobs are drained by four processes SIGKILLed and restarted in turn every 300 ms, with 2 s
//! leases: none lost, and none run again but those whose process was killed while running them. (Sequences, which
//! the engine does not take yet, are not part of it.)

// The shared module also reads the begin and end marks, which these tests do not use.
#[allow(dead_code)]
mod fleet;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use fleet::{Runs, Spawn};
use outbox::{EnqueueOpts, JobContext, JobError, JobEventKind, JobStatus, Worker, ops};
use outbox_tests::{Race, TestMariaDb, scalar};

/// A migrated database of the test's own on the MariaDB server, and a directory for its logs.
async fn mariadb(test: &str) -> Option<(TestMariaDb, tempfile::TempDir)> {
    let t = TestMariaDb::fresh(test).await?;
    outbox::migrate(&t.db).await.expect("migrate");
    Some((t, tempfile::tempdir().expect("a temp dir")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_a_killed_worker_is_rescued_and_completed_by_another_on_mariadb() {
    let Some((t, dir)) = mariadb("killed worker").await else { return };
    let job = outbox::enqueue(&t.db, &Race { n: 1, sleep_ms: 0 }, EnqueueOpts::new()).await.expect("enqueue");
    let log = dir.path().join("hang.log");
    let mut child =
        Spawn { url: &t.url, log: &log, mode: "hang", lease_ms: 1_000, concurrency: 8, stderr: None }.start();
    let started = outbox_tests::eventually(Duration::from_secs(30), || {
        let log = log.clone();
        async move { std::fs::read_to_string(&log).map(|s| !s.is_empty()).unwrap_or(false) }
    })
    .await;
    assert!(started, "the child never started the job");
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
    let finished = outbox_tests::eventually(Duration::from_secs(30), || async {
        ops::get(&t.db, job.id()).await.is_ok_and(|j| j.status == JobStatus::Completed)
    })
    .await;
    handle.shutdown().await.expect("shutdown");
    assert!(finished, "the job was never completed by the survivor");
    let done = ops::get(&t.db, job.id()).await.expect("get");
    assert_eq!((done.status, done.attempts), (JobStatus::Completed, 2));
    let history = ops::history(&t.db, job.id()).await.expect("history");
    let rescued = history.iter().find(|e| e.event == JobEventKind::Rescued).expect("a rescued event");
    let error = rescued.error.clone().unwrap_or_default();
    assert!(error.contains("lease expired") && error.contains(&dead_owner), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_killed_every_300_ms_run_twenty_thousand_jobs_with_none_lost_on_mariadb() {
    const JOBS: u64 = 20_000;
    const WORKERS: usize = 4;
    let Some((t, dir)) = mariadb("fleet").await else { return };
    let jobs: Vec<Race> = (0..JOBS).map(|n| Race { n, sleep_ms: n % 3 }).collect();
    for chunk in jobs.chunks(1_000) {
        outbox::enqueue_batch(&t.db, chunk, EnqueueOpts::new()).await.expect("enqueue");
    }
    // One log per process: a process killed while writing a line leaves it cut short, as its log's last line.
    let mut logs: Vec<PathBuf> = Vec::new();
    let spawn = |logs: &mut Vec<PathBuf>| {
        let log = dir.path().join(format!("runs-{}.log", logs.len()));
        let child =
            Spawn { url: &t.url, log: &log, mode: "serve", lease_ms: 2_000, concurrency: 8, stderr: None }.start();
        logs.push(log);
        child
    };
    let mut children: Vec<_> = (0..WORKERS).map(|_| spawn(&mut logs)).collect();
    let mut kills: Vec<u32> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let mut victim = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let done = scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await;
        if done == JOBS as i64 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "only {done} of {JOBS} jobs completed in time");
        let child = &mut children[victim];
        kills.push(child.id());
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        outbox_tests::assert_every_claim_rescuable(&t.db, false, "after a SIGKILL").await;
        *child = spawn(&mut logs);
        victim = (victim + 1) % WORKERS;
    }
    for status in fleet::wait_all(&mut children, Duration::from_secs(120)).await {
        assert!(status.success(), "a worker process failed: {status}");
    }
    // 0 lost.
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, JOBS as i64);
    let runs = Runs::read_after_kills(&logs, &kills);
    assert_eq!(runs.by_job.len() as u64, JOBS);
    // A job run more than once was running in a process that was killed, every run but its last, and its
    // history says it was rescued.
    let killed: HashMap<u32, ()> = kills.iter().map(|pid| (*pid, ())).collect();
    let twice = runs.twice();
    for (id, job_runs) in &twice {
        let (last, earlier) = job_runs.split_last().expect("runs");
        assert!(
            earlier.iter().all(|(_, pid)| killed.contains_key(pid) && *pid != last.1),
            "job {id} ran again though its earlier run's process was not killed: {job_runs:?}"
        );
        let history = ops::history(&t.db, id).await.expect("history");
        assert!(history.iter().any(|e| e.event == JobEventKind::Rescued), "job {id}: {history:?}");
    }
    eprintln!(
        "{WORKERS} processes on MariaDB, {} kills, {} runs for {JOBS} jobs, {} jobs run again after a kill",
        kills.len(),
        runs.by_job.values().map(Vec::len).sum::<usize>(),
        twice.len()
    );
}
