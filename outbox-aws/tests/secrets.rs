//! Canary secrets never appear in captured logs (every level, the SDK's own included), errors, or job rows,
//! on success and failure paths alike: given as static credentials against moto, and read by the standard
//! chain from the environment against a server that answers like AWS to bad credentials, echoing what it was
//! sent, as S3 does in a `SignatureDoesNotMatch` or `ExpiredToken` answer.

mod common;

use std::time::Duration;

use outbox::{EnqueueOpts, JobStatus};
use outbox_aws::{Aws, AwsOpts, SyncAws};
use outbox_tests::fresh_db;
use outbox_tests::http::{Reply, Server, reply};
use serde_json::json;

const CANARY: &str = "CanarySecretKey/9f8e7d6c5b4a+outbox";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_secret_never_leaves_the_credentials() {
    let Some(endpoint) = common::endpoint("a_canary_secret_never_leaves_the_credentials") else { return };
    let logs = outbox_tests::Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let t = fresh_db().await;
    let opts = AwsOpts::new().endpoint_url(&endpoint).region("us-east-1").static_credentials(
        "AKIDCANARYOUTBOX",
        CANARY,
        Some("canary-session-token".into()),
    );
    let aws = Aws::connect(opts.clone()).await.expect("connect");
    let mut shown = format!("{opts:?}\n{aws:?}\n");

    // Success paths, a retry, and permanent failures.
    let bucket = common::unique("canary");
    let ok = common::sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({ "tags": { "k": "v" } }))).await;
    common::completed(&ok);
    let object =
        SyncAws::upsert("s3_object", format!("{bucket}/o"), json!({ "body": "hello", "metadata": { "m": "1" } }));
    common::completed(&common::sync(&t.db, &aws, &object).await);
    let orphan = SyncAws::upsert("s3_object", format!("{}/o", common::unique("nobucket")), json!({ "body": "x" }));
    let id =
        outbox::enqueue(&t.db, &orphan, EnqueueOpts::new().max_attempts(1)).await.expect("enqueue").id().to_owned();
    common::drain(&t.db, &aws).await;
    let failed = outbox::ops::get(&t.db, &id).await.expect("get");
    assert_eq!(failed.status, JobStatus::Failed);
    shown.push_str(&format!("{failed:?}\n"));

    // A dead endpoint: connection errors, with the same credentials.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let dead =
        Aws::connect(opts.endpoint_url(format!("http://127.0.0.1:{port}")).sdk_max_attempts(1)).await.expect("connect");
    let job = SyncAws::upsert("s3_bucket", common::unique("dead"), json!({}));
    let id = outbox::enqueue(&t.db, &job, EnqueueOpts::new().max_attempts(1)).await.expect("enqueue").id().to_owned();
    common::drain(&t.db, &dead).await;
    let unreachable = outbox::ops::get(&t.db, &id).await.expect("get");
    assert_eq!(unreachable.status, JobStatus::Failed);
    let report = outbox_aws::reconcile(&t.db, &dead, outbox_aws::ReconcileOpts::new()).await.expect("reconcile");
    assert!(report.check_failed >= 1, "{report:?}");
    shown.push_str(&format!("{report:?}\n{unreachable:?}\n"));

    // A missing region is a configuration error, which must not echo credentials either.
    let no_region = Aws::connect(AwsOpts::new().static_credentials("AKIDCANARYOUTBOX", CANARY, None)).await;
    if let Err(e) = no_region {
        shown.push_str(&format!("{e}\n{e:?}\n"));
    }

    let logs = logs.text();
    let rows = outbox_tests::job_rows(&t.db).await;
    // The capture is real: it holds our events and the SDK's request traces, and the rows hold the errors.
    assert!(logs.contains("aws resource in sync") && logs.contains("aws sync failed"), "{logs}");
    assert!(logs.contains("aws_smithy_runtime"), "the SDK's own traces are captured");
    assert!(rows.contains("does not exist (yet)") && rows.contains("connection failed"), "{rows}");
    for (what, text) in [("logs", &logs), ("job rows", &rows), ("errors and debug output", &shown)] {
        assert!(!text.contains(CANARY), "the secret access key leaked into {what}");
        assert!(!text.contains("canary-session-token"), "the session token leaked into {what}");
    }
}

/// `(variable, canary)` in the environment of [`environment_canaries_never_leak_on_bad_credentials_or_error_answers`]:
/// the secret key, the session token (the bearer of a temporary identity, sent as `x-amz-security-token`), and
/// an API key of another service. Random enough that any 12 characters of one are a leak.
const ENV_CANARIES: &[(&str, &str)] = &[
    ("AWS_SECRET_ACCESS_KEY", "cnryAwsSecret/R3tY6uI1oP5aS0gJ+Kq"),
    ("AWS_SESSION_TOKEN", "cnryBearer.H8jK2lZ4xC7vB1nM5wQ/Fq=="),
    ("ANTHROPIC_API_KEY", "sk-ant-cnry-Q7xK2mZ9vW4pL8dF"),
];
const FRAGMENT: usize = 12;
const CHILD: &str = "OUTBOX_TEST_AWS_SECRETS_CHILD";

/// Where `text` holds a canary or a piece of one, described without repeating it.
fn leaks(text: &str) -> Vec<String> {
    outbox_tests::leaks(text, ENV_CANARIES, FRAGMENT)
}

/// The canaries go in through the environment, which a test can only set for a process of its own; the
/// global log capture wants one too.
#[test]
fn environment_canaries_never_leak_on_bad_credentials_or_error_answers() {
    let name = "environment_canaries_never_leak_on_bad_credentials_or_error_answers_child";
    let home = tempfile::tempdir().expect("home");
    let run = outbox_tests::run_child(name, CHILD, |cmd| {
        cmd.env_clear();
        // An empty home, so no shared config or credentials file joins in, and no instance metadata lookup.
        cmd.env("HOME", home.path()).env("PATH", std::env::var_os("PATH").unwrap_or_default());
        cmd.env("AWS_EC2_METADATA_DISABLED", "true").env("AWS_REGION", "us-east-1");
        cmd.env("AWS_ACCESS_KEY_ID", "AKIDCANARYENVOUTBOX").envs(ENV_CANARIES.iter().copied());
    });
    for (what, text) in [("the child's stdout", &run.stdout), ("the child's stderr", &run.stderr)] {
        assert_eq!(leaks(text), Vec::<String>::new(), "in {what}");
    }
    run.assert_passed();
}

fn xml(status: u16, body: String) -> Reply {
    Reply { headers: vec![("content-type", "application/xml")], ..reply(status, body) }
}

fn s3_error(status: u16, code: &str, message: &str, extra: &str) -> Reply {
    xml(
        status,
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>{extra}<RequestId>R1</RequestId></Error>"#
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "half of environment_canaries_never_leak_on_bad_credentials_or_error_answers, which runs it with the canaries set"]
async fn environment_canaries_never_leak_on_bad_credentials_or_error_answers_child() {
    outbox_tests::child_half(CHILD, "environment_canaries_never_leak_on_bad_credentials_or_error_answers");
    let logs = outbox_tests::Captured::everything();
    let t = fresh_db().await;
    let token = ENV_CANARIES[1].1;
    // What S3 says to a request it cannot verify: the canonical request it computed, headers and all.
    let canonical = format!(
        "<AWSAccessKeyId>AKIDCANARYENVOUTBOX</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256</StringToSign>\
         <CanonicalRequest>DELETE /b-sig\nhost:127.0.0.1\nx-amz-security-token:{token}\n</CanonicalRequest>"
    );
    let delete = |bucket: &str| SyncAws::delete("s3_bucket", bucket);
    let cases: Vec<(&str, SyncAws, Vec<Reply>)> = vec![
        (
            "signature",
            delete("b-sig"),
            vec![s3_error(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match",
                &canonical,
            )],
        ),
        (
            "unknown-key",
            delete("b-key"),
            vec![s3_error(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist", "")],
        ),
        (
            "expired",
            delete("b-exp"),
            vec![Reply {
                // Echoed in a header too, which the SDK traces with the answer.
                headers: vec![("content-type", "application/xml"), ("x-amz-id-2", ENV_CANARIES[1].1)],
                ..s3_error(
                    400,
                    "ExpiredToken",
                    "The provided token has expired.",
                    &format!("<Token-0>{token}</Token-0>"),
                )
            }],
        ),
        ("echoed", delete("b-echo"), vec![s3_error(403, "AccessDenied", &format!("denied for token {token}"), "")]),
        ("server", delete("b-500"), vec![s3_error(500, "InternalError", &format!("failed on {token}"), "")]),
        ("malformed", delete("b-bad"), vec![xml(400, format!("<html>bad gateway for {token}"))]),
        (
            "sqs",
            SyncAws::upsert("sqs_queue", "q-token", json!({})),
            vec![Reply {
                headers: vec![
                    ("content-type", "application/x-amz-json-1.0"),
                    ("x-amzn-query-error", "InvalidClientTokenId;Sender"),
                ],
                ..reply(
                    403,
                    format!(
                        r#"{{"__type":"com.amazon.coral.service#InvalidClientTokenId","message":"The security token {token} is invalid"}}"#
                    ),
                )
            }],
        ),
    ];
    let mut shown = String::new();
    for (case, job, replies) in cases {
        let server = Server::start(replies).await;
        let aws = Aws::connect(AwsOpts::new().endpoint_url(&server.base).sdk_max_attempts(1)).await.expect("connect");
        shown.push_str(&format!("{aws:?}\n"));
        let row = failed(&t.db, &aws, &job).await;
        shown.push_str(&format!("{row:?}\n"));
        let seen = server.seen();
        assert!(!seen.is_empty() && seen.iter().all(|s| s.header("x-amz-security-token") == Some(token)), "{case}");
    }
    // A server that takes the request and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", silent.local_addr().expect("addr"));
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            sockets.push(socket);
        }
    });
    let opts = AwsOpts::new().endpoint_url(&base).sdk_max_attempts(1).operation_timeout(Duration::from_millis(500));
    let aws = Aws::connect(opts).await.expect("connect");
    shown.push_str(&format!("{:?}\n", failed(&t.db, &aws, &delete("b-silent")).await));
    held.abort();

    let logs = logs.text();
    let rows = outbox_tests::job_rows(&t.db).await;
    // The capture is real: our events, the SDK's traces of the answers, the errors in the rows.
    for needle in ["aws sync failed", "aws_smithy_runtime", "read HTTP response body", "TRACE"] {
        assert!(logs.contains(needle), "the logs hold `{needle}`");
    }
    for needle in ["SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken", "InvalidClientTokenId", "timed out"] {
        assert!(rows.contains(needle), "the rows hold `{needle}`");
    }
    let mut found = Vec::new();
    for (what, text) in [("logs", &logs), ("job rows", &rows), ("errors and debug output", &shown)] {
        found.extend(leaks(text).into_iter().map(|l| format!("{what}: {l}")));
    }
    assert!(found.is_empty(), "{} leak(s):\n{}", found.len(), found.join("\n"));
}

/// Runs `job` once; it must fail.
async fn failed(db: &sea_orm::DatabaseConnection, aws: &Aws, job: &SyncAws) -> outbox::JobRecord {
    let id = outbox::enqueue(db, job, EnqueueOpts::new().max_attempts(1)).await.expect("enqueue").id().to_owned();
    common::drain(db, aws).await;
    let row = outbox::ops::get(db, &id).await.expect("get");
    assert_eq!(row.status, JobStatus::Failed, "{}", job.resource_id);
    row
}
