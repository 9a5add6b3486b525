//! The event feed, the worker registry and remote workers' claims, on every backend.

use std::time::Duration;

use outbox::remote::{self, ClaimRequest};
use outbox::{EnqueueOpts, Error, JobEventKind, JobStatus, Worker, ops};
use outbox_tests::{Probe, TestDb, conformance, eventually, exec, wait_scalar};

fn claim_req(worker: &str, limit: usize) -> ClaimRequest {
    ClaimRequest {
        worker: worker.into(),
        host: Some("test-host".into()),
        pid: Some(42),
        kinds: vec!["probe".into()],
        queues: None,
        limit,
        lease: Duration::from_secs(60),
    }
}

conformance!(the_feed_holds_every_transition_in_commit_order_and_resumes_after_any_id, mysql);
async fn the_feed_holds_every_transition_in_commit_order_and_resumes_after_any_id(t: TestDb) {
    let start = ops::feed_head(&t.db).await.expect("head");
    let mut ids = Vec::new();
    for n in 1..=2 {
        ids.push(outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned());
    }
    // Three in one statement: on PostgreSQL one row lists them, read and resumed inside like a worker's row.
    let batch: Vec<Probe> = (3..=5).map(|n| Probe { n }).collect();
    let batched = outbox::enqueue_batch(&t.db, &batch, EnqueueOpts::new()).await.expect("enqueue a batch");
    ids.extend(batched.iter().map(|e| e.id().to_owned()));
    let listing = "SELECT COUNT(*) FROM outbox_job_events WHERE event = 'enqueued' AND job_id = ''";
    let listings = if t.backend == outbox_tests::Backend::Postgres { 1 } else { 0 };
    assert_eq!(outbox_tests::scalar(&t.db, listing).await, listings, "rows listing enqueued jobs");
    let worker = Worker::builder(&t.db)
        .poll_interval(Duration::from_millis(20))
        .register(|_: Probe, _| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("build");
    worker.drain().await.expect("drain");
    ops::cancel(&t.db, outbox::enqueue(&t.db, &Probe { n: 9 }, EnqueueOpts::new()).await.expect("enqueue").id())
        .await
        .expect("cancel");

    // On PostgreSQL an event shows once every older transaction on the server has ended (other tests'
    // included): wait for the feed to catch up.
    let mut all = Vec::new();
    for _ in 0..200 {
        all = ops::feed(&t.db, &start, 1_000).await.expect("feed");
        if all.len() >= 5 * 3 + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(all.len(), 5 * 3 + 2, "{all:#?}");
    for id in &ids {
        let of_job: Vec<JobEventKind> = all.iter().filter(|e| &e.job_id == id).map(|e| e.event).collect();
        assert_eq!(of_job, [JobEventKind::Enqueued, JobEventKind::Claimed, JobEventKind::Completed]);
    }
    assert!(all.iter().all(|e| e.kind == "probe" && e.queue == "default"));
    assert_eq!(all.last().map(|e| e.event), Some(JobEventKind::Cancelled));
    // Reading in small pages from any id gives the rest, nothing skipped and nothing twice.
    for cut in 0..all.len() {
        let mut after = all[cut].id.clone();
        let mut rest = Vec::new();
        loop {
            let page = ops::feed(&t.db, &after, 4).await.expect("page");
            let Some(last) = page.last() else { break };
            after = last.id.clone();
            rest.extend(page);
        }
        assert_eq!(rest, all[cut + 1..], "after event {cut}");
    }
    let head = ops::feed_head(&t.db).await.expect("head");
    assert!(ops::feed(&t.db, &head, 10).await.expect("after head").is_empty());
    let err = ops::feed(&t.db, "not-an-id", 10).await.expect_err("bad id");
    assert!(matches!(err, Error::Invalid(_)) && err.to_string().contains("invalid event id `not-an-id`"), "{err}");
}

conformance!(a_worker_is_listed_while_it_runs_and_gone_after_it_stops, mysql);
async fn a_worker_is_listed_while_it_runs_and_gone_after_it_stops(t: TestDb) {
    let worker = Worker::builder(&t.db)
        .id("listed")
        .concurrency(3)
        .queues(["default"])
        .presence_interval(Duration::from_millis(100))
        .register(|_: Probe, _| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("build");
    let handle = worker.start();
    let db = t.db.clone();
    let listed = eventually(Duration::from_secs(10), || {
        let db = db.clone();
        async move { ops::workers(&db).await.expect("workers").iter().any(|w| w.id == "listed") }
    })
    .await;
    assert!(listed, "the worker never appeared");
    let w = ops::workers(&t.db).await.expect("workers").into_iter().find(|w| w.id == "listed").expect("listed");
    assert_eq!(
        (w.kinds.clone(), w.queues.clone(), w.concurrency, w.remote),
        (vec!["probe".to_owned()], Some(vec!["default".to_owned()]), Some(3), false)
    );
    assert_eq!(w.pid, Some(i64::from(std::process::id())));
    handle.shutdown().await.expect("shutdown");
    assert!(ops::workers(&t.db).await.expect("workers").iter().all(|w| w.id != "listed"));

    // An entry whose worker died (no refresh, no removal) drops out once it expires.
    exec(
        &t.db,
        &format!(
            "INSERT INTO outbox_workers (id, host, kinds, started_at, last_seen_at, expires_at) VALUES ('dead', 'h', '[]', {}, {}, {})",
            t.backend.time(0),
            t.backend.time(0),
            t.backend.time(1_000)
        ),
        vec![],
    )
    .await;
    assert!(ops::workers(&t.db).await.expect("workers").iter().all(|w| w.id != "dead"));
}

conformance!(remote_claims_are_fenced_like_in_process_ones, mysql);
async fn remote_claims_are_fenced_like_in_process_ones(t: TestDb) {
    for n in 1..=3 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let jobs = remote::claim(&t.db, &claim_req("far-1", 2)).await.expect("claim");
    assert_eq!(jobs.len(), 2);
    assert!(jobs.iter().all(|j| j.attempt == 1 && j.kind == "probe" && j.payload["n"].is_u64()));
    let (a, b) = (&jobs[0], &jobs[1]);
    remote::complete(&t.db, "far-1", &a.id, 1, Some(serde_json::json!({"ok": true}))).await.expect("complete");
    // Completing twice, or as another worker, or with another attempt, changes nothing.
    for (worker, attempt) in [("far-1", 1), ("far-2", 1)] {
        let err = remote::complete(&t.db, worker, &a.id, attempt, None).await.expect_err("stale");
        assert!(matches!(err, Error::StaleClaim { .. }), "{err}");
    }
    let err = remote::complete(&t.db, "far-1", &b.id, 2, None).await.expect_err("wrong attempt");
    assert!(matches!(err, Error::StaleClaim { .. }), "{err}");
    let done = ops::get(&t.db, &a.id).await.expect("get");
    assert_eq!((done.status, done.output), (JobStatus::Completed, Some(serde_json::json!({"ok": true}))));

    let until = remote::heartbeat(&t.db, "far-1", &b.id, 1, Duration::from_secs(600)).await.expect("heartbeat");
    assert!(until > chrono::Utc::now() + chrono::Duration::seconds(500));
    let status =
        remote::fail(&t.db, "far-1", &b.id, 1, "flaky upstream", true, Some(Duration::ZERO)).await.expect("fail");
    assert_eq!(status, JobStatus::Pending);
    let again = remote::claim(&t.db, &claim_req("far-1", 10)).await.expect("claim");
    let b2 = again.iter().find(|j| j.id == b.id).expect("b again");
    assert_eq!(b2.attempt, 2);
    remote::snooze(&t.db, "far-1", &b.id, 2, Duration::from_secs(3600)).await.expect("snooze");
    assert_eq!(ops::get(&t.db, &b.id).await.expect("get").attempts, 1, "a snooze gives the attempt back");
    let c = again.iter().find(|j| j.id != b.id).expect("c");
    let status = remote::fail(&t.db, "far-1", &c.id, 1, "bad input", false, None).await.expect("fail");
    assert_eq!(status, JobStatus::Failed);
    assert!(ops::workers(&t.db).await.expect("workers").iter().any(|w| w.id == "far-1" && w.remote));
    let err =
        remote::claim(&t.db, &ClaimRequest { kinds: vec![], ..claim_req("far-1", 1) }).await.expect_err("no kinds");
    assert!(err.to_string().contains("at least one kind"), "{err}");
}

conformance!(every_transition_is_recorded_once_whoever_writes_it, mysql);
async fn every_transition_is_recorded_once_whoever_writes_it(t: TestDb) {
    let mut ids = Vec::new();
    for n in 1..=20 {
        let opts = EnqueueOpts::new().max_attempts(2);
        ids.push(outbox::enqueue(&t.db, &Probe { n }, opts).await.expect("enqueue").id().to_owned());
    }
    // The rest in one statement: their histories read the enqueue from the job row (on PostgreSQL one feed
    // row lists them all).
    let batch: Vec<Probe> = (21..=40).map(|n| Probe { n }).collect();
    let opts = EnqueueOpts::new().max_attempts(2);
    let batched = outbox::enqueue_batch(&t.db, &batch, opts).await.expect("enqueue a batch");
    ids.extend(batched.iter().map(|e| e.id().to_owned()));
    // A claim and a completion written by hand, as another tool would: recorded by the trigger.
    let (now, by_hand) = (chrono::Utc::now().timestamp_millis(), ids[0].clone());
    let at = |ms| t.backend.time(ms);
    exec(
        &t.db,
        &format!(
            "UPDATE outbox_jobs SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = 'hand', \
             claimed_at = {n}, locked_at = {n}, lease_expires_at = {l}, updated_at = {n} WHERE id = ?",
            n = at(now),
            l = at(now + 60_000)
        ),
        vec![by_hand.clone().into()],
    )
    .await;
    exec(
        &t.db,
        &format!(
            "UPDATE outbox_jobs SET status = 'completed', completed_at = {n}, lease_expires_at = NULL, updated_at = {n} \
             WHERE id = ?",
            n = at(now + 1)
        ),
        vec![by_hand.clone().into()],
    )
    .await;
    // The worker's claims and batched outcomes of every kind: odd jobs fail once and then complete, every
    // fifth fails for good.
    let worker = Worker::builder(&t.db)
        .concurrency(16)
        .poll_interval(Duration::from_millis(10))
        .retry_policy(outbox::RetryPolicy {
            base: Duration::from_millis(1),
            max: Duration::from_millis(1),
            jitter: 0.0,
        })
        .register(|p: Probe, ctx| async move {
            if p.n.is_multiple_of(5) {
                Err(outbox::JobError::permanent("fifth"))
            } else if !p.n.is_multiple_of(2) && ctx.attempt() == 1 {
                Err(outbox::JobError::retry("odd, first time"))
            } else {
                Ok(())
            }
        })
        .build()
        .await
        .expect("build");
    let handle = worker.start();
    let settled = wait_scalar(
        &t.db,
        "SELECT COUNT(*) FROM outbox_jobs WHERE status IN ('completed', 'failed')",
        40,
        Duration::from_secs(30),
    )
    .await;
    handle.shutdown().await.expect("shutdown");
    assert!(settled, "the worker did not finish every job");
    use JobEventKind::{Claimed, Completed, Enqueued, Failed, Retried};
    for (i, id) in ids.iter().enumerate() {
        let n = i + 1;
        let events: Vec<JobEventKind> =
            ops::history(&t.db, id).await.expect("history").iter().map(|e| e.event).collect();
        let expected: &[JobEventKind] = if n == 1 {
            &[Enqueued, Claimed, Completed]
        } else if n % 5 == 0 {
            &[Enqueued, Claimed, Failed]
        } else if n % 2 == 1 {
            &[Enqueued, Claimed, Retried, Claimed, Completed]
        } else {
            &[Enqueued, Claimed, Completed]
        };
        assert_eq!(events, expected, "job {n} ({id})");
    }
    let workers: Vec<Option<String>> =
        ops::history(&t.db, &by_hand).await.expect("history").into_iter().map(|e| e.worker).collect();
    assert_eq!(workers, [None, Some("hand".to_owned()), Some("hand".to_owned())]);
}

conformance!(purging_finished_jobs_leaves_no_feed_row_behind, mysql);
async fn purging_finished_jobs_leaves_no_feed_row_behind(t: TestDb) {
    let jobs: Vec<Probe> = (1..=50).map(|n| Probe { n }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let worker = Worker::builder(&t.db)
        .concurrency(16)
        .poll_interval(Duration::from_millis(10))
        .register(|_: Probe, _| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("build");
    worker.drain().await.expect("drain");
    // MariaDB's store records each job's claim and completion in a row of its own.
    let worker_rows = match t.backend {
        outbox_tests::Backend::MySql => "SELECT COUNT(*) FROM outbox_job_events WHERE event <> 'enqueued'",
        _ => "SELECT COUNT(*) FROM outbox_job_events WHERE job_id = ''",
    };
    assert!(outbox_tests::scalar(&t.db, worker_rows).await > 0, "the worker wrote its claims and completions");
    // A purge takes the jobs finished more than 10 ms ago: purge until all 50 have aged past that.
    let purged = std::sync::atomic::AtomicU64::new(0);
    let all = eventually(Duration::from_secs(10), || async {
        let n = ops::purge(&t.db, &[JobStatus::Completed], Duration::from_millis(10)).await.expect("purge");
        purged.fetch_add(n, std::sync::atomic::Ordering::SeqCst) + n >= 50
    })
    .await;
    let purged = purged.into_inner();
    assert!(all && purged == 50, "purged {purged} of the 50 finished jobs");
    assert_eq!(outbox_tests::scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events").await, 0);
}

conformance!(a_workers_feed_row_names_a_shared_kind_and_queue_once_and_gives_each_job_its_own, mysql);
async fn a_workers_feed_row_names_a_shared_kind_and_queue_once_and_gives_each_job_its_own(t: TestDb) {
    // A worker's row of jobs of one kind and queue names them and lists `[id, attempt]`; one of several lists
    // `[id, kind, queue, attempt]`.
    let elements = match t.backend {
        outbox_tests::Backend::Postgres => {
            "FROM outbox_job_events e, json_array_elements(e.jobs) x WHERE e.job_id = '' AND e.event <> 'enqueued' \
             AND json_array_length(x) ="
        }
        outbox_tests::Backend::Sqlite => {
            "FROM outbox_job_events e, json_each(e.jobs) x WHERE e.job_id = '' AND e.event <> 'enqueued' \
             AND json_array_length(x.value) ="
        }
        outbox_tests::Backend::MySql => {
            "FROM outbox_job_events e, JSON_TABLE(e.jobs, '$[*]' COLUMNS (value JSON PATH '$')) x \
             WHERE e.job_id = '' AND e.event <> 'enqueued' AND JSON_LENGTH(x.value) ="
        }
    };
    // Counted by form: (short, full) elements of the workers' rows, and the claims and completions recorded in
    // rows of their own (a completion the writer wrote by itself goes through the transition trigger).
    let forms = || async {
        let short = format!("SELECT COUNT(*) {elements} 2 AND e.kind = 'probe' AND e.queue <> ''");
        let full = format!("SELECT COUNT(*) {elements} 4 AND e.kind = '' AND e.queue = ''");
        let own = "SELECT COUNT(*) FROM outbox_job_events WHERE job_id <> '' AND event IN ('claimed', 'completed')";
        let db = &t.db;
        (
            outbox_tests::scalar(db, &short).await,
            outbox_tests::scalar(db, &full).await,
            outbox_tests::scalar(db, own).await,
        )
    };
    let start = ops::feed_head(&t.db).await.expect("head");
    let mut queue_of = std::collections::HashMap::new();
    for n in 1..=6 {
        let queue = ["a", "a", "a", "b", "c", "b"][n as usize - 1];
        let job = outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new().queue(queue)).await.expect("enqueue");
        queue_of.insert(job.id().to_owned(), queue);
    }
    // Enqueued before the worker starts, each queue's jobs are claimed together.
    // MariaDB's store records each job's claim and completion in a row of its own (its triggers write them).
    let own_rows = t.backend == outbox_tests::Backend::MySql;
    drain_queues(&t.db, Some("a")).await;
    let (short, full, own) = forms().await;
    assert!(
        (own_rows || short >= 3) && full == 0 && short + own == 3 * 2,
        "jobs of one queue: short {short}, full {full}, own {own}"
    );
    drain_queues(&t.db, None).await;
    let (short, full, own) = forms().await;
    assert!(
        (if own_rows { own == 6 * 2 } else { full >= 3 }) && short + full + own == 6 * 2,
        "jobs of two queues: short {short}, full {full}, own {own}"
    );

    let mut all = Vec::new();
    for _ in 0..200 {
        all = ops::feed(&t.db, &start, 1_000).await.expect("feed");
        if all.len() >= 6 * 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(all.len(), 6 * 3, "{all:#?}");
    for e in &all {
        assert_eq!((e.kind.as_str(), Some(e.queue.as_str())), ("probe", queue_of.get(&e.job_id).copied()), "{e:?}");
    }
}

/// Runs every job of `queue` (or of every queue) with a worker of concurrency 10.
async fn drain_queues(db: &sea_orm::DatabaseConnection, queue: Option<&str>) {
    let mut builder = Worker::builder(db).concurrency(10).poll_interval(Duration::from_millis(20));
    if let Some(queue) = queue {
        builder = builder.queues([queue]);
    }
    let worker = builder.register(|_: Probe, _| async { Ok::<_, outbox::JobError>(()) }).build().await.expect("build");
    worker.drain().await.expect("drain");
}
