//! Operator functions: the six questions (what is outstanding, what failed and why, what is stuck, how long
//! jobs take, which keys were enqueued more than once, what ran lately), the actions that follow (retry,
//! cancel, purge), and waiting for a job's outcome.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection};

pub use crate::kind::registry::{kind, kinds};
pub use crate::stats::{
    ActivityPoint, BlockedSequence, DuplicateKey, FailureGroup, KindDurations, QueueCounts, Stats, StatusCount,
};

use crate::error::{Error, Result};
use crate::record::{
    FeedEvent, JobEvent, JobFilter, JobRecord, JobStatus, ReconciliationRecord, ScheduleRecord, WorkerRecord,
};
use crate::storage::{self, now_ms};
use crate::time::from_ms;
use crate::wake::{self, Watch};

/// Job counts of every queue: available, scheduled, waiting behind their sequence, claimed, stuck, completed,
/// failed, cancelled.
pub async fn queues<C: ConnectionTrait>(conn: &C) -> Result<Vec<QueueCounts>> {
    storage::stats::queues(conn, now_ms()).await
}

fn since(window: Duration) -> i64 {
    now_ms().saturating_sub(crate::time::duration_ms(window))
}

/// Job counts by kind and status.
pub async fn counts<C: ConnectionTrait>(conn: &C) -> Result<Vec<StatusCount>> {
    storage::stats::counts(conn).await
}

/// Jobs matching `filter`, newest first; with [`JobFilter::sequence`], the latest `limit` jobs of the
/// sequence in sequence order.
pub async fn list<C: ConnectionTrait>(conn: &C, filter: &JobFilter) -> Result<Vec<JobRecord>> {
    let mut jobs = storage::jobs::list(conn, filter).await?;
    if filter.sequence.is_some() {
        jobs.reverse();
    }
    Ok(jobs)
}

/// One job by id.
pub async fn get<C: ConnectionTrait>(conn: &C, id: &str) -> Result<JobRecord> {
    storage::jobs::get(conn, id).await?.ok_or_else(|| Error::NotFound { id: id.to_owned() })
}

/// The lifecycle of one job, oldest first: when it was enqueued, every claim, retry (with its error),
/// failure, rescue, snooze, release, cancel and operator retry, and its completion.
pub async fn history<C: ConnectionTrait>(conn: &C, id: &str) -> Result<Vec<JobEvent>> {
    storage::events::history(conn, id).await
}

/// Up to `limit` events of the feed after position `after` (an event's id, or [`feed_head`]), oldest
/// first: every lifecycle transition of every job, written by any process sharing the database, in the
/// order the database committed them. Reading again after the last id returned gets exactly what came
/// since, with nothing skipped and nothing twice. On PostgreSQL an event shows once every transaction
/// that began before it has ended, so a transaction left open holds the feed back. On MariaDB a read first
/// puts the events committed since the last read in the feed's order; a read inside a transaction does not, and
/// shows what readers outside one have ordered (read it outside one).
pub async fn feed<C: ConnectionTrait>(conn: &C, after: &str, limit: u64) -> Result<Vec<FeedEvent>> {
    storage::events::feed(conn, after, limit).await
}

/// Resolves when this process next writes a change (an enqueue, an outcome, an operator action), so a
/// reader of [`feed`] in the same process can look at once instead of at its next poll. Changes made by
/// other processes wake it too while a [`watch`] is held (SQLite: any commit; PostgreSQL: enqueues); keep
/// polling as the fallback. Create it before reading, then await it.
pub fn changed() -> tokio::sync::futures::Notified<'static> {
    wake::changes().notified()
}

/// Records `kind` (its JSON Schema and options) in the kinds table, as a worker does for its kinds when it
/// is built, so that tools and workers without the Rust type (the `outbox` command, a program in another
/// language claiming through [`crate::remote`]) can enqueue and validate its jobs. A worker that registers a
/// kind of the same name records its own definition over this one.
pub async fn record_kind<C: ConnectionTrait>(conn: &C, kind: &crate::Kind, recorded_by: &str) -> Result<()> {
    crate::kind::registry::record(conn, &[kind], recorded_by, &Default::default()).await
}

/// Starts hearing commits of other processes on `db`'s database until the returned [`Watch`] is dropped. On
/// SQLite (Linux) every commit then wakes this process's workers, [`wait`] calls and [`changed`] readers at
/// once; on PostgreSQL enqueues wake the workers and waiting claims ([`crate::remote::claim_waiting`]), and
/// outcomes are still seen by polling. Workers hold one of their own; a server or a tool that waits without
/// running a worker takes one.
pub async fn watch(db: &DatabaseConnection) -> Result<Watch> {
    storage::watch(db).await
}

/// The feed's current end: [`feed`] after it returns only events committed from now on.
pub async fn feed_head<C: ConnectionTrait>(conn: &C) -> Result<String> {
    storage::events::feed_head(conn).await
}

/// The workers (in-process and remote) that announced themselves and are still heartbeating, oldest first.
/// A worker that stops heartbeating drops out once its presence expires.
pub async fn workers<C: ConnectionTrait>(conn: &C) -> Result<Vec<WorkerRecord>> {
    storage::workers::list(conn, now_ms()).await
}

/// Claimed jobs whose lease has expired: their worker died or hangs, and no rescuer has run since.
pub async fn stuck<C: ConnectionTrait>(conn: &C) -> Result<Vec<JobRecord>> {
    storage::jobs::stuck(conn, now_ms()).await
}

/// The most recent failed jobs, each with its last error.
pub async fn failed<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<JobRecord>> {
    list(conn, &JobFilter { status: Some(JobStatus::Failed), limit, ..JobFilter::default() }).await
}

/// Run and wait times of jobs completed within `window`, by kind.
pub async fn durations<C: ConnectionTrait>(conn: &C, window: Duration) -> Result<Vec<KindDurations>> {
    storage::stats::durations(conn, since(window)).await
}

/// Idempotency keys carried by more than one job, most repeated first.
pub async fn duplicates<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<DuplicateKey>> {
    storage::stats::duplicates(conn, limit).await
}

/// What finished (completed, failed, cancelled) within `window`, by kind and status.
pub async fn recent<C: ConnectionTrait>(conn: &C, window: Duration) -> Result<Vec<StatusCount>> {
    storage::stats::finished_since(conn, since(window)).await
}

/// How many sequences a failed or cancelled job holds, and the first `limit` of them with their heads.
pub async fn blocked<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<(u64, Vec<BlockedSequence>)> {
    storage::stats::blocked(conn, limit).await
}

/// The six answers at once; `window` bounds durations and recent activity (an hour is typical).
pub async fn stats<C: ConnectionTrait>(conn: &C, window: Duration) -> Result<Stats> {
    let (blocked_sequences, blocked) = blocked(conn, 20).await?;
    Ok(Stats {
        blocked_sequences,
        blocked,
        counts: counts(conn).await?,
        failed: failed(conn, 20).await?,
        stuck: stuck(conn).await?,
        durations: durations(conn, window).await?,
        duplicates: duplicates(conn, 20).await?,
        recent: recent(conn, window).await?,
        window_secs: window.as_secs(),
        reconciliations: reconciliations(conn).await?,
    })
}

/// The latest report of every reconciler, by name.
pub async fn reconciliations<C: ConnectionTrait>(conn: &C) -> Result<Vec<ReconciliationRecord>> {
    storage::reconciliations::list(conn).await
}

/// Replaces the latest report of reconciler `rec.reconciler` (the `report` is shown by `outbox stats`).
pub async fn record_reconciliation<C: ConnectionTrait>(conn: &C, rec: &ReconciliationRecord) -> Result<()> {
    storage::reconciliations::record(conn, rec).await
}

/// Every registered schedule with its last tick and its next one from now.
pub async fn schedules<C: ConnectionTrait>(conn: &C) -> Result<Vec<ScheduleRecord>> {
    let mut schedules = storage::schedules::list(conn).await?;
    let now = now_ms();
    for s in &mut schedules {
        s.next_tick = crate::periodic::next_stored(&s.spec, &s.time_zone, now).ok().flatten().map(from_ms);
    }
    Ok(schedules)
}

/// Why `action` did not apply to job `id`: its current status, and the `hint` for that status.
async fn transition_error<C: ConnectionTrait>(
    conn: &C,
    id: &str,
    action: &'static str,
    hint: fn(JobStatus) -> &'static str,
) -> Error {
    match get(conn, id).await {
        Ok(job) => Error::InvalidTransition {
            id: id.to_owned(),
            action,
            status: job.status.to_string(),
            hint: hint(job.status),
        },
        Err(e) => e,
    }
}

/// Puts a failed or cancelled job back to pending with its attempts reset. Refused when an active job of the
/// same kind holds its idempotency key: that job already carries the intent.
pub async fn retry<C: ConnectionTrait>(conn: &C, id: &str) -> Result<()> {
    if storage::jobs::retry(conn, id, now_ms()).await? {
        tracing::info!(job_id = id, "job retried by operator");
        wake::wake();
        return Ok(());
    }
    Err(transition_error(conn, id, "retry", |status| match status {
        JobStatus::Failed | JobStatus::Cancelled => {
            "an active job with the same kind and idempotency key exists; it already carries this intent"
        }
        _ => "only failed or cancelled jobs can be retried",
    })
    .await)
}

/// Puts every failed job (of `kind`, when given) back to pending; returns how many. A job whose key is held
/// by an active job stays failed.
pub async fn retry_failed<C: ConnectionTrait>(conn: &C, kind: Option<&str>) -> Result<u64> {
    retry_failed_with(conn, kind, None).await
}

/// Like [`retry_failed`], for the failed jobs of `kind` (when given) whose last error is exactly `error`
/// (when given): one group of [`failure_groups`].
pub async fn retry_failed_with<C: ConnectionTrait>(conn: &C, kind: Option<&str>, error: Option<&str>) -> Result<u64> {
    let n = storage::jobs::retry_failed(conn, kind, error, now_ms()).await?;
    tracing::info!(jobs = n, kind = kind.unwrap_or("*"), by_error = error.is_some(), "failed jobs retried by operator");
    if n > 0 {
        wake::wake();
    }
    Ok(n)
}

/// Jobs completed and failed over the last `window`, per `bucket` of their last change, oldest first, with
/// a point for every bucket (the first one starts at or before `now - window`). Jobs purged since are not
/// counted, and neither is a job's earlier outcome once it was retried.
pub async fn activity<C: ConnectionTrait>(conn: &C, window: Duration, bucket: Duration) -> Result<Vec<ActivityPoint>> {
    let bucket_ms = crate::time::duration_ms(bucket).max(1);
    let now = now_ms();
    let first = now.saturating_sub(crate::time::duration_ms(window)).div_euclid(bucket_ms) * bucket_ms;
    let counted = storage::stats::activity(conn, first, bucket_ms).await?;
    let mut counted = counted.into_iter().peekable();
    let mut points = Vec::new();
    let mut at = first;
    while at <= now {
        let (completed, failed) = match counted.next_if(|(start, ..)| *start <= at) {
            Some((_, completed, failed)) => (completed, failed),
            None => (0, 0),
        };
        points.push(ActivityPoint { at: crate::time::from_ms(at), completed, failed });
        at = at.saturating_add(bucket_ms);
    }
    Ok(points)
}

/// Failed jobs grouped by kind and last error, largest group first, at most `limit` groups.
pub async fn failure_groups<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<FailureGroup>> {
    storage::stats::failure_groups(conn, limit).await
}

/// Cancels a pending job. A cancelled job of a kind whose sequences hold on failure holds its sequence like a
/// failed one; cancelling such a held head (failed or cancelled) again lets the jobs behind it run.
pub async fn cancel<C: ConnectionTrait>(conn: &C, id: &str) -> Result<()> {
    if storage::jobs::cancel(conn, id, now_ms()).await? {
        tracing::info!(job_id = id, "job cancelled");
        wake::outcome_written();
        return Ok(());
    }
    Err(transition_error(conn, id, "cancel", |_| {
        "only pending jobs can be cancelled, and failed or cancelled jobs that hold their sequence (which lets it go)"
    })
    .await)
}

/// Cancels every pending job about `subject` (`order:42`); returns how many. Jobs already running finish. Through a
/// transaction it commits or rolls back with the caller's writes: an order deleted, its pending jobs cancelled.
pub async fn cancel_subject<C: ConnectionTrait>(conn: &C, subject: &str) -> Result<u64> {
    check_subject(subject)?;
    let n = storage::jobs::cancel_subject(conn, subject, now_ms()).await?;
    tracing::info!(subject, jobs = n, "jobs of a subject cancelled");
    if n > 0 {
        wake::outcome_written();
    }
    Ok(n)
}

/// Puts every failed or cancelled job about `subject` back to pending, its attempts reset; returns how many. Of
/// several sharing an idempotency key only the latest goes back, and none whose key an active job holds.
pub async fn retry_subject<C: ConnectionTrait>(conn: &C, subject: &str) -> Result<u64> {
    check_subject(subject)?;
    let n = storage::jobs::retry_subject(conn, subject, now_ms()).await?;
    tracing::info!(subject, jobs = n, "jobs of a subject retried by operator");
    if n > 0 {
        wake::wake();
    }
    Ok(n)
}

/// The jobs about `subject`, newest first, at most `limit` (the archive keeps no subject).
pub async fn by_subject<C: ConnectionTrait>(conn: &C, subject: &str, limit: u64) -> Result<Vec<JobRecord>> {
    check_subject(subject)?;
    list(conn, &JobFilter { subject: Some(subject.to_owned()), limit, ..JobFilter::default() }).await
}

/// Refuses a subject no job could carry: empty, over [`crate::MAX_SUBJECT_BYTES`], or holding the NUL character.
pub fn check_subject(subject: &str) -> Result<()> {
    crate::kind::subject::check(subject).map_err(Error::Invalid)
}

/// The graph of workflow `id` (or batch): its steps, what each waits for, and where the workflow stands.
pub async fn workflow<C: ConnectionTrait>(conn: &C, id: &str) -> Result<crate::WorkflowGraph> {
    crate::workflow::workflow_graph(conn, id).await
}

/// Cancels every step of workflow `id` not yet started (running steps finish); the number cancelled.
pub async fn cancel_workflow<C: ConnectionTrait>(conn: &C, id: &str) -> Result<u64> {
    let cancelled = crate::workflow::cancel_workflow(conn, id).await?;
    wake::wake();
    Ok(cancelled)
}

/// The workflow and step of job `id`, its parents and its children (empty for a job in no workflow), each with its
/// step name and status.
pub async fn links<C: ConnectionTrait>(conn: &C, id: &str) -> Result<crate::Links> {
    crate::workflow::links(conn, id).await
}

/// Deletes one finished job (completed, failed or cancelled) and its history. Refused for an active job,
/// and for a failed or cancelled one that holds its sequence: retry it, or cancel it to let the sequence go.
pub async fn delete<C: ConnectionTrait>(conn: &C, id: &str) -> Result<()> {
    if storage::jobs::delete(conn, id).await? {
        tracing::info!(job_id = id, "job deleted by operator");
        return Ok(());
    }
    Err(transition_error(conn, id, "delete", |status| match status {
        JobStatus::Failed | JobStatus::Cancelled => {
            "it holds its sequence; retry it, or cancel it to let the sequence go, then delete it"
        }
        _ => "only completed, failed and cancelled jobs can be deleted",
    })
    .await)
}

/// Deletes jobs in the given terminal statuses last changed more than `older_than` ago; returns how many.
pub async fn purge<C: ConnectionTrait>(conn: &C, statuses: &[JobStatus], older_than: Duration) -> Result<u64> {
    storage::Dialect::of(conn)?;
    if let Some(active) = statuses.iter().find(|s| !s.is_terminal()) {
        return Err(Error::Invalid(format!(
            "cannot purge {active} jobs: only completed, failed and cancelled jobs can be purged"
        )));
    }
    let n = storage::jobs::purge(conn, statuses, since(older_than)).await?;
    tracing::info!(jobs = n, "finished jobs purged");
    Ok(n)
}

/// Waits until job `id` is finished (completed, failed or cancelled) and returns it, or fails with
/// [`Error::WaitTimeout`] once `timeout` has passed, or with [`Error::CompletedUnkept`] when it completed and
/// its kind keeps nothing. It wakes when a worker of this process writes an outcome,
/// on SQLite (Linux) when another process commits to the file, and otherwise looks again after a backoff
/// growing from 10 ms to 1 s, so every outcome is seen. Each look is one read of the job, which the database may hold up (a busy pool,
/// a locked file) past the timeout.
///
/// ```
/// # async fn demo(db: &sea_orm::DatabaseConnection, id: &str) -> Result<(), outbox::Error> {
/// let job = outbox::ops::wait(db, id, std::time::Duration::from_secs(30)).await?;
/// println!("{} ended {}", job.id, job.status);
/// # Ok(()) }
/// ```
pub async fn wait<C: ConnectionTrait>(conn: &C, id: &str, timeout: Duration) -> Result<JobRecord> {
    // A timeout too long to add up (`Duration::MAX` for "forever") waits as good as forever.
    let start = tokio::time::Instant::now();
    let deadline = start.checked_add(timeout).unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400));
    let mut backoff = Duration::from_millis(10);
    // An outcome written by another process on the same SQLite file wakes the wait as well.
    let _watch = crate::storage::watch_connection(conn).await;
    loop {
        // Registered before the read, so an outcome written in between still wakes this wait.
        let written = wake::outcomes().notified();
        tokio::pin!(written);
        written.as_mut().enable();
        let job = match get(conn, id).await {
            // Retention and `purge` take a job's events with it; a job deleted as it completed leaves them.
            Err(Error::NotFound { .. }) if storage::events::outlived(conn, id).await? => {
                return Err(Error::CompletedUnkept { id: id.to_owned() });
            }
            found => found?,
        };
        if job.status.is_terminal() {
            return Ok(job);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(Error::WaitTimeout { id: id.to_owned(), status: job.status, waited: timeout });
        }
        tokio::select! {
            _ = &mut written => {}
            _ = tokio::time::sleep(backoff.min(deadline - now)) => backoff = (backoff * 2).min(Duration::from_secs(1)),
        }
    }
}
