//! A remote worker written in Python (standard library only) drains jobs over HTTP while an in-process
//! worker drains others, on every backend: nothing lost, nothing completed twice, and a completion with a
//! stale claim answers 409 and changes nothing.

use std::collections::HashSet;
use std::time::Duration;

use outbox_core::{EnqueueOpts, JobError, JobStatus, Worker, ops};
use outbox_server::{Role, ServerOpts, Token};
use outbox_tests::{GroupGuard, Probe, Race, Served, TestDb, conformance, scalar, unavailable};

const JOBS: u64 = 1_000;
const WORK_TOKEN: &str = "work-token-for-the-python-worker";

conformance!(a_python_worker_drains_jobs_over_http_beside_an_in_process_worker);
async fn a_python_worker_drains_jobs_over_http_beside_an_in_process_worker(t: TestDb) {
    if std::process::Command::new("python3").arg("--version").output().is_err() {
        unavailable("a_python_worker_drains_jobs_over_http_beside_an_in_process_worker", "python3 is not installed");
        return;
    }
    let opts = ServerOpts::new().token(Token::new(Role::Work, WORK_TOKEN).expect("token"));
    let served = Served::start(&t.db, opts).await;
    let remote: Vec<Race> = (1..=JOBS).map(|n| Race { n, sleep_ms: 0 }).collect();
    outbox_core::enqueue_batch(&t.db, &remote, EnqueueOpts::new()).await.expect("enqueue");
    let local: Vec<Probe> = (1..=JOBS).map(|n| Probe { n }).collect();
    outbox_core::enqueue_batch(&t.db, &local, EnqueueOpts::new()).await.expect("enqueue");

    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("python-runs.log");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/remote_worker.py");
    let python = tokio::process::Command::new("python3")
        .args([script, &served.base, WORK_TOKEN, "python-1", "race", log.to_str().expect("utf-8 path")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("run python3");
    // Kills the Python worker's process group if the test fails before it exits.
    let _group = GroupGuard::new(python.id().expect("the Python worker's pid"));
    let python = tokio::time::timeout(Duration::from_secs(300), python.wait_with_output());
    let in_process = Worker::builder(&t.db)
        .concurrency(8)
        .poll_interval(Duration::from_millis(20))
        .register(|_: Probe, _| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .drain();
    let (python, drained) = tokio::join!(python, in_process);
    drained.expect("drain");
    let python = python.expect("the Python worker did not finish within 300 s").expect("run python3");
    assert!(python.status.success(), "{}", String::from_utf8_lossy(&python.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&python.stdout).expect("summary");
    assert_eq!(summary["completed"], JOBS, "{summary}");
    assert_eq!((summary["stale_status"].as_u64(), summary["stale_code"].as_str()), (Some(409), Some("stale_claim")));

    // Counted from the run log, not the table: each remote job ran once.
    let runs = std::fs::read_to_string(&log).expect("run log");
    let ids: Vec<&str> = runs.lines().filter_map(|l| l.split(' ').next()).collect();
    assert_eq!(ids.len(), JOBS as usize, "runs");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), JOBS as usize, "no job ran twice");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 2 * JOBS as i64);
    assert_eq!(
        scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'race' AND attempts = 1").await,
        JOBS as i64
    );
    // The stale completion changed nothing: the job kept the output of its one completion.
    let first = ops::get(&t.db, ids[0]).await.expect("get");
    assert_eq!(first.status, JobStatus::Completed);
    assert_eq!(first.output.as_ref().and_then(|o| o["by"].as_str()), Some("python"));
    assert_eq!(first.locked_by.as_deref(), Some("python-1"));
}
