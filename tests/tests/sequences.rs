//! Sequences and fleet-wide limits under real worker processes: 500 sequences of 20 steps drained by a fleet
//! whose members are SIGKILLed and restarted every 300 ms, and a kind limited to two running jobs across
//! eight processes. Every check reads the handlers' own begin and end lines (monotonic clock, `O_APPEND`).

// The race-log reader of the shared module is not used here: these tests read begin and end marks.
#[allow(dead_code)]
mod fleet;

use std::path::Path;
use std::time::Duration;

use fleet::{Chaos, Spawn, runs};
use outbox::EnqueueOpts;
use outbox_tests::{Backend, ChildProcess, Limited, Step, TestDb, conformance, scalar};

const KEYS: u32 = 500;
const STEPS: u32 = 20;

/// Starts `n` serving workers.
fn fleet(t: &TestDb, log: &Path, n: usize, lease_ms: u64) -> Vec<ChildProcess> {
    (0..n).map(|_| Spawn { url: &t.url, log, mode: "serve", lease_ms, concurrency: 8, stderr: None }.start()).collect()
}

conformance!(sequences_hold_their_order_while_workers_are_killed_every_300_ms);
async fn sequences_hold_their_order_while_workers_are_killed_every_300_ms(t: TestDb) {
    // Handlers take 0-20 ms.
    let processes = if t.backend == Backend::Postgres { 8 } else { 4 };
    let chaos =
        Chaos { keys: KEYS, steps: STEPS, sleep_mod: 21, processes, lease_ms: 1_000, within: Duration::from_secs(240) };
    let log = t.dir.path().join("steps.log");
    eprintln!("{:?}: {}", t.backend, chaos.run(&t.db, &t.url, &log).await);
}

conformance!(a_fleet_wide_limit_of_two_holds_across_eight_processes, mysql);
async fn a_fleet_wide_limit_of_two_holds_across_eight_processes(t: TestDb) {
    let jobs: Vec<Limited> = (0..200).map(|n| Limited { n, sleep_ms: 20 }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let log = t.dir.path().join("limited.log");
    let mut children = fleet(&t, &log, 8, 30_000);
    for status in fleet::wait_all(&mut children, Duration::from_secs(180)).await {
        assert!(status.success(), "a worker process failed: {status}");
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 200);
    outbox_tests::assert_every_claim_rescuable(&t.db, false, "after the fleet").await;
    let runs = runs(&log);
    assert_eq!(runs.len(), 200, "one run per job");
    // Sweep begins and ends in time order; an end at the same instant as a begin comes first.
    let mut marks: Vec<(u64, i32)> = Vec::new();
    for run in &runs {
        marks.push((run.begin, 1));
        marks.push((run.end.expect("no process was killed"), -1));
    }
    marks.sort();
    let (mut running, mut most) = (0, 0);
    for (_, delta) in marks {
        running += delta;
        most = most.max(running);
    }
    let pids: std::collections::HashSet<u32> = runs.iter().map(|r| r.pid).collect();
    assert_eq!(most, 2, "at most two may run at once across the fleet, and two did");
    eprintln!("200 limited jobs over {} processes: at most {most} running at once", pids.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_on_the_builder_names_what_is_wrong_with_it() {
    let t = outbox_tests::fresh_db().await;
    let noop = |_: Limited, _: outbox::JobContext| async { Ok::<_, outbox::JobError>(()) };
    let err = outbox::Worker::builder(&t.db)
        .register(noop)
        .concurrency_limit("claude_extraction", 2)
        .build()
        .await
        .expect_err("no handler for the kind");
    let text = err.to_string();
    assert!(text.contains("`claude_extraction`") && text.contains("limited"), "{text}");
    let err =
        outbox::Worker::builder(&t.db).register(noop).concurrency_limit("limited", 0).build().await.expect_err("0");
    assert!(err.to_string().contains("is 0"), "{err}");
    // A builder limit replaces the kind's own: one at a time here.
    let jobs: Vec<Limited> = (0..20).map(|n| Limited { n, sleep_ms: 5 }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r, m) = (running.clone(), most.clone());
    outbox::Worker::builder(&t.db)
        .concurrency(8)
        .concurrency_limit("limited", 1)
        .register(move |job: Limited, _: outbox::JobContext| {
            let (r, m) = (r.clone(), m.clone());
            async move {
                let now = r.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                m.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(job.sleep_ms)).await;
                r.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, outbox::JobError>(())
            }
        })
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 20);
    assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 1);
}

conformance!(a_job_retried_after_its_sequence_went_on_waits_for_the_running_one, mysql);
async fn a_job_retried_after_its_sequence_went_on_waits_for_the_running_one(t: TestDb) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use outbox_tests::Onward;

    let first = outbox::enqueue(&t.db, &Onward { key: 1, n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let second = outbox::enqueue(&t.db, &Onward { key: 1, n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (running, most, attempts) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (gate, running, most, attempts) = (gate.clone(), running.clone(), most.clone(), attempts.clone());
        move |job: Onward, _: outbox::JobContext| {
            let (gate, running, most, attempts) = (gate.clone(), running.clone(), most.clone(), attempts.clone());
            async move {
                most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                let first_run_of_first = job.n == 1 && attempts.fetch_add(1, Ordering::SeqCst) == 0;
                let result = if first_run_of_first {
                    Err(outbox::JobError::permanent("the first run of job 1 fails"))
                } else {
                    // Job 2 holds until the test opens the gate.
                    if job.n == 2 {
                        gate.acquire().await.expect("gate").forget();
                    }
                    Ok(())
                };
                running.fetch_sub(1, Ordering::SeqCst);
                result
            }
        }
    };
    let worker = outbox::Worker::builder(&t.db)
        .poll_interval(Duration::from_millis(20))
        .register(handler)
        .register(|_: outbox_tests::Probe, _: outbox::JobContext| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    // Job 1 fails; under the continue policy job 2 starts and holds.
    assert!(outbox_tests::wait_status(&t.db, first.id(), outbox::JobStatus::Failed, Duration::from_secs(10)).await);
    assert!(outbox_tests::wait_status(&t.db, second.id(), outbox::JobStatus::Claimed, Duration::from_secs(10)).await);
    outbox::ops::retry(&t.db, first.id()).await.expect("retry");
    let retried = outbox::ops::get(&t.db, first.id()).await.expect("get");
    assert_eq!(retried.waiting_for.as_deref(), Some(second.id()), "the retried job waits for the running one");
    // A job enqueued after the retry is taken by a claim that would have taken the retried job too, had it
    // been free to run: once that job is done, the retried one was passed over.
    let later = outbox::enqueue(&t.db, &outbox_tests::Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    assert!(
        outbox_tests::wait_status(&t.db, later.id(), outbox::JobStatus::Completed, Duration::from_secs(10)).await,
        "the worker did not claim a job enqueued after the retry"
    );
    let passed_over = outbox::ops::get(&t.db, first.id()).await.expect("get");
    assert_eq!(passed_over.status, outbox::JobStatus::Pending, "{passed_over:?}");
    assert_eq!(passed_over.waiting_for.as_deref(), Some(second.id()), "{passed_over:?}");
    gate.add_permits(1);
    assert!(outbox_tests::wait_status(&t.db, first.id(), outbox::JobStatus::Completed, Duration::from_secs(10)).await);
    worker.shutdown().await.expect("shutdown");
    assert_eq!(outbox::ops::get(&t.db, second.id()).await.expect("get").status, outbox::JobStatus::Completed);
    assert_eq!(most.load(Ordering::SeqCst), 1, "two jobs of one sequence ran at once");
}

conformance!(jobs_of_one_sequence_retried_together_rejoin_in_order, mysql);
async fn jobs_of_one_sequence_retried_together_rejoin_in_order(t: TestDb) {
    use outbox::{JobStatus, ops};
    use outbox_tests::Onward;

    let mut ids = Vec::new();
    for n in 1..=3 {
        let job = outbox::enqueue(&t.db, &Onward { key: 7, n }, EnqueueOpts::new()).await.expect("enqueue");
        ids.push(job.id().to_owned());
    }
    // As a worker leaves them under the continue policy: the first two failed for good, the third completed.
    for (id, status) in [(&ids[0], "failed"), (&ids[1], "failed"), (&ids[2], "completed")] {
        outbox_tests::exec(
            &t.db,
            "UPDATE outbox_jobs SET status = ?, attempts = 1 WHERE id = ?",
            vec![status.into(), id.as_str().into()],
        )
        .await;
    }
    // One statement puts both back: the first may run at once, the second waits for it.
    assert_eq!(ops::retry_failed(&t.db, Some("onward")).await.expect("retry failed"), 2);
    let first = ops::get(&t.db, &ids[0]).await.expect("get");
    let second = ops::get(&t.db, &ids[1]).await.expect("get");
    assert_eq!((first.status, first.waiting_for.as_deref()), (JobStatus::Pending, None), "{first:?}");
    assert_eq!(
        (second.status, second.waiting_for.as_deref()),
        (JobStatus::Pending, Some(ids[0].as_str())),
        "{second:?}"
    );
    // Put back alone, with nothing of its sequence to run, a job may run at once.
    exec_status(&t, &ids[0], "completed").await;
    exec_status(&t, &ids[1], "failed").await;
    ops::retry(&t.db, &ids[1]).await.expect("retry");
    let alone = ops::get(&t.db, &ids[1]).await.expect("get");
    assert_eq!((alone.status, alone.waiting_for.as_deref()), (JobStatus::Pending, None), "{alone:?}");
}

async fn exec_status(t: &TestDb, id: &str, status: &str) {
    outbox_tests::exec(&t.db, "UPDATE outbox_jobs SET status = ? WHERE id = ?", vec![status.into(), id.into()]).await;
}

conformance!(a_job_left_waiting_with_nothing_ahead_is_let_go_by_the_sweep, mysql);
async fn a_job_left_waiting_with_nothing_ahead_is_let_go_by_the_sweep(t: TestDb) {
    // What a lost race (or a hand-written row) leaves behind: a waiting job whose sequence has nothing ahead.
    let job = outbox::enqueue(&t.db, &Step { key: 9, seq: 0, sleep_ms: 0 }, EnqueueOpts::new()).await.expect("enqueue");
    let waiting = if t.backend == Backend::Postgres { "true" } else { "1" };
    outbox_tests::exec(
        &t.db,
        &format!("UPDATE outbox_jobs SET waiting = {waiting} WHERE id = ?"),
        vec![job.id().into()],
    )
    .await;
    if t.backend == Backend::MySql {
        // Every sequenced job goes in waiting there, noted for the store to let go: without its note, only the
        // sweep finds it.
        outbox_tests::exec(&t.db, "DELETE FROM outbox_sequence_notes", vec![]).await;
    }
    let worker = outbox::Worker::builder(&t.db)
        .poll_interval(Duration::from_millis(20))
        .rescue_interval(Duration::from_millis(100))
        .register(|_: Step, _: outbox::JobContext| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    let done = outbox_tests::wait_status(&t.db, job.id(), outbox::JobStatus::Completed, Duration::from_secs(10)).await;
    worker.shutdown().await.expect("shutdown");
    assert!(done, "the sweep let the job go");
}
