//! Conformance of `storage/stats.rs`: the counts by kind and status, activity, failure groups, durations,
//! duplicate keys, queues and blocked sequences.

use sea_orm::DatabaseConnection;

use super::{T0, add, job, keyed, looked_at_by_a_worker, mark_claimed, mark_completed, mark_failed, sequenced, set};
use crate::error::Result;
use crate::record::JobStatus;
use crate::stats::{DuplicateKey, FailureGroup, KindDurations, QueueCounts, StatusCount};
use crate::storage::enqueue::NewJob;
use crate::storage::{jobs, stats};
use crate::time::from_ms;

driver_tests!(
    counts_by_kind_and_status,
    finished_since_counts_recent_finished_jobs,
    activity_counts_per_bucket,
    failure_groups_by_kind_and_error,
    durations_of_completed_jobs,
    duplicates_lists_repeated_keys,
    queues_count_every_state,
    blocked_lists_held_sequences;
    mysql:
    counts_by_kind_and_status,
    finished_since_counts_recent_finished_jobs,
    activity_counts_per_bucket,
    failure_groups_by_kind_and_error,
    durations_of_completed_jobs,
    duplicates_lists_repeated_keys,
    queues_count_every_state,
    blocked_lists_held_sequences,
);

async fn counts_by_kind_and_status(db: &DatabaseConnection) -> Result<()> {
    let other = NewJob { kind: "other".into(), created_at: T0 + 7, ..job("d") };
    add(db, &[job("a"), NewJob { created_at: T0 + 5, ..job("b") }, job("c"), other]).await?;
    mark_completed(db, "c", T0 + 9).await?;
    mark_failed(db, "d", "boom", T0 + 9).await?;
    let count =
        |kind: &str, status, count, oldest| StatusCount { kind: kind.into(), status, count, oldest: from_ms(oldest) };
    let expected = [
        count("k", JobStatus::Completed, 1, T0),
        count("k", JobStatus::Pending, 2, T0),
        count("other", JobStatus::Failed, 1, T0 + 7),
    ];
    assert_eq!(stats::counts(db).await?, expected);
    Ok(())
}

async fn finished_since_counts_recent_finished_jobs(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    mark_completed(db, "a", T0 + 1_000).await?;
    mark_failed(db, "b", "boom", T0 + 9_000).await?;
    mark_completed(db, "c", T0 + 9_000).await?;
    let since = stats::finished_since(db, T0 + 5_000).await?;
    let count = |status, count| StatusCount { kind: "k".into(), status, count, oldest: from_ms(T0) };
    assert_eq!(since, [count(JobStatus::Completed, 1), count(JobStatus::Failed, 1)]);
    Ok(())
}

async fn activity_counts_per_bucket(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d"), job("e")]).await?;
    mark_completed(db, "a", T0 + 1_000).await?;
    mark_failed(db, "b", "boom", T0 + 2_000).await?;
    set(db, "c", "status = 'cancelled', updated_at = {0}", &[T0 + 2_000]).await?;
    mark_completed(db, "d", T0 + 120_000).await?;
    mark_completed(db, "e", T0 - 600_000).await?;
    let bucket = |t: i64| t / 60_000 * 60_000;
    let expected = [(bucket(T0 + 1_000), 1, 1), (bucket(T0 + 120_000), 1, 0)];
    assert_eq!(stats::activity(db, T0, 60_000).await?, expected);
    Ok(())
}

async fn failure_groups_by_kind_and_error(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    mark_failed(db, "a", "boom", T0 + 1).await?;
    mark_failed(db, "b", "boom", T0 + 3).await?;
    mark_failed(db, "c", "bad", T0 + 2).await?;
    let group = |error: &str, count, at, id: &str| FailureGroup {
        kind: "k".into(),
        error: Some(error.into()),
        count,
        latest_at: from_ms(at),
        latest_id: id.into(),
    };
    assert_eq!(stats::failure_groups(db, 10).await?, [group("boom", 2, T0 + 3, "b"), group("bad", 1, T0 + 2, "c")]);
    assert_eq!(stats::failure_groups(db, 1).await?.len(), 1);
    Ok(())
}

async fn durations_of_completed_jobs(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c")]).await?;
    let done = "status = 'completed', attempts = 1, claimed_at = {0}, completed_at = {1}, updated_at = {1}";
    set(db, "a", done, &[T0 + 1_000, T0 + 1_100]).await?;
    set(db, "b", done, &[T0 + 3_000, T0 + 3_300]).await?;
    let expected =
        KindDurations { kind: "k".into(), completed: 2, avg_run_ms: 200.0, max_run_ms: 300, avg_wait_ms: 2_000.0 };
    assert_eq!(stats::durations(db, T0).await?, [expected]);
    assert!(stats::durations(db, T0 + 5_000).await?.is_empty());
    Ok(())
}

async fn duplicates_lists_repeated_keys(db: &DatabaseConnection) -> Result<()> {
    add(db, &[keyed("a", "x"), keyed("u", "unique")]).await?;
    mark_completed(db, "a", T0 + 1).await?;
    add(db, &[keyed("b", "x")]).await?;
    mark_completed(db, "b", T0 + 2).await?;
    add(db, &[keyed("c", "x")]).await?;
    let expected = DuplicateKey { kind: "k".into(), key: "x".into(), jobs: 3, active: 1, completed: 2 };
    assert_eq!(stats::duplicates(db, 10).await?, [expected]);
    Ok(())
}

async fn queues_count_every_state(db: &DatabaseConnection) -> Result<()> {
    let later = NewJob { run_at: T0 + 60_000, ..job("b") };
    add(db, &[job("a"), later, job("c"), job("d"), job("e"), job("f"), job("g")]).await?;
    add(db, &[sequenced("h", "s"), sequenced("i", "s"), NewJob { queue: "q2".into(), run_at: T0 + 1_000, ..job("j") }])
        .await?;
    mark_claimed(db, "c", T0, T0 + 20_000).await?;
    mark_claimed(db, "d", T0, T0 + 5_000).await?;
    mark_completed(db, "e", T0 + 1).await?;
    mark_failed(db, "f", "boom", T0 + 1).await?;
    assert!(jobs::cancel(db, "g", T0 + 1).await?);
    looked_at_by_a_worker(db).await?;
    // Available, scheduled, waiting, claimed, stuck, completed, failed, cancelled; the oldest available.
    let counts = |queue: &str,
                  [available, scheduled, waiting, claimed, stuck, completed, failed, cancelled]: [u64; 8],
                  oldest| {
        let oldest_available = Some(from_ms(oldest));
        QueueCounts {
            queue: queue.into(),
            available,
            scheduled,
            waiting,
            claimed,
            stuck,
            completed,
            failed,
            cancelled,
            oldest_available,
        }
    };
    let (default, q2) =
        (counts("default", [2, 1, 1, 2, 1, 1, 1, 1], T0), counts("q2", [1, 0, 0, 0, 0, 0, 0, 0], T0 + 1_000));
    assert_eq!(stats::queues(db, T0 + 10_000).await?, [default, q2]);
    Ok(())
}

async fn blocked_lists_held_sequences(db: &DatabaseConnection) -> Result<()> {
    add(db, &[sequenced("s1", "s"), sequenced("s2", "s"), sequenced("s3", "s")]).await?;
    add(db, &[NewJob { hold: false, ..sequenced("t1", "t") }, sequenced("u1", "u"), sequenced("u2", "u")]).await?;
    mark_failed(db, "s1", "boom", T0 + 1).await?;
    mark_failed(db, "t1", "boom", T0 + 1).await?;
    add(db, &[sequenced("t2", "t")]).await?;
    let (count, heads) = stats::blocked(db, 10).await?;
    assert_eq!(count, 1);
    assert_eq!(heads.len(), 1);
    assert_eq!((heads[0].sequence_key.as_str(), heads[0].head.id.as_str(), heads[0].waiting), ("s", "s1", 2));
    assert!(heads[0].head.holds_sequence);
    assert_eq!(stats::blocked(db, 0).await?.0, 1);
    Ok(())
}
