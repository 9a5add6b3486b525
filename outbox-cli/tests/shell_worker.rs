//! The guide's shell worker (`examples/shell-worker.sh`), run as three processes, drains jobs that a fourth
//! enqueues: none lost, none run twice but the one whose worker was killed with SIGKILL mid-job, which is
//! rescued after its lease and completed by another; a `complete` for the killed worker's stale attempt is
//! refused with exit code 6 and changes nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use outbox_tests::{ChildProcess, Signal, eventually};
use sea_orm::ConnectionTrait;
use serde_json::Value;

const JOBS: usize = 300;

/// `outbox ARGS` on the database `db`, its output piped.
fn command(db: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    cmd.env_remove("OUTBOX_LOG")
        .env_remove("RUST_LOG")
        .env("OUTBOX_DATABASE_URL", db)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

fn outbox(db: &Path, args: &[&str]) -> Output {
    command(db, args).output().expect("run outbox")
}

fn ok(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "outbox failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn job(db: &Path, id: &str) -> Value {
    serde_json::from_str(&ok(outbox(db, &["get", id, "--format", "json"]))).expect("job json")
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/shell-worker.sh")
}

/// The job command: records each run (`n` per line), hangs on the first run of a `hang` job, prints its
/// output.
const WORK: &str = r#"#!/usr/bin/env bash
payload=$(cat)
n=$(jq -r .n <<<"$payload")
echo "$n" >> "$RUNS/runs.log"
if [[ $(jq -r '.hang // false' <<<"$payload") == true ]] && mkdir "$RUNS/hung" 2>/dev/null; then
  touch "$RUNS/hanging"
  sleep 600
fi
echo "{\"n\": $n}"
"#;

#[test]
fn the_guides_shell_worker_drains_jobs_from_three_processes_and_survives_a_sigkill() {
    let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guides/remote-and-shell-workers.md");
    let guide = std::fs::read_to_string(guide).expect("guide");
    let text = std::fs::read_to_string(script()).expect("script");
    assert!(
        guide.contains(&text),
        "docs/guides/remote-and-shell-workers.md must show examples/shell-worker.sh as it is"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("queue.db");
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).expect("runs dir");
    let work = dir.path().join("work.sh");
    std::fs::write(&work, WORK).expect("work script");
    ok(Command::new("chmod").arg("+x").arg(&work).output().expect("chmod"));
    ok(outbox(&db, &["migrate"]));
    let schema = r#"{"type": "object", "properties": {"n": {"type": "integer"}, "hang": {"type": "boolean"}}, "required": ["n"]}"#;
    ok(outbox(&db, &["define-kind", "echo", "--schema", schema]));

    let bin_dir = Path::new(env!("CARGO_BIN_EXE_outbox")).parent().expect("bin dir").to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let worker = || {
        ChildProcess::spawn(
            Command::new("bash")
                .arg(script())
                .arg("echo")
                .arg(&work)
                .env("PATH", &path)
                .env("OUTBOX_DATABASE_URL", &db)
                .env("OUTBOX_LEASE", "10s")
                .env("OUTBOX_HEARTBEAT", "2")
                .env("RUNS", &runs)
                .env_remove("OUTBOX_LOG")
                .env_remove("RUST_LOG")
                .stdout(std::process::Stdio::null()),
        )
    };
    let workers: Vec<ChildProcess> = (0..3).map(|_| worker()).collect();

    // One job hangs on its first run; its worker is killed with SIGKILL while it does.
    let hang: Value = serde_json::from_str(&ok(outbox(
        &db,
        &["enqueue", "echo", "--payload", r#"{"n": 0, "hang": true}"#, "--format", "json"],
    )))
    .expect("enqueue json");
    let hang_id = hang["id"].as_str().expect("id").to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !runs.join("hanging").exists() {
        assert!(std::time::Instant::now() < deadline, "no worker started the hanging job");
        std::thread::sleep(Duration::from_millis(20));
    }
    let claimed = job(&db, &hang_id);
    assert_eq!(claimed["job"]["status"], "claimed", "{claimed}");
    let owner = claimed["job"]["locked_by"].as_str().expect("owner").to_owned();
    let pid: u32 = owner.rsplit('-').next().and_then(|p| p.parse().ok()).expect("pid in the worker name");
    let killed = workers.iter().find(|w| w.id() == pid).unwrap_or_else(|| panic!("{owner} is none of the workers"));
    // Not reaped until the end: its heartbeat must stop although the dead shell lingers as a zombie.
    killed.signal(Signal::KILL);

    // A fourth process enqueues the rest, one command each.
    let enqueue = format!(
        "for i in $(seq 1 {JOBS}); do outbox enqueue echo --payload \"{{\\\"n\\\": $i}}\" >/dev/null || exit 1; done"
    );
    let out = Command::new("bash").args(["-c", &enqueue]).env("PATH", &path).env("OUTBOX_DATABASE_URL", &db).output();
    ok(out.expect("run the enqueuing process"));

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let url = outbox_tests::sqlite_url(&db);
    let conn = rt.block_on(outbox::connect(&url)).expect("connect");
    let count = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'";
    let drained = rt.block_on(eventually(Duration::from_secs(180), || async {
        let stmt = sea_orm::Statement::from_string(sea_orm::DbBackend::Sqlite, count);
        let row = conn.query_one_raw(stmt).await.expect("count").expect("a row");
        row.try_get_by_index::<i64>(0).expect("count") == JOBS as i64 + 1
    }));
    let runs_log = std::fs::read_to_string(runs.join("runs.log")).expect("runs log");
    assert!(drained, "not every job completed; runs: {}", runs_log.lines().count());

    // Every job ran exactly once, the hanging one twice (its first run was killed with its worker).
    let mut ran: HashMap<u64, usize> = HashMap::new();
    for line in runs_log.lines() {
        *ran.entry(line.trim().parse().expect("n")).or_default() += 1;
    }
    assert_eq!(ran.len(), JOBS + 1, "jobs that never ran");
    let twice: Vec<_> = ran.iter().filter(|(n, c)| **c != 1 && **n != 0).collect();
    assert!(twice.is_empty(), "jobs run more than once: {twice:?}");
    assert_eq!(ran[&0], 2, "the hanging job ran {} times", ran[&0]);

    // The rescued job was completed by another worker in its second attempt; the killed worker's stale
    // attempt is refused and changes nothing.
    let done = job(&db, &hang_id);
    assert_eq!(done["job"]["status"], "completed", "{done}");
    assert_eq!(done["job"]["attempts"], 2, "{done}");
    assert_ne!(done["job"]["locked_by"].as_str(), Some(owner.as_str()), "{done}");
    let stale = outbox(&db, &["complete", &hang_id, "--worker", &owner, "--run", "1", "--output", r#"{"late": 1}"#]);
    assert_eq!(stale.status.code(), Some(6), "{}", String::from_utf8_lossy(&stale.stderr));
    assert!(String::from_utf8_lossy(&stale.stderr).contains("nothing was changed"));
    assert_eq!(job(&db, &hang_id)["job"], done["job"], "the stale complete changed the job");
    drop(workers);
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn claim_complete_fail_extend_snooze_and_enqueue_wait_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("queue.db");
    ok(outbox(&db, &["migrate"]));
    let no_kind = outbox(&db, &["claim", "--worker", "w"]);
    assert_eq!(code(&no_kind), Some(2), "{}", stderr(&no_kind));
    assert!(stderr(&no_kind).contains("define-kind"), "{}", stderr(&no_kind));
    ok(outbox(&db, &["define-kind", "task", "--schema", r#"{"type": "object"}"#, "--max-attempts", "2"]));
    let bad_schema = outbox(&db, &["define-kind", "other", "--schema", r#"{"type": 7}"#]);
    assert_eq!(code(&bad_schema), Some(2), "{}", stderr(&bad_schema));

    // An empty queue: no output, exit 0, at once or after the wait; a waiting claim writes nothing while it
    // waits (its registry entry is not renewed, or it would wake itself through its own commits).
    assert_eq!(ok(outbox(&db, &["claim", "--worker", "w"])), "");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let conn = rt.block_on(outbox::connect(&outbox_tests::sqlite_url(&db))).expect("connect");
    let seen = |id: &str| {
        let workers = rt.block_on(outbox::ops::workers(&conn)).expect("workers");
        workers.iter().find(|w| w.id == id).map(|w| w.last_seen_at)
    };
    let idle = ChildProcess::spawn(&mut command(&db, &["claim", "--worker", "idle", "--wait", "3s"]));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let first = loop {
        if let Some(at) = seen("idle") {
            break at;
        }
        assert!(std::time::Instant::now() < deadline, "the waiting claim never registered");
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = idle.output_within(Duration::from_secs(30));
    assert!(out.status.success() && out.stdout.is_empty(), "{}", stderr(&out));
    assert_eq!(seen("idle"), Some(first), "the waiting claim wrote its registry entry again while it waited");
    for (args, named) in [
        (vec!["claim"], "--worker"),
        (vec!["claim", "--worker", "w", "--lease", "0s"], "lease"),
        (vec!["claim", "--worker", "w", "--wait", "6m"], "wait"),
        (vec!["claim", "--worker", "w", "--limit", "0"], "limit"),
        (vec!["claim", "--worker", "w", "--wait", "soon"], "soon"),
    ] {
        let out = outbox(&db, &args);
        assert_eq!(code(&out), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(named), "{args:?}: {}", stderr(&out));
    }

    let enqueue = |n: u32| {
        let out = ok(outbox(&db, &["enqueue", "task", "--payload", &format!(r#"{{"n": {n}}}"#), "--format", "json"]));
        serde_json::from_str::<Value>(&out).expect("json")["id"].as_str().expect("id").to_owned()
    };
    let claim = || -> Value {
        let out = ok(outbox(&db, &["claim", "--worker", "w", "--lease", "1m"]));
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("one job as JSON ({e}): {out}"))
    };
    let claimed_ref = |job: &Value| (job["id"].as_str().expect("id").to_owned(), job["run"].to_string());

    // fail with attempts left: pending again, after the given delay.
    let id = enqueue(1);
    let job = claim();
    assert_eq!(
        (job["id"].as_str(), job["worker"].as_str(), job["attempt"].as_i64()),
        (Some(id.as_str()), Some("w"), Some(1))
    );
    let (id, run) = claimed_ref(&job);
    let beat = ok(outbox(&db, &["extend", &id, "--worker", "w", "--run", &run, "--by", "10m"]));
    assert!(beat.contains("leased until"), "{beat}");
    let failed =
        ok(outbox(&db, &["fail", &id, "--worker", "w", "--run", &run, "--reason", "disk full", "--retry-in", "1h"]));
    assert!(failed.contains("pending, runs again at"), "{failed}");
    let record = job_of(&db, &id);
    assert_eq!((record["status"].as_str(), record["last_error"].as_str()), (Some("pending"), Some("disk full")));
    // The same claim cannot end twice.
    let again = outbox(&db, &["complete", &id, "--worker", "w", "--run", &run]);
    assert_eq!(code(&again), Some(6), "{}", stderr(&again));

    // fail --permanent: failed at once; snooze gives the attempt back.
    let id = enqueue(2);
    let (cid, run) = claimed_ref(&claim());
    assert_eq!(cid, id);
    ok(outbox(&db, &["fail", &id, "--worker", "w", "--run", &run, "--permanent", "--reason", "corrupt"]));
    assert_eq!(job_of(&db, &id)["status"], "failed");
    let id = enqueue(3);
    let (_, run) = claimed_ref(&claim());
    ok(outbox(&db, &["snooze", &id, "--worker", "w", "--run", &run, "--delay", "1h"]));
    let record = job_of(&db, &id);
    assert_eq!((record["status"].as_str(), record["attempts"].as_i64()), (Some("pending"), Some(0)));

    // A claim that waits returns the job another process enqueues meanwhile; `enqueue --wait` prints the job
    // as it ended, and exits 7 when it failed.
    let waiting = ChildProcess::spawn(&mut command(&db, &["claim", "--worker", "w2", "--wait", "60s"]));
    let registered = rt.block_on(eventually(Duration::from_secs(30), || async {
        outbox::ops::workers(&conn).await.expect("workers").iter().any(|w| w.id == "w2")
    }));
    assert!(registered, "the waiting claim never registered its worker");
    let enqueue_args = ["enqueue", "task", "--payload", r#"{"n": 4}"#, "--wait", "60s", "--format", "json"];
    let waited_for = ChildProcess::spawn(&mut command(&db, &enqueue_args));
    let out = waiting.output_within(Duration::from_secs(60));
    let job: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect("the claimed job");
    assert_eq!(job["payload"]["n"], 4);
    let (id, run) = claimed_ref(&job);
    ok(outbox(&db, &["fail", &id, "--worker", "w2", "--run", &run, "--permanent", "--reason", "no"]));
    let out = waited_for.output_within(Duration::from_secs(60));
    assert_eq!(code(&out), Some(7), "{}", stderr(&out));
    let ended: Value = serde_json::from_str(&String::from_utf8_lossy(&out.stdout)).expect("the ended job");
    assert_eq!((ended["id"].as_str(), ended["status"].as_str()), (Some(id.as_str()), Some("failed")));
}

fn job_of(db: &Path, id: &str) -> Value {
    job(db, id)["job"].clone()
}

/// `outbox claim --limit 10 | head -1` on a queue of ten jobs: `head` takes one; the nine it never read are
/// pending again once the claim exits, their attempts unused. A claim stopped by Ctrl-C while it waits exits
/// 130 having claimed nothing.
#[test]
fn a_claim_piped_into_head_gives_back_at_once_what_head_did_not_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("queue.db");
    ok(outbox(&db, &["migrate"]));
    ok(outbox(&db, &["define-kind", "task", "--schema", r#"{"type": "object"}"#]));
    for n in 0..10 {
        ok(outbox(&db, &["enqueue", "task", "--payload", &format!(r#"{{"n": {n}}}"#)]));
    }
    let pipeline = format!(
        "set -o pipefail; '{}' claim --worker w --limit 10 --lease 10m | head -1",
        env!("CARGO_BIN_EXE_outbox")
    );
    let out = Command::new("bash")
        .args(["-c", &pipeline])
        .env_remove("OUTBOX_LOG")
        .env_remove("RUST_LOG")
        .env("OUTBOX_DATABASE_URL", &db)
        .output()
        .expect("run the pipeline");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the pipeline failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let taken: Value = serde_json::from_str(lines[0]).expect("a claimed job");

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let conn = rt.block_on(outbox::connect(&outbox_tests::sqlite_url(&db))).expect("connect");
    let count = |sql: &str| rt.block_on(outbox_tests::scalar(&conn, sql));
    let claimed = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed'";
    assert_eq!(count(claimed), 1, "only the job head read is claimed");
    assert_eq!(job_of(&db, taken["id"].as_str().expect("id"))["status"], "claimed");
    assert_eq!(count("SELECT COUNT(*) FROM outbox_jobs WHERE status = 'pending' AND attempts = 0"), 9);

    // Ctrl-C while a claim waits (for a kind with no job): it stops, exits 130, and leaves nothing claimed.
    ok(outbox(&db, &["define-kind", "other", "--schema", r#"{"type": "object"}"#]));
    let waiting =
        ChildProcess::spawn(&mut command(&db, &["claim", "--worker", "ctrl-c", "--kind", "other", "--wait", "60s"]));
    let registered = rt.block_on(eventually(Duration::from_secs(30), || async {
        outbox::ops::workers(&conn).await.expect("workers").iter().any(|w| w.id == "ctrl-c")
    }));
    assert!(registered, "the waiting claim never registered its worker");
    waiting.signal(Signal::INT);
    let out = waiting.output_within(Duration::from_secs(30));
    assert_eq!(code(&out), Some(130), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(count("SELECT COUNT(*) FROM outbox_jobs WHERE locked_by = 'ctrl-c'"), 0);
    assert_eq!(count(claimed), 1, "only the job head read is claimed");
}
