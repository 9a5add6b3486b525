//! The MariaDB server the third backend will run on, and what its claims will rest on: a test's database is its own
//! and gone after the test, even one that panics; `FOR UPDATE SKIP LOCKED` passes over the rows another claim
//! holds instead of waiting for them; commits are durable.

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
