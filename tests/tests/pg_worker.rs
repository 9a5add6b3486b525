//! What only the PostgreSQL worker has: wake-ups through `LISTEN/NOTIFY` (a job inserted by any writer wakes
//! an idle worker whose poll interval is an hour, also after the server dropped its listen connection), and a
//! completion writer of its own, whose unwritten outcomes keep their slots.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use outbox::{EnqueueOpts, JobStatus, Kind, Worker};
use outbox_tests::{Backend, Probe, fresh, scalar};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait};

/// Inserts a pending `probe` job with plain SQL on the test's connection: no in-process wake-up happens, so
/// only the database's notification can tell the worker.
async fn insert_by_hand(db: &DatabaseConnection, n: u64) -> String {
    let kind = Kind::of::<Probe>().expect("kind");
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, \
             schema_hash, created_at, updated_at) \
             VALUES (gen_random_uuid()::text, 'probe', 'default', CAST($1 AS jsonb), 'pending', 0, 0, 3, now(), $2, \
             now(), now()) RETURNING id",
            vec![format!("{{\"n\": {n}}}").into(), kind.schema_hash().into()],
        ))
        .await
        .expect("insert by hand")
        .expect("the inserted row");
    row.try_get_by_index(0).expect("id")
}

/// The backend pid of this worker's listen connection once it is listening.
async fn listening_pid(db: &DatabaseConnection, worker: &str) -> Option<i64> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pid::int8 FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
            vec![format!("outbox-listener {worker}").into()],
        ))
        .await
        .expect("pg_stat_activity");
    row.map(|r| r.try_get_by_index::<i64>(0).expect("pid"))
}

async fn wait_listening(db: &DatabaseConnection, worker: &str, not: Option<i64>) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(pid) = listening_pid(db, worker).await.filter(|pid| Some(*pid) != not) {
            return pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "worker {worker} never listened (again)");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn notify_wakes_an_idle_worker_and_the_listener_reconnects() {
    let Some(t) = fresh(Backend::Postgres, "notify_wakes_an_idle_worker_and_the_listener_reconnects").await else {
        return;
    };
    let worker_id = format!("wake-{}", t.schema.as_ref().expect("a schema per test").name());
    let worker = Worker::builder(&t.db)
        .register::<Probe, _, _, _>(|_job: Probe, _ctx| async { Ok(()) })
        .poll_interval(Duration::from_secs(3600))
        .id(worker_id.clone())
        .build()
        .await
        .expect("build worker");
    let handle = worker.start();
    let first_pid = wait_listening(&t.db, &worker_id, None).await;

    let id = insert_by_hand(&t.db, 1).await;
    assert!(
        outbox_tests::wait_status(&t.db, &id, JobStatus::Completed, Duration::from_secs(30)).await,
        "a job inserted by hand was not picked up: the notification did not wake the worker"
    );

    // The server drops the listen connection; the worker listens again on a new one.
    let killed = scalar(&t.db, &format!("SELECT COUNT(*) FROM (SELECT pg_terminate_backend({first_pid})) k")).await;
    assert_eq!(killed, 1);
    let second_pid = wait_listening(&t.db, &worker_id, Some(first_pid)).await;
    assert_ne!(first_pid, second_pid);

    let id = insert_by_hand(&t.db, 2).await;
    assert!(
        outbox_tests::wait_status(&t.db, &id, JobStatus::Completed, Duration::from_secs(30)).await,
        "after the listen connection was dropped, a new job did not wake the worker"
    );
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 2);
    handle.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread")]
async fn outcomes_waiting_to_be_written_keep_their_slots() {
    let Some(t) = fresh(Backend::Postgres, "outcomes_waiting_to_be_written_keep_their_slots").await else {
        return;
    };
    for n in 1..=2 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (r, gate) = (Arc::clone(&runs), Arc::clone(&release));
    let worker = Worker::builder(&t.db)
        .register::<Probe, _, _, _>(move |_job: Probe, _ctx| {
            let (r, gate) = (Arc::clone(&r), Arc::clone(&gate));
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.expect("gate").forget();
                Ok(())
            }
        })
        .concurrency(2)
        .poll_interval(Duration::from_millis(50))
        .build()
        .await
        .expect("build worker");
    let handle = worker.start();
    assert!(outbox_tests::wait_count(&runs, 2, Duration::from_secs(30)).await, "both jobs started");

    // Another session holds the two claimed rows, so their outcomes cannot be written yet.
    let blocker = t.connect().await;
    let txn = blocker.begin().await.expect("begin");
    let locked = txn
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT id FROM outbox_jobs WHERE status = 'claimed' FOR UPDATE",
        ))
        .await
        .expect("lock the claimed rows");
    assert_eq!(locked.len(), 2);
    for n in 3..=6 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    release.add_permits(6);

    // The handlers have returned, but their outcomes wait behind the lock. One batch of unwritten outcomes
    // may wait while the next runs (2 more jobs); then the worker has no free slot, and the last two jobs
    // stay pending however often it polls.
    assert!(outbox_tests::wait_count(&runs, 4, Duration::from_secs(30)).await, "the next batch ran meanwhile");
    let ran_ahead =
        outbox_tests::eventually(Duration::from_secs(2), || async { runs.load(Ordering::SeqCst) > 4 }).await;
    assert!(!ran_ahead, "the worker claimed further past outcomes it had not written");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'pending'").await, 2);

    txn.commit().await.expect("release the rows");
    assert!(
        outbox_tests::wait_scalar(
            &t.db,
            "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'",
            6,
            Duration::from_secs(30)
        )
        .await,
        "every job completed once the outcomes were written"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 6);
    handle.shutdown().await.expect("shutdown");
}

/// A claim of 60 jobs lists them in one feed row of about 4 kB. Past PostgreSQL's default TOAST target (2 kB)
/// every such row was compressed and moved to the TOAST table; migration 8 keeps it inline and uncompressed.
#[tokio::test(flavor = "multi_thread")]
async fn a_workers_feed_rows_stay_inline_and_uncompressed() {
    let Some(t) = fresh(Backend::Postgres, "a_workers_feed_rows_stay_inline_and_uncompressed").await else {
        return;
    };
    let jobs: Vec<Probe> = (1..=60).map(|n| Probe { n }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let worker = Worker::builder(&t.db)
        .concurrency(60)
        .register(|_: Probe, _| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("build");
    worker.drain().await.expect("drain");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 60);
    let widest = "SELECT COALESCE(MAX(octet_length(jobs::text)), 0) FROM outbox_job_events WHERE jobs IS NOT NULL";
    assert!(scalar(&t.db, widest).await > 2_100, "no feed row wider than the default TOAST target to check");
    let compressed = "SELECT COUNT(*) FROM outbox_job_events \
        WHERE jobs IS NOT NULL AND pg_column_size(jobs) < octet_length(jobs::text)";
    assert_eq!(scalar(&t.db, compressed).await, 0, "feed rows were compressed");
    let toasted = "SELECT COALESCE((SELECT pg_relation_size(reltoastrelid) FROM pg_class \
        WHERE oid = 'outbox_job_events'::regclass AND reltoastrelid <> 0), 0)";
    assert_eq!(scalar(&t.db, toasted).await, 0, "feed rows were moved to the TOAST table");
}

/// A claim and a completion write new versions of the job's row. The jobs table leaves 60 % of each page free
/// as rows are inserted (`fillfactor = 40`), so both versions can stay on the job's own page
/// (PostgreSQL then logs only what changed and prunes the old versions in place). How many stay depends on what else holds snapshots on the
/// server (a drain beside other tests kept 109 of 400 on their page, alone about 330, on full pages 40 to 70),
/// so this checks the setting itself; `outbox-bench --case process` measures its effect.
#[tokio::test(flavor = "multi_thread")]
async fn the_jobs_table_leaves_room_for_updates() {
    let Some(t) = fresh(Backend::Postgres, "the_jobs_table_leaves_room_for_updates").await else {
        return;
    };
    let options = "SELECT COUNT(*) FROM pg_class WHERE oid = 'outbox_jobs'::regclass \
                   AND 'fillfactor=40' = ANY(reloptions)";
    assert_eq!(scalar(&t.db, options).await, 1, "outbox_jobs has fillfactor 40");
}

/// A claim and a completion of an unkeyed job, and the claim of a keyed one, change nothing the unique index of
/// keys reads: it names the generated `active_key`, never the job's status, so it does not stop those updates
/// from being heap-only. A keyed job gives its key up as it finishes, for any writer.
#[tokio::test(flavor = "multi_thread")]
async fn the_key_index_reads_what_only_a_keyed_job_s_end_changes() {
    let Some(t) = fresh(Backend::Postgres, "the_key_index_reads_what_only_a_keyed_job_s_end_changes").await else {
        return;
    };
    let def: String =
        t.db.query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pg_get_indexdef('outbox_jobs_active_key'::regclass)",
        ))
        .await
        .expect("index definition")
        .expect("a row")
        .try_get_by_index(0)
        .expect("text");
    assert!(def.contains("(kind, active_key)") && !def.contains("status"), "{def}");

    let keyed = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new().idempotency_key("k")).await.expect("keyed");
    let plain = insert_by_hand(&t.db, 2).await;
    let active_keys = |status: &str| {
        format!(
            "SELECT COUNT(*) FROM outbox_jobs WHERE status = '{status}' AND \
             active_key IS NOT DISTINCT FROM idempotency_key"
        )
    };
    assert_eq!(scalar(&t.db, &active_keys("pending")).await, 2, "pending jobs keep their key (or none)");
    let claim = "UPDATE outbox_jobs SET status = 'claimed', attempts = attempts + 1";
    t.db.execute_unprepared(claim).await.expect("claim");
    assert_eq!(scalar(&t.db, &active_keys("claimed")).await, 2, "a claim changes neither job's active_key");
    t.db.execute_unprepared("UPDATE outbox_jobs SET status = 'completed'").await.expect("complete");
    let held = "SELECT COUNT(*) FROM outbox_jobs WHERE active_key IS NOT NULL";
    assert_eq!(scalar(&t.db, held).await, 0, "finished jobs hold no key");
    let again = outbox::enqueue(&t.db, &Probe { n: 3 }, EnqueueOpts::new().idempotency_key("k")).await.expect("again");
    assert!(again.is_new() && again.id() != keyed.id() && again.id() != plain, "{again:?}");
}

/// A claim records its jobs and their lease in one row of `outbox_claims`, and the worker deletes that row in the
/// statement that writes the outcome of the claim's last job: a drain in claims of many sizes (a concurrency of 7
/// against 300 jobs finishing at their own pace) leaves none, and takes no lease index entry on the jobs.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_s_row_goes_with_the_outcome_of_its_last_job() {
    let Some(t) = fresh(Backend::Postgres, "a_claim_s_row_goes_with_the_outcome_of_its_last_job").await else {
        return;
    };
    let lease_index = "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'outbox_jobs' \
                       AND indexdef LIKE '%lease%'";
    assert_eq!(scalar(&t.db, lease_index).await, 0, "no index of the jobs reads their lease");
    for n in 1..=300 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let seen = Arc::new(AtomicUsize::new(0));
    let (s, db) = (Arc::clone(&seen), t.db.clone());
    let worker = Worker::builder(&t.db)
        .register::<Probe, _, _, _>(move |job: Probe, ctx| {
            let (s, db) = (Arc::clone(&s), db.clone());
            let listed = format!("SELECT COUNT(*) FROM outbox_claims WHERE jobs @> ARRAY['{}']", ctx.id());
            async move {
                // Jobs of one claim end at different times; until its own outcome is written, a job's claim
                // lists it.
                tokio::time::sleep(Duration::from_millis(job.n % 5)).await;
                if scalar(&db, &listed).await == 1 {
                    s.fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            }
        })
        .concurrency(7)
        .build()
        .await
        .expect("build worker");
    let handle = worker.start();
    assert!(
        outbox_tests::wait_scalar(
            &t.db,
            "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'",
            300,
            Duration::from_secs(60)
        )
        .await,
        "every job completed"
    );
    handle.shutdown().await.expect("shutdown");
    assert_eq!(seen.load(Ordering::SeqCst), 300, "every running job was listed by a claim");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_claims").await, 0, "no claim is left");
}

/// The rescue reads the claims whose lease ran out. Of a claim of two jobs, one of which was renewed since, it
/// puts back only the one whose own lease ran out, and moves the claim on to the other's lease rather than
/// deleting it: that job is still rescued once its lease runs out. A job claimed by hand-written SQL gets a claim
/// of its own, so it is rescued too.
#[tokio::test(flavor = "multi_thread")]
async fn the_rescue_puts_back_what_expired_and_keeps_the_claim_of_the_rest() {
    let Some(t) = fresh(Backend::Postgres, "the_rescue_puts_back_what_expired_and_keeps_the_claim_of_the_rest").await
    else {
        return;
    };
    let (a, b, c) = (insert_by_hand(&t.db, 1).await, insert_by_hand(&t.db, 2).await, insert_by_hand(&t.db, 3).await);
    // `a` and `b` claimed as the worker's claim statement claims (its feed flag flipped, so no trigger lists
    // them), `a` expired and `b` renewed for an hour; their claim expired with `a`.
    let claim = |id: &str, lease: &str| {
        format!(
            "UPDATE outbox_jobs SET status = 'claimed', attempts = 1, runs = 1, locked_by = 'gone', \
             locked_at = now(), claimed_at = now(), lease_expires_at = {lease}, updated_at = now(), \
             event_flip = NOT event_flip WHERE id = '{id}'"
        )
    };
    t.db.execute_unprepared(&claim(&a, "now() - interval '1 second'")).await.expect("claim a");
    t.db.execute_unprepared(&claim(&b, "now() + interval '1 hour'")).await.expect("claim b");
    t.db.execute_unprepared(&format!(
        "INSERT INTO outbox_claims (worker, lease_expires_at, jobs) \
         VALUES ('gone', now() - interval '1 second', ARRAY['{a}', '{b}'])"
    ))
    .await
    .expect("their claim");
    // `c` claimed by hand, its lease already run out: a trigger lists it in a claim of its own.
    t.db.execute_unprepared(&format!(
        "UPDATE outbox_jobs SET status = 'claimed', attempts = 1, locked_by = 'hand', \
         lease_expires_at = now() - interval '1 second' WHERE id = '{c}'"
    ))
    .await
    .expect("claim c by hand");
    let listed = |id: &str| format!("SELECT COUNT(*) FROM outbox_claims WHERE jobs @> ARRAY['{id}']");
    assert_eq!(scalar(&t.db, &listed(&c)).await, 1, "a job claimed by hand is listed by a claim");

    let worker = Worker::builder(&t.db)
        .register::<Probe, _, _, _>(|_job: Probe, _ctx| async { Ok(()) })
        .rescue_interval(Duration::from_millis(50))
        .build()
        .await
        .expect("build worker");
    let handle = worker.start();
    let done = format!("SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed' AND id IN ('{a}', '{c}')");
    assert!(outbox_tests::wait_scalar(&t.db, &done, 2, Duration::from_secs(30)).await, "a and c were rescued and ran");
    handle.shutdown().await.expect("shutdown");

    let b_row =
        format!("SELECT COUNT(*) FROM outbox_jobs WHERE id = '{b}' AND status = 'claimed' AND locked_by = 'gone'");
    assert_eq!(scalar(&t.db, &b_row).await, 1, "b, renewed, is still claimed");
    let moved_on = format!(
        "SELECT COUNT(*) FROM outbox_claims c JOIN outbox_jobs j ON j.id = '{b}' \
         WHERE c.jobs @> ARRAY['{b}'] AND c.lease_expires_at = j.lease_expires_at"
    );
    assert_eq!(scalar(&t.db, &moved_on).await, 1, "b's claim took b's lease");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_claims").await, 1, "only b's claim is left");
}

/// A worker of every queue reads the queues its kinds are registered to and those that hold ready jobs, which it
/// lists every second. A job enqueued into a queue it has not listed is still claimed when the worker is woken:
/// the claim that finds nothing lists the queues again. The poll interval is an hour, so only that can start it.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_of_every_queue_claims_from_a_queue_it_had_not_listed() {
    let Some(t) = fresh(Backend::Postgres, "a_worker_of_every_queue_claims_from_a_queue_it_had_not_listed").await
    else {
        return;
    };
    let index = "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'outbox_jobs' \
                 AND indexname LIKE 'outbox_jobs_ready%'";
    assert_eq!(scalar(&t.db, index).await, 1, "one ready index");
    let worker = Worker::builder(&t.db)
        .register::<Probe, _, _, _>(|_job: Probe, _ctx| async { Ok(()) })
        .poll_interval(Duration::from_secs(3600))
        .build()
        .await
        .expect("build worker");
    let handle = worker.start();
    let first = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    assert!(
        outbox_tests::wait_status(&t.db, first.id(), JobStatus::Completed, Duration::from_secs(30)).await,
        "a job of the kind's own queue ran"
    );
    for (n, queue) in [(2, "adhoc"), (3, "zzz"), (4, "aaa")] {
        let job = outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new().queue(queue)).await.expect("enqueue");
        assert!(
            outbox_tests::wait_status(&t.db, job.id(), JobStatus::Completed, Duration::from_secs(30)).await,
            "the job of queue {queue} ran"
        );
    }
    handle.shutdown().await.expect("shutdown");
}
