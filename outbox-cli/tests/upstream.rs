//! A fleet of `outbox work` processes calling a loopback server that stands in for the Anthropic Messages API:
//! one 429 (then one 529) with `retry-after: 2` holds `claude_extraction` for every process for two seconds, uses
//! no attempt, and the jobs resume once the hold ends; no job claimed after the hold was written calls it meanwhile.

use std::process::{Command, Stdio};
use std::time::Duration;

use outbox::EnqueueOpts;
use outbox_fs::ClaudeExtraction;
use outbox_tests::http::{Reply, Server, reply};
use outbox_tests::{Backend, ChildProcess, TestDb, conformance, scalar};

const JOBS: usize = 24;
const ANSWER: &str = r#"{"model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}"#;

conformance!(a_429_holds_the_fleet_until_its_retry_after, mysql);
async fn a_429_holds_the_fleet_until_its_retry_after(t: TestDb) {
    upstream_says_wait(&t, 429, "rate_limit_error").await;
}

conformance!(a_529_holds_the_fleet_until_its_retry_after, mysql);
async fn a_529_holds_the_fleet_until_its_retry_after(t: TestDb) {
    upstream_says_wait(&t, 529, "overloaded_error").await;
}

async fn upstream_says_wait(t: &TestDb, status: u16, kind: &str) {
    // Each answer takes 50 ms; the fifth request is told to wait two seconds.
    let slow = |r: Reply| Reply { delay: Duration::from_millis(50), ..r };
    let mut replies: Vec<Reply> = (0..4).map(|_| slow(reply(200, ANSWER.into()))).collect();
    let body = format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"wait"}}}}"#);
    replies.push(Reply { headers: vec![("retry-after", "2")], ..reply(status, body) });
    replies.extend((0..JOBS).map(|_| slow(reply(200, ANSWER.into()))));
    let server = Server::start(replies).await;
    let jobs: Vec<ClaudeExtraction> = (0..JOBS)
        .map(|n| ClaudeExtraction::new(format!("Extract {n}."), format!("answers/{n}.md"), format!("R-{n}")))
        .collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("files");
    std::fs::create_dir(&root).expect("root");
    // Two slots each, and a fleet-wide limit of four: requests overlap, as a fleet's do.
    let mut fleet: Vec<ChildProcess> = (0..4)
        .map(|_| {
            ChildProcess::spawn(
                Command::new(env!("CARGO_BIN_EXE_outbox"))
                    .args(["work", "--anthropic-model", "m", "--concurrency", "2", "--limit", "claude_extraction=4"])
                    .arg("--database-url")
                    .arg(&t.url)
                    .arg("--root")
                    .arg(&root)
                    .env_remove("OUTBOX_DATABASE_URL")
                    .env("ANTHROPIC_API_KEY", "test-key")
                    .env("ANTHROPIC_BASE_URL", &server.base)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )
        })
        .collect();
    let done = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'";
    let all = i64::try_from(JOBS).expect("jobs");
    assert!(outbox_tests::wait_scalar(&t.db, done, all, Duration::from_secs(60)).await, "every job completed");
    for child in &mut fleet {
        let _ = child.kill();
        let _ = child.wait();
    }
    let seen = server.seen();
    assert_eq!(seen.len(), JOBS + 1, "one request per job, and the one told to wait");
    let told = seen[4].at;
    // A request that arrives during the hold must be of a job claimed before the hold was written: one already on
    // its way (under load, its request may reach the server well after the answer that set the hold). A job claimed
    // later would mean the hold did not hold the fleet. Times are the database's, in ms: the hold is written with the
    // held job's release, and a claim statement under way as it commits may end a few ms after it.
    let ms = |column: &str| match t.backend {
        Backend::Sqlite | Backend::MySql => column.to_owned(),
        Backend::Postgres => format!("(EXTRACT(EPOCH FROM {column}) * 1000)::int8"),
    };
    let held_at = scalar(&t.db, &format!("SELECT {} FROM outbox_job_events WHERE event = 'released'", ms("at"))).await;
    let payload = match t.backend {
        Backend::Sqlite | Backend::MySql => "payload",
        Backend::Postgres => "payload::text",
    };
    let mut during = Vec::new();
    for s in &seen[5..] {
        let after_told = s.at.saturating_duration_since(told);
        if after_told <= Duration::from_millis(100) || after_told >= Duration::from_millis(1_950) {
            continue;
        }
        let n = (0..JOBS).find(|n| s.body.contains(&format!("Extract {n}."))).expect("a request of one of the jobs");
        let claimed = format!("SELECT {} FROM outbox_jobs WHERE {payload} LIKE '%Extract {n}.%'", ms("claimed_at"));
        let claimed_at = scalar(&t.db, &claimed).await;
        if claimed_at > held_at + 50 {
            during.push((after_told, n, claimed_at - held_at));
        }
    }
    assert!(
        during.is_empty(),
        "jobs claimed after the hold was written sent requests while it held (after the answer, job, ms claimed after \
         the hold): {during:?}"
    );
    let after = seen[5..].iter().filter(|s| s.at >= told + Duration::from_millis(1_950)).count();
    assert!(after > 0, "the jobs resumed after the hold");
    let attempts = scalar(&t.db, "SELECT MAX(attempts) FROM outbox_jobs").await;
    assert_eq!(attempts, 1, "the held job's attempt was given back");
    let released = scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events WHERE event = 'released'").await;
    assert_eq!(released, 1, "the held job was given back once");
}
