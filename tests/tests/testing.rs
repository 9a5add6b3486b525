//! `outbox::testing` on every backend: a drain reports exactly the jobs its worker claimed, even while another
//! transaction is open (which holds back the event feed on PostgreSQL); a job run inline is answered as a
//! worker answers it, timeouts and the last attempt included.

use std::time::Duration;

use outbox::testing::{self, Ran};
use outbox::{EnqueueOpts, JobContext, JobError, JobStatus, RetryPolicy, Worker};
use outbox_tests::{Backend, Keyed, Probe, TestDb, conformance};

conformance!(a_drain_reports_the_jobs_its_worker_claimed_and_no_other, mysql);
async fn a_drain_reports_the_jobs_its_worker_claimed_and_no_other(t: TestDb) {
    for n in 1..=3 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let other = outbox::enqueue(&t.db, &Keyed { user_id: 1, note: "not probe".into() }, EnqueueOpts::new())
        .await
        .expect("enqueue");
    // Another worker's job, completed before the drain starts.
    Worker::builder(&t.db)
        .register(|_: Keyed, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
    // On a server, a transaction left open with a write holds back the event feed, which the drain does not
    // read. (On SQLite an open write transaction would hold every writer instead.)
    let held = match Backend::of(&t.db) {
        Backend::Postgres | Backend::MySql => {
            let txn = outbox::begin(&t.db).await.expect("begin");
            let note = "held open".to_owned();
            outbox::enqueue(&txn, &Keyed { user_id: 2, note }, EnqueueOpts::new()).await.expect("enqueue");
            Some(txn)
        }
        Backend::Sqlite => None,
    };
    let worker = Worker::builder(&t.db)
        .retry_policy(RetryPolicy { base: Duration::from_secs(60), max: Duration::from_secs(60), jitter: 0.0 })
        .register(|job: Probe, _: JobContext| async move {
            match job.n {
                1 => Ok(serde_json::json!({ "n": 1 })),
                2 => Err(JobError::permanent("two is refused")),
                _ => Err(JobError::retry("three later")),
            }
        })
        .build()
        .await
        .expect("build");
    let drained = testing::drain(worker).await.expect("drain");
    if let Some(txn) = held {
        txn.rollback().await.expect("rollback");
    }
    let payload = |jobs: Vec<&outbox::JobRecord>| -> Vec<u64> {
        jobs.iter().map(|j| j.payload["n"].as_u64().expect("n")).collect()
    };
    assert_eq!(drained.jobs.len(), 3, "{drained:?}");
    assert!(drained.jobs.iter().all(|j| j.id != other.id()), "the other worker's job is not reported");
    assert_eq!(payload(drained.completed()), [1]);
    assert_eq!(payload(drained.failed()), [2]);
    assert_eq!(payload(drained.pending()), [3]);
    assert_eq!(drained.completed()[0].output, Some(serde_json::json!({ "n": 1 })));
}

conformance!(a_job_run_inline_is_answered_as_a_worker_answers_it, mysql);
async fn a_job_run_inline_is_answered_as_a_worker_answers_it(t: TestDb) {
    let worker = Worker::builder(&t.db)
        .kind_timeout("probe", Duration::from_millis(50))
        .cancel_grace(Duration::from_millis(50))
        .register(|job: Probe, ctx: JobContext| async move {
            match job.n {
                // Stops when asked, with an error: a timeout.
                1 => {
                    ctx.cancelled().await;
                    Err(JobError::retry("interrupted"))
                }
                // Ignores the request: dropped after the grace.
                2 => {
                    tokio::time::sleep(Duration::from_secs(3_600)).await;
                    Ok(serde_json::Value::Null)
                }
                _ => Err(JobError::retry(format!("attempt {} failed", ctx.attempt()))),
            }
        })
        .build()
        .await
        .expect("build");
    assert_eq!(
        testing::perform(&worker, &Probe { n: 1 }).await.expect("run"),
        Ran::Retried { error: "timed out after 50ms".into(), after: Duration::from_secs(30) }
    );
    match testing::perform(&worker, &Probe { n: 2 }).await.expect("run") {
        Ran::Retried { error, .. } => {
            assert!(error.contains("did not stop within the cancel grace of 50ms"), "{error}")
        }
        other => panic!("expected the dropped handler's attempt to be retried, got {other}"),
    }
    // The last attempt fails the job, worded as a worker records it.
    assert_eq!(
        testing::perform_attempt(&worker, &Probe { n: 3 }, 3, 3).await.expect("run"),
        Ran::Failed { error: "attempt 3 failed (attempt 3 of 3)".into() }
    );
    let refused = testing::perform_attempt(&worker, &Probe { n: 3 }, 4, 3).await.expect_err("out of range");
    assert!(refused.to_string().contains("attempt 4 of 3"), "{refused}");

    // An enqueued job runs as its next attempt; a job that is not pending is refused, naming it.
    let job = outbox::enqueue(&t.db, &Probe { n: 3 }, EnqueueOpts::new()).await.expect("enqueue");
    assert_eq!(
        testing::run_job(&worker, &t.db, job.id()).await.expect("run"),
        Ran::Retried { error: "attempt 1 failed".into(), after: Duration::from_secs(30) }
    );
    outbox::ops::cancel(&t.db, job.id()).await.expect("cancel");
    let refused = testing::run_job(&worker, &t.db, job.id()).await.expect_err("cancelled");
    assert!(refused.to_string().contains(job.id()) && refused.to_string().contains("cancelled"), "{refused}");
    assert_eq!(outbox::ops::get(&t.db, job.id()).await.expect("get").status, JobStatus::Cancelled);
}
