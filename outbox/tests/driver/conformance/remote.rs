//! Conformance of `storage/remote.rs`: a remote worker's claims, outcomes and lease renewals, each fenced by
//! its claim.

use std::time::Duration;

use sea_orm::DatabaseConnection;

use super::{add, completed, finished, get, job, opts, sequenced, set};
use crate::error::Result;
use crate::record::JobStatus;
use crate::storage::enqueue::NewJob;
use crate::storage::{Finished, Keep, Outcome, WorkerStoreOpts, events, jobs, now_ms, open_worker_store, remote};
use crate::time::from_ms;

driver_tests!(
    remote_claim_takes_due_jobs_of_its_kinds_and_queues,
    remote_claim_honours_limits_and_sequences,
    remote_finish_is_fenced,
    a_batch_of_plain_completions_is_fenced,
    remote_extend_is_fenced_and_never_shortens,
    a_batch_with_a_stale_and_a_fresh_outcome_writes_the_fresh_one,
    a_remote_heartbeat_answers_the_lease_it_stored,
    a_completion_written_alone_deletes_a_job_kept_nowhere;
    mysql:
    remote_claim_takes_due_jobs_of_its_kinds_and_queues,
    remote_claim_honours_limits_and_sequences,
    remote_finish_is_fenced,
    a_batch_of_plain_completions_is_fenced,
    remote_extend_is_fenced_and_never_shortens,
    a_batch_with_a_stale_and_a_fresh_outcome_writes_the_fresh_one,
    a_remote_heartbeat_answers_the_lease_it_stored,
    a_completion_written_alone_deletes_a_job_kept_nowhere,
);

async fn remote_claim_takes_due_jobs_of_its_kinds_and_queues(db: &DatabaseConnection) -> Result<()> {
    let now = now_ms();
    let other = NewJob { kind: "other".into(), ..job("b") };
    let (later, urgent) =
        (NewJob { run_at: now + 3_600_000, ..job("c") }, NewJob { queue: "q2".into(), priority: 5, ..job("d") });
    add(db, &[job("a"), other, later, urgent, job("e")]).await?;
    let in_default = WorkerStoreOpts { queues: Some(vec!["default".into()]), ..opts("r", &["k"]) };
    let claimed = remote::claim(db, in_default, 1, now, now + 30_000).await?;
    assert_eq!(
        claimed.iter().map(|c| (c.id.as_str(), c.attempt, c.run, c.sequenced)).collect::<Vec<_>>(),
        [("a", 1, 1, false)]
    );
    assert_eq!((claimed[0].payload.replace(' ', ""), claimed[0].max_attempts), (r#"{"n":1}"#.to_owned(), 3));
    let a = get(db, "a").await?;
    assert_eq!(
        (a.status, a.locked_by.as_deref(), a.lease_expires_at),
        (JobStatus::Claimed, Some("r"), Some(from_ms(now + 30_000)))
    );
    let rest = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
    assert_eq!(rest.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["d", "e"], "by priority; `c` is not due");
    Ok(())
}

async fn remote_claim_honours_limits_and_sequences(db: &DatabaseConnection) -> Result<()> {
    let now = now_ms();
    add(db, &[job("a"), job("b"), sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    let limited = WorkerStoreOpts {
        flows: vec![crate::flow::FlowKind {
            kind: "k".into(),
            concurrency: Some(1),
            rate: None,
            rate_per_key: false,
            fair: false,
        }],
        ..opts("r", &["k"])
    };
    assert_eq!(remote::claim(db, limited.clone(), 10, now, now + 30_000).await?.len(), 1);
    assert!(remote::claim(db, limited, 10, now, now + 30_000).await?.is_empty(), "one is running");
    let claimed = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
    let mut got: Vec<(&str, bool)> = claimed.iter().map(|c| (c.id.as_str(), c.sequenced)).collect();
    got.sort_unstable();
    assert_eq!(got, [("b", false), ("s1", true)], "`s2` waits for `s1`");
    assert!(remote::finish(db, "r", finished("s1", 1, completed())).await?);
    let next = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
    assert_eq!(next.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["s2"]);
    Ok(())
}

async fn remote_finish_is_fenced(db: &DatabaseConnection) -> Result<()> {
    let now = now_ms();
    add(db, &[job("a"), job("b")]).await?;
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 2);
    assert!(!remote::finish(db, "other", finished("a", 1, completed())).await?, "another owner");
    assert!(!remote::finish(db, "r", finished("a", 2, completed())).await?, "another attempt");
    assert_eq!(get(db, "a").await?.status, JobStatus::Claimed);
    assert!(remote::finish(db, "r", finished("a", 1, completed())).await?);
    let a = get(db, "a").await?;
    assert_eq!(
        (a.status, a.output, a.lease_expires_at),
        (JobStatus::Completed, Some(serde_json::json!({"ok": true})), None)
    );
    assert!(a.completed_at.is_some());
    assert!(!remote::finish(db, "r", finished("a", 1, completed())).await?, "written already");
    let retry = Outcome::Retry { run_at: now + 60_000, error: "later".into() };
    assert!(remote::finish(db, "r", finished("b", 1, retry)).await?);
    let b = get(db, "b").await?;
    assert_eq!(
        (b.status, b.attempts, b.last_error.as_deref(), b.run_at),
        (JobStatus::Pending, 1, Some("later"), from_ms(now + 60_000))
    );
    Ok(())
}

/// A worker's batch of completions without output (each backend's plain statement) lands only for the claims it
/// holds: the right owner and the attempt claimed, once.
async fn a_batch_of_plain_completions_is_fenced(db: &DatabaseConnection) -> Result<()> {
    let now = now_ms();
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 4);
    let plain = |id: &str, attempt: i32| finished(id, attempt, Outcome::Completed { output: None });
    let written = remote::finish_batch(db, "r", vec![plain("a", 1), plain("b", 2)]).await?;
    assert_eq!(written, [true, false], "`b` was claimed for its first attempt");
    let written = remote::finish_batch(db, "other", vec![plain("c", 1), plain("d", 1)]).await?;
    assert_eq!(written, [false, false], "`c` and `d` are claimed by `r`");
    for id in ["b", "c", "d"] {
        assert_eq!(get(db, id).await?.status, JobStatus::Claimed, "`{id}`");
    }
    let a = get(db, "a").await?;
    assert_eq!((a.status, a.output, a.lease_expires_at, a.attempts), (JobStatus::Completed, None, None, 1));
    assert!(a.completed_at.is_some());
    let written =
        remote::finish_batch(db, "r", vec![plain("b", 1), plain("c", 1), plain("d", 1), plain("a", 1)]).await?;
    assert_eq!(written, [true, true, true, false], "`a` was written already");
    for id in ["b", "c", "d"] {
        assert_eq!(get(db, id).await?.status, JobStatus::Completed, "`{id}`");
    }
    Ok(())
}

async fn remote_extend_is_fenced_and_never_shortens(db: &DatabaseConnection) -> Result<()> {
    let now = now_ms();
    add(db, &[job("a")]).await?;
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 1_000).await?.len(), 1);
    assert_eq!(remote::extend(db, "r", "a", 1, now + 60_000).await?, Some(now + 60_000));
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(from_ms(now + 60_000)));
    assert_eq!(remote::extend(db, "r", "a", 1, now + 10).await?, Some(now + 60_000), "the lease as stored");
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(from_ms(now + 60_000)), "never shortened");
    assert_eq!(remote::extend(db, "other", "a", 1, now + 90_000).await?, None);
    assert_eq!(remote::extend(db, "r", "a", 2, now + 90_000).await?, None);
    assert_eq!(remote::extend(db, "r", "nope", 1, now + 90_000).await?, None);
    Ok(())
}

/// A batch holding the outcome of a job's earlier run beside that of its current run writes the current one,
/// in whichever order they come.
async fn a_batch_with_a_stale_and_a_fresh_outcome_writes_the_fresh_one(db: &DatabaseConnection) -> Result<()> {
    add(db, &[NewJob { max_attempts: 5, ..job("a") }, NewJob { max_attempts: 5, ..job("b") }]).await?;
    let now = now_ms();
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 1_000).await?.len(), 2);
    set(db, "a", "lease_expires_at = {0}", &[now - 1]).await?;
    set(db, "b", "lease_expires_at = {0}", &[now - 1]).await?;
    let store = open_worker_store(db, opts("r", &["k"]), &tokio::runtime::Handle::current()).await?;
    assert_eq!(store.rescue(now).await?.len(), 2);
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 60_000).await?.len(), 2);
    let done =
        |id: &str, run: i32| finished(id, run, Outcome::Completed { output: Some(format!("{{\"run\":{run}}}")) });
    let written = remote::finish_batch(db, "r", vec![done("a", 2), done("a", 1), done("b", 1), done("b", 2)]).await?;
    assert_eq!(written, [true, false, false, true], "the current runs' outcomes, whatever their place");
    for id in ["a", "b"] {
        let j = get(db, id).await?;
        assert_eq!((j.status, j.output), (JobStatus::Completed, Some(serde_json::json!({"run": 2}))), "`{id}`");
    }
    store.close().await;
    Ok(())
}

/// A heartbeat never shortens a lease, and answers the lease as it stands: a shorter renewal after a longer one
/// answers the longer one.
async fn a_remote_heartbeat_answers_the_lease_it_stored(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a")]).await?;
    let now = now_ms();
    let claimed = remote::claim(db, opts("r", &["k"]), 1, now, now + 1_000).await?;
    let run = claimed[0].run;
    let long = crate::remote::heartbeat(db, "r", "a", run, Duration::from_secs(300)).await?;
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(long));
    let short = crate::remote::heartbeat(db, "r", "a", run, Duration::from_secs(1)).await?;
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(long), "never shortened");
    assert_eq!(short, long, "the answer is the lease as stored, not the one asked for");
    Ok(())
}

/// An outcome written alone (a remote worker's, or one of a batch the database refused, written job by job)
/// deletes a completed job of a kind that keeps nothing, as a batch does.
async fn a_completion_written_alone_deletes_a_job_kept_nowhere(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a")]).await?;
    let now = now_ms();
    let claimed = remote::claim(db, opts("r", &["k"]), 1, now, now + 60_000).await?;
    let done = Finished { keep: Keep::Nothing, ..finished("a", claimed[0].run, Outcome::Completed { output: None }) };
    assert!(remote::finish(db, "r", done).await?);
    assert_eq!(jobs::get(db, "a").await?, None, "deleted as it completed");
    assert!(events::outlived(db, "a").await?, "its events tell it completed");
    Ok(())
}
