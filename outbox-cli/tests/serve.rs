//! `outbox serve`: the real binary serving the API on a loopback port, and refusing what it must.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use outbox_tests::{ChildProcess, Signal};

const READ: &str = "read-secret-for-the-cli-test";
const OPERATE: &str = "operate-secret-for-the-cli-test";

fn outbox(db: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    cmd.env_remove("OUTBOX_DATABASE_URL")
        .env_remove("OUTBOX_TOKENS")
        .env_remove("OUTBOX_LOG")
        .env_remove("RUST_LOG")
        .arg("--database-url")
        .arg(db)
        .args(args);
    cmd
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_public_address_without_tokens_is_refused_before_anything_opens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("queue.db");
    let out = outbox(&db, &["serve", "--listen", "0.0.0.0:0"]).output().expect("run outbox");
    let line = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{line}");
    assert!(line.starts_with("error: refusing to listen on 0.0.0.0:0 without tokens"), "{line}");
    assert!(line.contains("OUTBOX_TOKENS") && line.trim_end().lines().count() == 1, "{line}");
    assert!(!db.exists(), "the database is not even opened");

    // A malformed token names where it came from, never its secret.
    let out = outbox(&db, &["serve", "--listen", "0.0.0.0:0"])
        .env("OUTBOX_TOKENS", "read:fine-secret,admin:hunter2-secret")
        .output()
        .expect("run outbox");
    let line = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{line}");
    assert!(line.contains("OUTBOX_TOKENS, token 2") && line.contains("unknown role `admin`"), "{line}");
    assert!(!line.contains("hunter2") && !line.contains("fine-secret"), "{line}");
}

/// One HTTP/1.1 request on a fresh connection; the status and the whole answer.
fn http(port: u16, request: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    Some((status, answer))
}

fn get(port: u16, path: &str, token: &str) -> Option<(u16, String)> {
    http(
        port,
        &format!(
            "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
        ),
    )
}

/// SIGTERM, then how it exited and what it wrote.
fn stop(child: ChildProcess) -> Output {
    child.signal(Signal::TERM);
    child.output_within(Duration::from_secs(60))
}

#[test]
fn serves_with_tokens_from_the_environment_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("queue.db");
    assert!(outbox(&db, &["migrate"]).output().expect("migrate").status.success());
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let listen = format!("127.0.0.1:{port}");
    let child = ChildProcess::spawn(
        outbox(&db, &["serve", "--listen", &listen])
            .env("OUTBOX_TOKENS", format!("read:{READ}, operate:{OPERATE}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let queues = loop {
        if let Some(answer) = get(port, "/api/queues", READ) {
            break answer;
        }
        assert!(Instant::now() < deadline, "outbox serve did not answer: {}", stderr(&stop(child)));
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(queues.0, 200, "{}", queues.1);
    assert_eq!(get(port, "/api/queues", "wrong").map(|a| a.0), Some(401));
    // The built-in kinds of the binary are known.
    let kinds = get(port, "/api/kinds/create_file", READ).expect("kinds");
    assert!(kinds.0 == 200 && kinds.1.contains(r#""source":"built_in""#), "{}", kinds.1);
    let body = r#"{"kind": "delete_file", "payload": {"path": "a.txt"}}"#;
    let post = format!(
        "POST /api/jobs HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {OPERATE}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let created = http(port, &post).expect("enqueue");
    assert_eq!(created.0, 201, "{}", created.1);

    let out = stop(child);
    let logs = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{logs}");
    assert!(logs.contains("serving the outbox api") && logs.contains(&listen), "{logs}");
    assert!(logs.contains("SIGTERM") && logs.contains("server stopped"), "{logs}");
    assert!(!logs.contains(READ) && !logs.contains(OPERATE), "a token was logged: {logs}");
}

/// `examples/workflow.py`, a program in another language, creates the README's workflow over HTTP from `outbox
/// serve` and through `outbox workflow create`: the same ten steps and edges both ways.
#[test]
fn the_python_example_creates_the_readme_workflow_over_http_and_through_the_cli() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("queue.db");
    assert!(outbox(&db, &["migrate"]).output().expect("migrate").status.success());
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/workflow.py");
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_outbox")).parent().expect("bin dir").to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let python = |args: &[&str]| {
        let out = Command::new("python3")
            .arg(&example)
            .args(args)
            .env("PATH", &path)
            .env("OUTBOX_DATABASE_URL", outbox_tests::sqlite_url(&db))
            .env("OUTBOX_TOKEN", OPERATE)
            .output()
            .expect("run python3");
        assert!(out.status.success(), "workflow.py {args:?}: {}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")
    };
    let via_cli = python(&["cli"]);

    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let child = ChildProcess::spawn(
        outbox(&db, &["serve", "--listen", &format!("127.0.0.1:{port}")])
            .env("OUTBOX_TOKENS", format!("read:{READ}, operate:{OPERATE}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(port, "/api/queues", READ).is_none() {
        assert!(Instant::now() < deadline, "outbox serve did not answer");
        std::thread::sleep(Duration::from_millis(50));
    }
    let via_http = python(&["http", &format!("http://127.0.0.1:{port}")]);
    let graph = |id: &str| {
        let (status, answer) = get(port, &format!("/api/workflows/{id}"), READ).expect("graph");
        assert_eq!(status, 200, "{answer}");
        let body = answer.split("\r\n\r\n").nth(1).expect("body");
        let graph: serde_json::Value = serde_json::from_str(body).expect("json graph");
        let steps = graph["steps"].as_array().expect("steps").clone();
        let ids: std::collections::HashMap<String, String> = steps
            .iter()
            .map(|s| (s["id"].as_str().expect("id").to_owned(), s["step"].as_str().expect("step").to_owned()))
            .collect();
        let mut shape: Vec<(String, Vec<String>, String)> = steps
            .iter()
            .map(|s| {
                let mut after: Vec<String> = s["parents"]
                    .as_array()
                    .expect("parents")
                    .iter()
                    .map(|p| ids[p.as_str().expect("p")].clone())
                    .collect();
                after.sort();
                (s["step"].as_str().expect("step").to_owned(), after, s["state"].as_str().expect("state").to_owned())
            })
            .collect();
        shape.sort();
        shape
    };
    let (cli_shape, http_shape) =
        (graph(via_cli["id"].as_str().expect("id")), graph(via_http["id"].as_str().expect("id")));
    drop(stop(child));
    assert_eq!(cli_shape, http_shape, "the same workflow both ways");
    assert_eq!(cli_shape.len(), 10);
    let index = cli_shape.iter().find(|(step, _, _)| step == "index").expect("the index step");
    assert_eq!(index.1, ["publish-contract-7", "publish-contract-8", "publish-contract-9"]);
    assert_eq!(index.2, "waiting");
    let writes = cli_shape
        .iter()
        .filter(|(step, after, state)| step.starts_with("write-") && after.is_empty() && state == "pending");
    assert_eq!(writes.count(), 3);
}
