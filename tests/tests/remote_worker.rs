//! A remote worker written in Python (standard library only) drains jobs over HTTP while an in-process
//! worker drains others, on every backend: nothing lost, nothing completed twice, and a completion with a
//! stale claim answers 409 and changes nothing.

use std::collections::HashSet;
use std::time::Duration;

use outbox::{EnqueueOpts, JobError, JobStatus, Worker, ops};
use outbox_server::{Role, ServerOpts, Token};
use outbox_tests::{GroupGuard, Probe, Race, Served, TestDb, conformance, scalar, unavailable};

const JOBS: u64 = 1_000;
const WORK_TOKEN: &str = "work-token-for-the-python-worker";

conformance!(a_python_worker_drains_jobs_over_http_beside_an_in_process_worker, mysql);
async fn a_python_worker_drains_jobs_over_http_beside_an_in_process_worker(t: TestDb) {
    if std::process::Command::new("python3").arg("--version").output().is_err() {
        unavailable("a_python_worker_drains_jobs_over_http_beside_an_in_process_worker", "python3 is not installed");
        return;
    }
    let opts = ServerOpts::new().token(Token::new(Role::Work, WORK_TOKEN).expect("token"));
    let served = Served::start(&t.db, opts).await;
    let remote: Vec<Race> = (1..=JOBS).map(|n| Race { n, sleep_ms: 0 }).collect();
    outbox::enqueue_batch(&t.db, &remote, EnqueueOpts::new()).await.expect("enqueue");
    let local: Vec<Probe> = (1..=JOBS).map(|n| Probe { n }).collect();
    outbox::enqueue_batch(&t.db, &local, EnqueueOpts::new()).await.expect("enqueue");

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_client_went_away_gives_its_jobs_back_on_postgres() {
    let test = "a_claim_whose_client_went_away_gives_its_jobs_back_on_postgres";
    outbox_tests::run(outbox_tests::Backend::Postgres, test, claim_of_a_client_gone).await;
}

/// A long-poll claim's client goes away while the claim's statement is in the database: the claim runs to its
/// end in a task of its own, and the job it took is given back at once, its attempt unused, instead of staying
/// claimed by no one for its lease. The statement is held in the database by a lock on the table it writes its
/// feed row into, so that the client leaves while it runs.
async fn claim_of_a_client_gone(t: TestDb) {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let served = Served::start(&t.db, ServerOpts::new()).await;
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let blocker = t.connect().await;
    let lock = blocker.begin().await.expect("begin");
    lock.execute_unprepared("LOCK TABLE outbox_job_events IN SHARE MODE").await.expect("lock the feed");

    let mut client = tokio::net::TcpStream::connect(served.addr).await.expect("connect");
    let body = r#"{"worker": "gone", "kinds": ["probe"], "lease": "10m", "wait": "20s"}"#;
    let request = format!(
        "POST /api/work/claim HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        served.addr,
        body.len()
    );
    client.write_all(request.as_bytes()).await.expect("send the claim");
    // The claim statement (its text as the server keeps it, cut at 1 kB) waits for the lock.
    let waiting = "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
                   AND wait_event_type = 'Lock' AND query LIKE 'WITH c AS MATERIALIZED (SELECT ctid FROM outbox_jobs%'";
    let held = outbox_tests::eventually(Duration::from_secs(30), || async { scalar(&t.db, waiting).await > 0 }).await;
    assert!(held, "the claim's statement never waited for the lock");

    // The client closes its side; the server reads that, drops the request and closes the connection.
    client.shutdown().await.expect("close the client's side");
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut answer)).await;
    assert!(closed.is_ok(), "the server kept serving a request whose client went away");
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    let let_go = std::time::Instant::now();
    lock.rollback().await.expect("let the claim go on");

    let claimed = || async {
        ops::history(&t.db, job.id()).await.expect("history").iter().any(|e| e.event == outbox::JobEventKind::Claimed)
    };
    assert!(outbox_tests::eventually(Duration::from_secs(30), claimed).await, "the claim's statement never ran");
    let back = || async {
        let j = ops::get(&t.db, job.id()).await.expect("get");
        j.status == JobStatus::Pending && j.attempts == 0
    };
    // The lease is ten minutes: a job left claimed would not be back within this bound.
    assert!(
        outbox_tests::eventually(Duration::from_secs(30), back).await,
        "the job a gone client's claim took stays claimed: {:?}",
        ops::get(&t.db, job.id()).await.expect("get")
    );
    eprintln!("the job was pending again {:?} after the claim's statement was let go", let_go.elapsed());
    blocker.close().await.expect("close");
}
