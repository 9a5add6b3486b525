//! Operator functions, on every backend.

use std::time::Duration;

use outbox::{EnqueueOpts, Error, JobStatus, ops};
use outbox_tests::{Backend, Keyed, Probe, TestDb, conformance, exec, scalar};

conformance!(retry_cancel_and_purge_follow_the_lifecycle, mysql);
async fn retry_cancel_and_purge_follow_the_lifecycle(t: TestDb) {
    let a = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let b = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");

    // Cancel applies to pending jobs only.
    ops::cancel(&t.db, a.id()).await.expect("cancel");
    assert_eq!(ops::get(&t.db, a.id()).await.expect("get").status, JobStatus::Cancelled);
    let err = ops::cancel(&t.db, a.id()).await.expect_err("cancel twice");
    assert!(err.to_string().contains("its status is `cancelled`"), "{err}");

    // Retry applies to failed and cancelled jobs, and resets attempts.
    let err = ops::retry(&t.db, b.id()).await.expect_err("pending");
    assert!(matches!(err, Error::InvalidTransition { action: "retry", .. }), "{err}");
    exec(
        &t.db,
        "UPDATE outbox_jobs SET status = 'failed', attempts = 3, last_error = 'x' WHERE id = ?",
        vec![b.id().into()],
    )
    .await;
    ops::retry(&t.db, b.id()).await.expect("retry failed");
    ops::retry(&t.db, a.id()).await.expect("retry cancelled");
    let job = ops::get(&t.db, b.id()).await.expect("get");
    assert_eq!((job.status, job.attempts), (JobStatus::Pending, 0));
    let events: Vec<String> =
        ops::history(&t.db, a.id()).await.expect("history").into_iter().map(|e| e.event.to_string()).collect();
    assert_eq!(events, ["enqueued", "cancelled", "retried_by_operator"]);

    // A failed job whose intent is already carried by an active job is not retried twice.
    exec(&t.db, "UPDATE outbox_jobs SET status = 'failed' WHERE id = ?", vec![b.id().into()]).await;
    let twin = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    assert!(twin.is_new());
    let err = ops::retry(&t.db, b.id()).await.expect_err("twin active");
    assert!(err.to_string().contains("same kind and idempotency key"), "{err}");
    assert!(err.to_string().contains("its status is `failed`"), "{err}");
    assert_eq!(ops::retry_failed(&t.db, Some("probe")).await.expect("bulk"), 0);
    // The refusal is a read, not a failed statement: inside a transaction it leaves the transaction usable.
    exec(&t.db, "UPDATE outbox_jobs SET status = 'cancelled' WHERE id = ?", vec![b.id().into()]).await;
    outbox::transaction(&t.db, async |txn| {
        let err = ops::retry(txn, b.id()).await.expect_err("twin active");
        assert!(err.to_string().contains("its status is `cancelled`"), "{err}");
        ops::get(txn, twin.id()).await.map(|_| ())
    })
    .await
    .expect("the transaction is still usable");

    // Unknown ids are named.
    let err = ops::get(&t.db, "nope").await.expect_err("unknown");
    assert_eq!(err.to_string(), "no job with id `nope`");

    // Purge removes only terminal jobs older than the cutoff.
    let long_ago = t.backend.time(0);
    let sql = format!("UPDATE outbox_jobs SET status = 'completed', updated_at = {long_ago} WHERE id = ?");
    exec(&t.db, &sql, vec![twin.id().into()]).await;
    let err = ops::purge(&t.db, &[JobStatus::Pending], Duration::from_secs(1)).await.expect_err("pending");
    assert!(err.to_string().contains("cannot purge pending jobs"), "{err}");
    let n =
        ops::purge(&t.db, &[JobStatus::Completed, JobStatus::Failed], Duration::from_secs(3600)).await.expect("purge");
    assert_eq!(n, 1);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 2);
    if t.backend == Backend::Postgres {
        let gone = "SELECT COUNT(*) FROM outbox_finished f \
                    WHERE NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = ANY(f.jobs))";
        assert_eq!(scalar(&t.db, gone).await, 0, "the log still lists the purged job");
    }
    assert_eq!(
        scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events WHERE job_id NOT IN (SELECT id FROM outbox_jobs)").await,
        0
    );
}

conformance!(retry_failed_keeps_the_latest_of_each_key, mysql);
/// Several failed jobs carrying one key: a bulk retry brings back the latest (by last change) on every
/// backend, and leaves the others failed.
async fn retry_failed_keeps_the_latest_of_each_key(t: TestDb) {
    let mut ids = Vec::new();
    for (i, at) in [(1, 3_000), (2, 9_000), (3, 5_000)] {
        let job = outbox::enqueue(&t.db, &Keyed { user_id: 7, note: format!("try {i}") }, EnqueueOpts::new())
            .await
            .expect("enqueue");
        let sql = format!("UPDATE outbox_jobs SET status = 'failed', updated_at = {} WHERE id = ?", t.backend.time(at));
        exec(&t.db, &sql, vec![job.id().into()]).await;
        ids.push(job.id().to_owned());
    }
    let lone =
        outbox::enqueue(&t.db, &Keyed { user_id: 8, note: "alone".into() }, EnqueueOpts::new()).await.expect("enqueue");
    exec(&t.db, "UPDATE outbox_jobs SET status = 'failed' WHERE id = ?", vec![lone.id().into()]).await;
    assert_eq!(ops::retry_failed(&t.db, Some("keyed")).await.expect("bulk"), 2);
    let status = |id: String| {
        let db = t.db.clone();
        async move { ops::get(&db, &id).await.expect("get").status }
    };
    assert_eq!(status(ids[1].clone()).await, JobStatus::Pending, "the latest failed job of the key");
    assert_eq!(status(ids[0].clone()).await, JobStatus::Failed);
    assert_eq!(status(ids[2].clone()).await, JobStatus::Failed);
    assert_eq!(status(lone.id().to_owned()).await, JobStatus::Pending);
}

conformance!(stats_answer_the_six_questions, mysql);
async fn stats_answer_the_six_questions(t: TestDb) {
    let now = chrono::Utc::now().timestamp_millis();
    let ids: Vec<String> = futures_ids(&t.db, 6).await;
    // One job in each state the questions are about.
    let at = |ms| t.backend.time(ms);
    let rows = [
        (&ids[0], format!("status = 'claimed', attempts = 1, lease_expires_at = {}", at(1))),
        (&ids[1], format!("status = 'claimed', attempts = 1, lease_expires_at = {}", at(now + 600_000))),
        (
            &ids[2],
            format!(
                "status = 'completed', attempts = 1, claimed_at = {}, completed_at = {}, updated_at = {}",
                at(now - 250),
                at(now),
                at(now)
            ),
        ),
        (&ids[3], "status = 'failed', attempts = 3, last_error = 'smtp said no'".to_owned()),
    ];
    for (id, set) in rows {
        exec(&t.db, &format!("UPDATE outbox_jobs SET {set} WHERE id = ?"), vec![id.clone().into()]).await;
    }
    // A key enqueued again after its first job completed.
    let first = outbox::enqueue(&t.db, &Keyed { user_id: 1, note: "a".into() }, EnqueueOpts::new()).await.expect("e");
    exec(&t.db, "UPDATE outbox_jobs SET status = 'completed' WHERE id = ?", vec![first.id().into()]).await;
    outbox::enqueue(&t.db, &Keyed { user_id: 1, note: "b".into() }, EnqueueOpts::new()).await.expect("e");

    let stats = ops::stats(&t.db, Duration::from_secs(3600)).await.expect("stats");
    let count = |kind: &str, status| {
        stats.counts.iter().find(|c| c.kind == kind && c.status == status).map(|c| c.count).unwrap_or(0)
    };
    assert_eq!(count("probe", JobStatus::Pending), 2);
    assert_eq!(count("probe", JobStatus::Claimed), 2);
    assert_eq!(count("probe", JobStatus::Completed), 1);
    assert_eq!(count("probe", JobStatus::Failed), 1);
    assert_eq!(stats.failed.len(), 1);
    assert_eq!(stats.failed[0].last_error.as_deref(), Some("smtp said no"));
    assert_eq!(stats.stuck.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), vec![ids[0].as_str()]);
    let probe = stats.durations.iter().find(|d| d.kind == "probe").expect("durations");
    assert_eq!((probe.completed, probe.max_run_ms), (1, 250));
    assert_eq!(stats.duplicates.len(), 1);
    assert_eq!(stats.duplicates[0].key, r#"{"userId":1}"#);
    assert!(stats.recent.iter().any(|c| c.kind == "probe" && c.status == JobStatus::Completed && c.count == 1));
    assert!(stats.recent.iter().any(|c| c.kind == "probe" && c.status == JobStatus::Failed && c.count == 1));
    let listed =
        ops::list(&t.db, &outbox::JobFilter { kind: Some("keyed".into()), ..Default::default() }).await.expect("list");
    assert_eq!(listed.len(), 2);
    assert!(serde_json::to_string(&stats).expect("stats serialize").contains("smtp said no"));
}

async fn futures_ids(db: &sea_orm::DatabaseConnection, n: u64) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 1..=n {
        ids.push(outbox::enqueue(db, &Probe { n: i }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned());
    }
    ids
}

conformance!(workers_record_their_kinds_for_tools_without_the_types, mysql);
async fn workers_record_their_kinds_for_tools_without_the_types(t: TestDb) {
    assert!(ops::kinds(&t.db).await.expect("kinds").is_empty());
    let worker = outbox::Worker::builder(&t.db)
        .register(|_: Probe, _| async { Ok::<_, outbox::JobError>(()) })
        .register(|_: Keyed, _| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("worker");
    drop(worker);
    let kinds = ops::kinds(&t.db).await.expect("kinds");
    let names: Vec<&str> = kinds.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["keyed", "probe"]);
    let keyed = ops::kind(&t.db, "keyed").await.expect("kind").expect("recorded");
    assert_eq!(
        (keyed.queue.as_str(), keyed.unique, keyed.key_fields.clone()),
        ("mail", true, vec!["userId".to_owned()])
    );
    let typed = outbox::Kind::of::<Keyed>().expect("kind");
    assert_eq!(keyed.schema_hash, typed.schema_hash());

    // The recorded kind validates and keys payloads like the typed one.
    let rebuilt = outbox::Kind::from_record(&keyed).expect("rebuild");
    assert_eq!(rebuilt.schema_hash(), typed.schema_hash());
    let bad = rebuilt.violations(&serde_json::json!({ "userId": "seven", "note": "x" }));
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].path, "/userId");
    let payload = serde_json::json!({ "userId": 7, "note": "x" });
    let a = outbox::enqueue_raw(&t.db, &rebuilt, payload.clone(), EnqueueOpts::new()).await.expect("raw");
    let b =
        outbox::enqueue(&t.db, &Keyed { user_id: 7, note: "other".into() }, EnqueueOpts::new()).await.expect("typed");
    assert_eq!(a.id(), b.id(), "the same key from both paths");
    assert_eq!(ops::get(&t.db, a.id()).await.expect("get").queue, "mail");
    assert!(ops::kind(&t.db, "nope").await.expect("kind").is_none());
}

conformance!(queues_count_available_scheduled_claimed_and_stuck_jobs, mysql);
async fn queues_count_available_scheduled_claimed_and_stuck_jobs(t: TestDb) {
    for n in 1..=3 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    outbox::enqueue(&t.db, &Probe { n: 4 }, EnqueueOpts::new().delay(Duration::from_secs(600))).await.expect("later");
    outbox::enqueue(&t.db, &Keyed { user_id: 1, note: String::new() }, EnqueueOpts::new()).await.expect("mail");
    let sql = format!(
        "UPDATE outbox_jobs SET status = 'claimed', locked_by = 'w', attempts = 1, runs = 1, lease_expires_at = {} \
         WHERE payload = '{{\"n\":3}}'",
        t.backend.time(0)
    );
    assert_eq!(exec(&t.db, &sql, vec![]).await, 1);
    let queues = ops::queues(&t.db).await.expect("queues");
    assert_eq!(queues.len(), 2);
    let default = &queues[0];
    assert_eq!(default.queue, "default");
    assert_eq!((default.available, default.scheduled, default.claimed, default.stuck), (2, 1, 1, 1));
    assert!(default.oldest_available.is_some());
    assert_eq!((queues[1].queue.as_str(), queues[1].available), ("mail", 1));
    let stuck = ops::stuck(&t.db).await.expect("stuck");
    assert_eq!(stuck[0].runs, 1);
}

conformance!(a_database_an_earlier_build_created_is_refused_and_left_untouched, mysql);
async fn a_database_an_earlier_build_created_is_refused_and_left_untouched(t: TestDb) {
    // The tables an earlier build's nine migrations left are the ones the squashed schema creates; only the
    // migration table tells them apart.
    let id = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    exec(&t.db, "DELETE FROM outbox_migrations", vec![]).await;
    for (n, name) in ["m20261122_000001_create_outbox_jobs", "m20261127_000009_schedules_locks_reconciliations"]
        .into_iter()
        .enumerate()
    {
        let sql = format!("INSERT INTO outbox_migrations (version, applied_at) VALUES ('{name}', {n})");
        exec(&t.db, &sql, vec![]).await;
    }
    let said = |e: outbox::Error| {
        let text = e.to_string();
        assert!(matches!(e, outbox::Error::Unsupported(_)), "{text}");
        assert!(text.contains("earlier build of outbox") && text.contains("outbox migrate"), "{text}");
    };
    said(outbox::migrate(&t.db).await.expect_err("migrate refuses it"));
    said(outbox::pending_migrations(&t.db).await.expect_err("pending_migrations refuses it"));
    let worker = outbox::Worker::builder(&t.db)
        .register(|_: Probe, _: outbox::JobContext| async { Ok::<_, outbox::JobError>(()) });
    match worker.build().await {
        Ok(_) => panic!("the worker must refuse to start on it"),
        Err(e) => said(e),
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_migrations").await, 2, "its migrations are untouched");
    let job = ops::get(&t.db, &id).await.expect("its job is still there");
    assert_eq!((job.status, job.attempts), (JobStatus::Pending, 0), "and was not run");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_kinds").await, 0, "no kind was recorded");
}

conformance!(migrations_undo_and_redo_cleanly, mysql);
async fn migrations_undo_and_redo_cleanly(t: TestDb) {
    use sea_orm_migration::MigratorTrait;

    outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    outbox::Migrator::down(&t.db, None).await.expect("undo every migration");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_migrations").await, 0);
    let every = outbox::Migrator::migrations().len();
    assert_eq!(outbox::Migrator::get_pending_migrations(&t.db).await.expect("pending").len(), every);
    if t.backend == Backend::Postgres {
        // Triggers go with their table; their functions must not be left behind in the schema.
        let left = scalar(
            &t.db,
            "SELECT COUNT(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = current_schema() AND p.proname LIKE 'outbox%'",
        )
        .await;
        assert_eq!(left, 0, "functions left after undoing the migrations");
    }
    outbox::migrate(&t.db).await.expect("migrate again");
    outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue again");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 1);
}
