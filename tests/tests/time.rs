//! Execution timeouts and retention, on every backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use outbox_core::{EnqueueOpts, JobContext, JobError, JobStatus, Retention, RetryPolicy, Worker, ops};
use outbox_tests::{Probe, Step, TestDb, conformance, exec, scalar};

const DAY_MS: i64 = 86_400_000;

conformance!(a_handler_past_its_timeout_is_cancelled_retried_then_failed_while_others_run);
async fn a_handler_past_its_timeout_is_cancelled_retried_then_failed_while_others_run(t: TestDb) {
    // n = 1 stops when asked; n = 2 ignores the request and is dropped; the rest finish at once.
    let polite = outbox_core::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let deaf = outbox_core::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&asked);
    let handle = Worker::builder(&t.db)
        .poll_interval(Duration::from_millis(20))
        .concurrency(4)
        .kind_timeout("probe", Duration::from_millis(200))
        .cancel_grace(Duration::from_millis(300))
        .retry_policy(RetryPolicy { base: Duration::from_millis(20), max: Duration::from_millis(50), jitter: 0.0 })
        .register(move |job: Probe, ctx: JobContext| {
            let seen = Arc::clone(&seen);
            async move {
                match job.n {
                    1 => {
                        ctx.cancelled().await;
                        seen.fetch_add(1, Ordering::SeqCst);
                        Err(JobError::retry("stopped as asked"))
                    }
                    2 => {
                        tokio::time::sleep(Duration::from_secs(3_600)).await;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    // Jobs enqueued while both slow ones hang still run.
    let mut quick = Vec::new();
    for n in 3..=12 {
        quick.push(outbox_core::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue"));
    }
    for job in &quick {
        assert!(outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(10)).await);
    }
    let polite_failed = outbox_tests::wait_status(&t.db, polite.id(), JobStatus::Failed, Duration::from_secs(20)).await;
    let deaf_failed = outbox_tests::wait_status(&t.db, deaf.id(), JobStatus::Failed, Duration::from_secs(20)).await;
    handle.shutdown().await.expect("shutdown");
    assert!(polite_failed && deaf_failed, "both timed-out jobs fail once their attempts are used up");
    assert_eq!(asked.load(Ordering::SeqCst), 3, "each attempt was asked to stop through its context");

    for (job, why) in [(&polite, "timed out after 200ms"), (&deaf, "ignored cancellation and was dropped")] {
        let record = ops::get(&t.db, job.id()).await.expect("get");
        assert_eq!(record.attempts, 3);
        let error = record.last_error.expect("error");
        assert!(error.contains(why) && error.contains("(attempt 3 of 3)"), "{error}");
        let history = ops::history(&t.db, job.id()).await.expect("history");
        let events: Vec<String> = history.iter().map(|e| e.event.to_string()).collect();
        assert_eq!(
            events,
            ["enqueued", "claimed", "retried", "claimed", "retried", "claimed", "failed"],
            "{history:?}"
        );
        // Each retry came at once, not after the five-minute lease expired: the claim was given back.
        for e in history.iter().filter(|e| e.event.to_string() == "retried") {
            assert!(e.error.as_deref().is_some_and(|m| m.contains("timed out after 200ms")), "{e:?}");
        }
    }
}

conformance!(retention_prunes_old_finished_jobs_but_keeps_sequences_evidence);
async fn retention_prunes_old_finished_jobs_but_keeps_sequences_evidence(t: TestDb) {
    for n in 1..=40 {
        outbox_core::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    for seq in 1..=3 {
        outbox_core::enqueue(&t.db, &Step { key: 7, seq, sleep_ms: 0 }, EnqueueOpts::new()).await.expect("enqueue");
    }
    Worker::builder(&t.db)
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .register(|_: Step, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
    let now = outbox_tests::now_ms();
    let at = |ms: i64| t.backend.time(ms);
    // Probe 1-30 and every step finished two days ago; 31-40 just now.
    exec(&t.db, &format!("UPDATE outbox_jobs SET updated_at = {} WHERE kind = 'step'", at(now - 2 * DAY_MS)), vec![])
        .await;
    let old_probe = format!(
        "UPDATE outbox_jobs SET updated_at = {} WHERE kind = 'probe' AND {} <= 30",
        at(now - 2 * DAY_MS),
        n_expr(&t)
    );
    exec(&t.db, &old_probe, vec![]).await;
    // Failed probes of three days (kept: younger than the four days probes keep failures), five and eight
    // days (pruned).
    let failed = |n: i64, age: i64| {
        format!(
            "UPDATE outbox_jobs SET status = 'failed', updated_at = {} WHERE kind = 'probe' AND {} = {n}",
            at(now - age),
            n_expr(&t)
        )
    };
    exec(&t.db, &failed(1, 3 * DAY_MS), vec![]).await;
    exec(&t.db, &failed(2, 8 * DAY_MS), vec![]).await;
    exec(&t.db, &failed(3, 5 * DAY_MS), vec![]).await;
    let history_of_2 = scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events WHERE job_id = (SELECT id FROM outbox_jobs WHERE kind = 'probe' AND status = 'failed' ORDER BY updated_at LIMIT 1)").await;
    assert!(history_of_2 > 0, "the failed job has history to prune");

    // Two workers with small batches: both try, one holds the lease at a time. Failed probes are kept four
    // days, in place of seven.
    let retention = || {
        Retention::new().interval(Duration::from_millis(50)).batch_size(7).kind_max_age(
            "probe",
            JobStatus::Failed,
            Some(Duration::from_secs(4 * 86_400)),
        )
    };
    let mut handles = Vec::new();
    for id in ["pruner-a", "pruner-b"] {
        let worker = Worker::builder(&t.db)
            .id(id)
            .retention(retention())
            .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
            .build()
            .await
            .expect("build");
        handles.push(worker.start());
    }
    let pruned = outbox_tests::eventually(Duration::from_secs(20), || async {
        scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await == 10 + 1 + 1
    })
    .await;
    let holder = scalar(&t.db, "SELECT COUNT(*) FROM outbox_locks WHERE name = 'retention'").await;
    for handle in handles {
        handle.shutdown().await.expect("shutdown");
    }
    assert!(pruned, "left: {}", scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await);
    assert_eq!(holder, 1, "one process holds the retention lease");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_locks").await, 0, "a stopping worker gives the lease up");
    let completed = "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'probe' AND status = 'completed'";
    assert_eq!(scalar(&t.db, completed).await, 10);
    let failed = "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'probe' AND status = 'failed'";
    assert_eq!(scalar(&t.db, failed).await, 1);
    let steps =
        ops::list(&t.db, &ops::JobFilter { kind: Some("step".into()), ..Default::default() }).await.expect("list");
    assert_eq!(steps.len(), 1, "the sequence keeps its latest completed job");
    assert_eq!(steps[0].payload["seq"], 3);
    let orphans = "SELECT COUNT(*) FROM outbox_job_events e WHERE e.job_id <> '' \
                   AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = e.job_id)";
    assert_eq!(scalar(&t.db, orphans).await, 0, "pruned jobs take their history with them");
}

/// The `n` of a probe's payload.
fn n_expr(t: &TestDb) -> &'static str {
    match t.backend {
        outbox_tests::Backend::Sqlite => "json_extract(payload, '$.n')",
        outbox_tests::Backend::Postgres => "(payload ->> 'n')::int8",
    }
}

conformance!(a_schedule_whose_builder_panics_leaves_the_others_running);
async fn a_schedule_whose_builder_panics_leaves_the_others_running(t: TestDb) {
    let broken = outbox_core::Schedule::every("broken", Duration::from_millis(100), |_| -> Probe {
        panic!("no payload for this tick")
    });
    let working = outbox_core::Schedule::every("working", Duration::from_millis(100), |tick| Probe {
        n: u64::try_from(tick.timestamp_millis()).unwrap_or(1),
    });
    let handle = Worker::builder(&t.db)
        .schedule(broken)
        .schedule(working)
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    let ticking = outbox_tests::eventually(Duration::from_secs(10), || async {
        scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'probe'").await >= 5
    })
    .await;
    handle.shutdown().await.expect("a panicking builder does not bring the worker down");
    assert!(ticking, "the working schedule kept enqueuing");
    let schedules = ops::schedules(&t.db).await.expect("schedules");
    let broken = schedules.iter().find(|s| s.name == "broken").expect("registered");
    assert_eq!(broken.last_job_id, None, "no tick of the broken schedule enqueued a job");
}

#[tokio::test]
async fn a_shutdown_during_a_start_up_step_stops_it_before_any_claim() {
    let t = outbox_tests::fresh_db().await;
    let job = outbox_core::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let began = Arc::new(AtomicUsize::new(0));
    let step_began = Arc::clone(&began);
    let handle = Worker::builder(&t.db)
        .on_start("a reconciliation of a huge tree", move |_, _| async move {
            step_began.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(3_600)).await;
            Ok(())
        })
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    assert!(outbox_tests::wait_count(&began, 1, Duration::from_secs(10)).await, "the start-up step never began");
    let stopped = tokio::time::timeout(Duration::from_secs(10), handle.shutdown()).await;
    assert!(stopped.is_ok_and(|r| r.is_ok()), "the shutdown did not wait for the step");
    assert_eq!(ops::get(&t.db, job.id()).await.expect("get").status, JobStatus::Pending, "nothing was claimed");
}
