//! The MariaDB server the third backend will run on, and what its engine will rest on: a test's database is its own
//! and gone after the test, even one that panics; `FOR UPDATE SKIP LOCKED` passes over the rows another claim
//! holds instead of waiting for them; commits are durable. Then the schema as outbox's migrations make it
//! (`outbox/src/storage/mysql/schema.sql`): migrating again changes nothing, text is Unicode whatever the server's
//! default character set, claims read their indexes in order with no sort, a key is unique per kind
//! while its job is active, a payload must be JSON, and no trigger writes a MEMORY table.

use outbox_tests::{TestMariaDb, database_exists, mariadb_server};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};

async fn ids(txn: &impl ConnectionTrait, sql: &str) -> Vec<i64> {
    txn.query_all_raw(Statement::from_string(DbBackend::MySql, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| row.try_get_by_index::<i64>(0).expect("an id"))
        .collect()
}

#[tokio::test]
async fn a_test_database_is_dropped_after_its_test_even_one_that_panics() {
    let Some(server) = mariadb_server("a_test_database_is_dropped_after_its_test_even_one_that_panics") else {
        return;
    };
    // A test that ends.
    let t = TestMariaDb::fresh("ends").await.expect("a server");
    let ended = t.name().to_owned();
    t.db.execute_unprepared("CREATE TABLE kept (id BIGINT PRIMARY KEY)").await.expect("a table");
    assert!(database_exists(&server, &ended).await.expect("look"), "the test's database exists while it runs");
    drop(t);
    assert!(!database_exists(&server, &ended).await.expect("look"), "{ended} is gone after the test");

    // A test that panics while a transaction of its own holds a lock in its database.
    let (names, named) = std::sync::mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let t = TestMariaDb::fresh("panics").await.expect("a server");
            names.send(t.name().to_owned()).expect("send the name");
            t.db.execute_unprepared("CREATE TABLE held (id BIGINT PRIMARY KEY)").await.expect("a table");
            let txn = t.db.begin().await.expect("begin");
            txn.execute_unprepared("INSERT INTO held VALUES (1)").await.expect("insert");
            panic!("the test fails while its transaction holds a row lock");
        })
    })
    .join();
    assert!(panicked.is_err(), "the test panicked");
    let name = named.recv().expect("the database's name");
    assert!(!database_exists(&server, &name).await.expect("look"), "{name} is gone after the test that panicked");
}

#[tokio::test]
async fn skip_locked_claims_pass_over_the_rows_another_claim_holds() {
    let Some(t) = TestMariaDb::fresh("skip_locked_claims_pass_over_the_rows_another_claim_holds").await else {
        return;
    };
    t.db.execute_unprepared("CREATE TABLE jobs (id BIGINT PRIMARY KEY, due BIGINT NOT NULL, KEY due (due, id))")
        .await
        .expect("the table");
    t.db.execute_unprepared("INSERT INTO jobs SELECT seq, seq FROM seq_1_to_10").await.expect("ten jobs");
    let claim = "SELECT id FROM jobs ORDER BY due, id LIMIT 3 FOR UPDATE SKIP LOCKED";
    let first = t.db.begin().await.expect("begin");
    let second = t.connect(1).await;
    let second = second.begin().await.expect("begin");
    // A claim that waited for the first's locks would fail after a second instead of passing over them.
    second.execute_unprepared("SET SESSION innodb_lock_wait_timeout = 1").await.expect("lock wait");
    assert_eq!(ids(&first, claim).await, vec![1, 2, 3]);
    assert_eq!(ids(&second, claim).await, vec![4, 5, 6], "the second claim passes over the rows the first holds");
    first.rollback().await.expect("rollback");
    assert_eq!(ids(&second, claim).await, vec![1, 2, 3], "rows let go are claimable again");
    second.commit().await.expect("commit");
}

#[tokio::test]
async fn the_server_syncs_every_commit_and_is_recent_enough() {
    let Some(t) = TestMariaDb::fresh("the_server_syncs_every_commit_and_is_recent_enough").await else {
        return;
    };
    let row = t
        .db
        .query_one_raw(Statement::from_string(DbBackend::MySql, "SELECT VERSION(), @@innodb_flush_log_at_trx_commit"))
        .await
        .expect("the server's settings")
        .expect("a row");
    let version: String = row.try_get_by_index(0).expect("the version");
    let flush: u64 = row.try_get_by_index(1).expect("the flush setting");
    let number: Vec<u32> = version.split(['.', '-']).take(2).map(|p| p.parse().expect("a version number")).collect();
    assert!(version.contains("MariaDB") && number >= vec![10, 6], "MariaDB 10.6 or later, for SKIP LOCKED: {version}");
    assert_eq!(flush, 1, "every commit reaches the disk (innodb_flush_log_at_trx_commit = 1)");
}

/// The MariaDB schema (`outbox/src/storage/mysql/schema.sql`), made in `t`'s database by outbox's migrations.
async fn with_schema(t: &TestMariaDb) {
    outbox::migrate(&t.db).await.expect("the migrations");
}

/// `n` jobs of kinds `a` and `b` (every third is `a`), half at priority 1, every fifth completed; those of kind `a`
/// keyed by one of three flow keys.
async fn jobs(t: &TestMariaDb, n: u32) {
    let sql = format!(
        "INSERT INTO outbox_jobs (id, kind, queue, payload, priority, schema_hash, created_at, run_at, updated_at, \
         status, flow_key) SELECT LPAD(seq, 26, '0'), IF(seq % 3 = 0, 'a', 'b'), 'default', '{{}}', seq % 2, 'h', \
         seq, seq, seq, IF(seq % 5 = 0, 'completed', 'pending'), IF(seq % 3 = 0, CONCAT('k', seq % 9), NULL) \
         FROM seq_1_to_{n}"
    );
    t.db.execute_unprepared(&sql).await.expect("the jobs");
    t.db.execute_unprepared("ANALYZE TABLE outbox_jobs").await.expect("analyze");
}

/// The ids `sql` selects, zero-padded numbers as [`jobs`] writes them, as numbers.
async fn job_ids(conn: &impl ConnectionTrait, sql: &str) -> Vec<i64> {
    conn.query_all_raw(Statement::from_string(DbBackend::MySql, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| row.try_get_by_index::<String>(0).expect("an id").parse().expect("a number"))
        .collect()
}

async fn plan(t: &TestMariaDb, sql: &str) -> String {
    let row =
        t.db.query_one_raw(Statement::from_string(DbBackend::MySql, format!("EXPLAIN FORMAT=JSON {sql}")))
            .await
            .unwrap_or_else(|e| panic!("explain {sql}: {e}"))
            .expect("a plan");
    row.try_get_by_index::<String>(0).expect("the plan's text")
}

#[tokio::test]
async fn the_claims_read_their_indexes_in_order_with_no_sort() {
    let Some(t) = TestMariaDb::fresh("the_claims_read_their_indexes_in_order_with_no_sort").await else {
        return;
    };
    with_schema(&t).await;
    jobs(&t, 20_000).await;
    let ready = "SELECT id FROM outbox_jobs WHERE ready_queue = 'default' AND kind = 'a' AND status = 'pending' \
                 ORDER BY priority DESC, run_at, id LIMIT 5 FOR UPDATE SKIP LOCKED";
    let planned = plan(&t, ready).await;
    assert!(planned.contains(r#""key": "outbox_jobs_ready_queue""#), "the ready index:\n{planned}");
    assert!(!planned.contains("filesort"), "no sort:\n{planned}");
    // Priority 1 first (odd numbers), then by run time; completed jobs (multiples of 5) are not in the index.
    let first = t.db.begin().await.expect("begin");
    assert_eq!(job_ids(&first, ready).await, vec![3, 9, 21, 27, 33]);
    let other = t.connect(1).await;
    let second = other.begin().await.expect("begin");
    assert_eq!(job_ids(&second, ready).await, vec![39, 51, 57, 63, 69], "a second claim passes over the first's");
    first.rollback().await.expect("rollback");
    second.rollback().await.expect("rollback");

    let head = "SELECT id FROM outbox_jobs WHERE ready_flow_head = UNHEX(MD5(CONCAT('a', CHAR(0), 'k3'))) \
                AND kind = 'a' AND flow_key = 'k3' ORDER BY priority DESC, run_at, id LIMIT 3 FOR UPDATE SKIP LOCKED";
    let planned = plan(&t, head).await;
    assert!(planned.contains(r#""key": "outbox_jobs_flow_heads""#), "the flow heads' index:\n{planned}");
    assert!(!planned.contains("filesort"), "no sort:\n{planned}");
    assert_eq!(job_ids(&t.db, head).await, vec![3, 21, 39], "key k3's head: seq % 9 = 3, at priority 1 first");
    let keys = "SELECT DISTINCT flow_key FROM outbox_jobs WHERE ready_flow_kind = 'a' ORDER BY flow_key";
    let planned = plan(&t, keys).await;
    assert!(planned.contains(r#""key": "outbox_jobs_flow_keys""#), "the keys' index:\n{planned}");
    assert!(!planned.contains("filesort"), "no sort:\n{planned}");
}

#[tokio::test]
async fn a_key_is_unique_per_kind_while_its_job_is_active_and_compares_bytewise() {
    let Some(t) = TestMariaDb::fresh("a_key_is_unique_per_kind_while_its_job_is_active_and_compares_bytewise").await
    else {
        return;
    };
    with_schema(&t).await;
    let insert = |id: &str, kind: &str, key: &str| {
        format!(
            "INSERT INTO outbox_jobs (id, kind, payload, schema_hash, created_at, run_at, updated_at, idempotency_key) \
             VALUES ('{id}', '{kind}', '{{}}', 'h', 1, 1, 1, '{key}')"
        )
    };
    t.db.execute_unprepared(&insert("1", "a", "k")).await.expect("the first keyed job");
    let duplicate = t.db.execute_unprepared(&insert("2", "a", "k")).await.expect_err("a duplicate while active");
    assert!(duplicate.to_string().contains("Duplicate entry"), "refused by the unique index: {duplicate}");
    t.db.execute_unprepared(&insert("3", "b", "k")).await.expect("the same key of another kind");
    t.db.execute_unprepared(&insert("4", "a", "k ")).await.expect("a key with a trailing space is another key");
    t.db.execute_unprepared(&insert("5", "a", "K")).await.expect("keys compare by case");
    t.db.execute_unprepared("UPDATE outbox_jobs SET status = 'completed' WHERE id = '1'").await.expect("complete");
    t.db.execute_unprepared(&insert("6", "a", "k")).await.expect("the key again once its job finished");
}

#[tokio::test]
async fn a_payload_must_be_json() {
    let Some(t) = TestMariaDb::fresh("a_payload_must_be_json").await else {
        return;
    };
    with_schema(&t).await;
    let refused =
        t.db.execute_unprepared(
            "INSERT INTO outbox_jobs (id, kind, payload, schema_hash, created_at, run_at, updated_at) \
             VALUES ('1', 'a', '{not json', 'h', 1, 1, 1)",
        )
        .await
        .expect_err("not JSON");
    assert!(refused.to_string().contains("payload"), "the check names the column: {refused}");
}

/// No trigger of the outbox tables writes a MEMORY table. A statement takes the write lock of every MEMORY table its
/// triggers may write when it starts, and holds it to its end, whichever branch runs: a statement waiting for a row
/// lock then held that table lock, and the row's holder, wanting it for its next statement, waited on it. Four worker
/// processes stalled each other so (`tests/tests/mariadb_fleet.rs` found it: one job of 20,000 completed in five
/// minutes), and InnoDB cannot see such a cycle. The wake-up log is written by statements of its own.
#[tokio::test]
async fn no_trigger_writes_a_memory_table() {
    let Some(t) = TestMariaDb::fresh("triggers").await else { return };
    with_schema(&t).await;
    let sql = "SELECT CONCAT(g.TRIGGER_NAME, ' writes ', m.TABLE_NAME) FROM information_schema.TRIGGERS g \
               JOIN information_schema.TABLES m ON m.TABLE_SCHEMA = g.TRIGGER_SCHEMA AND m.ENGINE = 'MEMORY' \
               AND g.ACTION_STATEMENT LIKE CONCAT('%', m.TABLE_NAME, '%') WHERE g.TRIGGER_SCHEMA = DATABASE()";
    let rows = t.db.query_all_raw(Statement::from_string(DbBackend::MySql, sql)).await.expect("the triggers");
    let found: Vec<String> = rows.iter().map(|r| r.try_get_by_index(0).expect("a name")).collect();
    assert_eq!(found, Vec::<String>::new());
    let memory = "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND ENGINE = 'MEMORY'";
    let row = t.db.query_one_raw(Statement::from_string(DbBackend::MySql, memory)).await.expect("count");
    let n: i64 = row.expect("a row").try_get_by_index(0).expect("a count");
    assert_eq!(n, 2, "the check looked at the wake-up log's tables");
}

#[tokio::test]
async fn migrating_again_changes_nothing_and_text_is_unicode_whatever_the_server_s_default() {
    let Some(t) = TestMariaDb::fresh("unicode").await else { return };
    with_schema(&t).await;
    assert!(outbox::pending_migrations(&t.db).await.expect("pending").is_empty(), "nothing left to apply");
    with_schema(&t).await;
    let not_unicode = "SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME, ' ', CHARACTER_SET_NAME) \
                       FROM information_schema.COLUMNS \
                       WHERE TABLE_SCHEMA = DATABASE() AND CHARACTER_SET_NAME NOT IN ('utf8mb4', 'ascii') \
                       AND TABLE_NAME <> 'outbox_migrations' ORDER BY 1";
    let rows = t.db.query_all_raw(Statement::from_string(DbBackend::MySql, not_unicode)).await.expect("the columns");
    let columns: Vec<String> = rows.iter().map(|r| r.try_get_by_index(0).expect("a column")).collect();
    // A server started without a configuration file defaults to latin1, which would take these as `?`. The
    // migrator's own table takes the database's default: it holds migration names, which are ASCII.
    assert_eq!(columns, Vec::<String>::new(), "columns in a character set other than utf8mb4 or ascii");
    let text = "kind ü 🙂 語";
    let insert = Statement::from_sql_and_values(
        DbBackend::MySql,
        "INSERT INTO outbox_jobs (id, kind, queue, payload, schema_hash, created_at, run_at, updated_at, last_error, \
         locked_by) VALUES ('01', ?, 'default', '{}', 'h', 0, 0, 0, ?, ?)",
        [text.into(), text.into(), text.into()],
    );
    t.db.execute_raw(insert).await.expect("a job in any script");
    let read = "SELECT CONCAT_WS('|', kind, last_error, locked_by) FROM outbox_jobs";
    let row = t.db.query_one_raw(Statement::from_string(DbBackend::MySql, read)).await.expect("read").expect("a row");
    assert_eq!(row.try_get_by_index::<String>(0).expect("text"), format!("{text}|{text}|{text}"));
}

/// Enqueue through the caller's own transaction, on the engine as far as it is built: a rolled-back enqueue leaves
/// nothing, a committed one is there once; a duplicate key collapses onto the active job, in one enqueue and in a
/// batch; a sequenced job is refused before any SQL, naming the job and its kind, and nothing of its batch is
/// written.
#[tokio::test]
async fn enqueue_commits_and_rolls_back_with_the_caller_s_transaction_and_collapses_duplicate_keys() {
    use outbox::{EnqueueOpts, Enqueued};
    use outbox_tests::Probe;
    let Some(t) = TestMariaDb::fresh("enqueue").await else { return };
    with_schema(&t).await;
    let count = async |sql: &str| -> i64 {
        let row = t.db.query_one_raw(Statement::from_string(DbBackend::MySql, sql)).await.expect("count");
        row.expect("a row").try_get_by_index(0).expect("a count")
    };

    let txn = t.db.begin().await.expect("begin");
    outbox::enqueue(&txn, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    txn.rollback().await.expect("rollback");
    assert_eq!(count("SELECT COUNT(*) FROM outbox_jobs").await, 0, "rolled back with the caller's transaction");

    let txn = t.db.begin().await.expect("begin");
    let Enqueued::New(first) = outbox::enqueue(&txn, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue")
    else {
        panic!("a new job")
    };
    // The same payload, the same key (`probe` keys by payload): collapsed onto the first, in its transaction too.
    let again = outbox::enqueue(&txn, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue again");
    assert_eq!(again, Enqueued::Existing(first.clone()));
    txn.commit().await.expect("commit");
    let job = outbox::ops::get(&t.db, &first).await.expect("the job");
    assert_eq!(
        (job.kind.as_str(), job.status.as_str(), job.payload.clone()),
        ("probe", "pending", serde_json::json!({"n": 1}))
    );

    let batch = [Probe { n: 1 }, Probe { n: 2 }, Probe { n: 3 }, Probe { n: 2 }];
    let written = outbox::enqueue_batch(&t.db, &batch, EnqueueOpts::new()).await.expect("a batch");
    assert_eq!(written[0], Enqueued::Existing(first), "the held key collapses onto the active job");
    assert!(matches!(&written[1], Enqueued::New(_)) && matches!(&written[2], Enqueued::New(_)), "{written:?}");
    assert_eq!(
        written[3],
        Enqueued::Existing(written[1].id().to_owned()),
        "a duplicate in the batch collapses onto the first"
    );
    assert_eq!(count("SELECT COUNT(*) FROM outbox_jobs").await, 3);

    // A sequence through the caller's transaction: its places follow the order of the enqueues, and a rolled-back
    // one leaves no job (its place is a gap).
    let sequenced = EnqueueOpts { sequence: Some("order-1".into()), ..EnqueueOpts::new() };
    let txn = t.db.begin().await.expect("begin");
    outbox::enqueue(&txn, &Probe { n: 9 }, sequenced.clone()).await.expect("a sequenced job");
    txn.rollback().await.expect("rollback");
    let txn = t.db.begin().await.expect("begin");
    let batch = [Probe { n: 10 }, Probe { n: 11 }, Probe { n: 12 }];
    let written = outbox::enqueue_batch(&txn, &batch, sequenced).await.expect("a sequenced batch");
    txn.commit().await.expect("commit");
    let mut places = Vec::new();
    for w in &written {
        let job = outbox::ops::get(&t.db, w.id()).await.expect("the job");
        places.push((job.payload["n"].as_i64().expect("n"), job.sequence_no.expect("a place")));
    }
    assert!(places.windows(2).all(|p| p[0].1 < p[1].1), "in the batch's order: {places:?}");
    assert_eq!(count("SELECT COUNT(*) FROM outbox_jobs").await, 6, "nothing of the rolled-back enqueue");
}

/// A worker on MariaDB runs every job once, retries a failing attempt with its error recorded, and its outcomes are
/// what the operator queries report.
#[tokio::test]
async fn a_worker_runs_every_job_once_and_retries_a_failing_one() {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use outbox::{EnqueueOpts, JobError, Worker};
    use outbox_tests::Probe;
    let Some(t) = TestMariaDb::fresh("worker").await else { return };
    with_schema(&t).await;
    let batch: Vec<Probe> = (1..=40).map(|n| Probe { n }).collect();
    outbox::enqueue_batch(&t.db, &batch, EnqueueOpts::new()).await.expect("a batch");
    let runs: Arc<Mutex<Vec<u64>>> = Arc::default();
    let seen = runs.clone();
    let handle = Worker::builder(&t.db)
        .id("mariadb-worker")
        .concurrency(4)
        .poll_interval(Duration::from_millis(20))
        .retry_policy(outbox::RetryPolicy {
            base: Duration::from_millis(10),
            max: Duration::from_millis(10),
            jitter: 0.0,
        })
        .register(move |job: Probe, ctx: outbox::JobContext| {
            let seen = seen.clone();
            async move {
                seen.lock().expect("runs").push(job.n);
                if job.n == 7 && ctx.attempt() == 1 {
                    return Err(JobError::retry("the first attempt of 7 fails"));
                }
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("build")
        .start();
    // Enqueued while the worker runs: found by its next claim.
    outbox::enqueue(&t.db, &Probe { n: 41 }, EnqueueOpts::new()).await.expect("enqueue");
    let count = |status: &'static str| {
        let db = t.db.clone();
        async move {
            let sql = format!("SELECT COUNT(*) FROM outbox_jobs WHERE status = '{status}'");
            let row = db.query_one_raw(Statement::from_string(DbBackend::MySql, sql)).await.expect("count");
            row.expect("a row").try_get_by_index::<i64>(0).expect("a count")
        }
    };
    let done = outbox_tests::eventually(Duration::from_secs(30), || async { count("completed").await == 41 }).await;
    handle.shutdown().await.expect("shutdown");
    assert!(done, "41 jobs completed: {} of them", count("completed").await);
    let mut runs = runs.lock().expect("runs").clone();
    runs.sort_unstable();
    let mut expected: Vec<u64> = (1..=41).collect();
    expected.push(7);
    expected.sort_unstable();
    assert_eq!(runs, expected, "every job once, 7 twice");
    let seven = outbox::ops::list(&t.db, &outbox::JobFilter { limit: 100, ..outbox::JobFilter::default() })
        .await
        .expect("the jobs")
        .into_iter()
        .find(|j| j.payload == serde_json::json!({"n": 7}))
        .expect("job 7");
    assert_eq!((seven.attempts, seven.status.as_str()), (2, "completed"));
    let history = outbox::ops::history(&t.db, &seven.id).await.expect("its history");
    let events: Vec<String> = history.iter().map(|e| e.event.to_string()).collect();
    assert_eq!(events, ["enqueued", "claimed", "retried", "claimed", "completed"], "{history:?}");
}

/// A parent's outcome another writer noted (here by hand) whose child an open transaction holds cannot be counted
/// yet: it holds no worker's outcomes (a store counts the notes of its own outcomes in their transaction, and others'
/// in a look of their own, whose waits are bounded), and it is counted once the child is let go.
#[tokio::test]
async fn a_note_that_cannot_be_counted_yet_holds_no_worker_s_outcome() {
    use std::time::Duration;

    use outbox::{EnqueueOpts, JobStatus, Worker};
    use outbox_tests::{Probe, eventually};
    let Some(t) = TestMariaDb::fresh("held_note").await else { return };
    with_schema(&t).await;
    let mut wf = outbox::Workflow::new("held");
    wf.step("a", &Probe { n: 1 });
    wf.step("b", &Probe { n: 2 }).after(["a"]);
    let txn = outbox::begin(&t.db).await.expect("begin");
    let enqueued = outbox::enqueue_workflow(&txn, &wf).await.expect("a workflow");
    txn.commit().await.expect("commit");
    let (a, b) = (enqueued.step("a").expect("a").to_owned(), enqueued.step("b").expect("b").to_owned());
    let sql = format!("UPDATE outbox_jobs SET status = 'completed', updated_at = updated_at + 1 WHERE id = '{a}'");
    t.db.execute_unprepared(&sql).await.expect("a completed by another writer");
    let holder = t.connect(1).await;
    let held = holder.begin().await.expect("begin");
    held.execute_unprepared(&format!("SELECT id FROM outbox_jobs WHERE id = '{b}' FOR UPDATE")).await.expect("hold b");

    let other = outbox::enqueue(&t.db, &Probe { n: 3 }, EnqueueOpts::new()).await.expect("a job").id().to_owned();
    let worker = Worker::builder(&t.db)
        .poll_interval(Duration::from_millis(20))
        .register(|_: Probe, _: outbox::JobContext| async { Ok::<_, outbox::JobError>(()) })
        .build()
        .await
        .expect("a worker")
        .start();
    let status = |id: String| {
        let db = t.db.clone();
        async move { outbox::ops::get(&db, &id).await.expect("the job").status }
    };
    let done = eventually(Duration::from_secs(20), || async { status(other.clone()).await == JobStatus::Completed });
    assert!(done.await, "the worker's outcome was held by a note it does not own");
    assert_eq!(status(b.clone()).await, JobStatus::Pending, "b waits while its row is held");
    held.rollback().await.expect("let b go");
    let ran = eventually(Duration::from_secs(20), || async { status(b.clone()).await == JobStatus::Completed });
    assert!(ran.await, "b ran once a's outcome was counted");
    worker.shutdown().await.expect("shutdown");
}
