//! Conformance of the worker store (`storage/worker_store.rs`, run by each engine's `store/`): claims, outcomes,
//! lease renewals and rescues, and the fence that keeps a stale outcome off a newer claim.

use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::{add, completed, finished, get, job, opts};
use crate::error::Result;
use crate::record::{JobEventKind, JobStatus};
use crate::storage::enqueue::NewJob;
use crate::storage::{Dialect, Outcome, WorkerStoreOpts, events, jobs, now_ms, open_worker_store, remote};
use crate::time::from_ms;

driver_tests!(
    store_claims_and_finishes,
    store_extends_its_own_claims,
    store_rescues_expired_claims,
    store_claim_lets_in_scheduled_jobs_once_due,
    store_claim_reads_only_served_kinds_and_queues,
    store_claims_each_job_once_and_a_later_higher_priority_within_a_second,
    store_claims_a_job_ahead_of_a_short_read_by_the_next_claim,
    store_stale_outcome_leaves_the_newer_claim_rescuable,
    an_operator_retry_fences_out_the_earlier_run;
    mysql:
    store_claims_and_finishes,
    store_extends_its_own_claims,
    store_rescues_expired_claims,
    store_claim_lets_in_scheduled_jobs_once_due,
    store_claim_reads_only_served_kinds_and_queues,
    store_claims_each_job_once_and_a_later_higher_priority_within_a_second,
    store_claims_a_job_ahead_of_a_short_read_by_the_next_claim,
    store_stale_outcome_leaves_the_newer_claim_rescuable,
    an_operator_retry_fences_out_the_earlier_run,
);

async fn store_claims_and_finishes(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c")]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    let claimed = store.claim(2, now, now + 30_000).await?;
    assert_eq!(claimed.iter().map(|c| (c.id.as_str(), c.attempt)).collect::<Vec<_>>(), [("a", 1), ("b", 1)]);
    store.finish(finished("a", 1, completed()))?;
    store.finish(finished("b", 1, Outcome::Failed { error: "boom".into() }))?;
    store.flush().await?;
    let (a, b) = (get(db, "a").await?, get(db, "b").await?);
    assert_eq!(
        (a.status, a.output, a.locked_by.as_deref()),
        (JobStatus::Completed, Some(serde_json::json!({"ok": true})), Some("w1"))
    );
    assert_eq!((b.status, b.last_error.as_deref()), (JobStatus::Failed, Some("boom")));
    assert_eq!(get(db, "c").await?.status, JobStatus::Pending);
    let history: Vec<JobEventKind> = events::history(db, "a").await?.iter().map(|e| e.event).collect();
    assert_eq!(history, [JobEventKind::Enqueued, JobEventKind::Claimed, JobEventKind::Completed]);
    store.close().await;
    Ok(())
}

async fn store_extends_its_own_claims(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b")]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    assert_eq!(store.claim(1, now, now + 1_000).await?.len(), 1);
    assert_eq!(remote::claim(db, opts("w2", &["k"]), 1, now, now + 1_000).await?.len(), 1);
    let until = now + 90_000;
    assert_eq!(store.extend(vec!["a".into(), "b".into(), "nope".into()], until).await?, 1, "only its own");
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(from_ms(until)));
    assert_eq!(get(db, "b").await?.lease_expires_at, Some(from_ms(now + 1_000)));
    store.close().await;
    Ok(())
}

async fn store_rescues_expired_claims(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), NewJob { max_attempts: 1, ..job("b") }]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    assert_eq!(store.claim(10, now, now + 30_000).await?.len(), 2);
    assert!(store.rescue(now).await?.is_empty(), "the leases run for 30 s");
    let later = now + 3_600_000;
    let mut rescued = store.rescue(later).await?;
    rescued.sort_by(|x, y| x.id.cmp(&y.id));
    let got: Vec<_> =
        rescued.iter().map(|r| (r.id.as_str(), r.status.as_str(), r.attempt, r.previous_owner.as_deref())).collect();
    assert_eq!(got, [("a", "pending", 1, Some("w1")), ("b", "failed", 1, Some("w1"))]);
    let (a, b) = (get(db, "a").await?, get(db, "b").await?);
    assert_eq!((a.status, a.lease_expires_at, a.run_at), (JobStatus::Pending, None, from_ms(later)));
    assert_eq!(a.last_error.as_deref(), Some("lease expired while claimed by w1"));
    assert_eq!(b.last_error.as_deref(), Some("lease expired while claimed by w1; no attempts left"));
    assert_eq!(events::history(db, "a").await?.last().map(|e| e.event), Some(JobEventKind::Rescued));
    assert_eq!(events::history(db, "b").await?.last().map(|e| e.event), Some(JobEventKind::RescuedFailed));
    assert!(store.rescue(later).await?.is_empty());
    // The rescued attempt's outcome meets the fence.
    store.finish(finished("a", 1, completed()))?;
    store.flush().await?;
    assert_eq!(get(db, "a").await?.status, JobStatus::Pending);
    store.close().await;
    Ok(())
}

/// Whether job `id` waits off the ready indexes for its time.
async fn is_scheduled(db: &DatabaseConnection, id: &str) -> Result<bool> {
    let b = Dialect::of(db)?;
    let row = db.query_one_raw(b.stmt("SELECT scheduled FROM outbox_jobs WHERE id = $1", vec![id.into()])).await?;
    Ok(row.unwrap_or_else(|| panic!("no job `{id}`")).try_get_by_index::<bool>(0)?)
}

async fn store_claim_lets_in_scheduled_jobs_once_due(db: &DatabaseConnection) -> Result<()> {
    let now = now_ms();
    let later = now + 60_000;
    // Due later, at a higher priority: never read by a claim before it is due.
    add(db, &[NewJob { run_at: later, scheduled: true, priority: 5, ..job("later") }, job("now")]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let claimed = store.claim(10, now, now + 30_000).await?;
    assert_eq!(claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["now"]);
    assert!(is_scheduled(db, "later").await?);
    // A retry's backoff schedules the job again.
    store.finish(finished("now", 1, Outcome::Retry { run_at: later + 5, error: "boom".into() }))?;
    store.flush().await?;
    assert!(is_scheduled(db, "now").await?, "backing off");
    assert!(store.claim(10, now + 1, now + 30_000).await?.is_empty());
    let mut claimed = store.claim(10, later + 5, later + 30_000).await?;
    claimed.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(claimed.iter().map(|c| (c.id.as_str(), c.attempt)).collect::<Vec<_>>(), [("later", 1), ("now", 2)]);
    assert!(!is_scheduled(db, "later").await? && !is_scheduled(db, "now").await?);
    // A snooze waits off the ready indexes too.
    store.finish(finished("later", 1, Outcome::Snoozed { run_at: later + 5 }))?;
    store.flush().await?;
    let snoozed = get(db, "later").await?;
    assert_eq!((snoozed.status, snoozed.attempts), (JobStatus::Pending, 0), "snoozed");
    assert!(is_scheduled(db, "later").await?, "snoozed until a later time");
    store.close().await;
    Ok(())
}

async fn store_claim_reads_only_served_kinds_and_queues(db: &DatabaseConnection) -> Result<()> {
    let other = |id: &str| NewJob { kind: "other".into(), priority: 9, ..job(id) };
    add(db, &[other("o1"), job("k1"), NewJob { kind: "k2".into(), priority: 1, ..job("k2") }, other("o2")]).await?;
    add(db, &[NewJob { queue: "q".into(), priority: 3, ..job("q1") }]).await?;
    let store = open_worker_store(db, opts("w1", &["k", "k2"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    let mut claimed: Vec<String> = store.claim(2, now, now + 30_000).await?.into_iter().map(|c| c.id).collect();
    claimed.sort_unstable();
    assert_eq!(claimed, ["k2", "q1"], "the heads of both kinds' ranges, merged by priority");
    store.close().await;
    let queued = WorkerStoreOpts { queues: Some(vec!["default".into()]), ..opts("w2", &["k", "k2", "other"]) };
    let claimed = remote::claim(db, queued, 10, now, now + 30_000).await?;
    let mut got: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
    got.sort_unstable();
    assert_eq!(got, ["k1", "o1", "o2"]);
    assert_eq!(get(db, "k1").await?.status, JobStatus::Claimed);
    Ok(())
}

/// A claim that reads on from where the last one ended and finds fewer jobs than it asked for starts them at
/// once; the next claim reads the head, where a job enqueued meanwhile ahead of them sorts.
async fn store_claims_a_job_ahead_of_a_short_read_by_the_next_claim(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    let first: Vec<String> = store.claim(2, now, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    assert_eq!(first, ["a", "b"]);
    add(db, &[NewJob { priority: 9, ..job("hi") }]).await?;
    let mut short: Vec<String> = store.claim(10, now + 10, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    short.sort_unstable();
    assert!(short.starts_with(&["c".to_owned(), "d".to_owned()]), "{short:?}");
    let next: Vec<String> = store.claim(10, now + 20, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    let mut seen: Vec<String> = first.into_iter().chain(short).chain(next).collect();
    seen.sort_unstable();
    assert_eq!(seen, ["a", "b", "c", "d", "hi"], "every job once, the later one by the claim after the short one");
    let empty = store.claim(10, now + 30, now + 60_000).await?;
    assert!(empty.is_empty(), "{empty:?}");
    store.close().await;
    Ok(())
}

async fn store_claims_each_job_once_and_a_later_higher_priority_within_a_second(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d"), job("e")]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    let mut seen: Vec<String> = store.claim(2, now, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    assert_eq!(seen, ["a", "b"]);
    // Enqueued after the claim, ahead of everything left: a worker reading on from where its last claim ended
    // may take others first, but not for longer than a second.
    add(db, &[NewJob { priority: 9, ..job("hi") }]).await?;
    let next: Vec<String> = store.claim(1, now + 10, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    assert_eq!(next.len(), 1, "{next:?}");
    seen.extend(next);
    let later: Vec<String> = store.claim(1, now + 1_100, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    seen.extend(later);
    assert!(seen.iter().any(|id| id == "hi"), "the higher priority waited over a second: {seen:?}");
    let rest: Vec<String> = store.claim(10, now + 1_200, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    seen.extend(rest);
    seen.sort_unstable();
    assert_eq!(seen, ["a", "b", "c", "d", "e", "hi"], "every job once");
    store.close().await;
    Ok(())
}

/// The claimed jobs no rescue can see: on PostgreSQL, those no claim row lists at or before their own lease; on
/// SQLite and MySQL (whose rescuers read the claimed jobs themselves), those without a lease. Every claimed job must
/// be rescuable, or a worker that dies with it strands it.
pub(super) async fn unrescuable(db: &DatabaseConnection) -> Result<Vec<String>> {
    let sql: &str = match Dialect::of(db)? {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => {
            "SELECT id FROM outbox_jobs WHERE status = 'claimed' AND lease_expires_at IS NULL ORDER BY id"
        }
        #[cfg(feature = "postgres")]
        Dialect::Postgres => {
            "SELECT j.id FROM outbox_jobs j WHERE j.status = 'claimed' AND NOT EXISTS (SELECT 1 FROM outbox_claims c \
             WHERE j.id = ANY(c.jobs) AND c.lease_expires_at <= COALESCE(j.lease_expires_at, TIMESTAMPTZ 'epoch')) \
             ORDER BY 1"
        }
        #[cfg(feature = "mysql")]
        Dialect::MySql => {
            "SELECT id FROM outbox_jobs WHERE status = 'claimed' AND lease_expires_at IS NULL ORDER BY id"
        }
    };
    let rows = db.query_all_raw(Dialect::of(db)?.stmt(sql, vec![])).await?;
    Ok(rows.iter().map(|r| r.try_get_by_index::<String>(0)).collect::<std::result::Result<_, _>>()?)
}

/// A worker whose claim ran out claims the job again; the first run's late outcome is refused and leaves the
/// second claim as the rescuers see it.
async fn store_stale_outcome_leaves_the_newer_claim_rescuable(db: &DatabaseConnection) -> Result<()> {
    add(db, &[NewJob { max_attempts: 5, ..job("a") }]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    let first = store.claim(1, now, now + 1_000).await?;
    assert_eq!(first.iter().map(|c| (c.id.as_str(), c.run)).collect::<Vec<_>>(), [("a", 1)]);
    assert_eq!(store.rescue(now + 2_000).await?.len(), 1, "the first claim ran out");
    let second = store.claim(1, now + 2_000, now + 3_000).await?;
    assert_eq!(second.iter().map(|c| (c.id.as_str(), c.run)).collect::<Vec<_>>(), [("a", 2)]);
    store.finish(finished("a", first[0].run, completed()))?;
    store.flush().await?;
    assert_eq!(get(db, "a").await?.status, JobStatus::Claimed, "the stale outcome is refused");
    assert_eq!(unrescuable(db).await?, Vec::<String>::new(), "the second claim is still rescuable");
    let rescued = store.rescue(now + 4_000).await?;
    assert_eq!(rescued.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["a"], "the second claim is rescued");
    store.close().await;
    Ok(())
}

/// An operator's retry starts a job's attempts over, not its runs: the outcome of a run before the retry never
/// lands on a claim after it, even by the same worker and with the same attempt number.
async fn an_operator_retry_fences_out_the_earlier_run(db: &DatabaseConnection) -> Result<()> {
    add(db, &[NewJob { max_attempts: 1, ..job("a") }, NewJob { max_attempts: 1, ..job("b") }]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = now_ms();
    let first = store.claim(10, now, now + 1_000).await?;
    assert_eq!(first.iter().map(|c| (c.attempt, c.run)).collect::<Vec<_>>(), [(1, 1), (1, 1)]);
    let rescued = store.rescue(now + 2_000).await?;
    assert!(rescued.iter().all(|r| r.status == "failed"), "no attempts left: {rescued:?}");
    for id in ["a", "b"] {
        assert!(jobs::retry(db, id, now + 2_000).await?, "`{id}` retried");
    }
    let second = store.claim(10, now + 2_000, now + 60_000).await?;
    assert_eq!(second.iter().map(|c| (c.attempt, c.run)).collect::<Vec<_>>(), [(1, 2), (1, 2)]);
    // The first run of `a` ends late, through the worker; that of `b` through the remote calls.
    store.finish(finished("a", first[0].run, Outcome::Failed { error: "stale".into() }))?;
    store.flush().await?;
    assert!(!remote::finish(db, "w1", finished("b", first[1].run, Outcome::Failed { error: "stale".into() })).await?);
    assert_eq!(remote::extend(db, "w1", "b", first[1].run, now + 90_000).await?, None, "a stale renewal is refused");
    for id in ["a", "b"] {
        let j = get(db, id).await?;
        assert_eq!(
            (j.status, j.last_error.as_deref()),
            (JobStatus::Claimed, Some("lease expired while claimed by w1; no attempts left")),
            "`{id}`"
        );
    }
    store.finish(finished("a", second[0].run, completed()))?;
    store.flush().await?;
    assert!(remote::finish(db, "w1", finished("b", second[1].run, completed())).await?);
    for id in ["a", "b"] {
        assert_eq!(get(db, id).await?.status, JobStatus::Completed, "`{id}`");
    }
    assert_eq!(unrescuable(db).await?, Vec::<String>::new());
    store.close().await;
    Ok(())
}

/// MySQL alone (the other engines' limits are held by `tests/tests/sequences.rs` and the remote area): a kind
/// limited to two running jobs fleet-wide is claimed two at a time by two workers together, again as one finishes.
#[cfg(feature = "mysql")]
mod mysql_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_limit_on_running_jobs_holds_across_two_stores() {
        let name = "mysql::a_limit_on_running_jobs_holds_across_two_stores";
        super::super::run(crate::storage::Dialect::MySql, name, super::limit_across_stores).await;
    }
}

#[cfg(feature = "mysql")]
async fn limit_across_stores(db: &DatabaseConnection) -> Result<()> {
    use crate::flow::FlowKind;
    let limited = FlowKind { kind: "k".into(), concurrency: Some(2), rate: None, rate_per_key: false, fair: false };
    let with_limit = |w: &str| WorkerStoreOpts { flows: vec![limited.clone()], ..opts(w, &["k"]) };
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    let bg = tokio::runtime::Handle::current();
    let (w1, w2) =
        (open_worker_store(db, with_limit("w1"), &bg).await?, open_worker_store(db, with_limit("w2"), &bg).await?);
    let now = now_ms();
    let first = w1.claim(10, now, now + 60_000).await?;
    assert_eq!(first.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a", "b"], "two of the limit");
    assert!(w2.claim(10, now, now + 60_000).await?.is_empty(), "the limit is taken by the other worker");
    w1.finish(finished("a", 1, completed()))?;
    w1.flush().await?;
    let next = w2.claim(10, now, now + 60_000).await?;
    assert_eq!(next.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c"], "one more as one finished");
    w1.close().await;
    w2.close().await;
    Ok(())
}
