//! Ordered side effects: jobs for one path run one at a time, in commit order, on both backends; a failed
//! job holds its path's sequence until an operator retries or cancels it.

mod common;

use common::{TestDb, conformance, env, worker};
use outbox::{EnqueueOpts, JobStatus, ops};
use outbox_fs::{CreateFile, DeleteFile, ReconcileOpts};

const PATHS: usize = 200;

conformance!(two_writes_to_one_path_land_in_commit_order_and_the_reconciler_agrees, mysql);
async fn two_writes_to_one_path_land_in_commit_order_and_the_reconciler_agrees(t: TestDb) {
    let e = env(t);
    let big = "A".repeat(200 * 1024);
    // Each intent commits on its own, as an application would write them.
    for i in 0..PATHS {
        let first = CreateFile { path: format!("rewritten/{i}.txt"), content: big.clone(), overwrite: true };
        outbox::enqueue(&e.db, &first, EnqueueOpts::new()).await.expect("enqueue A");
        let second = CreateFile { path: format!("rewritten/{i}.txt"), content: "B".into(), overwrite: true };
        outbox::enqueue(&e.db, &second, EnqueueOpts::new()).await.expect("enqueue B");
        let create = CreateFile { path: format!("deleted/{i}.txt"), content: big.clone(), overwrite: true };
        outbox::enqueue(&e.db, &create, EnqueueOpts::new()).await.expect("enqueue create");
        let delete = DeleteFile { path: format!("deleted/{i}.txt"), require_exists: false };
        outbox::enqueue(&e.db, &delete, EnqueueOpts::new()).await.expect("enqueue delete");
    }
    // The second job of every path waits behind the first: only the first ones are claimable.
    let waiting =
        ops::list(&e.db, &outbox::JobFilter { sequence: Some("fs:rewritten/0.txt".into()), ..Default::default() })
            .await
            .expect("list the sequence");
    assert_eq!(waiting.len(), 2);
    assert!(waiting[0].sequence_no < waiting[1].sequence_no, "{waiting:?}");
    assert_eq!(waiting[0].waiting_for, None);
    assert_eq!(waiting[1].waiting_for.as_deref(), Some(waiting[0].id.as_str()));

    worker(&e).concurrency(8).build().await.expect("build").drain().await.expect("drain");

    let counts = ops::counts(&e.db).await.expect("counts");
    assert!(counts.iter().all(|c| c.status == JobStatus::Completed), "{counts:?}");
    let mut older = Vec::new();
    let mut back = Vec::new();
    for i in 0..PATHS {
        let content = std::fs::read_to_string(e.root_dir.join(format!("rewritten/{i}.txt"))).expect("rewritten file");
        if content != "B" {
            older.push(i);
        }
        if e.root_dir.join(format!("deleted/{i}.txt")).exists() {
            back.push(i);
        }
    }
    assert!(older.is_empty(), "{} of {PATHS} files hold the older content: {older:?}", older.len());
    assert!(back.is_empty(), "{} of {PATHS} deleted files came back: {back:?}", back.len());
    let report = outbox_fs::reconcile(&e.db, &e.root, ReconcileOpts::new()).await.expect("reconcile");
    assert!(report.discrepancies.is_empty(), "{:?}", report.discrepancies);
}

conformance!(a_duplicate_behind_a_later_intent_of_its_path_runs_last_and_the_file_ends_present, mysql);
async fn a_duplicate_behind_a_later_intent_of_its_path_runs_last_and_the_file_ends_present(t: TestDb) {
    let e = env(t);
    let create = CreateFile { path: "x.txt".into(), content: "wanted".into(), overwrite: true };
    let delete = DeleteFile { path: "x.txt".into(), require_exists: false };
    let first = outbox::enqueue(&e.db, &create, EnqueueOpts::new()).await.expect("enqueue create");
    outbox::enqueue(&e.db, &delete, EnqueueOpts::new()).await.expect("enqueue delete");
    // Same key as the first create, which is still pending; but a delete of the path came after it.
    let third = outbox::enqueue(&e.db, &create, EnqueueOpts::new()).await.expect("enqueue create again");
    assert!(matches!(third, outbox::Enqueued::New(_)), "the last create collapsed onto the first: {third:?}");
    assert_ne!(third.id(), first.id());
    // Nothing of the path came after the third: a fourth collapses onto it.
    let fourth = outbox::enqueue(&e.db, &create, EnqueueOpts::new()).await.expect("enqueue create a fourth time");
    assert_eq!(fourth, outbox::Enqueued::Existing(third.id().to_owned()));
    let mut jobs = ops::list(&e.db, &outbox::JobFilter { sequence: Some("fs:x.txt".into()), ..Default::default() })
        .await
        .expect("list the sequence");
    jobs.sort_by_key(|j| j.sequence_no);
    let order: Vec<(&str, Option<i64>)> = jobs.iter().map(|j| (j.kind.as_str(), j.sequence_no)).collect();
    assert_eq!(jobs.len(), 3, "{order:?}");
    assert_eq!(jobs.iter().map(|j| j.kind.as_str()).collect::<Vec<_>>(), ["create_file", "delete_file", "create_file"]);
    assert_eq!(jobs[2].id, third.id());

    // In a batch, a duplicate with nothing of its path between it and its twin collapses as it always did.
    let again = |path: &str| CreateFile { path: path.into(), content: "batch".into(), overwrite: true };
    let batch = outbox::enqueue_batch(&e.db, &[again("y.txt"), again("z.txt"), again("y.txt")], EnqueueOpts::new())
        .await
        .expect("enqueue a batch");
    assert!(batch[0].is_new() && batch[1].is_new(), "{batch:?}");
    assert_eq!(batch[2], outbox::Enqueued::Existing(batch[0].id().to_owned()));

    worker(&e).concurrency(4).build().await.expect("build").drain().await.expect("drain");
    let content = std::fs::read_to_string(e.root_dir.join("x.txt")).expect("the file is present after the drain");
    assert_eq!(content, "wanted");
    let report = outbox_fs::reconcile(&e.db, &e.root, ReconcileOpts::new()).await.expect("reconcile");
    assert!(report.discrepancies.is_empty(), "{:?}", report.discrepancies);
}

conformance!(a_failed_job_holds_its_sequence_until_an_operator_retries_or_cancels_it, mysql);
async fn a_failed_job_holds_its_sequence_until_an_operator_retries_or_cancels_it(t: TestDb) {
    let e = env(t);
    // The first write fails for good: the file exists with other content and overwrite is off.
    std::fs::write(e.root_dir.join("a.txt"), "someone else's").expect("seed");
    let fails = CreateFile { path: "a.txt".into(), content: "mine".into(), overwrite: false };
    let head = outbox::enqueue(&e.db, &fails, EnqueueOpts::new()).await.expect("enqueue");
    let delete = DeleteFile { path: "a.txt".into(), require_exists: false };
    let behind = outbox::enqueue(&e.db, &delete, EnqueueOpts::new()).await.expect("enqueue");
    // Another path is not held by it.
    let other = CreateFile { path: "b.txt".into(), content: "b".into(), overwrite: false };
    let other = outbox::enqueue(&e.db, &other, EnqueueOpts::new()).await.expect("enqueue");
    worker(&e).build().await.expect("build").drain().await.expect("drain");

    assert_eq!(ops::get(&e.db, head.id()).await.expect("get").status, JobStatus::Failed);
    assert_eq!(ops::get(&e.db, other.id()).await.expect("get").status, JobStatus::Completed);
    let waiting = ops::get(&e.db, behind.id()).await.expect("get");
    assert_eq!(waiting.status, JobStatus::Pending);
    assert_eq!(waiting.waiting_for.as_deref(), Some(head.id()), "the waiting job names its head");
    assert!(e.root_dir.join("a.txt").exists(), "the delete behind a failed create must not run");
    let (blocked, heads) = ops::blocked(&e.db, 10).await.expect("blocked");
    assert_eq!(blocked, 1);
    assert_eq!(
        (heads[0].sequence_key.as_str(), heads[0].head.id.as_str(), heads[0].waiting),
        ("fs:a.txt", head.id(), 1)
    );
    let stats = ops::stats(&e.db, std::time::Duration::from_secs(3600)).await.expect("stats");
    assert_eq!(stats.blocked_sequences, 1);
    // A purge keeps the held head: deleting it would let the sequence go with nobody deciding so.
    ops::purge(&e.db, &[JobStatus::Failed], std::time::Duration::ZERO).await.expect("purge");
    assert!(ops::get(&e.db, head.id()).await.expect("get").holds_sequence);

    // Cancelling the held head lets the rest run.
    ops::cancel(&e.db, head.id()).await.expect("release");
    let released = ops::get(&e.db, head.id()).await.expect("get");
    assert_eq!(released.status, JobStatus::Cancelled);
    assert!(!released.holds_sequence);
    assert_eq!(ops::get(&e.db, behind.id()).await.expect("get").waiting_for, None);
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(ops::get(&e.db, behind.id()).await.expect("get").status, JobStatus::Completed);
    assert!(!e.root_dir.join("a.txt").exists());
    assert_eq!(ops::blocked(&e.db, 10).await.expect("blocked").0, 0);

    // A held head retried by an operator runs first, then the job behind it.
    let from = ops::feed_head(&e.db).await.expect("feed head");
    std::fs::write(e.root_dir.join("c.txt"), "someone else's").expect("seed");
    let fails = CreateFile { path: "c.txt".into(), content: "mine".into(), overwrite: false };
    let head = outbox::enqueue(&e.db, &fails, EnqueueOpts::new()).await.expect("enqueue");
    let after = CreateFile { path: "c.txt".into(), content: "after".into(), overwrite: true };
    let behind = outbox::enqueue(&e.db, &after, EnqueueOpts::new()).await.expect("enqueue");
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(ops::get(&e.db, behind.id()).await.expect("get").status, JobStatus::Pending);
    std::fs::remove_file(e.root_dir.join("c.txt")).expect("operator fixes the cause");
    ops::retry(&e.db, head.id()).await.expect("retry");
    assert_eq!(ops::get(&e.db, behind.id()).await.expect("get").waiting_for.as_deref(), Some(head.id()));
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    let head = ops::get(&e.db, head.id()).await.expect("get");
    let behind = ops::get(&e.db, behind.id()).await.expect("get");
    assert_eq!((head.status, behind.status), (JobStatus::Completed, JobStatus::Completed));
    // In commit order (the feed's), not by timestamps: a claim's time is read before its statement runs, so a
    // claim can carry a time a few milliseconds before a completion that committed ahead of it. The feed shows
    // an event once every transaction older than its own has ended, on PostgreSQL those of other tests on the
    // server too: read it until both events are there.
    let (head_done, behind_claimed) = wait_for_feed(&e.db, &from, &head.id, &behind.id).await;
    assert!(head_done < behind_claimed, "the retried head ran first");
    assert_eq!(std::fs::read_to_string(e.root_dir.join("c.txt")).expect("c"), "after");
}

conformance!(a_cancelled_pending_job_holds_its_sequence_and_a_second_cancel_lets_it_go, mysql);
async fn a_cancelled_pending_job_holds_its_sequence_and_a_second_cancel_lets_it_go(t: TestDb) {
    let e = env(t);
    let first = CreateFile { path: "d.txt".into(), content: "1".into(), overwrite: true };
    let first = outbox::enqueue(&e.db, &first, EnqueueOpts::new()).await.expect("enqueue");
    let second = CreateFile { path: "d.txt".into(), content: "2".into(), overwrite: true };
    let second = outbox::enqueue(&e.db, &second, EnqueueOpts::new()).await.expect("enqueue");
    ops::cancel(&e.db, first.id()).await.expect("cancel");
    assert!(ops::get(&e.db, first.id()).await.expect("get").holds_sequence);
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(ops::get(&e.db, second.id()).await.expect("get").status, JobStatus::Pending);
    ops::cancel(&e.db, first.id()).await.expect("release");
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(ops::get(&e.db, second.id()).await.expect("get").status, JobStatus::Completed);
    assert_eq!(std::fs::read_to_string(e.root_dir.join("d.txt")).expect("d"), "2");
    // A job that was never held cannot be "released": cancelling a completed job is refused.
    let err = ops::cancel(&e.db, second.id()).await.expect_err("completed");
    assert!(err.to_string().contains("completed"), "{err}");
}

conformance!(the_reconciler_takes_the_latest_job_of_a_path_in_sequence_order_not_completion_time, mysql);
async fn the_reconciler_takes_the_latest_job_of_a_path_in_sequence_order_not_completion_time(t: TestDb) {
    let e = env(t);
    let first = CreateFile { path: "late.txt".into(), content: "first".into(), overwrite: true };
    let first = outbox::enqueue(&e.db, &first, EnqueueOpts::new()).await.expect("enqueue");
    let second = CreateFile { path: "late.txt".into(), content: "second".into(), overwrite: true };
    outbox::enqueue(&e.db, &second, EnqueueOpts::new()).await.expect("enqueue");
    worker(&e).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(std::fs::read_to_string(e.root_dir.join("late.txt")).expect("late"), "second");
    // The earlier job's completion recorded as the later one (a clock step, a slow writer): sequence order
    // still decides which job the file must match.
    let later = e.backend.time(chrono::Utc::now().timestamp_millis() + 60_000);
    common::exec(
        &e.db,
        &format!("UPDATE outbox_jobs SET completed_at = {later} WHERE id = ?"),
        vec![first.id().into()],
    )
    .await;
    let report = outbox_fs::reconcile(&e.db, &e.root, ReconcileOpts::new()).await.expect("reconcile");
    assert!(report.discrepancies.is_empty(), "{:?}", report.discrepancies);
}

/// The feed positions (after `from`) of `head`'s completion and `behind`'s claim, once both show.
async fn wait_for_feed(
    db: &outbox::sea_orm::DatabaseConnection,
    from: &str,
    head: &str,
    behind: &str,
) -> (usize, usize) {
    use outbox::JobEventKind::{Claimed, Completed};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let feed = ops::feed(db, from, 1_000).await.expect("feed");
        let at = |id: &str, event| feed.iter().position(|f| f.job_id == id && f.event == event);
        if let (Some(done), Some(claimed)) = (at(head, Completed), at(behind, Claimed)) {
            return (done, claimed);
        }
        assert!(std::time::Instant::now() < deadline, "the feed never showed both events: {feed:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
