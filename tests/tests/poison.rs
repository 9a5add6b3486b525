//! One bad row never stops the queue. A row a worker cannot read (a payload stored as a BLOB, text that is
//! not UTF-8, JSON of the wrong shape), written by another tool behind the framework's back, is failed by
//! itself with an error naming the column, and every other job runs. Where the database can refuse such a
//! write, it does: SQLite's jobs table is STRICT with text-only JSON columns, PostgreSQL's columns are typed.

use std::time::Duration;

use outbox_core::{EnqueueOpts, JobContext, JobError, JobStatus, Migrator, Worker, ops};
use outbox_tests::{Backend, Probe, TestDb, conformance, exec, scalar, sqlite_url, try_exec};
use sea_orm::DatabaseConnection;
use sea_orm_migration::MigratorTrait;

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
    outbox_core::enqueue_batch(db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
}

/// A database at the schema before enforced types (migration 4), as another tool could have written into.
async fn loose_database(dir: &tempfile::TempDir) -> DatabaseConnection {
    let db = outbox_core::connect(&sqlite_url(&dir.path().join("loose.db"))).await.expect("connect");
    Migrator::up(&db, Some(4)).await.expect("migrate to the loose schema");
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_rows_fail_alone_while_every_good_job_completes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = loose_database(&dir).await;
    enqueue_good(&db).await;
    let bad = [
        ("bad-blob", "x'00ff'", "its `payload` column holds a BLOB of 2 bytes"),
        ("bad-integer", "42", "invalid payload"),
        ("bad-real", "4.5", "invalid payload"),
        ("bad-utf8", "CAST(x'7b226e223a22ff227d' AS TEXT)", "its `payload` column holds text that is not UTF-8"),
    ];
    for (id, payload, _) in bad {
        exec(&db, &insert(Backend::Sqlite, id, payload), vec![]).await;
    }
    // More unreadable rows at the head of the queue than a claim takes: a claim made only of them must not
    // look like an empty queue.
    const MORE: usize = 20;
    for n in 0..MORE {
        exec(&db, &insert(Backend::Sqlite, &format!("bad-more-{n:02}"), "x'00'"), vec![]).await;
    }
    // Before, the first claim read the BLOB and failed as a whole, and so did every claim after it.
    drain(&db).await;

    let completed = scalar(&db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await;
    assert_eq!(completed, GOOD as i64, "every good job completes");
    for (id, _, says) in bad {
        let job = ops::get(&db, id).await.unwrap_or_else(|e| panic!("{id} can still be read for operators: {e}"));
        assert_eq!(job.status, JobStatus::Failed, "{id}");
        let error = job.last_error.unwrap_or_default();
        assert!(error.contains("payload") && error.contains(says), "{id}: {error}");
        assert_eq!(job.attempts, 1, "{id} failed at once, not retried");
    }
    let failed = ops::list(&db, &outbox_core::JobFilter { status: Some(JobStatus::Failed), ..Default::default() })
        .await
        .expect("the failed jobs are listed");
    assert_eq!(failed.len(), bad.len() + MORE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_to_enforced_types_keeps_every_row_and_fails_jobs_it_cannot_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = loose_database(&dir).await;
    enqueue_good(&db).await;
    exec(&db, &insert(Backend::Sqlite, "blob-pending", "x'00ff'"), vec![]).await;
    exec(&db, &insert(Backend::Sqlite, "blob-done", "x'01'"), vec![]).await;
    exec(&db, "UPDATE outbox_jobs SET status = 'completed', output = x'02' WHERE id = 'blob-done'", vec![]).await;
    // Text where a number belongs passed the old table's checks (text sorts above every number).
    exec(&db, &insert(Backend::Sqlite, "text-attempts", r#"'{"n": 7}'"#), vec![]).await;
    exec(&db, "UPDATE outbox_jobs SET max_attempts = 'many' WHERE id = 'text-attempts'", vec![]).await;
    let events_before = scalar(&db, "SELECT COUNT(*) FROM outbox_job_events").await;

    outbox_core::migrate(&db).await.expect("upgrade");

    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM outbox_jobs").await, GOOD as i64 + 3, "no row lost");
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM outbox_job_events").await, events_before, "history kept");
    let pending = ops::get(&db, "blob-pending").await.expect("read");
    assert_eq!(pending.status, JobStatus::Failed);
    assert!(pending.last_error.as_deref().unwrap_or_default().contains("`payload` column holds a BLOB of 2 bytes"));
    assert_eq!(pending.payload, serde_json::json!("x'00FF'"), "the bytes are kept");
    let done = ops::get(&db, "blob-done").await.expect("read");
    assert_eq!(done.status, JobStatus::Completed);
    assert_eq!((done.payload, done.output), (serde_json::json!("x'01'"), Some(serde_json::json!("x'02'"))));
    let objects = scalar(
        &db,
        "SELECT COUNT(*) FROM sqlite_master WHERE tbl_name = 'outbox_jobs' AND type IN ('index', 'trigger') \
         AND name NOT LIKE 'sqlite_autoindex%'",
    )
    .await;
    assert_eq!(objects, 13, "the rebuilt table has its 7 indexes and 5 triggers back, and the feed's enqueued trigger");
    drain(&db).await;
    assert_eq!(scalar(&db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, GOOD as i64 + 2);
}

conformance!(the_database_refuses_payloads_that_are_not_json_text);
async fn the_database_refuses_payloads_that_are_not_json_text(t: TestDb) {
    let (blob, integer, real) = match t.backend {
        Backend::Sqlite => ("x'00ff'", "42", "4.5"),
        Backend::Postgres => ("'\\x00ff'::bytea", "42", "4.5"),
    };
    for (n, payload) in [blob, integer, real].into_iter().enumerate() {
        let err = try_exec(&t.db, &insert(t.backend, &format!("bad-{n}"), payload), vec![])
            .await
            .expect_err(&format!("a payload of {payload} is refused"));
        assert!(err.to_string().contains("payload"), "{payload}: {err}");
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0, "nothing written");

    // Nor can an update put one there, or text where a number belongs.
    let id = outbox_core::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    let blob_update = format!("UPDATE outbox_jobs SET payload = {blob} WHERE id = '{id}'");
    let err = try_exec(&t.db, &blob_update, vec![]).await.expect_err("a BLOB payload by update is refused");
    assert!(err.to_string().contains("payload"), "{err}");
    let text_attempts = format!("UPDATE outbox_jobs SET attempts = 'many' WHERE id = '{id}'");
    let err = try_exec(&t.db, &text_attempts, vec![]).await.expect_err("text attempts are refused");
    assert!(err.to_string().contains("attempts") || err.to_string().contains("integer"), "{err}");
    let job = ops::get(&t.db, &id).await.expect("read");
    assert_eq!((job.payload, job.attempts), (serde_json::json!({"n": 1}), 0));
}
