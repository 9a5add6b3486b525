//! Transactional enqueue, deduplication and validation, on every backend.

use outbox::{EnqueueOpts, Enqueued, Error, Kind, KindOpts, ops};
use outbox_tests::{Keyed, Probe, Span, Step, TestDb, conformance, exec, scalar, try_exec};
use sea_orm::TransactionTrait;
use serde_json::json;

conformance!(rollback_leaves_no_job_and_commit_leaves_one, mysql);
async fn rollback_leaves_no_job_and_commit_leaves_one(t: TestDb) {
    exec(&t.db, "CREATE TABLE orders (customer TEXT NOT NULL)", vec![]).await;

    // The helper rolls back when the closure fails: neither the domain row nor the job exists.
    let failed: Result<(), Error> = outbox::transaction(&t.db, async |txn| {
        try_exec(txn, "INSERT INTO orders (customer) VALUES ('ann')", vec![])
            .await
            .map_err(|e| Error::Invalid(e.to_string()))?;
        outbox::enqueue(txn, &Probe { n: 1 }, EnqueueOpts::new()).await?;
        Err(Error::Invalid("domain check failed".into()))
    })
    .await;
    assert!(failed.is_err());
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM orders").await, 0);

    // A hand-managed transaction dropped without commit also leaves nothing.
    let txn = t.db.begin().await.expect("begin");
    outbox::enqueue(&txn, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue");
    txn.rollback().await.expect("rollback");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);

    // Commit: both rows exist.
    let done = outbox::transaction(&t.db, async |txn| {
        try_exec(txn, "INSERT INTO orders (customer) VALUES ('bob')", vec![])
            .await
            .map_err(|e| Error::Invalid(e.to_string()))?;
        outbox::enqueue(txn, &Probe { n: 3 }, EnqueueOpts::new()).await
    })
    .await
    .expect("commit");
    assert!(done.is_new());
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 1);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM orders").await, 1);
    let job = ops::get(&t.db, done.id()).await.expect("get");
    assert_eq!(job.kind, "probe");
    assert_eq!(job.payload, serde_json::json!({"n": 3}));
    assert_eq!(job.status, outbox::JobStatus::Pending);
    assert_eq!(job.schema_hash, Kind::of::<Probe>().expect("kind").schema_hash());
}

conformance!(concurrent_duplicate_enqueues_leave_one_row, mysql);
async fn concurrent_duplicate_enqueues_leave_one_row(t: TestDb) {
    // Two independent pools on the same database, 16 racing transactions.
    let other = t.connect().await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let db = if i % 2 == 0 { t.db.clone() } else { other.clone() };
        tasks.push(tokio::spawn(async move {
            outbox::transaction(&db, async |txn| {
                outbox::enqueue(txn, &Keyed { user_id: 42, note: format!("try {i}") }, EnqueueOpts::new()).await
            })
            .await
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("join").expect("enqueue"));
    }
    let new: Vec<&Enqueued> = results.iter().filter(|r| r.is_new()).collect();
    assert_eq!(new.len(), 1, "{results:?}");
    assert!(results.iter().all(|r| r.id() == new[0].id()), "{results:?}");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 1);
    let job = ops::get(&t.db, new[0].id()).await.expect("get");
    assert_eq!(job.idempotency_key.as_deref(), Some(r#"{"userId":42}"#));
    assert_eq!(job.queue, "mail");
}

conformance!(keys_are_unique_among_active_jobs_only, mysql);
async fn keys_are_unique_among_active_jobs_only(t: TestDb) {
    let first = outbox::enqueue(&t.db, &Probe { n: 5 }, EnqueueOpts::new()).await.expect("enqueue");
    let again = outbox::enqueue(&t.db, &Probe { n: 5 }, EnqueueOpts::new()).await.expect("enqueue");
    assert_eq!(again, Enqueued::Existing(first.id().to_owned()));
    // Another payload is another intent.
    assert!(outbox::enqueue(&t.db, &Probe { n: 6 }, EnqueueOpts::new()).await.expect("enqueue").is_new());
    // An explicit key overrides the payload hash.
    let a = outbox::enqueue(&t.db, &Probe { n: 7 }, EnqueueOpts::new().idempotency_key("k")).await.expect("a");
    let b = outbox::enqueue(&t.db, &Probe { n: 8 }, EnqueueOpts::new().idempotency_key("k")).await.expect("b");
    assert_eq!(a.id(), b.id());
    // Once the job is finished the key is free again.
    exec(&t.db, "UPDATE outbox_jobs SET status = 'completed' WHERE id = ?", vec![first.id().into()]).await;
    let later = outbox::enqueue(&t.db, &Probe { n: 5 }, EnqueueOpts::new()).await.expect("enqueue");
    assert!(later.is_new());
    assert_ne!(later.id(), first.id());
    let dups = ops::duplicates(&t.db, 10).await.expect("duplicates");
    assert_eq!(dups.len(), 1);
    assert_eq!((dups[0].jobs, dups[0].active, dups[0].completed), (2, 1, 1));

    // Cancelling lets the key go; the cancelled job cannot be retried while the new holder is active, and takes
    // the key back once it has finished: a duplicate then collapses onto it.
    let key = || EnqueueOpts::new().idempotency_key("c");
    let cancelled = outbox::enqueue(&t.db, &Probe { n: 9 }, key()).await.expect("enqueue");
    ops::cancel(&t.db, cancelled.id()).await.expect("cancel");
    let holder = outbox::enqueue(&t.db, &Probe { n: 10 }, key()).await.expect("enqueue");
    assert!(holder.is_new());
    assert!(ops::retry(&t.db, cancelled.id()).await.is_err(), "retried while another active job holds its key");
    exec(&t.db, "UPDATE outbox_jobs SET status = 'failed' WHERE id = ?", vec![holder.id().into()]).await;
    ops::retry(&t.db, cancelled.id()).await.expect("retry once the key is free");
    let dup = outbox::enqueue(&t.db, &Probe { n: 11 }, key()).await.expect("enqueue");
    assert_eq!(dup, Enqueued::Existing(cancelled.id().to_owned()));
    // A job deleted while active (as a kind that keeps nothing deletes it at completion) lets it go too.
    exec(&t.db, "DELETE FROM outbox_jobs WHERE id = ?", vec![cancelled.id().into()]).await;
    assert!(outbox::enqueue(&t.db, &Probe { n: 12 }, key()).await.expect("enqueue").is_new());
}

conformance!(invalid_payloads_are_rejected_with_their_path_and_write_nothing, mysql);
async fn invalid_payloads_are_rejected_with_their_path_and_write_nothing(t: TestDb) {
    // Typed: the schema requires n >= 1.
    let err = outbox::enqueue(&t.db, &Probe { n: 0 }, EnqueueOpts::new()).await.expect_err("n = 0");
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidPayload { .. }), "{text}");
    assert!(text.contains("kind `probe`") && text.contains("at /n:"), "{text}");

    // Raw: every violation is named.
    let kind = Kind::of::<Keyed>().expect("kind");
    let err = outbox::enqueue_raw(&t.db, &kind, json!({"userId": "x", "note": 3}), EnqueueOpts::new())
        .await
        .expect_err("two violations");
    let text = err.to_string();
    assert!(text.contains("at /userId:") && text.contains("at /note:"), "{text}");
    let err =
        outbox::enqueue_raw(&t.db, &kind, json!({"note": "x"}), EnqueueOpts::new()).await.expect_err("missing field");
    assert!(err.to_string().contains("at /userId: \"userId\" is a required property"), "{err}");

    // Over the size cap.
    let schema = json!({"type": "object", "properties": {"blob": {"type": "string"}}});
    let blob_kind = Kind::from_schema("blob", schema, KindOpts::DEFAULT).expect("kind");
    let big = "x".repeat(outbox::DEFAULT_MAX_PAYLOAD_BYTES + 1);
    let err = outbox::enqueue_raw(&t.db, &blob_kind, json!({ "blob": big }), EnqueueOpts::new())
        .await
        .expect_err("too large");
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("kind `blob`") && err.to_string().contains("262144"), "{err}");
    // A producer of bigger documents raises its own cap; the next enqueue without it still has the default.
    let bigger = EnqueueOpts::new().max_payload_bytes(outbox::DEFAULT_MAX_PAYLOAD_BYTES * 2);
    outbox::enqueue_raw(&t.db, &blob_kind, json!({ "blob": big }), bigger).await.expect("raised cap");
    let err = outbox::enqueue_raw(&t.db, &blob_kind, json!({ "blob": big }), EnqueueOpts::new())
        .await
        .expect_err("the default cap is per enqueue, not raised for the process");
    assert!(matches!(err, Error::PayloadTooLarge { limit: 262_144, .. }), "{err}");
    exec(&t.db, "DELETE FROM outbox_jobs", vec![]).await;

    // Bad options.
    let err = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new().max_attempts(0)).await.expect_err("0");
    assert!(err.to_string().contains("max_attempts"), "{err}");

    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);
}

conformance!(batch_enqueue_writes_in_order_and_collapses_duplicates, mysql);
async fn batch_enqueue_writes_in_order_and_collapses_duplicates(t: TestDb) {
    let existing =
        outbox::enqueue(&t.db, &Keyed { user_id: 3, note: "old".into() }, EnqueueOpts::new()).await.expect("enqueue");
    let jobs: Vec<Keyed> = (0..2_500).map(|i| Keyed { user_id: i % 2_400, note: format!("n{i}") }).collect();
    let results =
        outbox::transaction(&t.db, async |txn| outbox::enqueue_batch(txn, &jobs, EnqueueOpts::new().priority(3)).await)
            .await
            .expect("batch");
    assert_eq!(results.len(), 2_500);
    assert_eq!(results[3], Enqueued::Existing(existing.id().to_owned()));
    // Inputs 2400.. repeat the keys of inputs 0..100 within the batch.
    assert_eq!(results[2_400].id(), results[0].id());
    assert!(!results[2_400].is_new());
    assert_eq!(results.iter().filter(|r| r.is_new()).count(), 2_399);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 2_400);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE priority = 3").await, 2_399);

    // An invalid member rejects the whole batch before anything is written.
    let kind = Kind::of::<Probe>().expect("kind");
    let err = outbox::enqueue_batch_raw(&t.db, &kind, vec![json!({"n": 1}), json!({"n": -1})], EnqueueOpts::new())
        .await
        .expect_err("invalid member");
    assert!(err.to_string().contains("at /n:"), "{err}");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'probe'").await, 0);
}

conformance!(a_batch_writes_each_job_as_given_and_a_sequence_in_list_order, mysql);
async fn a_batch_writes_each_job_as_given_and_a_sequence_in_list_order(t: TestDb) {
    // Notes no JSON or SQL quoting may change: quotes, backslashes, control characters, line separators,
    // characters outside the BMP.
    let notes =
        ["plain", "it's \"quoted\"", "back\\slash \\u0041", "tab\tnew\nline", "\u{2028}\u{2029}", "🦀 ünï ∑", ""];
    let jobs: Vec<Keyed> =
        notes.iter().enumerate().map(|(i, n)| Keyed { user_id: i as i64 + 10, note: (*n).to_owned() }).collect();
    let opts = EnqueueOpts::new().priority(-7).max_attempts(9).queue("q2").delay(std::time::Duration::from_secs(3600));
    let results = outbox::enqueue_batch(&t.db, &jobs, opts).await.expect("batch");
    for (job, result) in jobs.iter().zip(&results) {
        assert!(result.is_new());
        let rec = ops::get(&t.db, result.id()).await.expect("get");
        assert_eq!(rec.payload, json!({ "userId": job.user_id, "note": job.note }), "job {}", rec.id);
        assert_eq!((rec.priority, rec.max_attempts, rec.queue.as_str(), rec.attempts), (-7, 9, "q2", 0));
        assert_eq!(rec.idempotency_key, Some(format!("{{\"userId\":{}}}", job.user_id)));
        let ahead = rec.run_at - rec.created_at;
        assert!(ahead >= chrono::Duration::seconds(3599) && ahead <= chrono::Duration::seconds(3601), "{ahead}");
    }
    // Delayed jobs wait off the ready indexes until due.
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE kind = 'keyed' AND scheduled").await, 7);

    // Three sequences interleaved in one batch: each takes its places in the order the list gives, and only
    // its first job is free to run.
    let steps: Vec<Step> = (0..30).map(|i| Step { key: i % 3, seq: i / 3, sleep_ms: 0 }).collect();
    let results = outbox::enqueue_batch(&t.db, &steps, EnqueueOpts::new()).await.expect("steps");
    for key in 0..3 {
        let mut placed: Vec<(i64, u32, bool)> = Vec::new();
        for (step, result) in steps.iter().zip(&results).filter(|(s, _)| s.key == key) {
            let no = scalar(&t.db, &format!("SELECT sequence_no FROM outbox_jobs WHERE id = '{}'", result.id())).await;
            let waiting =
                scalar(&t.db, &format!("SELECT COUNT(*) FROM outbox_jobs WHERE id = '{}' AND waiting", result.id()))
                    .await;
            placed.push((no, step.seq, waiting == 1));
        }
        assert!(placed.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1), "sequence {key}: {placed:?}");
        if t.backend == outbox_tests::Backend::MySql {
            // MariaDB's enqueue looks for no job ahead (`docs/internals/mariadb.md`, sequences): every job goes in
            // waiting, and a worker's next look lets the first go.
            assert!(placed.iter().all(|p| p.2), "sequence {key}: {placed:?}");
            continue;
        }
        assert_eq!(placed.iter().filter(|p| !p.2).count(), 1, "sequence {key}: {placed:?}");
        assert!(!placed[0].2, "sequence {key}: its first job is free to run: {placed:?}");
    }
}

conformance!(a_kind_s_own_rules_run_after_its_schema, mysql);
async fn a_kind_s_own_rules_run_after_its_schema(t: TestDb) {
    let err = outbox::enqueue(&t.db, &Span { lo: 5, hi: 1 }, EnqueueOpts::new()).await.expect_err("hi < lo");
    assert_eq!(err.to_string(), "invalid payload for kind `span`: at /hi: 1 is below lo (5)");
    let kind = Kind::of::<Span>().expect("kind");
    let err =
        outbox::enqueue_raw(&t.db, &kind, json!({"lo": 2, "hi": 1}), EnqueueOpts::new()).await.expect_err("raw too");
    assert!(err.to_string().contains("at /hi: 1 is below lo (2)"), "{err}");
    assert!(outbox::enqueue(&t.db, &Span { lo: 1, hi: 1 }, EnqueueOpts::new()).await.expect("valid").is_new());
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 1);
}
