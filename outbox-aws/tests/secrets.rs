//! A canary secret access key never appears in captured logs (every level, the SDK's own included),
//! errors, or job rows, on success and failure paths alike.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use outbox_aws::{Aws, AwsOpts, SyncAws};
use outbox_core::{EnqueueOpts, JobStatus};
use outbox_tests::fresh_db;
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::json;

const CANARY: &str = "CanarySecretKey/9f8e7d6c5b4a+outbox";

/// Everything logged, at every level, from every crate.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
    }
}

/// Every column of every job and event row, as text.
async fn rows(db: &sea_orm::DatabaseConnection) -> String {
    let mut out = String::new();
    for table in ["outbox_jobs", "outbox_job_events"] {
        let sql = format!("SELECT * FROM {table}");
        for row in db.query_all_raw(Statement::from_string(DbBackend::Sqlite, sql)).await.expect("rows") {
            for i in 0.. {
                match row.try_get_by_index::<Option<String>>(i) {
                    Ok(v) => out.push_str(&format!("{v:?}|")),
                    Err(_) => match row.try_get_by_index::<Option<i64>>(i) {
                        Ok(v) => out.push_str(&format!("{v:?}|")),
                        Err(_) => break,
                    },
                }
            }
            out.push('\n');
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_secret_never_leaves_the_credentials() {
    let Some(endpoint) = common::endpoint("a_canary_secret_never_leaves_the_credentials") else { return };
    let logs = Captured::default();
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
    let id = outbox_core::enqueue(&t.db, &orphan, EnqueueOpts::new().max_attempts(1))
        .await
        .expect("enqueue")
        .id()
        .to_owned();
    common::drain(&t.db, &aws).await;
    let failed = outbox_core::ops::get(&t.db, &id).await.expect("get");
    assert_eq!(failed.status, JobStatus::Failed);
    shown.push_str(&format!("{failed:?}\n"));

    // A dead endpoint: connection errors, with the same credentials.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let dead =
        Aws::connect(opts.endpoint_url(format!("http://127.0.0.1:{port}")).sdk_max_attempts(1)).await.expect("connect");
    let job = SyncAws::upsert("s3_bucket", common::unique("dead"), json!({}));
    let id =
        outbox_core::enqueue(&t.db, &job, EnqueueOpts::new().max_attempts(1)).await.expect("enqueue").id().to_owned();
    common::drain(&t.db, &dead).await;
    let unreachable = outbox_core::ops::get(&t.db, &id).await.expect("get");
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
    let rows = rows(&t.db).await;
    // The capture is real: it holds our events and the SDK's request traces, and the rows hold the errors.
    assert!(logs.contains("aws resource in sync") && logs.contains("aws sync failed"), "{logs}");
    assert!(logs.contains("aws_smithy_runtime"), "the SDK's own traces are captured");
    assert!(rows.contains("does not exist (yet)") && rows.contains("connection failed"), "{rows}");
    for (what, text) in [("logs", &logs), ("job rows", &rows), ("errors and debug output", &shown)] {
        assert!(!text.contains(CANARY), "the secret access key leaked into {what}");
        assert!(!text.contains("canary-session-token"), "the session token leaked into {what}");
    }
}
