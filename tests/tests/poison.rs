//! One bad row never stops the queue. A row a worker cannot read (a payload stored as a BLOB, text that is
//! not UTF-8, JSON of the wrong shape), written by another tool behind the framework's back, is failed by
//! itself with an error naming the column, and every other job runs. Where the database can refuse such a
//! write, it does: SQLite's jobs table is STRICT with text-only JSON columns, PostgreSQL's columns are typed.

use std::time::Duration;

use outbox::{EnqueueOpts, JobContext, JobError, JobStatus, Worker, ops};
use outbox_tests::{Backend, Probe, TestDb, conformance, exec, scalar, sqlite_url, try_exec};
use sea_orm::DatabaseConnection;

const GOOD: u64 = 1_000;

/// A raw insert of a pending `probe` job due long ago (so it is at the head of the queue) with `payload`
/// as SQL.
fn insert(backend: Backend, id: &str, payload: &str) -> String {
    format!(
        "INSERT INTO outbox_jobs (id, kind, queue, payload, status, run_at, schema_hash, created_at, updated_at) \
         VALUES ('{id}', 'probe', 'default', {payload}, 'pending', {t}, 'hand-written', {t}, {t})",
        t = backend.time(0)
    )
}

async fn drain(db: &DatabaseConnection) {
    let worker = Worker::builder(db)
        .concurrency(8)
        .poll_interval(Duration::from_millis(20))
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build the worker");
    tokio::time::timeout(Duration::from_secs(120), worker.drain()).await.expect("drained in time").expect("drain");
}

async fn enqueue_good(db: &DatabaseConnection) {
    let jobs: Vec<Probe> = (1..=GOOD).map(|n| Probe { n }).collect();
    outbox::enqueue_batch(db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
}

/// Text that is not UTF-8 is the one unreadable payload the strict table cannot refuse (SQLite checks the type
/// of a value, not its encoding): another tool can still write it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_rows_fail_alone_while_every_good_job_completes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = outbox::connect(&sqlite_url(&dir.path().join("outbox.db"))).await.expect("connect");
    outbox::migrate(&db).await.expect("migrate");
    enqueue_good(&db).await;
    let not_utf8 = "CAST(x'7b226e223a22ff227d' AS TEXT)";
    exec(&db, &insert(Backend::Sqlite, "bad-utf8", not_utf8), vec![]).await;
    // More unreadable rows at the head of the queue than a claim takes: a claim made only of them must not
    // look like an empty queue.
    const MORE: usize = 20;
    for n in 0..MORE {
        exec(&db, &insert(Backend::Sqlite, &format!("bad-more-{n:02}"), "CAST(x'ff' AS TEXT)"), vec![]).await;
    }
    drain(&db).await;

    let completed = scalar(&db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await;
    assert_eq!(completed, GOOD as i64, "every good job completes");
    for n in std::iter::once("bad-utf8".to_owned()).chain((0..MORE).map(|n| format!("bad-more-{n:02}"))) {
        let job = ops::get(&db, &n).await.unwrap_or_else(|e| panic!("{n} can still be read for operators: {e}"));
        assert_eq!(job.status, JobStatus::Failed, "{n}");
        let error = job.last_error.unwrap_or_default();
        assert!(error.contains("its `payload` column holds text that is not UTF-8"), "{n}: {error}");
        assert_eq!(job.attempts, 1, "{n} failed at once, not retried");
    }
    let failed = ops::list(&db, &outbox::JobFilter { status: Some(JobStatus::Failed), ..Default::default() })
        .await
        .expect("the failed jobs are listed");
    assert_eq!(failed.len(), 1 + MORE);
}

conformance!(the_database_refuses_payloads_that_are_not_json_text, mysql);
async fn the_database_refuses_payloads_that_are_not_json_text(t: TestDb) {
    let (blob, integer, real) = match t.backend {
        Backend::Sqlite => ("x'00ff'", "42", "4.5"),
        Backend::Postgres => ("'\\x00ff'::bytea", "42", "4.5"),
        // MariaDB's JSON is text that must be valid JSON, which `42` and `4.5` are: text that is not JSON instead.
        Backend::MySql => ("x'00ff'", "'not json'", "'{\"n\": 1'"),
    };
    for (n, payload) in [blob, integer, real].into_iter().enumerate() {
        let err = try_exec(&t.db, &insert(t.backend, &format!("bad-{n}"), payload), vec![])
            .await
            .expect_err(&format!("a payload of {payload} is refused"));
        assert!(err.to_string().contains("payload"), "{payload}: {err}");
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0, "nothing written");

    // Nor can an update put one there, or text where a number belongs.
    let id = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    let blob_update = format!("UPDATE outbox_jobs SET payload = {blob} WHERE id = '{id}'");
    let err = try_exec(&t.db, &blob_update, vec![]).await.expect_err("a BLOB payload by update is refused");
    assert!(err.to_string().contains("payload"), "{err}");
    let text_attempts = format!("UPDATE outbox_jobs SET attempts = 'many' WHERE id = '{id}'");
    let err = try_exec(&t.db, &text_attempts, vec![]).await.expect_err("text attempts are refused");
    assert!(err.to_string().contains("attempts") || err.to_string().contains("integer"), "{err}");
    let job = ops::get(&t.db, &id).await.expect("read");
    assert_eq!((job.payload, job.attempts), (serde_json::json!({"n": 1}), 0));
}
