//! The quickstart's application tested the way an application tests its own jobs: with `outbox::testing`
//! alone, on a throwaway SQLite file.

use outbox::testing::{self, Ran, TempSqlite};
use outbox::{EnqueueOpts, JobStatus, Worker};
use outbox_examples::{SendOrderConfirmation, create_orders_table, place_order, send_order_confirmation};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn app() -> Result<(TempSqlite, Worker), Box<dyn std::error::Error>> {
    let temp = TempSqlite::new().await?;
    create_orders_table(&temp.db).await?;
    let worker = Worker::builder(&temp.db).register(send_order_confirmation).build().await?;
    Ok((temp, worker))
}

#[tokio::test]
async fn a_rolled_back_order_leaves_no_confirmation_and_a_committed_one_leaves_one() -> TestResult {
    let (temp, worker) = app().await?;
    let db = &temp.db;

    // Rolled back: the transaction saw its job, the database never holds it.
    let txn = outbox::begin(db).await?;
    let order_id = place_order(&txn, "grace", 1_500).await?;
    let job = testing::assert_enqueued::<SendOrderConfirmation, _>(&txn, |p| p.order_id == order_id).await;
    assert_eq!(job.payload.email, "grace@example.com");
    // The handler runs inline on the uncommitted job, through the worker's registration.
    let ran = testing::run_job(&worker, &txn, job.id()).await?;
    assert_eq!(ran.output(), Some(&serde_json::json!({ "sent_to": "grace@example.com", "order_id": order_id })));
    txn.rollback().await?;
    testing::refute_enqueued::<SendOrderConfirmation, _>(db, |_| true).await;
    assert!(testing::all_enqueued(db).await?.is_empty());

    // Committed: exactly one job, for this order.
    let order_id = outbox::transaction(db, async |txn| place_order(txn, "ada", 4_200).await).await?;
    let jobs = testing::enqueued::<SendOrderConfirmation, _>(db).await?;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].payload, SendOrderConfirmation { order_id, email: "ada@example.com".into() });
    assert_eq!(jobs[0].record.queue, "mail");

    // Run inline: completed, with the output the handler records; the row is left pending.
    let ran = testing::run_job(&worker, db, jobs[0].id()).await?;
    assert_eq!(
        ran,
        Ran::Completed { output: Some(serde_json::json!({ "sent_to": "ada@example.com", "order_id": order_id })) }
    );
    assert_eq!(testing::enqueued::<SendOrderConfirmation, _>(db).await?.len(), 1);

    // Drained for real: the job completes and stores the same output.
    let drained = testing::drain(worker).await?;
    let completed = drained.completed();
    assert_eq!(completed.len(), 1, "{drained:?}");
    assert_eq!(completed[0].id, jobs[0].id());
    assert_eq!(completed[0].status, JobStatus::Completed);
    assert_eq!(completed[0].output, ran.output().cloned());
    assert!(testing::all_enqueued(db).await?.is_empty());
    Ok(())
}

#[tokio::test]
async fn a_rejected_mailbox_fails_the_job_without_a_retry() -> TestResult {
    let (temp, worker) = app().await?;
    let bounced = SendOrderConfirmation { order_id: 9, email: "nobody@bounce.example".into() };
    let ran = testing::perform(&worker, &bounced).await?;
    assert_eq!(ran, Ran::Failed { error: "mailbox nobody@bounce.example rejected the confirmation of order 9".into() });

    outbox::enqueue(&temp.db, &bounced, EnqueueOpts::new()).await?;
    let drained = testing::drain(worker).await?;
    assert_eq!(drained.failed().len(), 1, "{drained:?}");
    assert_eq!(drained.failed()[0].attempts, 1);
    Ok(())
}

#[tokio::test]
async fn an_invalid_payload_fails_inline_as_it_would_in_a_worker() -> TestResult {
    let (_temp, worker) = app().await?;
    let invalid = SendOrderConfirmation { order_id: 1, email: "not an address".into() };
    match testing::perform(&worker, &invalid).await? {
        Ran::Failed { error } => assert!(error.starts_with("invalid payload: at /email"), "{error}"),
        other => panic!("expected the invalid payload to fail, got {other}"),
    }
    Ok(())
}

#[tokio::test]
#[should_panic(
    expected = "expected a pending job of kind `send_order_confirmation` matching the predicate; pending: ["
)]
async fn an_assertion_that_finds_no_match_names_the_kind_and_lists_what_is_pending() {
    let (temp, _worker) = app().await.expect("the app starts");
    let job = SendOrderConfirmation { order_id: 3, email: "ada@example.com".into() };
    outbox::enqueue(&temp.db, &job, EnqueueOpts::new()).await.expect("the job is enqueued");
    testing::assert_enqueued::<SendOrderConfirmation, _>(&temp.db, |p| p.order_id == 4).await;
}
