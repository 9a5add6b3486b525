//! Conformance of `storage/retention.rs`: finished jobs pruned by status, kind and age, and the feed's old
//! rows.

use sea_orm::DatabaseConnection;

use super::{T0, add, ids, job, mark_completed, mark_failed, opts, sequenced};
use crate::error::Result;
use crate::record::{JobEventKind, JobFilter, JobStatus};
use crate::storage::enqueue::NewJob;
use crate::storage::retention::{self, PruneRules};
use crate::storage::{events, jobs, now_ms, remote};

driver_tests!(
    prune_keeps_the_latest_of_a_sequence,
    prune_feed_deletes_old_worker_rows;
    mysql: prune_keeps_the_latest_of_a_sequence,
);

#[cfg(feature = "mysql")]
mod mysql_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prune_feed_deletes_the_events_that_outlived_their_job() {
        let name = "mysql::prune_feed_deletes_the_events_that_outlived_their_job";
        super::super::run(crate::storage::Dialect::MySql, name, super::outlived).await;
    }
}

/// A job deleted while claimed (as a completion of a kind that keeps nothing deletes it) keeps its events for the
/// feed's readers until they are as old as the feed's rows may be: MariaDB's store writes no feed row of many jobs
/// to find them by, and its delete trigger lists the job instead.
#[cfg(feature = "mysql")]
async fn outlived(db: &DatabaseConnection) -> Result<()> {
    use sea_orm::ConnectionTrait;
    add(db, &[job("a"), job("b")]).await?;
    let now = now_ms();
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 2);
    db.execute_unprepared("DELETE FROM outbox_jobs WHERE id = 'a'").await.map_err(crate::error::Error::db("delete"))?;
    assert!(events::outlived(db, "a").await?, "the events outlive the job");
    assert_eq!(retention::prune_feed(db, now - 60_000, 10).await?, 0, "the events are newer");
    assert!(events::outlived(db, "a").await?);
    assert_eq!(retention::prune_feed(db, now + 60_000, 10).await?, 1, "one job's events");
    assert!(!events::outlived(db, "a").await?, "gone by the feed's age");
    assert_eq!(retention::prune_feed(db, now + 60_000, 10).await?, 0);
    assert_eq!(events::history(db, "b").await?.len(), 2, "a job still here keeps its history");
    Ok(())
}

async fn prune_keeps_the_latest_of_a_sequence(db: &DatabaseConnection) -> Result<()> {
    let slow = NewJob { kind: "slow".into(), ..job("e") };
    add(db, &[job("a"), job("b"), job("c"), slow, sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    for id in ["a", "e", "s1", "s2"] {
        mark_completed(db, id, T0 + 1_000).await?;
    }
    mark_completed(db, "b", T0 + 9_000).await?;
    mark_failed(db, "c", "boom", T0 + 1_000).await?;
    let rules = PruneRules { statuses: vec![(JobStatus::Completed, T0 + 5_000, vec![("slow".into(), T0)])] };
    let now = T0 + 10_000;
    assert_eq!(retention::prune(db, &rules, now, 1).await?.jobs, 1, "one batch of one");
    assert_eq!(retention::prune(db, &rules, now, 100).await?.jobs, 1);
    let last = retention::prune(db, &rules, now, 100).await?;
    assert_eq!(last, retention::Pruned { jobs: 0, more: false }, "the kept jobs are not looked at again now");
    let left = jobs::list(db, &JobFilter::default()).await?;
    assert_eq!(ids(&left), ["s2", "e", "c", "b"], "`a` and `s1` went");
    // Two seconds on, `slow` keeps its jobs four seconds less than the others: `e` has come due.
    let later = PruneRules { statuses: vec![(JobStatus::Completed, T0 + 7_000, vec![("slow".into(), T0 + 3_000)])] };
    assert_eq!(
        retention::prune(db, &later, T0 + 12_000, 100).await?.jobs,
        1,
        "`e` is due once its kind's age has passed"
    );
    let left = jobs::list(db, &JobFilter::default()).await?;
    assert_eq!(ids(&left), ["s2", "c", "b"]);
    Ok(())
}

async fn prune_feed_deletes_old_worker_rows(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b")]).await?;
    let now = now_ms();
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 2);
    assert_eq!(retention::prune_feed(db, now - 60_000, 10).await?, 0, "the claim's row is newer");
    assert_eq!(retention::prune_feed(db, now + 60_000, 10).await?, 1, "one row for both claims; enqueues stay");
    assert_eq!(retention::prune_feed(db, now + 60_000, 10).await?, 0);
    assert_eq!(events::history(db, "a").await?[0].event, JobEventKind::Enqueued);
    Ok(())
}
