//! Worker behaviour on every backend: outcomes, retries, snooze, panics, invalid payloads, unknown kinds,
//! stale writers and graceful shutdown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox::{EnqueueOpts, JobContext, JobError, JobStatus, Kind, KindOpts, RetryPolicy, Worker, ops};
use outbox_tests::{Backend, Probe, Span, TestDb, conformance, exec, scalar, try_exec};
use serde_json::json;
use tokio::sync::Notify;

fn quick(db: &sea_orm::DatabaseConnection) -> outbox::WorkerBuilder {
    Worker::builder(db).poll_interval(Duration::from_millis(20)).retry_policy(RetryPolicy {
        base: Duration::from_millis(50),
        max: Duration::from_secs(1),
        jitter: 0.0,
    })
}

conformance!(completes_jobs_and_records_output, mysql);
async fn completes_jobs_and_records_output(t: TestDb) {
    for n in 1..=20 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let worker = quick(&t.db)
        .concurrency(4)
        .register(|job: Probe, ctx: JobContext| async move {
            Ok::<_, JobError>(json!({"double": job.n * 2, "attempt": ctx.attempt()}))
        })
        .build()
        .await
        .expect("build");
    worker.drain().await.expect("drain");
    let done = ops::list(&t.db, &outbox::JobFilter { status: Some(JobStatus::Completed), ..Default::default() })
        .await
        .expect("list");
    assert_eq!(done.len(), 20);
    for job in done {
        let n: u64 = job.payload["n"].as_u64().expect("n");
        let out = job.output.clone().expect("output");
        assert_eq!(out, json!({"double": n * 2, "attempt": 1}));
        assert_eq!(job.attempts, 1);
        assert!(job.completed_at.is_some() && job.claimed_at.is_some());
        assert_eq!(job.lease_expires_at, None);
    }
}

conformance!(a_completion_the_database_refuses_fails_that_job_alone_and_at_once, mysql);
/// A completion the database refuses for good (here a trigger an operator added) fails that job with the
/// database's reason as soon as it is refused, and the rest of its batch completes: nothing waits for a lease to
/// run out, and the job does not run again to be refused again.
async fn a_completion_the_database_refuses_fails_that_job_alone_and_at_once(t: TestDb) {
    let refuse = match t.backend {
        Backend::Sqlite => vec![
            "CREATE TRIGGER refuse_13 BEFORE UPDATE OF status ON outbox_jobs \
             WHEN NEW.status = 'completed' AND json_extract(NEW.payload, '$.n') = 13 \
             BEGIN SELECT RAISE(ABORT, 'job 13 may not complete'); END",
        ],
        Backend::Postgres => vec![
            "CREATE FUNCTION refuse_13() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'job 13 may not complete'; END $$",
            "CREATE TRIGGER refuse_13 BEFORE UPDATE OF status ON outbox_jobs FOR EACH ROW \
             WHEN (NEW.status = 'completed' AND NEW.payload ->> 'n' = '13') EXECUTE FUNCTION refuse_13()",
        ],
        Backend::MySql => vec![
            "CREATE TRIGGER refuse_13 BEFORE UPDATE ON outbox_jobs FOR EACH ROW \
             IF NEW.status = 'completed' AND OLD.status <> 'completed' AND JSON_EXTRACT(NEW.payload, '$.n') = 13 THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'job 13 may not complete'; END IF",
        ],
    };
    for sql in refuse {
        exec(&t.db, sql, vec![]).await;
    }
    let mut ids = Vec::new();
    for n in 1..=20 {
        ids.push(outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned());
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let worker = quick(&t.db)
        .concurrency(20)
        .register(move |_: Probe, _: JobContext| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, JobError>(json!({"ok": true})) }
        })
        .build()
        .await
        .expect("build");
    // The drain ends once every outcome is written; a refused batch must not wait out its leases first.
    tokio::time::timeout(Duration::from_secs(60), worker.drain())
        .await
        .expect("the drain ended within a minute")
        .expect("drain");
    for (n, id) in (1..=20).zip(&ids) {
        let job = ops::get(&t.db, id).await.expect("get");
        if n == 13 {
            assert_eq!(job.status, JobStatus::Failed, "job {n}: {job:?}");
            let error = job.last_error.clone().unwrap_or_default();
            assert!(error.contains("could not be stored") && error.contains("job 13 may not complete"), "{error}");
            assert_eq!(job.output, None);
        } else {
            assert_eq!(job.status, JobStatus::Completed, "job {n}: {job:?}");
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 20, "each job ran once");
}

conformance!(retries_back_off_then_fail_after_max_attempts, mysql);
async fn retries_back_off_then_fail_after_max_attempts(t: TestDb) {
    let id = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let calls = Arc::new(Mutex::new(Vec::<(i32, Instant)>::new()));
    let seen = Arc::clone(&calls);
    let handle = quick(&t.db)
        .register(move |_: Probe, ctx: JobContext| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().expect("lock").push((ctx.attempt(), Instant::now()));
                Err::<(), _>(JobError::retry("upstream unavailable"))
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    let failed = outbox_tests::wait_status(&t.db, id.id(), JobStatus::Failed, Duration::from_secs(20)).await;
    handle.shutdown().await.expect("shutdown");
    assert!(failed, "job did not fail in time");
    let job = ops::get(&t.db, id.id()).await.expect("get");
    assert_eq!(job.attempts, 3);
    let error = job.last_error.expect("error");
    assert!(error.contains("upstream unavailable") && error.contains("attempt 3 of 3"), "{error}");
    let calls = calls.lock().expect("lock").clone();
    assert_eq!(calls.iter().map(|c| c.0).collect::<Vec<_>>(), vec![1, 2, 3]);
    let history = ops::history(&t.db, id.id()).await.expect("history");
    let events: Vec<(&str, i32)> = history.iter().map(|e| (e.event.as_str(), e.attempt)).collect();
    assert_eq!(
        events,
        vec![
            ("enqueued", 0),
            ("claimed", 1),
            ("retried", 1),
            ("claimed", 2),
            ("retried", 2),
            ("claimed", 3),
            ("failed", 3)
        ]
    );
    assert_eq!(history[2].error.as_deref(), Some("upstream unavailable"));
    assert!(history[6].error.as_deref().is_some_and(|e| e.contains("attempt 3 of 3")));
    // Backoff 50 ms, then 100 ms (no jitter).
    assert!(calls[1].1 - calls[0].1 >= Duration::from_millis(50), "{calls:?}");
    assert!(calls[2].1 - calls[1].1 >= Duration::from_millis(100), "{calls:?}");
}

conformance!(snooze_uses_no_attempt_and_permanent_errors_do_not_retry, mysql);
async fn snooze_uses_no_attempt_and_permanent_errors_do_not_retry(t: TestDb) {
    let snoozer = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let doomed = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    let calls = Arc::new(Mutex::new(Vec::<(u64, i32)>::new()));
    let seen = Arc::clone(&calls);
    let handle = quick(&t.db)
        .register(move |job: Probe, ctx: JobContext| {
            let seen = Arc::clone(&seen);
            async move {
                let first = {
                    let mut calls = seen.lock().expect("lock");
                    calls.push((job.n, ctx.attempt()));
                    calls.iter().filter(|c| c.0 == job.n).count() == 1
                };
                match job.n {
                    1 if first => Err(JobError::snooze(Duration::from_millis(100))),
                    1 => Ok(()),
                    _ => Err(JobError::permanent("the account is closed")),
                }
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    let settled = outbox_tests::wait_scalar(
        &t.db,
        "SELECT COUNT(*) FROM outbox_jobs WHERE status IN ('completed', 'failed')",
        2,
        Duration::from_secs(20),
    )
    .await;
    handle.shutdown().await.expect("shutdown");
    assert!(settled);
    let job = ops::get(&t.db, snoozer.id()).await.expect("get");
    assert_eq!((job.status, job.attempts), (JobStatus::Completed, 1));
    let events: Vec<String> =
        ops::history(&t.db, snoozer.id()).await.expect("history").into_iter().map(|e| e.event.to_string()).collect();
    assert_eq!(events, ["enqueued", "claimed", "snoozed", "claimed", "completed"]);
    let job = ops::get(&t.db, doomed.id()).await.expect("get");
    assert_eq!((job.status, job.attempts), (JobStatus::Failed, 1));
    assert_eq!(job.last_error.as_deref(), Some("the account is closed"));
    let mut calls = calls.lock().expect("lock").clone();
    calls.sort();
    assert_eq!(calls, vec![(1, 1), (1, 1), (2, 1)]);
}

conformance!(a_panicking_handler_is_one_failed_attempt_and_the_worker_lives_on, mysql);
async fn a_panicking_handler_is_one_failed_attempt_and_the_worker_lives_on(t: TestDb) {
    let boom = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let fine = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new().delay(Duration::from_millis(200)))
        .await
        .expect("enqueue");
    let handle = quick(&t.db)
        .register(|job: Probe, ctx: JobContext| async move {
            if job.n == 1 && ctx.attempt() == 1 {
                panic!("boom at attempt {}", ctx.attempt());
            }
            Ok::<_, JobError>(())
        })
        .build()
        .await
        .expect("build")
        .start();
    let done = outbox_tests::wait_scalar(
        &t.db,
        "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'",
        2,
        Duration::from_secs(20),
    )
    .await;
    assert!(!handle.is_finished(), "the worker died");
    handle.shutdown().await.expect("shutdown");
    assert!(done);
    let job = ops::get(&t.db, boom.id()).await.expect("get");
    assert_eq!(job.attempts, 2);
    assert_eq!(job.last_error.as_deref(), Some("handler panicked: boom at attempt 1"));
    assert_eq!(ops::get(&t.db, fine.id()).await.expect("get").attempts, 1);
}

conformance!(a_corrupted_payload_fails_permanently_on_its_first_claim, mysql);
async fn a_corrupted_payload_fails_permanently_on_its_first_claim(t: TestDb) {
    let bad_value = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let not_json = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    let drifted = outbox::enqueue(&t.db, &Probe { n: 3 }, EnqueueOpts::new()).await.expect("enqueue");
    exec(&t.db, "UPDATE outbox_jobs SET payload = '{\"n\": \"oops\"}' WHERE id = ?", vec![bad_value.id().into()]).await;
    // SQLite keeps payloads as text, so a hand edit can leave one that is not JSON at all, and the worker must
    // fail it. PostgreSQL's jsonb column refuses such text by itself, which keeps the same promise earlier.
    let not_json_write = "UPDATE outbox_jobs SET payload = 'not json' WHERE id = ?";
    let mut corrupted = vec![(bad_value.id(), "at /n:")];
    match t.backend {
        Backend::Sqlite => {
            exec(&t.db, not_json_write, vec![not_json.id().into()]).await;
            corrupted.push((not_json.id(), "not json"));
        }
        Backend::Postgres => {
            let err = try_exec(&t.db, not_json_write, vec![not_json.id().into()]).await.expect_err("jsonb refuses");
            assert!(err.to_string().contains("invalid input syntax for type json"), "{err}");
            let kept = ops::get(&t.db, not_json.id()).await.expect("get").payload;
            assert_eq!(kept, json!({"n": 2}));
            ops::cancel(&t.db, not_json.id()).await.expect("cancel the job left valid");
        }
        Backend::MySql => {
            let err = try_exec(&t.db, not_json_write, vec![not_json.id().into()]).await.expect_err("JSON refuses");
            assert!(err.to_string().contains("4025"), "{err}");
            ops::cancel(&t.db, not_json.id()).await.expect("cancel the job left valid");
        }
    }
    corrupted.push((drifted.id(), "schema changed since enqueue: a0a0a0a0a0a0 then"));
    exec(
        &t.db,
        "UPDATE outbox_jobs SET payload = '{\"n\": 0}', schema_hash = 'a0a0a0a0a0a0a0a0' WHERE id = ?",
        vec![drifted.id().into()],
    )
    .await;
    // A payload that breaks the kind's own rules fails the same way.
    let span = outbox::enqueue(&t.db, &Span { lo: 1, hi: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    exec(&t.db, "UPDATE outbox_jobs SET payload = '{\"lo\": 3, \"hi\": 2}' WHERE id = ?", vec![span.id().into()]).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let (probes, spans) = (Arc::clone(&calls), Arc::clone(&calls));
    quick(&t.db)
        .register(move |_: Probe, _: JobContext| {
            probes.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, JobError>(()) }
        })
        .register(move |_: Span, _: JobContext| {
            spans.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, JobError>(()) }
        })
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
    let job = ops::get(&t.db, span.id()).await.expect("get");
    assert_eq!((job.status, job.attempts), (JobStatus::Failed, 1));
    assert_eq!(job.last_error.as_deref(), Some("invalid payload: at /hi: 2 is below lo (3)"));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "a handler ran on an invalid payload");
    for (id, needle) in corrupted {
        let job = ops::get(&t.db, id).await.expect("get");
        assert_eq!((job.status, job.attempts), (JobStatus::Failed, 1), "{job:?}");
        let error = job.last_error.expect("error");
        assert!(error.starts_with("invalid payload") && error.contains(needle), "{error}");
    }
}

conformance!(unknown_kinds_stay_pending_and_visible, mysql);
async fn unknown_kinds_stay_pending_and_visible(t: TestDb) {
    let schema = json!({"type": "object"});
    let other = Kind::from_schema("not_handled_here", schema, KindOpts::DEFAULT).expect("kind");
    let id = outbox::enqueue_raw(&t.db, &other, json!({"a": 1}), EnqueueOpts::new()).await.expect("enqueue");
    outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    quick(&t.db)
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
    let job = ops::get(&t.db, id.id()).await.expect("get");
    assert_eq!((job.status, job.attempts), (JobStatus::Pending, 0));
    let counts = ops::counts(&t.db).await.expect("counts");
    assert!(counts.iter().any(|c| c.kind == "not_handled_here" && c.status == JobStatus::Pending && c.count == 1));
    assert!(counts.iter().any(|c| c.kind == "probe" && c.status == JobStatus::Completed && c.count == 1));
}

conformance!(a_stale_worker_cannot_complete_or_fail_a_rescued_job, mysql);
/// A worker whose claim expired and was rescued cannot complete or fail the job afterwards.
async fn a_stale_worker_cannot_complete_or_fail_a_rescued_job(t: TestDb) {
    let ok_job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let err_job = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    let started = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let (s, r) = (Arc::clone(&started), Arc::clone(&release));
    let stale = quick(&t.db)
        .id("stale-worker")
        .concurrency(2)
        .register(move |job: Probe, _: JobContext| {
            let (s, r) = (Arc::clone(&s), Arc::clone(&r));
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                r.notified().await;
                if job.n == 1 { Ok(json!({"by": "stale"})) } else { Err(JobError::permanent("stale failure")) }
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    assert!(outbox_tests::wait_count(&started, 2, Duration::from_secs(10)).await);
    // Both leases run out while the stale worker is stuck in its handlers.
    let expire = format!("UPDATE outbox_jobs SET lease_expires_at = {} WHERE status = 'claimed'", t.backend.time(0));
    assert_eq!(exec(&t.db, &expire, vec![]).await, 2);
    // A second worker rescues and completes them.
    quick(&t.db)
        .id("fresh-worker")
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(json!({"by": "fresh"})) })
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
    // Now the stale handlers return; their writes must not land.
    release.notify_waiters();
    stale.shutdown().await.expect("shutdown");
    for id in [ok_job.id(), err_job.id()] {
        let job = ops::get(&t.db, id).await.expect("get");
        assert_eq!(job.status, JobStatus::Completed, "{job:?}");
        assert_eq!(job.output, Some(json!({"by": "fresh"})));
        assert_eq!(job.locked_by.as_deref(), Some("fresh-worker"));
        assert_eq!(job.attempts, 2);
    }
}

conformance!(graceful_shutdown_leaves_no_job_claimed, mysql);
async fn graceful_shutdown_leaves_no_job_claimed(t: TestDb) {
    for n in 1..=6 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let started = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&started);
    let handle = quick(&t.db)
        .concurrency(6)
        .shutdown_grace(Duration::from_secs(1))
        .cancel_grace(Duration::from_millis(500))
        .register(move |job: Probe, ctx: JobContext| {
            let s = Arc::clone(&s);
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                match job.n % 3 {
                    // Finishes within the grace period.
                    0 => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(())
                    }
                    // Stops at its checkpoint when cancelled.
                    1 => {
                        ctx.cancelled().await;
                        Err(JobError::retry("interrupted"))
                    }
                    // Ignores cancellation entirely.
                    _ => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok(())
                    }
                }
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    assert!(outbox_tests::wait_count(&started, 6, Duration::from_secs(10)).await);
    handle.shutdown().await.expect("shutdown");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed'").await, 0);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 2);
    // Interrupted jobs are pending again with their attempt given back.
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'pending' AND attempts = 0").await, 4);
    // The attempt is given back, but the run is counted: a handler can tell it may have acted before.
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE runs = 1").await, 6);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events WHERE event = 'released'").await, 4);
}

conformance!(answers_after_cancellation_follow_the_documented_contract, mysql);
/// Once the worker has asked a handler to stop, what the handler answers decides the job: `Ok` completes it,
/// a snooze snoozes it, and a retryable error, a permanent error or a panic gives it back without using the
/// attempt (the failure may be the interruption itself).
async fn answers_after_cancellation_follow_the_documented_contract(t: TestDb) {
    // n: 1 = Ok, 2 = retry, 3 = permanent, 4 = snooze, 5 = panic.
    let mut ids = Vec::new();
    for n in 1..=5 {
        ids.push(outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue"));
    }
    let started = Arc::new(AtomicUsize::new(0));
    let s = Arc::clone(&started);
    let handle = quick(&t.db)
        .concurrency(5)
        .shutdown_grace(Duration::from_millis(200))
        .cancel_grace(Duration::from_secs(10))
        .register(move |job: Probe, ctx: JobContext| {
            let s = Arc::clone(&s);
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                ctx.cancelled().await;
                assert!(ctx.is_cancelled());
                match job.n {
                    1 => Ok(json!({"stopped": "cleanly"})),
                    2 => Err(JobError::retry("interrupted")),
                    3 => Err(JobError::permanent("interrupted, and said so permanently")),
                    4 => Err(JobError::snooze(Duration::from_secs(3600))),
                    _ => panic!("interrupted by a panic"),
                }
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    assert!(outbox_tests::wait_count(&started, 5, Duration::from_secs(10)).await);
    handle.shutdown().await.expect("shutdown");
    let job = |i: usize| {
        let db = t.db.clone();
        let id = ids[i].id().to_owned();
        async move { ops::get(&db, &id).await.expect("get") }
    };
    let ok = job(0).await;
    assert_eq!((ok.status, ok.attempts), (JobStatus::Completed, 1), "{ok:?}");
    for (i, what) in [(1, "retry"), (2, "permanent"), (4, "panic")] {
        let released = job(i).await;
        assert_eq!((released.status, released.attempts), (JobStatus::Pending, 0), "{what}: {released:?}");
        assert!(released.run_at <= chrono::Utc::now(), "{what}: due again at once");
        let events: Vec<_> =
            ops::history(&t.db, &released.id).await.expect("history").into_iter().map(|e| e.event).collect();
        assert_eq!(events.last(), Some(&outbox::JobEventKind::Released), "{what}");
    }
    let snoozed = job(3).await;
    assert_eq!((snoozed.status, snoozed.attempts), (JobStatus::Pending, 0), "{snoozed:?}");
    assert!(snoozed.run_at > chrono::Utc::now() + chrono::Duration::minutes(50), "{snoozed:?}");
}

conformance!(a_snooze_past_the_last_storable_time_is_clamped, mysql);
/// `JobError::snooze(Duration::MAX)` parks the job at the latest time every backend stores (9999-12-31)
/// instead of overflowing or failing its write.
async fn a_snooze_past_the_last_storable_time_is_clamped(t: TestDb) {
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    quick(&t.db)
        .register(|_: Probe, _: JobContext| async { Err::<(), _>(JobError::snooze(Duration::MAX)) })
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
    let parked = ops::get(&t.db, job.id()).await.expect("get");
    assert_eq!((parked.status, parked.attempts), (JobStatus::Pending, 0), "{parked:?}");
    assert_eq!(parked.run_at.to_rfc3339(), "9999-12-31T23:59:59.999+00:00");
}

/// SQLite only: an in-memory database lives in one connection, which worker processes cannot share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_needs_a_file_database() {
    let db = outbox::connect("sqlite::memory:").await.expect("connect");
    outbox::migrate(&db).await.expect("migrate");
    let err = Worker::builder(&db)
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect_err("in-memory");
    assert!(err.to_string().contains("file database"), "{err}");
}

conformance!(leases_are_renewed_while_a_handler_runs, mysql);
/// A handler running past several lease periods keeps its claim: the worker renews it. (The lease leaves a
/// renewal more than a second of slack, so a loaded machine does not make the test flaky.)
async fn leases_are_renewed_while_a_handler_runs(t: TestDb) {
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let slow = quick(&t.db)
        .lease(Duration::from_secs(2))
        .rescue_interval(Duration::from_millis(50))
        .register(|_: Probe, _: JobContext| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, JobError>(())
        })
        .build()
        .await
        .expect("build")
        .start();
    // Only once the slow worker holds the job: a second worker rescues aggressively all along.
    assert!(outbox_tests::wait_status(&t.db, job.id(), JobStatus::Claimed, Duration::from_secs(30)).await);
    let rescuer = quick(&t.db)
        .rescue_interval(Duration::from_millis(50))
        .register(|_: Probe, _: JobContext| async { Err::<(), _>(JobError::permanent("must never run")) })
        .build()
        .await
        .expect("build")
        .start();
    let done = outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(30)).await;
    slow.shutdown().await.expect("shutdown");
    rescuer.shutdown().await.expect("shutdown");
    assert!(done);
    let job = ops::get(&t.db, job.id()).await.expect("get");
    assert_eq!((job.status, job.attempts, job.last_error), (JobStatus::Completed, 1, None));
}

conformance!(the_worker_survives_database_errors_and_recovers, mysql, flavor = "current_thread");
/// Database errors in the loop back off and the worker recovers when the database does. On a `current_thread`
/// runtime the worker logs on the test's thread, where its warnings are captured: the test sees its claims
/// fail.
async fn the_worker_survives_database_errors_and_recovers(t: TestDb) {
    let logs = outbox_tests::Captured::default();
    let writer = logs.clone();
    let _capture = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("outbox=warn"))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let handle = quick(&t.db)
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    // Every claim fails while the table is away.
    exec(&t.db, "ALTER TABLE outbox_jobs RENAME TO outbox_jobs_away", vec![]).await;
    let failures = || logs.text().lines().filter(|l| l.contains("claiming failed")).count();
    let failed = outbox_tests::eventually(Duration::from_secs(10), || async { failures() >= 3 }).await;
    assert!(failed, "the worker did not fail to claim three times while the table was away:\n{}", logs.text());
    assert!(!handle.is_finished(), "the worker died on a database error:\n{}", logs.text());
    exec(&t.db, "ALTER TABLE outbox_jobs_away RENAME TO outbox_jobs", vec![]).await;
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let done = outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(15)).await;
    handle.shutdown().await.expect("shutdown");
    assert!(done, "the worker did not recover");
}

conformance!(a_handler_can_extend_its_lease, mysql);
/// A handler can hold its claim longer than the lease; the heartbeat never shortens that.
async fn a_handler_can_extend_its_lease(t: TestDb) {
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let started = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let (s, r) = (Arc::clone(&started), Arc::clone(&release));
    // Held alongside, with the lease the heartbeat gives it: each renewal shows in its row.
    let witness = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    let handle = quick(&t.db)
        .lease(Duration::from_millis(150))
        .register(move |job: Probe, ctx: JobContext| {
            let (s, r) = (Arc::clone(&s), Arc::clone(&r));
            async move {
                if job.n == 1 {
                    ctx.extend_lease(Duration::from_secs(3600)).await.map_err(JobError::retry)?;
                }
                s.fetch_add(1, Ordering::SeqCst);
                r.notified().await;
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    assert!(outbox_tests::wait_count(&started, 2, Duration::from_secs(10)).await);
    // Several heartbeats (every 50 ms) pass: the witness's lease moves three times.
    let leases = Mutex::new(Vec::new());
    let renewed = outbox_tests::eventually(Duration::from_secs(10), || async {
        let lease = ops::get(&t.db, witness.id()).await.expect("get").lease_expires_at;
        let mut leases = leases.lock().expect("leases");
        if leases.last() != Some(&lease) {
            leases.push(lease);
        }
        leases.len() > 3
    })
    .await;
    let leases = leases.into_inner().expect("leases");
    assert!(renewed, "the heartbeat did not renew the witness's lease three times: {leases:?}");
    let lease = ops::get(&t.db, job.id()).await.expect("get").lease_expires_at.expect("leased");
    assert!(lease > chrono::Utc::now() + chrono::Duration::minutes(59), "lease shortened to {lease}");
    release.notify_waiters();
    for id in [job.id(), witness.id()] {
        assert!(outbox_tests::wait_status(&t.db, id, JobStatus::Completed, Duration::from_secs(10)).await);
    }
    handle.shutdown().await.expect("shutdown");
}

/// Set for the halves of `an_enqueue_wakes_an_idle_worker`, each run alone in a process of its own: wake-ups
/// are process-wide, and another test's enqueue in this binary would wake the idle worker too.
const ALONE: &str = "OUTBOX_TEST_WAKE_ALONE";

#[test]
fn an_enqueue_wakes_an_idle_worker() {
    for half in ["sqlite", "postgres"] {
        let name = format!("an_enqueue_wakes_an_idle_worker_alone::{half}");
        outbox_tests::run_child(&name, ALONE, |_| {}).assert_passed();
    }
}

mod an_enqueue_wakes_an_idle_worker_alone {
    use outbox_tests::Backend;

    #[tokio::test(flavor = "current_thread")]
    #[ignore = "half of an_enqueue_wakes_an_idle_worker, which runs it alone in a process"]
    async fn sqlite() {
        outbox_tests::child_half(super::ALONE, "an_enqueue_wakes_an_idle_worker");
        outbox_tests::run(Backend::Sqlite, "an_enqueue_wakes_an_idle_worker::sqlite", super::wakes_an_idle_worker)
            .await;
    }

    #[tokio::test(flavor = "current_thread")]
    #[ignore = "half of an_enqueue_wakes_an_idle_worker, which runs it alone in a process"]
    async fn postgres() {
        outbox_tests::child_half(super::ALONE, "an_enqueue_wakes_an_idle_worker");
        let test = "an_enqueue_wakes_an_idle_worker::postgres";
        outbox_tests::run(Backend::Postgres, test, super::wakes_an_idle_worker).await;
    }
}

/// Enqueueing through the transaction helper wakes an idle worker of the same process at once: with an hour
/// between polls, only a wake-up makes it claim. The worker's watch (SQLite's file watch, PostgreSQL's `LISTEN`)
/// often hears the same commit and calls for a claim too, whose reason is `heard`, and either claim may take the
/// job; but this process's wake-up always calls for a claim of its own, `wake`, and nothing else here does: no
/// `wake` claim before the enqueue, and the handler holds the job until the test has seen one after it, so no
/// written outcome (which wakes the worker too on PostgreSQL) can call for it either.
async fn wakes_an_idle_worker(t: TestDb) {
    let log = outbox_tests::ClaimLog::default();
    let _recording = log.record();
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let hold = Arc::clone(&release);
    let handle = Worker::builder(&t.db)
        .poll_interval(Duration::from_secs(3600))
        .register(move |_: Probe, ctx: JobContext| {
            let (started_tx, hold) = (started_tx.clone(), Arc::clone(&hold));
            async move {
                let _ = started_tx.send(());
                tokio::select! {
                    () = hold.notified() => {}
                    () = ctx.cancelled() => {}
                }
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    let idle = outbox_tests::eventually(Duration::from_secs(10), || async { !log.claims().is_empty() }).await;
    assert!(idle, "the worker never made its first claim");
    let before = log.claims();
    assert!(
        before.iter().all(|c| c.claimed == 0 && c.reason != "wake"),
        "nothing to claim, and no wake-up of this process, before the enqueue: {before:?}"
    );
    let job = outbox::transaction(&t.db, async |txn| outbox::enqueue(txn, &Probe { n: 1 }, EnqueueOpts::new()).await)
        .await
        .expect("enqueue");
    let running = tokio::time::timeout(Duration::from_secs(10), started.recv()).await;
    assert!(matches!(running, Ok(Some(()))), "the idle worker never took the job; its claims: {:?}", log.claims());
    let woken = || async { log.claims()[before.len()..].iter().any(|c| c.reason == "wake") };
    let woken = outbox_tests::eventually(Duration::from_secs(10), woken).await;
    release.notify_one();
    let done = outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(10)).await;
    handle.shutdown().await.expect("shutdown");
    let claims = log.claims();
    assert!(woken, "no claim was called for by this process's wake-up at the enqueue: {claims:?}");
    assert!(done, "the job did not complete: {claims:?}");
    let taken = claims.iter().find(|c| c.claimed > 0).map(|c| c.reason.as_str());
    assert!(matches!(taken, Some("wake" | "heard")), "the job is taken by a wake-up's claim: {claims:?}");
}

conformance!(a_wake_up_racing_a_finishing_job_is_not_lost, mysql);
/// Each job's handler returns on the wake-up of the next job's enqueue, so the worker finds "a task finished"
/// and "a wake-up arrived" ready together. With an hour between polls, a wake-up dropped for the finished task
/// leaves its job waiting: every job must start within seconds of its commit.
async fn a_wake_up_racing_a_finishing_job_is_not_lost(t: TestDb) {
    const JOBS: u64 = 1_000;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let handle = Worker::builder(&t.db)
        .poll_interval(Duration::from_secs(3600))
        .concurrency(4)
        .register(move |job: Probe, ctx: JobContext| {
            let started_tx = started_tx.clone();
            async move {
                let next_change = ops::changed();
                tokio::pin!(next_change);
                next_change.as_mut().enable();
                let _ = started_tx.send(job.n);
                tokio::select! {
                    _ = next_change => {}
                    _ = ctx.cancelled() => {}
                }
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    let mut lost = None;
    for n in 1..=JOBS {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
        match tokio::time::timeout(Duration::from_secs(5), started.recv()).await {
            Ok(Some(m)) => assert_eq!(m, n, "jobs start in enqueue order"),
            Ok(None) => panic!("the worker stopped"),
            Err(_) => {
                lost = Some(n);
                break;
            }
        }
    }
    handle.shutdown().await.expect("shutdown");
    assert_eq!(lost, None, "this job waited for the hourly poll: its wake-up was lost");
}
