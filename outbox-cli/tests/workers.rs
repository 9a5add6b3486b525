//! `outbox workers`: the live entries of the worker registry, a real in-process worker's and a remote one's,
//! as a table and as JSON; an expired entry and a stopped worker are not listed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use outbox::{JobError, Worker};
use outbox_tests::{Probe, eventually, exec, sqlite_url};
use serde_json::{Value, json};

/// Runs `outbox --database-url DB ARGS`, expects exit 0, and returns stdout.
fn outbox(db: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .env_remove("OUTBOX_DATABASE_URL")
        .env_remove("OUTBOX_LOG")
        .env_remove("RUST_LOG")
        .arg("--database-url")
        .arg(db)
        .args(args)
        .output()
        .expect("run outbox");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "outbox {args:?} failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn listed(db: &Path) -> Vec<Value> {
    let text = outbox(db, &["workers", "--format", "json"]);
    let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    value.as_array().unwrap_or_else(|| panic!("not an array: {value}")).clone()
}

/// A registry entry as a remote worker's claim writes it; times are milliseconds from now.
async fn insert_remote(db: &impl sea_orm::ConnectionTrait, id: &str, host: &str, started: i64, expires: i64) {
    let now = chrono::Utc::now().timestamp_millis();
    exec(
        db,
        "INSERT INTO outbox_workers (id, host, pid, queues, kinds, concurrency, running, remote, started_at, \
         last_seen_at, expires_at) VALUES (?, ?, ?, ?, ?, NULL, ?, 1, ?, ?, ?)",
        vec![
            id.into(),
            host.into(),
            4242_i64.into(),
            r#"["mail"]"#.into(),
            r#"["resize","thumbnail"]"#.into(),
            2_i64.into(),
            (now + started).into(),
            (now + started + 1_000).into(),
            (now + expires).into(),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_lists_live_workers_and_not_expired_or_stopped_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("queue.db");
    let db = outbox::connect(&sqlite_url(&path)).await.expect("connect");
    outbox::migrate(&db).await.expect("migrate");
    assert_eq!(outbox(&path, &["workers"]).trim(), "no live workers");
    assert!(listed(&path).is_empty());

    insert_remote(&db, "py-7", "build-3", -60_000, 55_000).await;
    insert_remote(&db, "gone-1", "old-box", -600_000, -240_000).await;
    let worker = Worker::builder(&db)
        .id("inproc-1")
        .queues(["default"])
        .concurrency(3)
        .register(|_: Probe, _| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("worker")
        .start();
    let registered = eventually(Duration::from_secs(30), || async {
        outbox::ops::workers(&db).await.expect("workers").iter().any(|w| w.id == "inproc-1")
    })
    .await;
    assert!(registered, "the worker never appeared in the registry");

    // Oldest first: the remote worker started a minute ago.
    let workers = listed(&path);
    let ids: Vec<&Value> = workers.iter().map(|w| &w["id"]).collect();
    assert_eq!(ids, [&json!("py-7"), &json!("inproc-1")], "{workers:?}");
    let remote = &workers[0];
    assert_eq!(
        (&remote["host"], &remote["pid"], &remote["queues"], &remote["kinds"]),
        (&json!("build-3"), &json!(4242), &json!(["mail"]), &json!(["resize", "thumbnail"]))
    );
    assert_eq!(
        (&remote["running"], &remote["remote"], &remote["concurrency"]),
        (&json!(2), &json!(true), &Value::Null)
    );
    for field in ["started_at", "last_seen_at", "expires_at"] {
        assert!(remote[field].is_string(), "{field}: {remote}");
    }
    let local = &workers[1];
    assert_eq!(
        (&local["pid"], &local["queues"], &local["kinds"], &local["concurrency"], &local["remote"]),
        (&json!(std::process::id()), &json!(["default"]), &json!(["probe"]), &json!(3), &json!(false))
    );

    let table = outbox(&path, &["workers"]);
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines[0].split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(header, ["ID", "HOST", "PID", "KINDS", "QUEUES", "RUNNING", "REMOTE", "LAST SEEN"], "{table}");
    assert_eq!(lines.len(), 3, "{table}");
    let cells = |line: &str| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(cells(lines[1])[..7], ["py-7", "build-3", "4242", "resize,thumbnail", "mail", "2", "yes"], "{table}");
    let pid = std::process::id().to_string();
    let local = cells(lines[2]);
    assert_eq!(local[0], "inproc-1", "{table}");
    assert_eq!(local[2..7], [pid.as_str(), "probe", "default", "0/3", "no"], "{table}");
    assert!(!table.contains("gone-1"), "an expired entry is not listed: {table}");

    // A worker that stops takes its entry with it.
    worker.shutdown().await.expect("shutdown");
    let ids: Vec<Value> = listed(&path).iter().map(|w| w["id"].clone()).collect();
    assert_eq!(ids, [json!("py-7")]);
}
