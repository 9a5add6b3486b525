//! Conformance of `storage/events.rs`: a job's history, and the feed of events read page by page.

use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;

use super::{T0, add, job, mark_claimed, mark_failed, opts};
use crate::error::{Error, Result};
use crate::record::{FeedEvent, JobEventKind};
use crate::storage::{Dialect, enqueue, events, jobs, now_ms, remote};

driver_tests!(
    history_lists_the_transitions,
    history_of_an_unknown_job_is_not_found,
    feed_pages_through_single_and_batch_rows,
    feed_after_the_head_shows_only_later_events,
    feed_refuses_an_invalid_id;
    mysql:
    history_lists_the_transitions,
    history_of_an_unknown_job_is_not_found,
    feed_pages_through_single_and_batch_rows,
    feed_after_the_head_shows_only_later_events,
    feed_refuses_an_invalid_id,
);

async fn history_lists_the_transitions(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a")]).await?;
    mark_claimed(db, "a", T0 + 10, T0 + 1_000).await?;
    mark_failed(db, "a", "boom", T0 + 20).await?;
    assert!(jobs::retry(db, "a", T0 + 30).await?);
    let history = events::history(db, "a").await?;
    let kinds: Vec<JobEventKind> = history.iter().map(|e| e.event).collect();
    use JobEventKind::{Claimed, Enqueued, Failed, RetriedByOperator};
    assert_eq!(kinds, [Enqueued, Claimed, Failed, RetriedByOperator]);
    let at: Vec<i64> = history.iter().map(|e| e.at.timestamp_millis()).collect();
    assert_eq!(at, [T0, T0 + 10, T0 + 20, T0 + 30]);
    assert_eq!((history[1].attempt, history[1].worker.as_deref()), (1, Some("w")));
    assert_eq!((history[2].attempt, history[2].error.as_deref()), (1, Some("boom")));
    Ok(())
}

async fn history_of_an_unknown_job_is_not_found(db: &DatabaseConnection) -> Result<()> {
    let err = events::history(db, "nope").await;
    assert!(matches!(&err, Err(Error::NotFound { id }) if id == "nope"), "{err:?}");
    Ok(())
}

/// The feed after `after`, read `limit` events a page, each page after the last event of the one before,
/// until `want` events came. On PostgreSQL an event shows once every transaction older than its own has ended
/// (of any test on the server), so an empty page is read again, for 30 s at most.
async fn feed_pages(db: &DatabaseConnection, after: &str, limit: u64, want: usize) -> Result<Vec<FeedEvent>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut position, mut events) = (after.to_owned(), Vec::new());
    while events.len() < want {
        assert!(Instant::now() < deadline, "the feed after `{after}` showed {events:?} of {want} events");
        let page = events::feed(db, &position, limit).await?;
        assert!(page.len() as u64 <= limit, "{} events in a page of {limit}", page.len());
        match page.last() {
            Some(last) => position = last.id.clone(),
            None => tokio::task::yield_now().await,
        }
        events.extend(page);
    }
    Ok(events)
}

async fn feed_pages_through_single_and_batch_rows(db: &DatabaseConnection) -> Result<()> {
    let head = events::feed_head(db).await?;
    assert_eq!(enqueue::insert_jobs(db, &[job("a"), job("b"), job("c")]).await?.len(), 3);
    assert_eq!(enqueue::insert_jobs(db, &[job("d")]).await?.len(), 1);
    let now = now_ms();
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 4);
    let one_by_one = feed_pages(db, &head, 1, 8).await?;
    assert_eq!(feed_pages(db, &head, 3, 8).await?, one_by_one, "pages of 3 read the same as pages of 1");
    assert_eq!(feed_pages(db, &head, 100, 8).await?, one_by_one);
    let seen: Vec<(&str, JobEventKind)> = one_by_one.iter().map(|e| (e.job_id.as_str(), e.event)).collect();
    use JobEventKind::Enqueued;
    assert_eq!(seen[..4], [("a", Enqueued), ("b", Enqueued), ("c", Enqueued), ("d", Enqueued)]);
    assert!(one_by_one[..4].iter().all(|e| (e.kind.as_str(), e.queue.as_str(), e.attempt) == ("k", "default", 0)));
    let mut claimed: Vec<&str> = seen[4..].iter().map(|(id, _)| *id).collect();
    claimed.sort_unstable();
    assert_eq!(claimed, ["a", "b", "c", "d"]);
    assert!(one_by_one[4..].iter().all(|e| e.event == JobEventKind::Claimed && e.worker.as_deref() == Some("r")));
    assert!(one_by_one[4..].iter().all(|e| (e.kind.as_str(), e.queue.as_str(), e.attempt) == ("k", "default", 1)));
    // A row of many events names each `<row>.<n>`; a row of one, by its row alone.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    let listed = |events: &[FeedEvent]| {
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        let row = ids[0].strip_suffix(".0").expect("a batch row's first event ends in .0").to_owned();
        assert_eq!(ids, (0..events.len()).map(|n| format!("{row}.{n}")).collect::<Vec<_>>());
    };
    // PostgreSQL records a statement's enqueued jobs in one row; SQLite's triggers write one per job. MariaDB's
    // triggers write one per job for claims too (`mysql/store.rs`).
    #[cfg(any(feature = "sqlite", feature = "mysql"))]
    let alone = |events: &[FeedEvent]| assert!(events.iter().all(|e| !e.id.contains('.')), "{events:?}");
    match Dialect::of(db)? {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => (listed(&one_by_one[..3]), listed(&one_by_one[4..])),
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => (alone(&one_by_one[..3]), listed(&one_by_one[4..])),
        #[cfg(feature = "mysql")]
        Dialect::MySql => (alone(&one_by_one[..3]), alone(&one_by_one[4..])),
    };
    assert!(!one_by_one[3].id.contains('.'), "a statement of one job keeps a row of its own");
    assert!(events::feed(db, &one_by_one[7].id, 10).await?.is_empty(), "nothing after the last event");
    Ok(())
}

async fn feed_after_the_head_shows_only_later_events(db: &DatabaseConnection) -> Result<()> {
    let start = events::feed_head(db).await?;
    add(db, &[job("before")]).await?;
    // Once `before` shows, every transaction up to its own has ended: a head read now is past it.
    assert_eq!(feed_pages(db, &start, 10, 1).await?[0].job_id, "before");
    let head = events::feed_head(db).await?;
    add(db, &[job("after")]).await?;
    let later = feed_pages(db, &head, 10, 1).await?;
    assert_eq!(
        later.iter().map(|e| (e.job_id.as_str(), e.event)).collect::<Vec<_>>(),
        [("after", JobEventKind::Enqueued)]
    );
    assert_eq!(events::feed(db, &head, 10).await?, later);
    Ok(())
}

async fn feed_refuses_an_invalid_id(db: &DatabaseConnection) -> Result<()> {
    for id in ["x.y", "nope", "-5", "1.x"] {
        let err = events::feed(db, id, 10).await;
        assert!(matches!(err, Err(Error::Invalid(_))), "`{id}`: {err:?}");
    }
    Ok(())
}
