//! How AWS errors decide a job's fate, against a real HTTP server on loopback that answers like S3:
//! throttling and 5xx retry, access errors fail at once, and the worker records both.

mod common;

use std::time::Duration;

use outbox::JobStatus;
use outbox_aws::{Aws, SyncAws};
use outbox_tests::fresh_db;
use outbox_tests::http::{Reply, Server};
use serde_json::json;

fn s3_error(status: u16, code: &str, message: &str) -> Reply {
    let body = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message><RequestId>R1</RequestId></Error>"#
    );
    Reply { headers: vec![("content-type", "application/xml")], ..outbox_tests::http::reply(status, body) }
}

fn not_found() -> Reply {
    Reply { headers: vec![("content-type", "application/xml")], ..outbox_tests::http::reply(404, String::new()) }
}

async fn fake_s3(replies: Vec<Reply>) -> (Server, Aws) {
    let server = Server::start(replies).await;
    let opts = common::opts(&server.base).sdk_max_attempts(1);
    let aws = Aws::connect(opts).await.expect("clients");
    (server, aws)
}

/// Runs the job on a started worker until it fails for good.
async fn run_until_failed(db: &sea_orm::DatabaseConnection, aws: &Aws, job: &SyncAws) -> outbox::JobRecord {
    let id = common::enqueue(db, job).await;
    let handle = common::worker(db, aws).build().await.expect("worker").start();
    let failed = outbox_tests::wait_status(db, &id, JobStatus::Failed, Duration::from_secs(20)).await;
    handle.shutdown().await.expect("shutdown");
    assert!(failed, "the job never failed");
    outbox::ops::get(db, &id).await.expect("get job")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_holds_the_kind_without_an_attempt_and_access_denied_fails_at_once() {
    let t = fresh_db().await;
    let (server, aws) = fake_s3(vec![
        not_found(),
        s3_error(503, "SlowDown", "Please reduce your request rate."),
        not_found(),
        s3_error(403, "AccessDenied", "Access Denied"),
    ])
    .await;
    let job = SyncAws::upsert("s3_object", "some-bucket/k.txt", json!({ "body": "x" }));
    let row = run_until_failed(&t.db, &aws, &job).await;
    assert_eq!(row.attempts, 1, "SlowDown gave its attempt back (the kind was held), AccessDenied failed at once");
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.contains("PutObject `s3_object some-bucket/k.txt`: AccessDenied: Access Denied (http 403)"),
        "{error}"
    );
    let history = outbox::ops::history(&t.db, &row.id).await.expect("history");
    assert!(
        history.iter().any(|e| e.event == outbox::JobEventKind::Released),
        "the throttled attempt was given back: {history:?}"
    );
    assert!(!history.iter().any(|e| e.event == outbox::JobEventKind::Retried), "{history:?}");
    let seen: Vec<String> = server.seen().iter().map(|s| s.line.clone()).collect();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen[1].starts_with("PUT /some-bucket/k.txt"), "path-style addressing: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_retry_until_max_attempts() {
    let t = fresh_db().await;
    let replies =
        (0..3).flat_map(|_| [not_found(), s3_error(500, "InternalError", "We encountered an internal error.")]);
    let (_server, aws) = fake_s3(replies.collect()).await;
    let job = SyncAws::upsert("s3_bucket", "flaky-bucket", json!({}));
    let opts = outbox::EnqueueOpts::new().max_attempts(3);
    let id = outbox::enqueue(&t.db, &job, opts).await.expect("enqueue").id().to_owned();
    let row = {
        let handle = common::worker(&t.db, &aws).build().await.expect("worker").start();
        let failed = outbox_tests::wait_status(&t.db, &id, JobStatus::Failed, Duration::from_secs(30)).await;
        handle.shutdown().await.expect("shutdown");
        assert!(failed, "the job never failed");
        outbox::ops::get(&t.db, &id).await.expect("get")
    };
    assert_eq!((row.attempts, row.max_attempts), (3, 3));
    assert!(
        row.last_error.as_deref().is_some_and(|e| e.contains("CreateBucket") && e.contains("InternalError")),
        "{:?}",
        row.last_error
    );
}
