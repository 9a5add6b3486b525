//! Conformance of `storage/jobs.rs`: jobs read, listed and paged, and the operators' retry, cancel, purge and
//! delete.

use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::{T0, add, finished, get, ids, job, keyed, mark_claimed, mark_completed, mark_failed, opts, sequenced};
use crate::error::Result;
use crate::record::{JobFilter, JobStatus};
use crate::storage::enqueue::NewJob;
use crate::storage::{Dialect, Finished, Keep, Outcome, events, jobs, now_ms, open_worker_store};
use crate::time::from_ms;

driver_tests!(
    get_of_an_unknown_id_is_none,
    list_filters_by_status_kind_queue_and_key,
    list_pages_newest_first,
    list_of_a_sequence_and_since,
    stuck_lists_expired_claims,
    retry_puts_a_failed_job_back,
    retry_refuses_a_key_an_active_job_holds,
    retry_failed_takes_the_latest_of_each_key,
    cancel_cancels_pending_jobs_only,
    cancel_releases_a_held_sequence,
    purge_deletes_old_finished_jobs,
    delete_removes_one_finished_job,
    purge_takes_the_events_of_jobs_deleted_as_they_completed,
    subjects_list_cancel_and_retry_their_jobs,
    a_subject_s_jobs_are_read_through_its_index_among_a_million;
    // Not on MySQL: a plan read with PostgreSQL's and SQLite's own EXPLAIN.
    mysql:
    purge_deletes_old_finished_jobs,
    delete_removes_one_finished_job,
    purge_takes_the_events_of_jobs_deleted_as_they_completed,
    get_of_an_unknown_id_is_none,
    list_filters_by_status_kind_queue_and_key,
    list_pages_newest_first,
    list_of_a_sequence_and_since,
    stuck_lists_expired_claims,
    retry_puts_a_failed_job_back,
    retry_refuses_a_key_an_active_job_holds,
    retry_failed_takes_the_latest_of_each_key,
    cancel_cancels_pending_jobs_only,
    cancel_releases_a_held_sequence,
    subjects_list_cancel_and_retry_their_jobs,
);

async fn get_of_an_unknown_id_is_none(db: &DatabaseConnection) -> Result<()> {
    assert_eq!(jobs::get(db, "nope").await?, None);
    Ok(())
}

async fn list_filters_by_status_kind_queue_and_key(db: &DatabaseConnection) -> Result<()> {
    let other = |id: &str| NewJob { kind: "other".into(), ..job(id) };
    add(db, &[keyed("a", "x"), other("b"), NewJob { queue: "q2".into(), ..job("c") }, job("d")]).await?;
    mark_completed(db, "d", T0 + 1).await?;
    let list = async |filter: JobFilter| jobs::list(db, &JobFilter { limit: 10, ..filter }).await;
    assert_eq!(ids(&list(JobFilter { status: Some(JobStatus::Completed), ..Default::default() }).await?), ["d"]);
    assert_eq!(ids(&list(JobFilter { kind: Some("k".into()), ..Default::default() }).await?), ["d", "c", "a"]);
    let q = JobFilter { kind: Some("k".into()), queue: Some("default".into()), ..Default::default() };
    assert_eq!(ids(&list(q).await?), ["d", "a"]);
    assert_eq!(ids(&list(JobFilter { key: Some("x".into()), ..Default::default() }).await?), ["a"]);
    Ok(())
}

async fn list_pages_newest_first(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("j1"), job("j2"), job("j3"), job("j4"), job("j5")]).await?;
    let page = async |before: Option<&str>| {
        jobs::list(db, &JobFilter { before: before.map(Into::into), limit: 2, ..Default::default() }).await
    };
    assert_eq!(ids(&page(None).await?), ["j5", "j4"]);
    assert_eq!(ids(&page(Some("j4")).await?), ["j3", "j2"]);
    assert_eq!(ids(&page(Some("j2")).await?), ["j1"]);
    assert_eq!(ids(&page(Some("j1")).await?), Vec::<&str>::new());
    Ok(())
}

async fn list_of_a_sequence_and_since(db: &DatabaseConnection) -> Result<()> {
    add(db, &[sequenced("s1", "s"), sequenced("s2", "s"), sequenced("s3", "s"), job("a")]).await?;
    let in_sequence = JobFilter { sequence: Some("s".into()), limit: 2, ..Default::default() };
    assert_eq!(ids(&jobs::list(db, &in_sequence).await?), ["s3", "s2"]);
    mark_completed(db, "a", T0 + 5_000).await?;
    let since = JobFilter { since: Some(from_ms(T0 + 1_000)), ..Default::default() };
    assert_eq!(ids(&jobs::list(db, &since).await?), ["a"]);
    Ok(())
}

async fn stuck_lists_expired_claims(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c")]).await?;
    mark_claimed(db, "a", T0, T0 + 10_000).await?;
    mark_claimed(db, "b", T0, T0 + 100).await?;
    assert_eq!(ids(&jobs::stuck(db, T0 + 1_000).await?), ["b"]);
    assert_eq!(ids(&jobs::stuck(db, T0 + 20_000).await?), ["b", "a"]);
    assert!(jobs::stuck(db, T0).await?.is_empty());
    Ok(())
}

async fn retry_puts_a_failed_job_back(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a")]).await?;
    assert!(!jobs::retry(db, "a", T0 + 1).await?, "a pending job is not retried");
    mark_failed(db, "a", "boom", T0 + 1).await?;
    assert!(jobs::retry(db, "a", T0 + 50).await?);
    let a = get(db, "a").await?;
    assert_eq!(
        (a.status, a.attempts, a.run_at, a.updated_at),
        (JobStatus::Pending, 0, from_ms(T0 + 50), from_ms(T0 + 50))
    );
    assert!(!jobs::retry(db, "nope", T0).await?);
    Ok(())
}

async fn retry_refuses_a_key_an_active_job_holds(db: &DatabaseConnection) -> Result<()> {
    add(db, &[keyed("a", "x")]).await?;
    mark_failed(db, "a", "boom", T0 + 1).await?;
    add(db, &[keyed("b", "x")]).await?;
    assert!(!jobs::retry(db, "a", T0 + 2).await?);
    assert_eq!(get(db, "a").await?.status, JobStatus::Failed);
    Ok(())
}

async fn retry_failed_takes_the_latest_of_each_key(db: &DatabaseConnection) -> Result<()> {
    add(db, &[keyed("a", "x")]).await?;
    mark_failed(db, "a", "boom", T0 + 1).await?;
    add(db, &[keyed("b", "x"), job("c"), NewJob { kind: "other".into(), ..job("d") }]).await?;
    mark_failed(db, "b", "boom", T0 + 2).await?;
    mark_failed(db, "c", "bad", T0 + 2).await?;
    mark_failed(db, "d", "boom", T0 + 2).await?;
    assert_eq!(jobs::retry_failed(db, Some("k"), Some("boom"), T0 + 10).await?, 1);
    assert_eq!((get(db, "a").await?.status, get(db, "b").await?.status), (JobStatus::Failed, JobStatus::Pending));
    // `a`'s key is held by `b` now: only `c` and `d` go.
    assert_eq!(jobs::retry_failed(db, None, None, T0 + 20).await?, 2);
    assert_eq!(get(db, "a").await?.status, JobStatus::Failed);
    assert_eq!(get(db, "d").await?.run_at, from_ms(T0 + 20));
    Ok(())
}

async fn cancel_cancels_pending_jobs_only(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b")]).await?;
    mark_completed(db, "b", T0 + 1).await?;
    assert!(jobs::cancel(db, "a", T0 + 5).await?);
    let a = get(db, "a").await?;
    assert_eq!((a.status, a.updated_at), (JobStatus::Cancelled, from_ms(T0 + 5)));
    assert!(!jobs::cancel(db, "a", T0 + 6).await?, "already cancelled");
    assert!(!jobs::cancel(db, "b", T0 + 6).await?, "completed");
    assert!(!jobs::cancel(db, "nope", T0 + 6).await?);
    Ok(())
}

async fn cancel_releases_a_held_sequence(db: &DatabaseConnection) -> Result<()> {
    add(db, &[sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    mark_failed(db, "s1", "boom", T0 + 1).await?;
    assert!(get(db, "s1").await?.holds_sequence);
    assert_eq!(get(db, "s2").await?.waiting_for.as_deref(), Some("s1"));
    assert!(jobs::cancel(db, "s1", T0 + 2).await?);
    let s1 = get(db, "s1").await?;
    assert_eq!((s1.status, s1.holds_sequence), (JobStatus::Cancelled, false));
    assert_eq!(get(db, "s2").await?.waiting_for, None);
    assert!(!jobs::cancel(db, "s1", T0 + 3).await?, "the hold is released already");
    Ok(())
}

async fn purge_deletes_old_finished_jobs(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d"), sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    mark_completed(db, "a", T0 + 1_000).await?;
    mark_failed(db, "b", "boom", T0 + 1_000).await?;
    mark_completed(db, "c", T0 + 9_000).await?;
    mark_failed(db, "s1", "boom", T0 + 1_000).await?;
    assert_eq!(jobs::purge(db, &[JobStatus::Pending], T0 + 5_000).await?, 0);
    let all = [JobStatus::Pending, JobStatus::Completed, JobStatus::Failed];
    assert_eq!(jobs::purge(db, &all, T0 + 5_000).await?, 2);
    let left = jobs::list(db, &JobFilter::default()).await?;
    assert_eq!(ids(&left), ["s2", "s1", "d", "c"], "the held `s1` stays");
    Ok(())
}

async fn delete_removes_one_finished_job(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    assert!(!jobs::delete(db, "a").await?, "pending");
    mark_completed(db, "a", T0 + 1).await?;
    assert!(jobs::delete(db, "a").await?);
    assert_eq!(jobs::get(db, "a").await?, None);
    assert!(!jobs::delete(db, "a").await?);
    mark_failed(db, "s1", "boom", T0 + 1).await?;
    assert!(!jobs::delete(db, "s1").await?, "it holds its sequence");
    Ok(())
}

/// `purge` of completed jobs also takes the events of jobs deleted as they completed, with the feed rows that
/// recorded those completions; nothing is left that no retention would find.
async fn purge_takes_the_events_of_jobs_deleted_as_they_completed(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b")]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    let claimed = store.claim(10, now, now + 60_000).await?;
    assert_eq!(claimed.len(), 2);
    for c in &claimed {
        let keep = if c.id == "a" { Keep::Nothing } else { Keep::Row };
        store.finish(Finished { keep, ..finished(&c.id, c.run, Outcome::Completed { output: None }) })?;
    }
    store.flush().await?;
    store.close().await;
    assert!(events::outlived(db, "a").await?);
    jobs::purge(db, &[JobStatus::Completed], now + 3_600_000).await?;
    let b = Dialect::of(db)?;
    let left = db.query_all_raw(b.stmt("SELECT job_id, event FROM outbox_job_events ORDER BY id", vec![])).await?;
    let left: Vec<(String, String)> = left
        .iter()
        .map(|r| Ok((r.try_get_by_index(0)?, r.try_get_by_index(1)?)))
        .collect::<std::result::Result<_, sea_orm::DbErr>>()?;
    assert_eq!(left, Vec::<(String, String)>::new(), "events left behind by the purge");
    Ok(())
}

async fn subjects_list_cancel_and_retry_their_jobs(db: &DatabaseConnection) -> Result<()> {
    let about = |id: &str, subject: &str| NewJob { subject: Some(subject.into()), ..job(id) };
    add(db, &[about("a", "order:1"), about("b", "order:1"), about("c", "order:2"), job("d"), about("e", "order:1")])
        .await?;
    mark_failed(db, "b", "boom", T0 + 1).await?;
    mark_claimed(db, "e", T0 + 1, T0 + 60_000).await?;
    let of = |subject: &str| JobFilter { subject: Some(subject.into()), ..JobFilter::default() };
    assert_eq!(ids(&jobs::list(db, &of("order:1")).await?), ["e", "b", "a"]);
    assert_eq!(get(db, "a").await?.subject.as_deref(), Some("order:1"));
    // Only the pending job goes; the failed one and the running one stay as they are.
    assert_eq!(jobs::cancel_subject(db, "order:1", T0 + 2).await?, 1);
    let status = async |id: &str| get(db, id).await.map(|j| j.status);
    assert_eq!(
        [status("a").await?, status("b").await?, status("c").await?, status("e").await?],
        [JobStatus::Cancelled, JobStatus::Failed, JobStatus::Pending, JobStatus::Claimed]
    );
    // The failed and the cancelled one go back; the other subject's and the unrelated job are untouched.
    assert_eq!(jobs::retry_subject(db, "order:1", T0 + 3).await?, 2);
    assert_eq!([status("a").await?, status("b").await?], [JobStatus::Pending, JobStatus::Pending]);
    assert_eq!(jobs::cancel_subject(db, "order:9", T0 + 4).await?, 0);
    assert_eq!(status("d").await?, JobStatus::Pending);
    Ok(())
}

/// The column of an `EXPLAIN` row that holds the plan's text.
fn plan_column(d: Dialect) -> usize {
    match d {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => 3,
        #[cfg(feature = "postgres")]
        Dialect::Postgres => 0,
        #[cfg(feature = "mysql")]
        Dialect::MySql => unreachable!("the subject plan: not on MySQL yet"),
    }
}

/// Among 1,000,000 jobs (half about one of 50,000 orders, ten jobs each), the list of one subject's jobs is planned
/// on the subject index, whose entries are its newest first: no scan of the table, no sort.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(unreachable_code))]
async fn a_subject_s_jobs_are_read_through_its_index_among_a_million(db: &DatabaseConnection) -> Result<()> {
    let d = Dialect::of(db)?;
    let (rows, explain): (&str, &str) = match d {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => (
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 999999) SELECT \
             printf('%026d', i) AS i, CASE WHEN i % 2 = 0 THEN 'order:' || (i / 20) END AS s FROM n",
            "EXPLAIN QUERY PLAN",
        ),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => (
            "SELECT lpad(i::text, 26, '0') AS i, CASE WHEN i % 2 = 0 THEN 'order:' || (i / 20) END AS s \
             FROM generate_series(0, 999999) AS i",
            "EXPLAIN",
        ),
        #[cfg(feature = "mysql")]
        Dialect::MySql => unreachable!("the subject plan: not on MySQL yet"),
    };
    // Written in one statement, without the triggers' history rows on PostgreSQL (the table is this test's own).
    #[cfg(feature = "postgres")]
    if d == Dialect::Postgres {
        db.execute_unprepared("ALTER TABLE outbox_jobs DISABLE TRIGGER USER").await?;
    }
    let insert = format!(
        "INSERT INTO outbox_jobs (id, kind, queue, payload, status, max_attempts, run_at, schema_hash, created_at, \
         updated_at, completed_at, subject) SELECT r.i, 'k', 'default', {}, 'completed', 3, {t}, 'h', {t}, {t}, {t}, r.s \
         FROM ({rows}) r",
        d.json("'{}'"),
        t = d.ts(&T0.to_string()),
    );
    db.execute_unprepared(&insert).await?;
    #[cfg(feature = "postgres")]
    if d == Dialect::Postgres {
        db.execute_unprepared("ALTER TABLE outbox_jobs ENABLE TRIGGER USER").await?;
    }
    db.execute_unprepared("ANALYZE").await?;
    let filter = JobFilter { subject: Some("order:4242".into()), limit: 100, ..JobFilter::default() };
    let listed = jobs::list(db, &filter).await?;
    assert_eq!(listed.len(), 10, "ten jobs about the order");
    assert!(listed.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    let statement = jobs::list_statement(d, &filter);
    let plan = db
        .query_all_raw(sea_orm::Statement { sql: format!("{explain} {}", statement.sql), ..statement })
        .await?
        .iter()
        .map(|row| row.try_get_by_index::<String>(plan_column(d)))
        .collect::<std::result::Result<Vec<_>, _>>()?
        .join("\n");
    println!("the list of one subject's jobs among 1,000,000, planned:\n{plan}");
    // A search of the index by subject (not a scan of it, nor of the table), whose order is the listing's.
    let searched: bool = match d {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => plan.lines().any(|l| l == "SEARCH outbox_jobs USING INDEX outbox_jobs_subject (subject=?)"),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => {
            plan.contains("Index Scan Backward using outbox_jobs_subject on outbox_jobs")
                && plan.contains("Index Cond: (subject = 'order:4242'::text)")
        }
        #[cfg(feature = "mysql")]
        Dialect::MySql => unreachable!("the subject plan: not on MySQL yet"),
    };
    assert!(searched, "read through the subject index:\n{plan}");
    let scans = ["SCAN outbox_jobs", "Seq Scan", "TEMP B-TREE", "Sort"];
    assert!(!scans.iter().any(|s| plan.contains(s)), "no scan of the table and no sort:\n{plan}");
    Ok(())
}
