//! The real `outbox` binary against real SQLite files, and against a PostgreSQL schema.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use outbox::{EnqueueOpts, Worker};
use outbox_tests::{ChildProcess, Keyed, Probe, Signal, eventually, exec};
use serde_json::{Value, json};

/// What one run of the binary left.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout))
    }

    /// The one-line error, checked to be one line naming `needle`.
    fn error_naming(&self, needle: &str) -> &str {
        let line = self.stderr.trim_end();
        assert!(!line.contains('\n'), "the error is one line: {line}");
        assert!(line.starts_with("error: ") && line.contains(needle), "the error names `{needle}`: {line}");
        assert!(line.contains("(hint: "), "the error carries a hint: {line}");
        line
    }
}

fn output(out: Output) -> Run {
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// SIGTERM to a worker, then how it exited and what it wrote (it may finish running jobs first).
fn stop(worker: ChildProcess) -> Run {
    worker.signal(Signal::TERM);
    output(worker.output_within(Duration::from_secs(60)))
}

/// A temp dir with a database path and a root directory for file jobs.
struct Env {
    dir: tempfile::TempDir,
    db: PathBuf,
    root: PathBuf,
    /// The database URL passed instead of `db`'s path (PostgreSQL).
    url: Option<String>,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("queue.db");
        let root = dir.path().join("files");
        std::fs::create_dir(&root).expect("root");
        Env { dir, db, root, url: None }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
        cmd.current_dir(self.dir.path())
            .env_remove("OUTBOX_DATABASE_URL")
            .env_remove("OUTBOX_LOG")
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR");
        if !args.contains(&"--database-url") {
            match &self.url {
                Some(url) => cmd.arg("--database-url").arg(url),
                None => cmd.arg("--database-url").arg(&self.db),
            };
        }
        cmd.args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Run {
        output(self.command(args).output().expect("run outbox"))
    }

    /// Runs and expects exit 0.
    fn ok(&self, args: &[&str]) -> Run {
        let run = self.run(args);
        assert_eq!(run.code, 0, "outbox {args:?} failed: {}{}", run.stdout, run.stderr);
        run
    }

    fn root_arg(&self) -> String {
        self.root.display().to_string()
    }

    fn url(&self) -> String {
        self.url.clone().unwrap_or_else(|| outbox_tests::sqlite_url(&self.db))
    }
}

/// Runs `outbox work --root` as a child process until `done` holds (30 s at most), then stops it with SIGTERM;
/// returns whether `done` held, and how the worker exited.
async fn work_until<F, Fut>(env: &Env, done: F) -> (bool, Run)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let worker = ChildProcess::spawn(
        env.command(&["work", "--root", &env.root_arg(), "--concurrency", "4"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let held = eventually(Duration::from_secs(30), done).await;
    (held, stop(worker))
}

fn status_of(env: &Env, id: &str) -> String {
    env.ok(&["get", id, "--format", "json"]).json()["job"]["status"].as_str().expect("status").to_owned()
}

fn enqueue_id(env: &Env, kind: &str, payload: Value) -> String {
    let run = env.ok(&["enqueue", kind, "--payload", &payload.to_string(), "--format", "json"]);
    run.json()["id"].as_str().expect("id").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_work_list_retry_cancel_purge_and_reconcile() {
    let env = Env::new();
    assert!(env.ok(&["migrate"]).stdout.contains("applied 001_schema"));
    assert!(env.ok(&["migrate"]).stdout.contains("already up to date"));
    std::fs::write(env.root.join("taken.txt"), "someone else's\n").expect("pre-existing file");

    let good = enqueue_id(&env, "create_file", json!({ "path": "notes/a.txt", "content": "one\n" }));
    let taken = enqueue_id(&env, "create_file", json!({ "path": "taken.txt", "content": "mine\n" }));
    let delete = enqueue_id(&env, "delete_file", json!({ "path": "never-there.txt" }));
    let again = env.ok(&["enqueue", "create_file", "--payload", r#"{"path": "notes/a.txt", "content": "one\n"}"#]);
    assert!(again.stdout.contains(&format!("already enqueued: {good}")), "{}", again.stdout);

    // A real worker process, stopped by SIGTERM once the queue is empty.
    let (drained, out) = work_until(&env, || async {
        env.ok(&["list", "--status", "pending", "--format", "json"]).json().as_array().is_some_and(Vec::is_empty)
    })
    .await;
    assert!(drained, "the worker drained the queue; its log: {}", out.stderr);
    assert_eq!(out.code, 0, "graceful stop: {}", out.stderr);
    assert!(out.stderr.contains("worker running"), "{}", out.stderr);
    assert_eq!(out.stderr.matches("worker stopped").count(), 1, "logged once: {}", out.stderr);
    assert!(!out.stderr.contains("\x1b["), "no colours in logs written to a pipe: {:?}", out.stderr);
    assert_eq!(std::fs::read_to_string(env.root.join("notes/a.txt")).expect("written"), "one\n");

    // list, as JSON and as a table.
    let jobs = env.ok(&["list", "--format", "json"]).json();
    let by_id = |id: &str| jobs.as_array().expect("array").iter().find(|j| j["id"] == id).cloned().expect("listed");
    assert_eq!(by_id(&good)["status"], "completed");
    assert_eq!(by_id(&delete)["status"], "completed");
    assert_eq!(by_id(&taken)["status"], "failed");
    assert!(by_id(&taken)["last_error"].as_str().is_some_and(|e| e.contains("overwrite is false")));
    let table = env.ok(&["list", "--status", "failed"]).stdout;
    assert!(table.starts_with("ID") && table.contains(&taken) && !table.contains(&good), "{table}");
    assert_eq!(
        env.ok(&["list", "--kind", "delete_file", "--since", "1h", "--format", "json"]).json().as_array().map(Vec::len),
        Some(1)
    );

    // stats and get show the failure and why.
    let stats = env.ok(&["stats", "--format", "json"]).json();
    assert_eq!(stats["failed"][0]["id"], taken.as_str());
    let shown = env.ok(&["get", &taken]).stdout;
    assert!(shown.contains("overwrite is false") && shown.contains("history") && shown.contains("failed"), "{shown}");

    // retry, then cancel, then purge; wrong states and unknown ids have their own exit codes.
    assert!(env.ok(&["retry", &taken]).stdout.contains("pending again"));
    assert_eq!(status_of(&env, &taken), "pending");
    let twice = env.run(&["retry", &taken]);
    assert_eq!(twice.code, 4, "{}", twice.stderr);
    twice.error_naming(&taken);
    // A cancelled file job holds its path's sequence; cancelling it again lets the sequence go on, and a
    // third cancel has nothing left to do.
    let held = env.ok(&["cancel", &taken]).stdout;
    assert!(held.contains("holds sequence fs:taken.txt") && held.contains("cancel it again"), "{held}");
    assert_eq!(status_of(&env, &taken), "cancelled");
    let kept = env.ok(&["purge", "--status", "cancelled", "--older-than", "0s", "--format", "json"]).json();
    assert_eq!(kept["purged"], 0, "a purge keeps a job that holds its sequence");
    assert!(env.ok(&["cancel", &taken]).stdout.contains("no longer wait for it"));
    assert_eq!(env.run(&["cancel", &taken]).code, 4);
    let purged = env.ok(&["purge", "--status", "cancelled", "--older-than", "0s", "--format", "json"]).json();
    assert_eq!(purged["purged"], 1);
    let gone = env.run(&["get", &taken]);
    assert_eq!(gone.code, 3);
    gone.error_naming(&taken);
    assert_eq!(
        env.ok(&["purge", "--status", "completed", "--older-than", "7d", "--format", "json"]).json()["purged"],
        0
    );

    // retry --failed puts every failed job back.
    let taken2 = enqueue_id(&env, "create_file", json!({ "path": "taken.txt", "content": "mine again\n" }));
    let db = outbox::connect(&env.url()).await.expect("connect");
    exec(&db, "UPDATE outbox_jobs SET status = 'failed', last_error = 'x' WHERE id = ?", vec![taken2.clone().into()])
        .await;
    assert_eq!(env.ok(&["retry", "--failed", "--kind", "create_file", "--format", "json"]).json()["retried"], 1);
    env.ok(&["cancel", &taken2]);

    // reconcile: clean, then a file edited behind the queue's back.
    let clean = env.run(&["reconcile", "--root", &env.root_arg()]);
    assert_eq!(clean.code, 0, "{}{}", clean.stdout, clean.stderr);
    assert!(clean.stdout.contains("0 content changed"), "{}", clean.stdout);
    std::fs::write(env.root.join("notes/a.txt"), "edited by hand\n").expect("edit");
    let drift = env.run(&["reconcile", "--root", &env.root_arg(), "--progress"]);
    assert_eq!(drift.code, 5, "{}{}", drift.stdout, drift.stderr);
    assert!(drift.stdout.contains("notes/a.txt") && drift.stdout.contains("1 content changed"), "{}", drift.stdout);
    assert!(drift.stderr.contains("reconciling [") && drift.stderr.contains("100%"), "progress bar: {}", drift.stderr);
    let report = env.run(&["reconcile", "--root", &env.root_arg(), "--format", "json"]);
    assert_eq!(report.code, 5);
    assert_eq!(report.json()["discrepancies"][0]["kind"], "content_changed");
    assert_eq!(std::fs::read_to_string(env.root.join("notes/a.txt")).expect("kept"), "edited by hand\n");

    // queues and schema parse as JSON too.
    let queues = env.ok(&["queues", "--format", "json"]).json();
    assert_eq!(queues[0]["queue"], "default");
    let schemas = env.ok(&["schema", "--format", "json"]).json();
    assert!(schemas.as_array().is_some_and(|k| k.iter().any(|k| k["kind"] == "sync_aws")));
}

#[test]
fn bad_input_exits_2_naming_the_field_or_value() {
    let env = Env::new();
    env.ok(&["migrate"]);
    let run = env.run(&["enqueue", "create_file", "--payload", r#"{"path": "a.txt", "content": "x""#]);
    assert_eq!(run.code, 2);
    run.error_naming("--payload is not valid JSON");

    let run = env.run(&["enqueue", "create_file", "--payload", r#"{"path": "a.txt", "content": 7}"#]);
    assert_eq!(run.code, 2);
    run.error_naming("at /content: 7 is not of type \"string\"");

    let run = env.run(&["enqueue", "create_file", "--payload", r#"{"content": "x"}"#]);
    assert_eq!(run.code, 2);
    run.error_naming("at /path:");

    let run = env.run(&["enqueue", "create_file", "--payload", r#"{"path": "../../etc/passwd", "content": "x"}"#]);
    assert_eq!(run.code, 2);
    run.error_naming("at /path: path `../../etc/passwd` is refused");

    let run = env.run(&["enqueue", "send_invoice", "--payload", "{}"]);
    assert_eq!(run.code, 2);
    let line = run.error_naming("unknown kind `send_invoice`");
    assert!(line.contains("known kinds: claude_extraction, create_file, delete_file, sync_aws"), "{line}");

    for (args, value) in [
        (vec!["purge", "--status", "failed", "--older-than", "7x"], "7x"),
        (vec!["stats", "--window", "soon"], "soon"),
        (vec!["enqueue", "create_file", "--payload", "{}", "--delay", "5"], "5"),
        (vec!["list", "--since", "yesterday"], "yesterday"),
        (vec!["list", "--status", "done"], "done"),
        // Out of the years 1 to 9999 the queue's times fall in (the first once panicked).
        (vec!["list", "--since", "100000000d"], "100000000d"),
        (vec!["stats", "--window", "100000000d"], "100000000d"),
        (vec!["purge", "--status", "failed", "--older-than", "100000000d"], "100000000d"),
        (vec!["enqueue", "create_file", "--payload", "{}", "--delay", "100000000d"], "100000000d"),
    ] {
        let run = env.run(&args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        run.error_naming(&format!("`{value}`"));
    }
    for (flag, says) in [
        ("--since", "reaches back before the year 1"),
        ("--window", "reaches back before the year 1"),
        ("--older-than", "reaches back before the year 1"),
        ("--delay", "reaches past the year 9999"),
    ] {
        let args: Vec<&str> = match flag {
            "--since" => vec!["list", flag, "100000000d"],
            "--window" => vec!["stats", flag, "100000000d"],
            "--older-than" => vec!["purge", "--status", "failed", flag, "100000000d"],
            _ => vec!["enqueue", "create_file", "--payload", "{}", flag, "100000000d"],
        };
        let line = env.run(&args).error_naming(says).to_owned();
        assert!(line.contains(flag) && !line.contains("panicked"), "{line}");
    }
    let run = env.run(&["purge", "--status", "pending", "--older-than", "1d"]);
    assert_eq!(run.code, 2);
    run.error_naming("--status pending cannot be purged");

    // JSON errors for programs.
    let run = env.run(&["--format", "json", "enqueue", "nope", "--payload", "{}"]);
    assert_eq!(run.code, 2);
    let err: Value = serde_json::from_str(run.stderr.trim()).expect("json error");
    assert_eq!(err["exitCode"], 2);
    assert!(err["error"].as_str().is_some_and(|e| e.contains("unknown kind `nope`")));

    assert_eq!(env.ok(&["list", "--format", "json"]).json(), json!([]), "nothing was enqueued");

    // A missing database, and one without the outbox tables.
    let missing = env.run(&["--database-url", "elsewhere.db", "list"]);
    assert_eq!(missing.code, 1);
    missing.error_naming("database file `elsewhere.db` does not exist");
    assert!(!env.dir.path().join("elsewhere.db").exists(), "read commands never create a database");
    std::fs::write(env.dir.path().join("empty.db"), "").expect("empty file");
    let bare = env.run(&["--database-url", "empty.db", "stats"]);
    assert_eq!(bare.code, 1);
    let line = bare.error_naming("outbox migration(s)");
    assert!(line.contains("lacks") && line.contains("outbox migrate"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_answers_all_six_questions() {
    let env = Env::new();
    env.ok(&["migrate"]);
    let db = outbox::connect(&env.url()).await.expect("connect");
    let now = chrono::Utc::now().timestamp_millis();
    let mut ids = Vec::new();
    for n in 1..=6 {
        ids.push(outbox::enqueue(&db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned());
    }
    // 1: pending (ids[0]), claimed with a live lease (ids[1]), stuck with an expired one (ids[2]).
    let claim = "UPDATE outbox_jobs SET status = 'claimed', attempts = 1, runs = 1, locked_by = 'w-1', locked_at = ?, \
                 claimed_at = ?, lease_expires_at = ? WHERE id = ?";
    exec(&db, claim, vec![now.into(), now.into(), (now + 600_000).into(), ids[1].clone().into()]).await;
    exec(
        &db,
        claim,
        vec![(now - 120_000).into(), (now - 120_000).into(), (now - 60_000).into(), ids[2].clone().into()],
    )
    .await;
    // Completed, with a run time (ids[3], ids[4]); failed with a reason (ids[5]).
    let complete = "UPDATE outbox_jobs SET status = 'completed', attempts = 1, runs = 1, claimed_at = ?, completed_at = ?, \
                    updated_at = ? WHERE id = ?";
    for id in [&ids[3], &ids[4]] {
        exec(&db, complete, vec![(now - 2_000).into(), (now - 500).into(), (now - 500).into(), id.clone().into()])
            .await;
    }
    exec(
        &db,
        "UPDATE outbox_jobs SET status = 'failed', attempts = 3, last_error = 'smtp: mailbox full (attempt 3 of 3)', \
         updated_at = ? WHERE id = ?",
        vec![now.into(), ids[5].clone().into()],
    )
    .await;
    // A duplicate key: the same intent enqueued again after the first one completed.
    let first = outbox::enqueue(&db, &Keyed { user_id: 42, note: "a".into() }, EnqueueOpts::new()).await.expect("k1");
    exec(&db, complete, vec![(now - 1_000).into(), now.into(), now.into(), first.id().into()]).await;
    outbox::enqueue(&db, &Keyed { user_id: 42, note: "b".into() }, EnqueueOpts::new()).await.expect("k2");

    let stats = env.ok(&["stats", "--format", "json"]).json();
    let count = |status: &str| -> u64 {
        stats["counts"]
            .as_array()
            .expect("counts")
            .iter()
            .filter(|c| c["status"] == status)
            .map(|c| c["count"].as_u64().unwrap_or(0))
            .sum()
    };
    // What is outstanding.
    assert_eq!((count("pending"), count("claimed")), (2, 2), "{stats}");
    // What failed and why.
    assert_eq!(stats["failed"][0]["id"], ids[5].as_str());
    assert!(stats["failed"][0]["last_error"].as_str().is_some_and(|e| e.contains("mailbox full")));
    // What is stuck.
    assert_eq!(stats["stuck"].as_array().map(Vec::len), Some(1));
    assert_eq!(stats["stuck"][0]["id"], ids[2].as_str());
    // How long jobs take.
    let probe = stats["durations"]
        .as_array()
        .expect("durations")
        .iter()
        .find(|d| d["kind"] == "probe")
        .cloned()
        .expect("probe");
    assert_eq!(probe["completed"], 2);
    assert!((probe["avg_run_ms"].as_f64().unwrap_or(0.0) - 1_500.0).abs() < 1.0, "{probe}");
    // Duplicates.
    assert_eq!(stats["duplicates"][0]["kind"], "keyed");
    assert_eq!(stats["duplicates"][0]["jobs"], 2);
    // What ran lately.
    let recent: u64 =
        stats["recent"].as_array().expect("recent").iter().map(|c| c["count"].as_u64().unwrap_or(0)).sum();
    assert_eq!(recent, 4, "{stats}");

    let table = env.ok(&["stats"]).stdout;
    for needle in [
        "outstanding",
        "failed",
        "mailbox full",
        "stuck",
        &ids[2],
        "durations",
        "1.5s",
        "duplicates",
        "keyed",
        "recent",
    ] {
        assert!(table.contains(needle), "the table shows `{needle}`:\n{table}");
    }
    let queues = env.ok(&["queues", "--format", "json"]).json();
    let default =
        queues.as_array().expect("queues").iter().find(|q| q["queue"] == "default").cloned().expect("default");
    assert_eq!((default["available"].clone(), default["stuck"].clone()), (json!(1), json!(1)), "{default}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_recorded_by_an_application_worker_validate_cli_enqueues() {
    let env = Env::new();
    env.ok(&["migrate"]);
    let unknown = env.run(&["enqueue", "probe", "--payload", r#"{"n": 1}"#]);
    assert_eq!(unknown.code, 2);
    unknown.error_naming("unknown kind `probe`");

    // An application's worker starts: its kinds land in the database.
    let db = outbox::connect(&env.url()).await.expect("connect");
    let worker = Worker::builder(&db)
        .register(|_: Probe, _| async { Ok::<_, outbox::JobError>(()) })
        .register(|_: outbox_tests::Step, _| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("worker");
    drop(worker);

    // A recorded kind's sequence template applies to enqueues from the command line.
    let step = |seq: u32| format!(r#"{{"key": 5, "seq": {seq}, "sleep_ms": 0}}"#);
    let first = env.ok(&["enqueue", "step", "--payload", &step(0), "--format", "json"]).json();
    let second = env.ok(&["enqueue", "step", "--payload", &step(1), "--format", "json"]).json();
    assert_eq!(second["job"]["sequence_key"], "key:5");
    assert_eq!(second["job"]["waiting_for"], first["id"], "{second}");
    let other =
        env.ok(&["enqueue", "step", "--payload", &step(2), "--sequence", "elsewhere", "--format", "json"]).json();
    assert_eq!(
        (other["job"]["sequence_key"].clone(), other["job"]["waiting_for"].clone()),
        (json!("elsewhere"), Value::Null)
    );
    let listed = env.ok(&["list", "--sequence", "key:5", "--format", "json"]).json();
    let ids: Vec<&Value> = listed.as_array().expect("list").iter().map(|j| &j["id"]).collect();
    assert_eq!(ids, [&first["id"], &second["id"]], "a sequence lists in its order");
    let shown = env.ok(&["get", second["id"].as_str().expect("id")]).stdout;
    assert!(shown.contains(&format!("waiting for job {}", first["id"].as_str().expect("id"))), "{shown}");
    let queues = env.ok(&["queues", "--format", "json"]).json();
    assert_eq!(queues[0]["waiting"], 1, "{queues}");

    let listed = env.ok(&["schema"]).stdout;
    assert!(listed.lines().any(|l| l.starts_with("probe") && l.contains("recorded")), "{listed}");
    let schema: Value = serde_json::from_str(&env.ok(&["schema", "probe"]).stdout).expect("schema json");
    assert_eq!(schema["properties"]["n"]["minimum"], 1);
    let bad = env.run(&["enqueue", "probe", "--payload", r#"{"n": 0}"#]);
    assert_eq!(bad.code, 2);
    bad.error_naming("at /n: 0 is less than the minimum of 1");
    let ok = env
        .ok(&[
            "enqueue",
            "probe",
            "--payload",
            r#"{"n": 3}"#,
            "--queue",
            "slow",
            "--priority",
            "-5",
            "--delay",
            "10m",
            "--max-attempts",
            "9",
            "--format",
            "json",
        ])
        .json();
    let job = &ok["job"];
    assert_eq!(
        (job["queue"].clone(), job["priority"].clone(), job["max_attempts"].clone()),
        (json!("slow"), json!(-5), json!(9))
    );
    let job = outbox::ops::get(&db, ok["id"].as_str().expect("id")).await.expect("get");
    assert!(job.run_at > chrono::Utc::now() + chrono::Duration::minutes(9), "delayed: {}", job.run_at);
    let payload_file = env.dir.path().join("p.json");
    std::fs::write(&payload_file, r#"{"n": 4}"#).expect("payload file");
    env.ok(&["enqueue", "probe", "--payload", &format!("@{}", payload_file.display())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_and_reconcile_with_aws() {
    let Some(endpoint) = outbox_tests::aws_endpoint("work_and_reconcile_with_aws") else { return };
    let env = Env::new();
    env.ok(&["migrate"]);
    let bucket = format!("cli-{:016x}", fastrand::u64(..));
    let payload = json!({ "resourceType": "s3_bucket", "resourceId": bucket, "config": { "tags": { "by": "cli" } } });
    let id = enqueue_id(&env, "sync_aws", payload);
    let aws_env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let worker = ChildProcess::spawn(
        env.command(&["work", "--root", &env.root_arg(), "--aws"])
            .envs(aws_env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let done = eventually(Duration::from_secs(30), || async { status_of(&env, &id) == "completed" }).await;
    let out = stop(worker);
    assert!(done, "the sync_aws job completed; worker log: {}", out.stderr);
    assert_eq!(out.code, 0, "{}", out.stderr);

    let clean = output(env.command(&["reconcile", "--aws"]).envs(aws_env).output().expect("reconcile"));
    assert_eq!(clean.code, 0, "{}{}", clean.stdout, clean.stderr);
    assert!(clean.stdout.contains("aws: checked 1 resource(s)"), "{}", clean.stdout);

    let aws = outbox_aws::Aws::connect(
        outbox_aws::AwsOpts::new()
            .endpoint_url(&endpoint)
            .region("us-east-1")
            .static_credentials("testing", "testing", None),
    )
    .await
    .expect("clients");
    aws.s3().delete_bucket().bucket(&bucket).send().await.expect("delete behind the queue's back");
    let root = env.root_arg();
    let drift = output(
        env.command(&["reconcile", "--aws", "--root", &root, "--format", "json"])
            .envs(aws_env)
            .output()
            .expect("reconcile"),
    );
    assert_eq!(drift.code, 5, "{}{}", drift.stdout, drift.stderr);
    let report = drift.json();
    assert_eq!(report["aws"]["missing"], 1, "{report}");
    assert_eq!(report["aws"]["discrepancies"][0]["resource_id"], bucket.as_str());
    assert_eq!(report["files"]["paths_checked"], 0);
}

#[test]
fn the_database_defaults_to_outbox_db_and_follows_outbox_database_url() {
    let env = Env::new();
    let bare = |args: &[&str], url: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
        cmd.current_dir(env.dir.path()).env_remove("OUTBOX_DATABASE_URL").args(args);
        if let Some(url) = url {
            cmd.env("OUTBOX_DATABASE_URL", url);
        }
        output(cmd.output().expect("run outbox"))
    };
    assert_eq!(bare(&["migrate"], None).code, 0);
    assert!(env.dir.path().join("outbox.db").exists(), "the default is outbox.db in the working directory");
    assert_eq!(bare(&["migrate"], Some("sqlite://other.db")).code, 0);
    assert!(env.dir.path().join("other.db").exists());
    let run = bare(&["enqueue", "delete_file", "--payload", r#"{"path": "x"}"#], Some("other.db"));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(bare(&["list", "--format", "json"], Some("other.db")).json().as_array().map(Vec::len), Some(1));
    assert_eq!(bare(&["list", "--format", "json"], None).json().as_array().map(Vec::len), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_lets_the_running_job_finish() {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::PermissionsExt;

    let env = Env::new();
    env.ok(&["migrate"]);
    // A stand-in for the `claude` CLI that answers once the test opens the gate (or after a minute, so a
    // failed test leaves nothing behind): the job runs until the worker has been interrupted.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../outbox-fs/tests/fixtures/extract/cli_success.json");
    let script = env.dir.path().join("slow-claude");
    let gate = env.dir.path().join("gate");
    let wait_for_gate =
        format!("i=0\nwhile [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done", gate.display());
    std::fs::write(&script, format!("#!/bin/sh\ncat > /dev/null\n{wait_for_gate}\ncat '{}'\n", fixture.display()))
        .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let prompt = "Summarize requirement R-7.";
    let hash: String = Sha256::digest(prompt.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let payload =
        json!({ "prompt": prompt, "targetPath": "answers/r7.md", "requirementId": "R-7", "promptHash": hash });
    let id = enqueue_id(&env, "claude_extraction", payload);

    let script_arg = script.display().to_string();
    let stderr_path = env.dir.path().join("worker.stderr");
    let worker = ChildProcess::spawn(
        env.command(&["work", "--root", &env.root_arg(), "--claude-cli", &script_arg])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).expect("stderr file")),
    );
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let started = eventually(Duration::from_secs(20), || async { status_of(&env, &id) == "claimed" }).await;
    assert!(started, "the job did not start: {}", stderr());
    worker.signal(Signal::INT);
    let interrupted =
        eventually(Duration::from_secs(20), || async { stderr().contains("interrupted: finishing running jobs") })
            .await;
    assert!(interrupted, "the worker did not say it was interrupted: {}", stderr());
    assert_eq!(status_of(&env, &id), "claimed", "the job runs while the worker stops");
    std::fs::write(&gate, "").expect("open the gate");
    let status = worker.output_within(Duration::from_secs(60)).status;
    assert_eq!(status.code(), Some(0), "{}", stderr());
    // The job that was running when Ctrl-C came finished before the worker exited.
    assert_eq!(status_of(&env, &id), "completed");
    let answer = std::fs::read_to_string(env.root.join("answers/r7.md")).expect("answer written");
    assert!(answer.contains("The system shall retry."), "{answer}");
}

/// The same commands on PostgreSQL: the URL alone picks the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_urls_work_end_to_end() {
    let Some(t) = outbox_tests::fresh(outbox_tests::Backend::Postgres, "postgres_urls_work_end_to_end").await else {
        return;
    };
    let mut env = Env::new();
    env.url = Some(t.url.clone());
    assert!(env.ok(&["migrate"]).stdout.contains("already up to date"));
    std::fs::write(env.root.join("taken.txt"), "someone else's\n").expect("pre-existing file");
    let good = enqueue_id(&env, "create_file", json!({ "path": "pg/a.txt", "content": "one\n" }));
    let taken = enqueue_id(&env, "create_file", json!({ "path": "taken.txt", "content": "mine\n" }));
    let again = env.ok(&["enqueue", "create_file", "--payload", r#"{"path": "pg/a.txt", "content": "one\n"}"#]);
    assert!(again.stdout.contains(&format!("already enqueued: {good}")), "{}", again.stdout);

    let (settled, out) =
        work_until(&env, || async { status_of(&env, &good) == "completed" && status_of(&env, &taken) == "failed" })
            .await;
    assert!(settled, "the worker ran both jobs; its log: {}", out.stderr);
    assert_eq!(out.code, 0, "graceful stop: {}", out.stderr);
    assert_eq!(std::fs::read_to_string(env.root.join("pg/a.txt")).expect("written"), "one\n");

    let stats = env.ok(&["stats", "--format", "json"]).json();
    assert_eq!(stats["failed"][0]["id"], taken.as_str());
    assert!(env.ok(&["get", &taken]).stdout.contains("overwrite is false"));
    assert!(env.ok(&["retry", &taken]).stdout.contains("pending again"));
    env.ok(&["cancel", &taken]);
    env.ok(&["cancel", &taken]);
    assert_eq!(
        env.ok(&["purge", "--status", "cancelled", "--older-than", "0s", "--format", "json"]).json()["purged"],
        1
    );
    assert_eq!(env.run(&["get", &taken]).code, 3);
    let clean = env.run(&["reconcile", "--root", &env.root_arg()]);
    assert_eq!(clean.code, 0, "{}{}", clean.stdout, clean.stderr);
    std::fs::remove_file(env.root.join("pg/a.txt")).expect("remove behind the queue's back");
    let drift = env.run(&["reconcile", "--root", &env.root_arg(), "--format", "json"]);
    assert_eq!(drift.code, 5, "{}{}", drift.stdout, drift.stderr);
    assert_eq!(drift.json()["discrepancies"][0]["path"], "pg/a.txt");
}

#[test]
fn payloads_that_are_not_utf8_exit_2_naming_their_source() {
    use std::io::Write;

    let env = Env::new();
    env.ok(&["migrate"]);
    let mut child = ChildProcess::spawn(
        env.command(&["enqueue", "create_file", "--payload", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    child.stdin.take().expect("stdin").write_all(b"{\"path\": \"a.txt\", \"content\": \"\xff\"}").expect("write");
    let run = output(child.output_within(Duration::from_secs(60)));
    assert_eq!(run.code, 2, "{}", run.stderr);
    run.error_naming("stdin is not UTF-8");

    let file = env.dir.path().join("latin1.json");
    std::fs::write(&file, b"{\"path\": \"caf\xe9.txt\", \"content\": \"x\"}").expect("payload file");
    let run = env.run(&["enqueue", "create_file", "--payload", &format!("@{}", file.display())]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    run.error_naming(&format!("the payload file `{}` is not UTF-8", file.display()));
    assert_eq!(env.ok(&["list", "--format", "json"]).json(), json!([]), "nothing was enqueued");
}

#[test]
fn rust_log_is_honoured_unless_outbox_log_is_set() {
    let env = Env::new();
    env.ok(&["migrate"]);
    let enqueue = |n: u32, vars: &[(&str, &str)]| {
        let payload = json!({ "path": format!("{n}.txt"), "content": "x" }).to_string();
        let out = env.command(&["enqueue", "create_file", "--payload", &payload]).envs(vars.iter().copied()).output();
        let run = output(out.expect("run outbox"));
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stderr
    };
    assert!(!enqueue(1, &[]).contains("job enqueued"), "warnings only by default");
    let debug = enqueue(2, &[("RUST_LOG", "debug")]);
    assert!(debug.contains("job enqueued"), "RUST_LOG=debug: {debug}");
    assert!(!debug.contains("\x1b["), "no colours in logs written to a pipe: {debug:?}");
    assert!(!enqueue(3, &[("RUST_LOG", "debug"), ("OUTBOX_LOG", "warn")]).contains("job enqueued"), "OUTBOX_LOG wins");
    assert!(enqueue(4, &[("OUTBOX_LOG", "debug"), ("NO_COLOR", "1")]).contains("job enqueued"));
}

/// `outbox work --reconcile` as a child process until `done` holds, then SIGTERM.
async fn work_reconciling_until<F, Fut>(env: &Env, extra: &[&str], done: F) -> (bool, Run)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let root = env.root_arg();
    let mut args = vec!["work", "--root", root.as_str(), "--reconcile"];
    args.extend_from_slice(extra);
    let worker = ChildProcess::spawn(env.command(&args).stdout(Stdio::piped()).stderr(Stdio::piped()));
    let held = eventually(Duration::from_secs(30), done).await;
    (held, stop(worker))
}

fn reconciliation(env: &Env) -> Option<Value> {
    let stats = env.ok(&["stats", "--format", "json"]).json();
    stats["reconciliations"].as_array()?.iter().find(|r| r["reconciler"] == "fs").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_reconciles_at_start_and_removes_stale_temp_files() {
    let env = Env::new();
    env.ok(&["migrate"]);
    let kept = enqueue_id(&env, "create_file", json!({ "path": "kept.txt", "content": "stays\n" }));
    let lost = enqueue_id(&env, "create_file", json!({ "path": "docs/lost.txt", "content": "goes\n" }));
    // First start: nothing to find yet; the jobs run after the reconciliation.
    let (done, out) = work_reconciling_until(&env, &[], || async {
        status_of(&env, &kept) == "completed" && status_of(&env, &lost) == "completed"
    })
    .await;
    assert!(done && out.code == 0, "{}", out.stderr);
    let first = reconciliation(&env).expect("the first start recorded its reconciliation");
    assert_eq!(first["report"]["paths_checked"], 0, "{first}");
    let first_at = first["at"].clone();

    // While nothing runs: a file is deleted by hand, and a crash leaves temp files (one stale, one recent).
    std::fs::remove_file(env.root.join("docs/lost.txt")).expect("delete by hand");
    let stale = env.root.join("docs/.outbox-4242-7.tmp");
    std::fs::write(&stale, "half written").expect("stale temp");
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(7_200);
    std::fs::File::options().write(true).open(&stale).expect("open").set_modified(two_hours_ago).expect("mtime");
    let recent = env.root.join(".outbox-4243-1.tmp");
    std::fs::write(&recent, "being written").expect("recent temp");

    // The restart reconciles before its first claim, logs what it found and records the counts.
    let (done, out) =
        work_reconciling_until(&env, &[], || async { reconciliation(&env).is_some_and(|r| r["at"] != first_at) }).await;
    assert!(done && out.code == 0, "the restart recorded a new reconciliation: {}", out.stderr);
    let second = reconciliation(&env).expect("recorded");
    let report = &second["report"];
    assert_eq!(report["paths_checked"], 2, "{second}");
    assert_eq!(report["missing"], 1, "the hand-deleted file: {second}");
    assert_eq!(report["ok"], 1, "{second}");
    assert_eq!(report["temp_files_removed"], 1, "{second}");
    assert!(!stale.exists(), "the stale temp file was removed");
    assert!(recent.exists(), "a temp file younger than an hour may be in use and stays");
    assert!(out.stderr.contains("docs/lost.txt"), "the discrepancy is logged: {}", out.stderr);
    assert!(out.stderr.contains("leftover temp files removed"), "{}", out.stderr);
    let table = env.ok(&["stats"]).stdout;
    assert!(table.contains("reconciliations") && table.contains("missing=1"), "{table}");
    assert_eq!(status_of(&env, &lost), "completed", "reconciling changes no job");
}

#[test]
fn schedules_file_errors_name_the_schedule_and_the_fault() {
    let env = Env::new();
    env.ok(&["migrate"]);
    let file = env.dir.path().join("schedules.json");
    let cases = [
        (
            json!([{"name": "n", "schedule": "61 * * * * *", "kind": "create_file", "payload": {"path": "a", "content": ""}}]),
            "61 * * * * *",
        ),
        (json!([{"name": "n", "schedule": "every 1s", "kind": "mail", "payload": {}}]), "`mail`"),
        (json!([{"name": "n", "schedule": "every 1s", "kind": "create_file", "payload": {"path": 5}}]), "/path"),
        (
            json!([{"name": "n", "schedule": "0 * * * *", "kind": "delete_file", "payload": {"path": "a"}, "time_zone": "Mars/Base"}]),
            "Mars/Base",
        ),
        (
            json!([{"name": "n", "schedule": "every 1s", "kind": "delete_file", "payload": {"path": "a"}, "colour": 1}]),
            "colour",
        ),
    ];
    for (entries, needle) in cases {
        std::fs::write(&file, entries.to_string()).expect("write");
        let run = env.run(&["work", "--root", &env.root_arg(), "--schedules", &file.display().to_string()]);
        assert_eq!(run.code, 2, "{entries}: {}", run.stderr);
        assert!(run.stderr.contains(needle), "{entries}: the error names {needle}: {}", run.stderr);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_lists_what_workers_registered() {
    let env = Env::new();
    env.ok(&["migrate"]);
    assert!(env.ok(&["schedules"]).stdout.contains("no schedules"));
    let file = env.dir.path().join("schedules.json");
    let entries = json!([{
        "name": "heartbeat",
        "schedule": "every 1s",
        "kind": "create_file",
        "payload": {"path": "beats/{tick}.txt", "content": "beat\n"},
    }]);
    std::fs::write(&file, entries.to_string()).expect("write");
    let (done, out) = work_reconciling_until(&env, &["--schedules", &file.display().to_string()], || async {
        std::fs::read_dir(env.root.join("beats")).map(|d| d.count() >= 2).unwrap_or(false)
    })
    .await;
    assert!(done && out.code == 0, "{}", out.stderr);
    let listed = env.ok(&["schedules", "--format", "json"]).json();
    let entry = &listed[0];
    assert_eq!(entry["name"], "heartbeat");
    assert_eq!(entry["spec"], "every 1000ms");
    assert!(entry["last_tick"].is_string() && entry["next_tick"].is_string() && entry["last_job_id"].is_string());
    let table = env.ok(&["schedules"]).stdout;
    assert!(table.starts_with("NAME") && table.contains("heartbeat") && table.contains("NEXT RUN"), "{table}");
}

#[test]
fn completions_are_printed_for_bash_zsh_and_fish_from_the_commands_definition() {
    let env = Env::new();
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef outbox"), ("fish", "complete -c outbox")] {
        let run = env.run(&["completions", shell]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        assert!(run.stdout.contains(marker), "{shell}: no `{marker}` in {}", run.stdout);
        for command in ["claim", "complete", "serve", "define-kind", "retry"] {
            assert!(run.stdout.contains(command), "{shell} completions lack `{command}`");
        }
        assert!(run.stdout.contains("database-url"), "{shell} completions lack the global --database-url");
    }
    assert!(!env.db.exists(), "printing completions opened no database");
    let bad = env.run(&["completions", "powershell7"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("powershell7"), "the error names the value: {}", bad.stderr);
}

#[test]
fn the_openapi_document_is_printed_without_a_database() {
    let env = Env::new();
    let run = env.run(&["openapi"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = run.json();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/api/work/claim"]["post"].is_object(), "{doc}");
    assert!(!env.db.exists(), "printing the document opened no database");
}

/// `--subject` on enqueue, list, cancel and retry: a subject's jobs listed, cancelled and put back together, the
/// others untouched; a subject no job could carry exits 2 naming it, with nothing written.
#[test]
fn subjects_are_enqueued_listed_cancelled_and_retried() {
    let env = Env::new();
    env.ok(&["migrate"]);
    let enqueue = |path: &str, subject: &str| {
        let payload = json!({ "path": path, "content": "x\n" }).to_string();
        let run = env.ok(&["enqueue", "create_file", "--payload", &payload, "--subject", subject, "--format", "json"]);
        run.json()["id"].as_str().expect("id").to_owned()
    };
    let (a, b, c) = (enqueue("a.txt", "order:42"), enqueue("b.txt", "order:42"), enqueue("c.txt", "order:7"));
    assert!(env.ok(&["get", &a]).stdout.contains("subject       order:42"));
    let listed = env.ok(&["list", "--subject", "order:42", "--format", "json"]).json();
    let ids: Vec<&str> = listed.as_array().expect("jobs").iter().map(|j| j["id"].as_str().expect("id")).collect();
    assert_eq!(ids, [b.as_str(), a.as_str()]);

    let cancelled = env.ok(&["cancel", "--subject", "order:42", "--format", "json"]).json();
    assert_eq!(cancelled, json!({"cancelled": 2, "subject": "order:42"}));
    assert_eq!(
        (status_of(&env, &a), status_of(&env, &b), status_of(&env, &c)),
        ("cancelled".into(), "cancelled".into(), "pending".into())
    );
    assert!(
        env.ok(&["retry", "--subject", "order:42"])
            .stdout
            .contains("retried 2 failed or cancelled job(s) about order:42")
    );
    assert_eq!(status_of(&env, &a), "pending");

    for args in [
        vec!["enqueue", "create_file", "--payload", r#"{"path": "d.txt", "content": "x"}"#, "--subject", ""],
        vec!["list", "--subject", ""],
        vec!["cancel", "--subject", ""],
        vec!["retry", "--subject", ""],
    ] {
        let run = env.run(&args);
        assert_eq!(run.code, 2, "{args:?}: {}{}", run.stdout, run.stderr);
        run.error_naming("the subject is empty");
    }
    let run = env.run(&["cancel", &a, "--subject", "order:42"]);
    assert_eq!(run.code, 2, "an id and a subject: {}", run.stderr);
    assert_eq!(env.ok(&["list", "--format", "json"]).json().as_array().expect("jobs").len(), 3, "nothing written");
}

/// `outbox workflow create` writes a fan-out of files and a step after them, `outbox work` runs the step only once
/// both files are there, `workflow show` and `get` tell what waits for what; a spec that does not read names the
/// field, and a workflow the queue refuses names every problem: both exit 2 with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_are_created_shown_run_and_cancelled() {
    let env = Env::new();
    env.ok(&["migrate"]);
    let file = |path: &str| json!({ "kind": "create_file", "payload": { "path": path, "content": "x\n" } });
    let mut index = file("index.txt");
    index["name"] = json!("index");
    index["after"] = json!(["a", "b"]);
    let (mut a, mut b) = (file("a.txt"), file("b.txt"));
    a["name"] = json!("a");
    b["name"] = json!("b");
    let spec = json!({ "name": "files then index", "steps": [a, b, index] });
    let spec_path = env.dir.path().join("wf.json");
    std::fs::write(&spec_path, spec.to_string()).expect("write spec");
    let created = env.ok(&["workflow", "create", &format!("@{}", spec_path.display()), "--format", "json"]).json();
    let id = created["id"].as_str().expect("id").to_owned();
    let index_job = created["steps"]["index"].as_str().expect("index job").to_owned();
    let shown = env.ok(&["workflow", "show", &id]).stdout;
    assert!(shown.contains("files then index") && shown.contains("waiting") && shown.contains("a, b"), "{shown}");
    let got = env.ok(&["get", &index_job]).stdout;
    assert!(got.contains("parents") && got.contains("waiting for it"), "{got}");

    let (done, _) = work_until(&env, || async { status_of(&env, &index_job) == "completed" }).await;
    assert!(done, "the index step did not complete");
    let graph = env.ok(&["workflow", "show", &id, "--format", "json"]).json();
    assert_eq!(graph["state"], "completed");
    let history = env.ok(&["get", &index_job, "--format", "json"]).json();
    let events: Vec<&str> =
        history["history"].as_array().expect("history").iter().map(|e| e["event"].as_str().expect("e")).collect();
    assert_eq!(events.first().copied(), Some("enqueued"));
    assert!(events.contains(&"ready"), "{events:?}");

    let again = env.ok(&["workflow", "create", &spec.to_string(), "--format", "json"]).json();
    let cancelled = env.ok(&["workflow", "cancel", again["id"].as_str().expect("id"), "--format", "json"]).json();
    assert_eq!(cancelled, json!({ "cancelled": 3 }));

    let before = env.ok(&["list", "--format", "json"]).json().as_array().expect("jobs").len();
    let unreadable = env.run(&["workflow", "create", r#"{"name": "x", "steps": [{"name": "a"}]}"#]);
    assert_eq!(unreadable.code, 2, "{}", unreadable.stderr);
    unreadable.error_naming("steps[0]");
    let cycle = json!({ "name": "cycle", "steps": [
        { "name": "a", "kind": "create_file", "payload": { "path": "c.txt", "content": "" }, "after": ["b"] },
        { "name": "b", "kind": "create_file", "payload": { "path": "d.txt", "content": "" }, "after": ["a"] },
    ]});
    let refused = env.run(&["workflow", "create", &cycle.to_string()]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    refused.error_naming("cycle: a, b");
    let bad_delay = json!({ "name": "delay", "steps": [
        { "name": "a", "kind": "create_file", "payload": { "path": "e.txt", "content": "" }, "delay": "soon" },
    ]});
    env.run(&["workflow", "create", &bad_delay.to_string()]).error_naming("steps[0].delay");
    assert_eq!(env.ok(&["list", "--format", "json"]).json().as_array().expect("jobs").len(), before, "nothing written");
}
