//! Execution timeouts and retention, on every backend.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use outbox::{
    EnqueueOpts, JobContext, JobError, JobEventKind, JobStatus, Retention, RetryPolicy, Worker, WorkerBuilder, ops,
};
use outbox_tests::{Probe, Step, TestDb, conformance, exec, scalar};
use sea_orm::DatabaseConnection;

const DAY_MS: i64 = 86_400_000;

conformance!(a_handler_past_its_timeout_is_cancelled_retried_then_failed_while_others_run, mysql);
async fn a_handler_past_its_timeout_is_cancelled_retried_then_failed_while_others_run(t: TestDb) {
    // n = 1 stops when asked; n = 2 ignores the request and is dropped; the rest finish at once.
    let polite = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let deaf = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
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
        quick.push(outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue"));
    }
    for job in &quick {
        assert!(outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(10)).await);
    }
    let polite_failed = outbox_tests::wait_status(&t.db, polite.id(), JobStatus::Failed, Duration::from_secs(20)).await;
    let deaf_failed = outbox_tests::wait_status(&t.db, deaf.id(), JobStatus::Failed, Duration::from_secs(20)).await;
    handle.shutdown().await.expect("shutdown");
    assert!(polite_failed && deaf_failed, "both timed-out jobs fail once their attempts are used up");
    assert_eq!(asked.load(Ordering::SeqCst), 3, "each attempt was asked to stop through its context");

    for (job, why) in [(&polite, "timed out after 200ms"), (&deaf, "did not stop within the cancel grace of 300ms")] {
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

conformance!(retention_prunes_old_finished_jobs_but_keeps_sequences_evidence, mysql);
async fn retention_prunes_old_finished_jobs_but_keeps_sequences_evidence(t: TestDb) {
    for n in 1..=40 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    for seq in 1..=3 {
        outbox::enqueue(&t.db, &Step { key: 7, seq, sleep_ms: 0 }, EnqueueOpts::new()).await.expect("enqueue");
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
    // PostgreSQL finds finished jobs through its log of when they finished: the worker's completions, the failed
    // jobs and the times changed by hand are all listed at their time.
    let unlisted = |at: &str| {
        format!(
            "SELECT COUNT(*) FROM outbox_jobs j WHERE j.finished_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM \
             outbox_finished f WHERE j.id = ANY(f.jobs){at})"
        )
    };
    if t.backend == outbox_tests::Backend::Postgres {
        assert_eq!(scalar(&t.db, &unlisted(" AND f.at = j.finished_at")).await, 0, "a finished job not in the log");
    }

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
        ops::list(&t.db, &outbox::JobFilter { kind: Some("step".into()), ..Default::default() }).await.expect("list");
    assert_eq!(steps.len(), 1, "the sequence keeps its latest completed job");
    assert_eq!(steps[0].payload["seq"], 3);
    let orphans = "SELECT COUNT(*) FROM outbox_job_events e WHERE e.job_id <> '' \
                   AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = e.job_id)";
    assert_eq!(scalar(&t.db, orphans).await, 0, "pruned jobs take their history with them");
    if t.backend == outbox_tests::Backend::Postgres {
        assert_eq!(scalar(&t.db, &unlisted("")).await, 0, "a kept job retention took out of the log");
    }
}

conformance!(a_kind_that_keeps_nothing_is_deleted_as_it_completes_and_its_events_outlive_it_until_retention, mysql);
async fn a_kind_that_keeps_nothing_is_deleted_as_it_completes_and_its_events_outlive_it_until_retention(t: TestDb) {
    let refused = Worker::builder(&t.db)
        .retention(Retention::off().kind_keep_nothing("nobody-handles-this"))
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect_err("a kind the worker has no handler for");
    assert!(refused.to_string().contains("`nobody-handles-this`"), "{refused}");
    let refused = Worker::builder(&t.db)
        .retention(Retention::off().kind_keep_nothing("step"))
        .register(|_: Step, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect_err("a kind whose jobs all run in sequences");
    assert!(refused.to_string().contains("`step`") && refused.to_string().contains("sequences"), "{refused}");

    let head = ops::feed_head(&t.db).await.expect("feed head");
    let ids = enqueue_probes(&t).await;
    let worker = || {
        Worker::builder(&t.db)
            .concurrency(8)
            .retention(Retention::off().kind_keep_nothing("probe"))
            .register(|p: Probe, _: JobContext| async move {
                if p.n == 7 { Err(JobError::permanent("seven fails")) } else { Ok(()) }
            })
    };
    worker().build().await.expect("build").drain().await.expect("drain");
    // One more, alone: a batch of one takes the single-row path on SQLite.
    let alone = outbox::enqueue(&t.db, &Probe { n: 31 }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    worker().build().await.expect("build").drain().await.expect("drain");

    let left = |kind: &str| format!("SELECT COUNT(*) FROM outbox_jobs WHERE kind = '{kind}'");
    assert_eq!(scalar(&t.db, &left("probe")).await, 4, "the failed probe and the sequence are kept");
    assert_eq!(ops::get(&t.db, &ids[6]).await.expect("the failed probe").status, JobStatus::Failed);
    let sequenced = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed' AND sequence_key IS NOT NULL";
    assert_eq!(scalar(&t.db, sequenced).await, 3, "jobs with a sequence key are kept as evidence");
    assert!(matches!(ops::get(&t.db, &ids[0]).await, Err(outbox::Error::NotFound { .. })));
    for id in [&ids[0], &ids[25], &alone] {
        let waited = ops::wait(&t.db, id, Duration::from_secs(5)).await.expect_err("nothing to return");
        assert!(matches!(waited, outbox::Error::CompletedUnkept { .. }), "{waited}");
    }
    let never = ops::wait(&t.db, "no-such-job", Duration::from_secs(1)).await.expect_err("no such job");
    assert!(matches!(never, outbox::Error::NotFound { .. }), "{never}");

    // A reader of the feed from before the enqueues misses none of the deleted jobs' events.
    let count = |events: &[outbox::FeedEvent], kind: JobEventKind| {
        events.iter().filter(|e| e.kind == "probe" && e.event == kind).count()
    };
    let probes_completed = || async {
        let events = ops::feed(&t.db, &head, 10_000).await.expect("feed");
        events.iter().filter(|e| e.kind == "probe" && e.event == JobEventKind::Completed).count() == 33
    };
    assert!(outbox_tests::eventually(Duration::from_secs(20), probes_completed).await, "the feed shows them all");
    let events = ops::feed(&t.db, &head, 10_000).await.expect("feed");
    assert_eq!(count(&events, JobEventKind::Enqueued), 34);
    assert_eq!(count(&events, JobEventKind::Claimed), 34);
    assert_eq!(count(&events, JobEventKind::Completed), 33);
    assert_eq!(count(&events, JobEventKind::Failed), 1);

    // Retention: the events of deleted jobs go with the feed row of their completion once it is old enough,
    // and nothing else goes.
    let orphans = "SELECT COUNT(*) FROM outbox_job_events e WHERE e.job_id <> '' \
                   AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = e.job_id)";
    assert!(scalar(&t.db, orphans).await >= 30, "the deleted jobs' events outlive them");
    let kept_events = "SELECT COUNT(*) FROM outbox_job_events e WHERE e.job_id <> '' \
                       AND EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = e.job_id)";
    let kept_before = scalar(&t.db, kept_events).await;
    let old = t.backend.time(outbox_tests::now_ms() - 2 * DAY_MS);
    exec(&t.db, &format!("UPDATE outbox_job_events SET at = {old} WHERE job_id = ''"), vec![]).await;
    // MariaDB's store writes no feed row of many jobs: its delete trigger lists each job deleted as it completed.
    if t.backend == outbox_tests::Backend::MySql {
        exec(&t.db, &format!("UPDATE outbox_outlived SET at = {old}"), vec![]).await;
    }
    let pruner = Worker::builder(&t.db)
        .retention(Retention::new().interval(Duration::from_millis(20)).batch_size(3))
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    let pruned =
        outbox_tests::eventually(Duration::from_secs(20), || async { scalar(&t.db, orphans).await == 0 }).await;
    pruner.shutdown().await.expect("shutdown");
    assert!(pruned, "orphaned events left: {}", scalar(&t.db, orphans).await);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events WHERE job_id = ''").await, 0);
    assert_eq!(scalar(&t.db, kept_events).await, kept_before, "the kept jobs keep their history");
}

conformance!(a_kind_kept_in_time_partitions_leaves_the_jobs_table_and_goes_with_its_partition_whole, mysql);
async fn a_kind_kept_in_time_partitions_leaves_the_jobs_table_and_goes_with_its_partition_whole(t: TestDb) {
    let refusal = |retention: Retention| async {
        Worker::builder(&t.db)
            .retention(retention)
            .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
            .register(|_: Step, _: JobContext| async { Ok::<_, JobError>(()) })
            .build()
            .await
            .expect_err("refused")
            .to_string()
    };
    let e = refusal(Retention::off().kind_in_partitions("nobody-handles-this")).await;
    assert!(e.contains("`nobody-handles-this`"), "{e}");
    let e = refusal(Retention::off().kind_in_partitions("step")).await;
    assert!(e.contains("`step`") && e.contains("sequences"), "{e}");
    let e = refusal(Retention::off().kind_in_partitions("probe").kind_keep_nothing("probe")).await;
    assert!(e.contains("`probe`") && e.contains("choose one"), "{e}");
    let own_age = Retention::off().kind_in_partitions("probe").kind_max_age("probe", JobStatus::Completed, None);
    let e = refusal(own_age).await;
    assert!(e.contains("`probe`") && e.contains("its own age"), "{e}");

    let mut ids = enqueue_probes(&t).await;
    let worker = |retention: Retention| {
        Worker::builder(&t.db).concurrency(8).retention(retention).register(|p: Probe, _: JobContext| async move {
            if p.n == 7 { Err(JobError::permanent("seven fails")) } else { Ok(serde_json::json!(p.n)) }
        })
    };
    let archiving = || Retention::off().kind_in_partitions("probe");
    worker(archiving()).build().await.expect("build").drain().await.expect("drain");
    // One more, alone: a batch of one takes the single-row path on SQLite.
    let alone = outbox::enqueue(&t.db, &Probe { n: 31 }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    worker(archiving()).build().await.expect("build").drain().await.expect("drain");
    ids.push(alone);

    let in_jobs = "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'probe'";
    assert_eq!(scalar(&t.db, in_jobs).await, 4, "the failed probe and the sequence stay in the jobs table");
    let archived = "SELECT COUNT(*) FROM outbox_jobs_archive WHERE kind = 'probe' AND status = 'completed'";
    assert_eq!(scalar(&t.db, archived).await, 30);
    // Each is read as it was completed, wherever it is.
    let job = ops::get(&t.db, &ids[0]).await.expect("an archived job");
    assert_eq!((job.status, job.output.clone(), job.attempts), (JobStatus::Completed, Some(serde_json::json!(1)), 1));
    assert!(job.completed_at.is_some() && job.claimed_at.is_some(), "{job:?}");
    let waited = ops::wait(&t.db, &ids[25], Duration::from_secs(5)).await.expect("wait for an archived job");
    assert_eq!(waited.output, Some(serde_json::json!(26)));
    assert_eq!(ops::get(&t.db, &ids[6]).await.expect("the failed probe").status, JobStatus::Failed);
    let all =
        ops::list(&t.db, &outbox::JobFilter { kind: Some("probe".into()), ..Default::default() }).await.expect("list");
    assert_eq!(all.len(), 34, "listings read both tables");
    assert!(all.windows(2).all(|w| w[0].id > w[1].id), "newest first across both tables");
    let two = outbox::JobFilter { kind: Some("probe".into()), limit: 2, ..Default::default() };
    let newest = ops::list(&t.db, &two).await.expect("list two");
    assert_eq!(newest.iter().map(|j| j.id.clone()).collect::<Vec<_>>(), vec![all[0].id.clone(), all[1].id.clone()]);
    let completed = ops::counts(&t.db)
        .await
        .expect("counts")
        .into_iter()
        .filter(|c| c.kind == "probe" && c.status == JobStatus::Completed)
        .map(|c| c.count)
        .sum::<u64>();
    assert_eq!(completed, 33, "counts read both tables");
    // An operator deletes an archived job like any other, with its history.
    let history = format!("SELECT COUNT(*) FROM outbox_job_events WHERE job_id = '{}'", ids[1]);
    assert!(scalar(&t.db, &history).await > 0, "an archived job keeps its history");
    ops::delete(&t.db, &ids[1]).await.expect("delete an archived job");
    assert!(matches!(ops::get(&t.db, &ids[1]).await, Err(outbox::Error::NotFound { .. })));
    assert_eq!(scalar(&t.db, &history).await, 0, "its history goes with it");
    assert_eq!(scalar(&t.db, archived).await, 29);

    // A pass makes the partitions (SQLite: sets the table aside as one) and keeps every job younger than the age.
    let partitions = match t.backend {
        outbox_tests::Backend::Sqlite => {
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name GLOB 'outbox_jobs_done_[0-9]*'"
        }
        outbox_tests::Backend::Postgres => {
            "SELECT COUNT(*) FROM pg_inherits WHERE inhparent = 'outbox_jobs_done'::regclass \
             AND inhrelid <> 'outbox_jobs_done_default'::regclass"
        }
        outbox_tests::Backend::MySql => {
            "SELECT COUNT(*) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME = 'outbox_jobs_done' AND PARTITION_NAME <> 'pmax'"
        }
    };
    let span = Duration::from_millis(300);
    let keeper =
        worker(Retention::new().interval(Duration::from_millis(20)).partition_span(span).kind_in_partitions("probe"))
            .build()
            .await
            .expect("build")
            .start();
    let made =
        outbox_tests::eventually(Duration::from_secs(20), || async { scalar(&t.db, partitions).await > 0 }).await;
    keeper.shutdown().await.expect("shutdown");
    assert!(made, "no partition was made");
    assert_eq!(scalar(&t.db, archived).await, 29, "a day's age keeps them all");
    // Completions after it land in a partition.
    let later: Vec<Probe> = (51..=55).map(|n| Probe { n }).collect();
    outbox::enqueue_batch(&t.db, &later, EnqueueOpts::new()).await.expect("enqueue");
    worker(archiving()).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(scalar(&t.db, archived).await, 34);
    // The readers of what finished lately read the partitions that can hold it, the ones set aside included.
    let db = &t.db;
    let recent = |window: Duration| async move {
        ops::recent(db, window)
            .await
            .expect("recent")
            .into_iter()
            .filter(|c| c.kind == "probe" && c.status == JobStatus::Completed)
            .map(|c| c.count)
            .sum::<u64>()
    };
    let in_table = "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'probe' AND status = 'completed'";
    let expected = u64::try_from(scalar(&t.db, archived).await + scalar(&t.db, in_table).await).expect("a count");
    assert_eq!(recent(Duration::from_secs(3600)).await, expected, "archived and kept completions alike");
    let timed = ops::durations(&t.db, Duration::from_secs(3600)).await.expect("durations");
    assert_eq!(timed.iter().find(|d| d.kind == "probe").map(|d| d.completed), Some(expected));
    if t.backend == outbox_tests::Backend::Sqlite {
        // A table named as set aside a day after the epoch is not read for the last hour, whatever it holds.
        exec(&t.db, "CREATE TABLE outbox_jobs_done_1_86400000 AS SELECT * FROM outbox_jobs_done WHERE 0", vec![]).await;
        exec(&t.db, "INSERT INTO outbox_jobs_done_1_86400000 SELECT * FROM outbox_jobs_archive LIMIT 1", vec![]).await;
        assert_eq!(recent(Duration::from_secs(3600)).await, expected, "the stray table's job is not counted");
        let ever = Duration::from_secs(60 * 60 * 24 * 365 * 100);
        assert_eq!(recent(ever).await, expected + 1, "a window reaching back to its time reads it");
        exec(&t.db, "DROP TABLE outbox_jobs_done_1_86400000", vec![]).await;
    }

    // With an age of a millisecond, whole partitions go (and PostgreSQL's default partition row by row).
    let events_before = scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events").await;
    let pruner = worker(
        Retention::new()
            .interval(Duration::from_millis(20))
            .partition_span(span)
            .max_age(JobStatus::Completed, Some(Duration::from_millis(1)))
            .kind_in_partitions("probe"),
    )
    .build()
    .await
    .expect("build")
    .start();
    let emptied =
        outbox_tests::eventually(Duration::from_secs(20), || async { scalar(&t.db, archived).await == 0 }).await;
    pruner.shutdown().await.expect("shutdown");
    assert!(emptied, "archived jobs left: {}", scalar(&t.db, archived).await);
    assert!(matches!(ops::get(&t.db, &ids[0]).await, Err(outbox::Error::NotFound { .. })));
    assert_eq!(
        scalar(&t.db, in_jobs).await,
        2,
        "the failed probe and the latest of the sequence (its evidence) are kept"
    );
    assert!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events").await <= events_before);
}

/// Probes 1 to 30 (their ids returned in order): 1 to 20 one per statement, 21 to 30 in one statement (on
/// PostgreSQL their enqueue is one row that belongs to none of them); and 41 to 43 in a sequence of their own,
/// whose latest completed job is evidence, so that retention keeps it.
async fn enqueue_probes(t: &TestDb) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 1..=20 {
        ids.push(outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned());
    }
    let batch: Vec<Probe> = (21..=30).map(|n| Probe { n }).collect();
    let batched = outbox::enqueue_batch(&t.db, &batch, EnqueueOpts::new()).await.expect("enqueue a batch");
    ids.extend(batched.iter().map(|e| e.id().to_owned()));
    for n in 41..=43 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new().sequence("kept")).await.expect("enqueue");
    }
    ids
}

/// The `n` of a probe's payload.
fn n_expr(t: &TestDb) -> &'static str {
    match t.backend {
        outbox_tests::Backend::Sqlite => "json_extract(payload, '$.n')",
        outbox_tests::Backend::Postgres => "(payload ->> 'n')::int8",
        outbox_tests::Backend::MySql => "CAST(JSON_EXTRACT(payload, '$.n') AS SIGNED)",
    }
}

conformance!(a_schedule_whose_builder_panics_leaves_the_others_running, mysql);
async fn a_schedule_whose_builder_panics_leaves_the_others_running(t: TestDb) {
    let broken = outbox::Schedule::every("broken", Duration::from_millis(100), |_| -> Probe {
        panic!("no payload for this tick")
    });
    let working = outbox::Schedule::every("working", Duration::from_millis(100), |tick| Probe {
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
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
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

/// Handlers that block their thread until the test lets them go, and the worker they stall: built and run on a
/// thread of its own, on a current-thread runtime, as an application running handlers there would.
struct Stall {
    /// The number of each job whose handler is holding its thread.
    held: mpsc::Receiver<u64>,
    held_tx: mpsc::Sender<u64>,
    /// One message lets one holding handler go; dropping it lets them all go.
    release: Option<mpsc::Sender<()>>,
    release_rx: Arc<Mutex<mpsc::Receiver<()>>>,
    /// Stops the worker; its thread ends once the worker has shut down.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<outbox::Result<()>>>,
}

/// What a handler holds its thread with.
#[derive(Clone)]
struct Holder {
    held: mpsc::Sender<u64>,
    release: Arc<Mutex<mpsc::Receiver<()>>>,
}

impl Holder {
    /// Blocks this thread (not just this task) until the test releases it; a minute at most.
    fn hold(&self, n: u64) {
        let _ = self.held.send(n);
        let release = self.release.lock().expect("release lock");
        let _ = release.recv_timeout(Duration::from_secs(60));
    }
}

impl Stall {
    fn new() -> Stall {
        let (held_tx, held) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        Stall {
            held,
            held_tx,
            release: Some(release),
            release_rx: Arc::new(Mutex::new(release_rx)),
            stop: None,
            thread: None,
        }
    }

    fn holder(&self) -> Holder {
        Holder { held: self.held_tx.clone(), release: Arc::clone(&self.release_rx) }
    }

    /// Builds and runs the worker `builder` makes on its own thread and current-thread runtime, with a pool of
    /// its own to `t`'s database.
    fn run(&mut self, t: &TestDb, builder: impl FnOnce(&DatabaseConnection) -> WorkerBuilder + Send + 'static) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (backend, url) = (t.backend, t.url.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let db = outbox_tests::connect_to(backend, &url).await;
                builder(&db)
                    .build()
                    .await?
                    .run_until(async {
                        let _ = stopped.await;
                    })
                    .await
            })
        });
        (self.stop, self.thread) = (Some(stop), Some(thread));
    }

    /// Waits until the handler of job `n` holds its thread.
    async fn held(&self, n: u64) {
        let got = tokio::task::block_in_place(|| self.held.recv_timeout(Duration::from_secs(30)));
        assert_eq!(got.ok(), Some(n), "the handler of job {n} never started to hold its thread");
    }

    fn release_one(&self) {
        self.release.as_ref().expect("not stopped").send(()).expect("release");
    }

    /// Lets every handler go, stops the worker and waits for its thread: its outcomes are all written or refused.
    fn stop(&mut self) -> outbox::Result<()> {
        drop(self.release.take());
        drop(self.stop.take());
        let Some(thread) = self.thread.take() else { return Ok(()) };
        tokio::task::block_in_place(|| thread.join()).expect("the stalled worker's thread panicked")
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        drop(self.release.take());
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::block_in_place(|| thread.join());
        }
    }
}

/// `(event, attempt, worker)` of each entry of a job's history.
async fn events(t: &TestDb, id: &str) -> Vec<(JobEventKind, i32, Option<String>)> {
    let history = ops::history(&t.db, id).await.expect("history");
    history.into_iter().map(|e| (e.event, e.attempt, e.worker)).collect()
}

conformance!(a_stalled_worker_holds_no_lock_and_its_expired_claim_is_rescued, mysql);
/// A handler that blocks its thread stalls its worker's runtime, whose retention passes every 10 ms. While it
/// is stalled, the application enqueues on another pool at once (20 stalls), and a second worker rescues the
/// stalled worker's expired claim and completes it; the stalled worker's late completion changes nothing.
async fn a_stalled_worker_holds_no_lock_and_its_expired_claim_is_rescued(t: TestDb) {
    let mut stall = Stall::new();
    let holder = stall.holder();
    stall.run(&t, move |db| {
        Worker::builder(db)
            .id("stalled")
            .concurrency(1)
            .poll_interval(Duration::from_millis(20))
            .lease(Duration::from_millis(300))
            .retention(Retention::new().interval(Duration::from_millis(10)))
            .register(move |job: Probe, ctx: JobContext| {
                let holder = holder.clone();
                async move {
                    if job.n < 1_000 && ctx.attempt() == 1 {
                        holder.hold(job.n);
                    }
                    Ok::<_, JobError>(())
                }
            })
    });
    let app = t.connect().await;
    let mut took = Vec::new();
    for round in 1..=20 {
        outbox::enqueue(&t.db, &Probe { n: round }, EnqueueOpts::new()).await.expect("enqueue");
        stall.held(round).await;
        let started = Instant::now();
        outbox::enqueue(&app, &Probe { n: 1_000 + round }, EnqueueOpts::new()).await.unwrap_or_else(|e| {
            panic!("stall {round}: the application's enqueue failed while the worker stalled: {e}")
        });
        took.push(started.elapsed());
        stall.release_one();
    }
    took.sort();
    eprintln!("enqueue during a stall: median {:?}, max {:?} (20 stalls)", took[10], took[19]);

    let job = outbox::enqueue(&t.db, &Probe { n: 99 }, EnqueueOpts::new()).await.expect("enqueue");
    stall.held(99).await;
    outbox_tests::assert_every_claim_rescuable(&t.db, true, "while the worker stalls").await;
    let rescuer = Worker::builder(&t.db)
        .id("rescuer")
        .poll_interval(Duration::from_millis(20))
        .rescue_interval(Duration::from_millis(50))
        .retention(Retention::off())
        .register(|_: Probe, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    let rescued = outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(30)).await;
    assert!(
        rescued,
        "the stalled worker's expired claim was not rescued and completed: {:?}",
        events(&t, job.id()).await
    );
    let record = ops::get(&t.db, job.id()).await.expect("get");
    let history = events(&t, job.id()).await;
    // The stalled handler returns `Ok` for attempt 1, and its worker writes it (or tries to) as it stops.
    stall.stop().expect("the stalled worker stops cleanly");
    rescuer.shutdown().await.expect("shutdown");
    assert_eq!(format!("{:?}", ops::get(&t.db, job.id()).await.expect("get")), format!("{record:?}"));
    assert_eq!(events(&t, job.id()).await, history, "the late completion changed the job's history");
    let completed: Vec<_> = history.iter().filter(|(e, ..)| *e == JobEventKind::Completed).collect();
    assert_eq!(completed, [&(JobEventKind::Completed, 2, Some("rescuer".into()))], "{history:?}");
    assert!(history.contains(&(JobEventKind::Claimed, 1, Some("stalled".into()))), "{history:?}");
    assert_eq!(record.attempts, 2);
    outbox_tests::assert_every_claim_rescuable(&t.db, false, "after the stall").await;
}

conformance!(a_handler_blocking_its_thread_past_its_timeout_is_given_back_from_outside, mysql);
/// A handler blocks its worker's only thread past its 200 ms timeout: its attempt is failed and its claim
/// given back while it still blocks, at the timeout plus the cancel grace; its late `Ok` is discarded and the
/// retry completes the job.
async fn a_handler_blocking_its_thread_past_its_timeout_is_given_back_from_outside(t: TestDb) {
    let mut stall = Stall::new();
    let holder = stall.holder();
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    stall.run(&t, move |db| {
        Worker::builder(db)
            .id("blocked")
            .poll_interval(Duration::from_millis(20))
            .kind_timeout("probe", Duration::from_millis(200))
            .cancel_grace(Duration::from_millis(300))
            .retry_policy(RetryPolicy { base: Duration::from_millis(20), max: Duration::from_millis(50), jitter: 0.0 })
            .register(move |job: Probe, ctx: JobContext| {
                let holder = holder.clone();
                async move {
                    if ctx.attempt() == 1 {
                        holder.hold(job.n);
                    }
                    Ok::<_, JobError>(())
                }
            })
    });
    stall.held(1).await;
    let retried = || async { events(&t, job.id()).await.iter().any(|(e, ..)| *e == JobEventKind::Retried) };
    let given_back = outbox_tests::eventually(Duration::from_secs(30), retried).await;
    assert!(given_back, "the blocked attempt was not given back: {:?}", events(&t, job.id()).await);
    let history = ops::history(&t.db, job.id()).await.expect("history");
    let at = |kind: JobEventKind| history.iter().find(|e| e.event == kind).map(|e| e.at).expect("event");
    let after = (at(JobEventKind::Retried) - at(JobEventKind::Claimed)).to_std().expect("retried after claimed");
    eprintln!("claimed to given back: {after:?} (timeout 200ms + cancel grace 300ms)");
    assert!(after < Duration::from_millis(1_500), "given back only after {after:?}");
    let error = history.iter().find_map(|e| e.error.clone()).expect("error");
    assert!(
        error.contains("timed out after 200ms") && error.contains("did not stop within the cancel grace of 300ms"),
        "{error}"
    );
    stall.release_one();
    let done = outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(30)).await;
    stall.stop().expect("the worker stops cleanly");
    assert!(done, "the retry did not complete the job: {:?}", events(&t, job.id()).await);
    let kinds: Vec<JobEventKind> = events(&t, job.id()).await.into_iter().map(|(e, ..)| e).collect();
    use JobEventKind::{Claimed, Completed, Enqueued, Retried};
    assert_eq!(kinds, [Enqueued, Claimed, Retried, Claimed, Completed], "the late `Ok` of attempt 1 counted");
    assert_eq!(ops::get(&t.db, job.id()).await.expect("get").attempts, 2);
}

conformance!(a_sequenced_handler_blocking_past_its_timeout_keeps_its_claim_until_rescued, mysql);
/// A job of a sequence whose handler blocks past its timeout is not given back while its thread still runs
/// (the next step could start beside it): its claim is kept, its lease left to expire, and a second worker
/// rescues it; the next step starts only after that.
async fn a_sequenced_handler_blocking_past_its_timeout_keeps_its_claim_until_rescued(t: TestDb) {
    let first = outbox::enqueue(&t.db, &Step { key: 1, seq: 0, sleep_ms: 0 }, EnqueueOpts::new()).await;
    let first = first.expect("enqueue");
    let second = outbox::enqueue(&t.db, &Step { key: 1, seq: 1, sleep_ms: 0 }, EnqueueOpts::new()).await;
    let second = second.expect("enqueue");
    let mut stall = Stall::new();
    let holder = stall.holder();
    stall.run(&t, move |db| {
        Worker::builder(db)
            .id("blocked")
            .poll_interval(Duration::from_millis(20))
            .lease(Duration::from_secs(2))
            .kind_timeout("step", Duration::from_millis(200))
            .cancel_grace(Duration::from_millis(300))
            .register(move |job: Step, ctx: JobContext| {
                let holder = holder.clone();
                async move {
                    if ctx.attempt() == 1 && job.seq == 0 {
                        holder.hold(0);
                    }
                    Ok::<_, JobError>(())
                }
            })
    });
    stall.held(0).await;
    let rescuer = Worker::builder(&t.db)
        .id("rescuer")
        .poll_interval(Duration::from_millis(20))
        .rescue_interval(Duration::from_millis(50))
        .register(|_: Step, _: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    let done = outbox_tests::wait_status(&t.db, second.id(), JobStatus::Completed, Duration::from_secs(30)).await;
    rescuer.shutdown().await.expect("shutdown");
    stall.stop().expect("the blocked worker stops cleanly");
    assert!(done, "the sequence did not go on: {:?}", events(&t, first.id()).await);
    let history = ops::history(&t.db, first.id()).await.expect("history");
    let kinds: Vec<JobEventKind> = history.iter().map(|e| e.event).collect();
    use JobEventKind::{Claimed, Completed, Enqueued, Rescued};
    assert_eq!(kinds, [Enqueued, Claimed, Rescued, Claimed, Completed], "given back while its thread ran: {history:?}");
    let rescued = history.iter().find(|e| e.event == Rescued).map(|e| e.at).expect("rescued");
    let next = ops::history(&t.db, second.id()).await.expect("history");
    let started = next.iter().find(|e| e.event == Claimed).map(|e| e.at).expect("claimed");
    assert!(started >= rescued, "the next step started at {started} before the blocked one was rescued at {rescued}");
}

conformance!(a_shutdown_does_not_wait_for_a_blocked_handler_whose_claim_was_given_back, mysql);
/// A handler blocks a thread of its worker's multi-thread runtime past its 200 ms timeout, and the test lets it
/// go only once the shutdown has resolved: a shutdown that waited for it would never resolve. Asked after the
/// watchdog gave the claim back, or before (it then waits for the give-back), the shutdown resolves with no job
/// of the worker claimed: the attempt failed for its timeout, and the job waits for its retry, an hour away.
async fn a_shutdown_does_not_wait_for_a_blocked_handler_whose_claim_was_given_back(t: TestDb) {
    for (n, given_back_first) in [(1, true), (2, false)] {
        let stall = Stall::new();
        let holder = stall.holder();
        let job = outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
        let hour = Duration::from_secs(3_600);
        let handle = Worker::builder(&t.db)
            .id(format!("blocked-{n}"))
            .poll_interval(Duration::from_millis(20))
            .kind_timeout("probe", Duration::from_millis(200))
            .cancel_grace(Duration::from_millis(300))
            .shutdown_grace(Duration::from_millis(100))
            .retry_policy(RetryPolicy { base: hour, max: hour, jitter: 0.0 })
            .register(move |job: Probe, _: JobContext| {
                let holder = holder.clone();
                async move {
                    holder.hold(job.n);
                    Ok::<_, JobError>(())
                }
            })
            .build()
            .await
            .expect("build")
            .start();
        stall.held(n).await;
        if given_back_first {
            let retried = || async { events(&t, job.id()).await.iter().any(|(e, ..)| *e == JobEventKind::Retried) };
            let given_back = outbox_tests::eventually(Duration::from_secs(30), retried).await;
            assert!(given_back, "the blocked attempt was not given back: {:?}", events(&t, job.id()).await);
        }
        // The handler still holds its thread, and does until `stall` is dropped below.
        let stopped = tokio::time::timeout(Duration::from_secs(30), handle.shutdown()).await;
        assert!(
            stopped.as_ref().is_ok_and(|r| r.is_ok()),
            "job {n}: the shutdown waited for a handler whose claim was given back: {stopped:?}"
        );
        let record = ops::get(&t.db, job.id()).await.expect("get");
        assert_eq!(record.status, JobStatus::Pending, "job {n}: given back for its retry: {record:?}");
        assert_eq!(record.attempts, 1, "job {n}");
        let error = record.last_error.clone().expect("error");
        assert!(error.contains("did not stop within the cancel grace of 300ms"), "job {n}: {error}");
        let kinds: Vec<JobEventKind> = events(&t, job.id()).await.into_iter().map(|(e, ..)| e).collect();
        use JobEventKind::{Claimed, Enqueued, Retried};
        assert_eq!(kinds, [Enqueued, Claimed, Retried], "job {n}");
        let workers = ops::workers(&t.db).await.expect("workers");
        assert!(workers.iter().all(|w| w.id != format!("blocked-{n}")), "job {n}: the worker left the registry");
        // Lets the handler go; its late `Ok` is discarded.
        drop(stall);
    }
}
