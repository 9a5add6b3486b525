//! Write transactions the way the guides open them: safe under concurrency on every backend, with the
//! caller's own error type, and never left aborted by a refused enqueue.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use outbox::prelude::*;
use outbox::{Error, JobStatus, ops};
use outbox_tests::{Backend, Probe, TestDb, conformance, exec, scalar, try_exec};
use serde::{Deserialize, Serialize};
use serde_json::json;

conformance!(concurrent_read_then_write_transactions_all_commit, mysql);
/// 50 tasks each read, then write a domain row and enqueue, in `outbox::transaction`, while a worker
/// runs: every one commits.
async fn concurrent_read_then_write_transactions_all_commit(t: TestDb) {
    exec(&t.db, "CREATE TABLE orders (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)", vec![]).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let worker = Worker::builder(&t.db)
        .concurrency(8)
        .register(move |_job: Probe, _ctx: JobContext| {
            let counter = Arc::clone(&counter);
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    let mut tasks = Vec::new();
    for n in 1..=50_u64 {
        let db = t.db.clone();
        tasks.push(tokio::spawn(async move {
            outbox::transaction(&db, async |txn| {
                let before = scalar(txn, "SELECT COUNT(*) FROM orders").await;
                try_exec(txn, "INSERT INTO orders (id, n) VALUES (?, ?)", vec![(n as i64).into(), before.into()])
                    .await?;
                outbox::enqueue(txn, &Probe { n }, EnqueueOpts::new()).await
            })
            .await
        }));
    }
    let mut committed = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(_) => committed += 1,
            Err(e) => panic!("a transaction failed: {e}"),
        }
    }
    assert_eq!(committed, 50);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM orders").await, 50);
    assert!(outbox_tests::wait_count(&ran, 50, Duration::from_secs(30)).await, "ran {}", ran.load(Ordering::SeqCst));
    worker.shutdown().await.expect("shutdown");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 50);
}

/// A job whose handler reads, then writes, in its own transaction.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "tally")]
struct Tally {
    n: i64,
}

conformance!(handlers_read_then_write_in_their_own_transactions, mysql);
/// 40 handlers each do read-then-write in their own `outbox::transaction` while 8 run at once and the
/// worker writes outcomes: no job fails.
async fn handlers_read_then_write_in_their_own_transactions(t: TestDb) {
    exec(&t.db, "CREATE TABLE tallies (n INTEGER PRIMARY KEY, seen INTEGER NOT NULL)", vec![]).await;
    let db = t.db.clone();
    let worker = Worker::builder(&t.db)
        .concurrency(8)
        .register(move |job: Tally, _ctx: JobContext| {
            let db = db.clone();
            async move {
                outbox::transaction(&db, async |txn| {
                    let seen = scalar(txn, "SELECT COUNT(*) FROM tallies").await;
                    try_exec(txn, "INSERT INTO tallies (n, seen) VALUES (?, ?)", vec![job.n.into(), seen.into()])
                        .await?;
                    Ok::<_, Error>(())
                })
                .await
                .map_err(JobError::retry)
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    let jobs: Vec<Tally> = (1..=40).map(|n| Tally { n }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let done = outbox_tests::wait_scalar(
        &t.db,
        "SELECT COUNT(*) FROM outbox_jobs WHERE status IN ('completed', 'failed')",
        40,
        Duration::from_secs(60),
    )
    .await;
    worker.shutdown().await.expect("shutdown");
    assert!(done, "the jobs did not finish");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'failed'").await, 0);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE attempts > 1").await, 0, "no attempt failed");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM tallies").await, 40);
}

conformance!(a_deferred_transaction_that_cannot_write_names_the_fix, mysql);
/// A plain `db.begin()` that reads, sees another writer commit, then enqueues: SQLite refuses the upgrade at
/// once, and the error names the fix. PostgreSQL takes the same code.
async fn a_deferred_transaction_that_cannot_write_names_the_fix(t: TestDb) {
    use outbox::sea_orm::TransactionTrait;

    exec(&t.db, "CREATE TABLE orders (id INTEGER PRIMARY KEY)", vec![]).await;
    let txn = t.db.begin().await.expect("begin");
    assert_eq!(scalar(&txn, "SELECT COUNT(*) FROM orders").await, 0);
    exec(&t.db, "INSERT INTO orders (id) VALUES (1)", vec![]).await;
    let result = outbox::enqueue(&txn, &Probe { n: 1 }, EnqueueOpts::new()).await;
    match t.backend {
        Backend::Sqlite => {
            let err = result.expect_err("SQLite cannot upgrade the snapshot");
            let text = err.to_string();
            assert!(text.contains("(code: 517)") && text.contains("began with a read"), "{text}");
            assert!(text.contains("`outbox::transaction`") && text.contains("`outbox::begin`"), "{text}");
            txn.rollback().await.expect("rollback");
        }
        Backend::Postgres | Backend::MySql => {
            result.expect("enqueue");
            txn.commit().await.expect("commit");
            assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 1);
        }
    }
}

outbox_tests::sqlite_only!(a_locked_database_names_its_real_cause);
/// SQLite's two "database is locked" errors name their own cause. A plain `db.begin()` that has read, while
/// another connection holds the write lock, is failed at once (code 5, not 517): waiting cannot help, and the
/// error names `outbox::transaction` / `begin`, not the busy timeout. An enqueue that waited its whole
/// busy timeout behind a long write transaction is told to look for it or raise the timeout.
async fn a_locked_database_names_its_real_cause(t: TestDb) {
    use outbox::sea_orm::TransactionTrait;

    exec(&t.db, "CREATE TABLE orders (id INTEGER PRIMARY KEY)", vec![]).await;
    let other = t.connect().await;
    let holder = outbox::begin(&other).await.expect("take the write lock");
    exec(&holder, "INSERT INTO orders (id) VALUES (1)", vec![]).await;

    let txn = t.db.begin().await.expect("begin");
    assert_eq!(scalar(&txn, "SELECT COUNT(*) FROM orders").await, 0);
    let err = outbox::enqueue(&txn, &Probe { n: 1 }, EnqueueOpts::new()).await.expect_err("locked");
    let text = err.to_string();
    assert!(text.contains("(code: 5)"), "{text}");
    assert!(text.contains("began with a read") && text.contains("`outbox::transaction`"), "{text}");
    assert!(text.contains("`outbox::begin`") && !text.contains("busy_timeout"), "{text}");
    txn.rollback().await.expect("rollback");

    let opts = outbox::ConnectOpts { busy_timeout: Duration::from_millis(200), ..Default::default() };
    let impatient = outbox::connect_with(&t.url, opts).await.expect("connect");
    let err = outbox::enqueue(&impatient, &Probe { n: 2 }, EnqueueOpts::new()).await.expect_err("locked");
    let text = err.to_string();
    assert!(text.contains("past the busy timeout of 200ms") && text.contains("`ConnectOpts::busy_timeout`"), "{text}");
    assert!(!text.contains("began with a read"), "{text}");
    holder.commit().await.expect("commit");
}

fn chrono_min() -> outbox::chrono::DateTime<outbox::chrono::Utc> {
    outbox::chrono::DateTime::<outbox::chrono::Utc>::MIN_UTC
}

/// A payload line of text, for the NUL test.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "line", unique = false)]
struct Line {
    text: String,
}

conformance!(nul_in_a_payload_is_refused_before_sql_where_it_cannot_be_stored, mysql);
/// NUL in a payload string: PostgreSQL cannot store it, so enqueue refuses it before any SQL, naming the
/// field, and the caller's transaction goes on to commit its other writes. SQLite stores it.
async fn nul_in_a_payload_is_refused_before_sql_where_it_cannot_be_stored(t: TestDb) {
    exec(&t.db, "CREATE TABLE notes (id INTEGER PRIMARY KEY)", vec![]).await;
    let backend = t.backend;
    outbox::transaction(&t.db, async |txn| {
        try_exec(txn, "INSERT INTO notes (id) VALUES (1)", vec![]).await?;
        let refused = outbox::enqueue(txn, &Line { text: "a\0b".into() }, EnqueueOpts::new()).await;
        match backend {
            Backend::Postgres => match refused {
                Err(Error::InvalidPayload { violations, .. }) => {
                    assert_eq!(violations.len(), 1, "{violations:?}");
                    assert_eq!(violations[0].path, "/text");
                    assert!(violations[0].message.contains("NUL"), "{}", violations[0].message);
                }
                other => panic!("expected an invalid payload, got {other:?}"),
            },
            Backend::Sqlite | Backend::MySql => assert!(refused.expect("SQLite and MySQL store NUL").is_new()),
        }
        // A NUL in an object key is named too, where the backend refuses it.
        let raw = outbox::Kind::from_schema("free", json!({"type": "object"}), outbox::KindOpts::DEFAULT)?;
        let keyed = outbox::enqueue_raw(txn, &raw, json!({"ok": {"k\u{0}ey": 1}}), EnqueueOpts::new()).await;
        if backend == Backend::Postgres {
            let text = keyed.expect_err("NUL key").to_string();
            assert!(text.contains("at /ok/k\u{0}ey"), "{text}");
        }
        // So are a run time no backend can hold and a NUL in a queue name or key.
        let line = Line { text: "later".into() };
        for opts in [
            EnqueueOpts::new().delay(Duration::MAX),
            EnqueueOpts::new().run_at(chrono_min()),
            EnqueueOpts::new().queue("a\0b"),
            EnqueueOpts::new().idempotency_key("k\0"),
            EnqueueOpts::new().idempotency_key("k".repeat(513)),
            EnqueueOpts::new().queue("q".repeat(256)),
        ] {
            let refused = outbox::enqueue(txn, &line, opts.clone()).await;
            assert!(matches!(refused, Err(Error::InvalidOpts { .. })), "{opts:?}: {refused:?}");
        }
        try_exec(txn, "INSERT INTO notes (id) VALUES (2)", vec![]).await?;
        outbox::enqueue(txn, &Line { text: "fine".into() }, EnqueueOpts::new()).await?;
        Ok::<_, Error>(())
    })
    .await
    .expect("the transaction commits");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM notes").await, 2);
    let lines = scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'line'").await;
    assert_eq!(lines, if backend == Backend::Postgres { 1 } else { 2 });
}

conformance!(payloads_nested_too_deep_are_refused_at_enqueue, mysql);
/// Nesting deeper than the worker can read back is refused at enqueue with the path where it goes too deep;
/// the deepest accepted payload runs.
async fn payloads_nested_too_deep_are_refused_at_enqueue(t: TestDb) {
    let kind = outbox::Kind::from_schema("free", json!({"type": "object"}), outbox::KindOpts::DEFAULT).expect("kind");
    let nest = |levels: usize| {
        let mut v = json!(1);
        for _ in 1..levels {
            v = json!([v]);
        }
        json!({ "a": v })
    };
    // MariaDB's JSON columns refuse more than 31 levels (10.6 to 12.1): the engine names that limit at enqueue.
    let (most, refusal) = match t.backend {
        Backend::MySql => (31, "nested more than 31 deep here, which MariaDB's JSON columns refuse"),
        _ => (127, "nests deeper than 127"),
    };
    let deepest = nest(most);
    let text = serde_json::to_string(&deepest).expect("text");
    serde_json::from_str::<serde_json::Value>(&text).expect("the worker can read the deepest accepted payload");
    let ok = outbox::enqueue_raw(&t.db, &kind, deepest, EnqueueOpts::new()).await.expect("accepted");
    let err = outbox::enqueue_raw(&t.db, &kind, nest(most + 1), EnqueueOpts::new()).await.expect_err("too deep");
    let text = err.to_string();
    assert!(text.contains(refusal), "{text}");
    assert!(text.contains("at /a/0/0/"), "{text}");
    // A hostile depth is refused by a check that does not recurse (dropping the value does, so the test
    // stays at a depth a test thread's stack can drop).
    let mut hostile = json!(0);
    for _ in 0..3_000 {
        hostile = json!([hostile]);
    }
    let err = outbox::enqueue_raw(&t.db, &kind, json!({ "h": hostile }), EnqueueOpts::new()).await;
    assert!(matches!(err, Err(Error::InvalidPayload { .. })), "{err:?}");
    assert_eq!(ops::get(&t.db, ok.id()).await.expect("get").status, JobStatus::Pending);
}

conformance!(wait_returns_the_finished_job_or_times_out, mysql);
/// `ops::wait` returns a job's record once it is finished, and says how long it waited otherwise.
async fn wait_returns_the_finished_job_or_times_out(t: TestDb) {
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let err = ops::wait(&t.db, job.id(), Duration::from_millis(100)).await.expect_err("nothing runs it");
    assert!(matches!(err, Error::WaitTimeout { status: JobStatus::Pending, .. }), "{err}");
    assert!(err.to_string().contains("still pending after waiting"), "{err}");
    let worker = Worker::builder(&t.db)
        .poll_interval(Duration::from_secs(3600))
        .register(|job: Probe, _ctx: JobContext| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, JobError>(json!({ "n": job.n }))
        })
        .build()
        .await
        .expect("build")
        .start();
    let started = std::time::Instant::now();
    let done = ops::wait(&t.db, job.id(), Duration::from_secs(30)).await.expect("wait");
    assert_eq!(done.status, JobStatus::Completed);
    assert_eq!(done.output, Some(json!({ "n": 1 })));
    assert!(started.elapsed() < Duration::from_secs(30));
    worker.shutdown().await.expect("shutdown");
    let err = ops::wait(&t.db, "no-such-job", Duration::from_secs(1)).await.expect_err("unknown id");
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
}

/// A job keyed by a long text field.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "doc")]
struct Doc {
    #[job(key)]
    path: String,
}

conformance!(long_derived_keys_are_stored_as_their_hash_and_still_dedupe, mysql);
/// A key field of 5,000 characters would not fit a unique index entry on every backend: the key is stored as
/// its sha256 and the same intent still collapses onto one job.
async fn long_derived_keys_are_stored_as_their_hash_and_still_dedupe(t: TestDb) {
    let doc = Doc { path: "p/".repeat(2_500) };
    let first = outbox::enqueue(&t.db, &doc, EnqueueOpts::new()).await.expect("enqueue");
    let again = outbox::enqueue(&t.db, &doc, EnqueueOpts::new()).await.expect("enqueue again");
    assert!(first.is_new() && !again.is_new() && first.id() == again.id());
    let key = ops::get(&t.db, first.id()).await.expect("get").idempotency_key.expect("key");
    assert!(key.starts_with("sha256:") && key.len() == 71, "{key}");
    let other = outbox::enqueue(&t.db, &Doc { path: "q/".repeat(2_500) }, EnqueueOpts::new()).await.expect("other");
    assert!(other.is_new());
}
