//! The event feed on MariaDB, where an event's id is handed out before its transaction commits: a reader resuming
//! from a position misses no event whose transaction committed after a later one's, reading never waits for a
//! transaction still open, and the feed's head is after every event committed before it.

use std::time::Duration;

use outbox::{EnqueueOpts, ops};
use outbox_tests::{Probe, TestMariaDb};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};

/// A read that waited for another transaction's lock would hang here until that transaction ended, which the test
/// does only after the read returns.
const HANG: Duration = Duration::from_secs(60);

async fn feed(t: &TestMariaDb, after: &str) -> Vec<outbox::FeedEvent> {
    tokio::time::timeout(HANG, ops::feed(&t.db, after, 1_000)).await.expect("a read that does not wait").expect("feed")
}

async fn ids(t: &TestMariaDb, sql: String) -> Vec<i64> {
    let rows = t.db.query_all_raw(Statement::from_string(DbBackend::MySql, sql)).await.expect("event ids");
    rows.iter().map(|r| r.try_get_by_index::<i64>(0).expect("an id")).collect()
}

#[tokio::test]
async fn a_reader_resuming_misses_no_event_that_committed_after_a_later_one() {
    let Some(t) = TestMariaDb::fresh("feed_order").await else { return };
    outbox::migrate(&t.db).await.expect("the migrations");
    let start = ops::feed_head(&t.db).await.expect("head");

    // The first enqueue takes its event's id first and commits last.
    let late = t.db.begin().await.expect("begin");
    let first = outbox::enqueue(&late, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue 1");
    let second = outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new()).await.expect("enqueue 2");
    let event_of = |job: &str| format!("SELECT id FROM outbox_job_events WHERE job_id = '{job}'");
    assert!(ids(&t, event_of(first.id())).await.is_empty(), "the open enqueue's event is not visible");

    // The reader reads the second job's event while the first's transaction is open, and does not wait for it.
    let read = feed(&t, &start).await;
    let seen: Vec<&str> = read.iter().map(|e| e.job_id.as_str()).collect();
    assert_eq!(seen, vec![second.id()], "only the committed event");
    let last = read.last().expect("an event").id.clone();

    late.commit().await.expect("commit the first");
    let (first_row, second_row) = (ids(&t, event_of(first.id())).await, ids(&t, event_of(second.id())).await);
    assert!(first_row < second_row, "the event that committed last has the lower id: {first_row:?} {second_row:?}");

    // Resuming after the last event read finds the one that committed after it, though its id is lower.
    let resumed = feed(&t, &last).await;
    let seen: Vec<&str> = resumed.iter().map(|e| e.job_id.as_str()).collect();
    assert_eq!(seen, vec![first.id()], "the late commit, once");
    let again = feed(&t, &resumed.last().expect("an event").id).await;
    assert!(again.is_empty(), "nothing twice: {again:?}");

    // The whole feed from the start holds both, in the order they committed.
    let all: Vec<String> = feed(&t, &start).await.into_iter().map(|e| e.job_id).collect();
    assert_eq!(all, vec![second.id().to_owned(), first.id().to_owned()]);
}

#[tokio::test]
async fn the_head_is_after_every_event_committed_before_it_even_never_read() {
    let Some(t) = TestMariaDb::fresh("feed_head").await else { return };
    outbox::migrate(&t.db).await.expect("the migrations");
    // Events no reader has read (so none is in the feed's order yet), and one whose transaction is open.
    for n in 1..=5 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let open = t.db.begin().await.expect("begin");
    let pending = outbox::enqueue(&open, &Probe { n: 100 }, EnqueueOpts::new()).await.expect("enqueue in a txn");
    let head =
        tokio::time::timeout(HANG, ops::feed_head(&t.db)).await.expect("a head that does not wait").expect("head");
    assert!(feed(&t, &head).await.is_empty(), "nothing committed before the head comes after it");
    let after = outbox::enqueue(&t.db, &Probe { n: 6 }, EnqueueOpts::new()).await.expect("enqueue after");
    open.commit().await.expect("commit");
    let mut seen: Vec<String> = feed(&t, &head).await.into_iter().map(|e| e.job_id).collect();
    seen.sort();
    let mut expected = vec![pending.id().to_owned(), after.id().to_owned()];
    expected.sort();
    assert_eq!(seen, expected, "what committed after the head, the open transaction's too");

    let err = ops::feed(&t.db, "12", 10).await.expect_err("a position of another engine");
    assert!(err.to_string().contains("`<stamp>-<number>`"), "{err}");
}

#[tokio::test]
async fn a_read_inside_a_transaction_orders_nothing_and_misses_nothing() {
    use sea_orm::TransactionTrait;
    let Some(t) = TestMariaDb::fresh("feed_in_txn").await else { return };
    outbox::migrate(&t.db).await.expect("the migrations");
    let start = ops::feed_head(&t.db).await.expect("head");
    let first = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    // A transaction's snapshot may predate a stamp another reader commits: a stamp of its own would be seen beside
    // rows of an earlier one it cannot see, and a reader would move past those. Inside one, nothing is stamped.
    let txn = t.db.begin().await.expect("begin");
    let inside = ops::feed(&txn, &start, 100).await.expect("a read inside a transaction");
    assert!(inside.is_empty(), "nothing ordered inside a transaction: {inside:?}");
    txn.commit().await.expect("commit");
    let stamped = ids(&t, "SELECT COUNT(*) FROM outbox_job_events WHERE seq IS NOT NULL".into()).await;
    assert_eq!(stamped, [0], "the transaction stamped nothing");
    let outside: Vec<String> = feed(&t, &start).await.into_iter().map(|e| e.job_id).collect();
    assert_eq!(outside, vec![first.id().to_owned()], "a read outside one orders and shows it");
}
