//! A handler's task and how it ends: its timeout, the watchdog ticket it settles as it ends, and the outcome the
//! worker loop records from what it returned.

use serde_json::Value;
use tokio::task::JoinError;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::Registered;
use super::handler::JobError;
use super::watchdog::{self, Ticket};
use crate::storage::{ClaimedJob, Outcome, now_ms};
use crate::time::ms_after;

pub(super) type HandlerResult = std::result::Result<Option<Value>, JobError>;

/// How a handler's task ended: its result, and its timeout if it ran past it.
pub(super) type TaskResult = (HandlerResult, Option<TimedOut>);

/// A handler ran past its timeout: it was asked to stop, and `dropped` if it had not within the grace.
#[derive(Debug, Clone, Copy)]
pub(super) struct TimedOut {
    limit: std::time::Duration,
    grace: std::time::Duration,
    pub(super) dropped: bool,
}

/// The outcome of `job`'s handler task, which ended with `result` (`timed_out` when its timeout stopped it).
/// `cancelling`: the worker had asked it to stop.
pub(super) fn outcome(
    job: &ClaimedJob,
    result: std::result::Result<HandlerResult, JoinError>,
    timed_out: Option<TimedOut>,
    cancelling: bool,
    retry: Option<&Registered>,
) -> Outcome {
    // Once the worker has asked a handler to stop, an error may be the interruption itself, whatever the
    // handler called it: the job is given back without using its attempt rather than failed or retried.
    // A handler stopped for its timeout was not interrupted by the worker's shutdown: its error is the timeout.
    // (Its token may also have been cancelled by the watchdog at its limit after it returned in time.)
    let asked_to_stop = cancelling;
    match result {
        Ok(Ok(output)) => Outcome::Completed { output: output.map(|v| v.to_string()) },
        Ok(Err(JobError::Snooze(after))) => Outcome::Snoozed { run_at: ms_after(now_ms(), after) },
        // The hold keeps the job (and the rest of its kind or key) from running until it ends; the job keeps its
        // place, its attempt given back.
        Ok(Err(JobError::RateLimited(_))) => Outcome::Released,
        Ok(Err(_)) if let Some(t) = timed_out.filter(|_| !cancelling) => {
            tracing::warn!(job_id = %job.id, kind = %job.kind, attempt = job.attempt, timeout = ?t.limit,
                dropped = t.dropped, "handler timed out");
            failure(job, t.message(), retry)
        }
        Ok(Err(JobError::Retry(_) | JobError::Permanent(_))) if asked_to_stop => Outcome::Released,
        Ok(Err(JobError::Permanent(error))) => Outcome::Failed { error },
        Ok(Err(JobError::Retry(error))) => failure(job, error, retry),
        Err(e) if e.is_cancelled() => Outcome::Released,
        Err(_) if asked_to_stop => Outcome::Released,
        Err(e) => failure(job, format!("handler panicked: {}", panic_message(e)), retry),
    }
}

/// `fut` run in the job's span, which records how it failed. A span no subscriber records (the usual worker without
/// tracing installed) leaves `fut` as it is: no second box per job.
pub(crate) fn in_span(fut: super::handler::HandlerFuture, span: tracing::Span) -> super::handler::HandlerFuture {
    use tracing::Instrument;
    if span.is_disabled() {
        return fut;
    }
    let record = span.clone();
    Box::pin(
        async move {
            let result = fut.await;
            if let Err(JobError::Retry(e) | JobError::Permanent(e)) = &result {
                crate::trace::failed(&record, e);
            }
            result
        }
        .instrument(span),
    )
}

/// `fut`, which holds its job's kind (or key, `per_key`) fleet-wide before it returns
/// [`JobError::RateLimited`]: the hold is written before the job's outcome frees its slot, so no worker claims
/// the next job of the kind before the hold is in force.
pub(super) fn held_when_rate_limited(
    fut: super::handler::HandlerFuture,
    db: sea_orm::DatabaseConnection,
    job: &ClaimedJob,
    per_key: bool,
) -> super::handler::HandlerFuture {
    let (id, kind) = (job.id.clone(), job.kind.clone());
    Box::pin(async move {
        let result = fut.await;
        if let Err(JobError::RateLimited(after)) = &result {
            let now = now_ms();
            let until = ms_after(now, *after);
            let reason = format!("job `{id}` was rate limited upstream");
            match crate::storage::flow::hold_for_job(&db, &id, per_key, until, &reason, now).await {
                Ok(()) => {
                    crate::flow::note_hold(until);
                    tracing::info!(job_id = %id, kind = %kind, until, per_key, "rate limited upstream; held fleet-wide");
                }
                Err(e) => {
                    // Without the hold the job itself waits, as a snooze.
                    tracing::warn!(job_id = %id, kind = %kind, error = %e, "rate limited upstream; holding failed");
                    return Err(JobError::Snooze(*after));
                }
            }
        }
        result
    })
}

/// Runs `fut` from `started` for at most `limit`; then asks it to stop through `cancel` and drops it after
/// `grace`. A handler that blocks its thread cannot be dropped: the watchdog acts for it. The `ticket` is
/// settled the moment the handler ends, however late the worker loop gets to its result.
pub(super) async fn with_timeout(
    fut: super::handler::HandlerFuture,
    started: Instant,
    (limit, grace): (std::time::Duration, std::time::Duration),
    cancel: CancellationToken,
    ticket: Ticket,
) -> TaskResult {
    let mut fut = settling(fut, ticket.clone());
    tokio::select! {
        result = &mut fut => {
            // The watchdog asks at the same deadline: a handler that stopped because it was asked timed out.
            let late = Instant::now() >= started + limit;
            return (result, late.then_some(TimedOut { limit, grace, dropped: false }));
        }
        _ = sleep_until(started + limit) => {}
    }
    cancel.cancel();
    tokio::select! {
        result = &mut fut => (result, Some(TimedOut { limit, grace, dropped: false })),
        _ = sleep_until(started + limit + grace) => {
            ticket.returned();
            (Err(JobError::Retry(String::new())), Some(TimedOut { limit, grace, dropped: true }))
        }
    }
}

/// `fut`, settling `ticket` as it completes, panics or is dropped (an aborted task).
fn settling(
    mut fut: super::handler::HandlerFuture,
    ticket: Ticket,
) -> impl std::future::Future<Output = HandlerResult> + Send {
    let on_drop = SettleOnDrop(ticket.clone());
    std::future::poll_fn(move |cx| {
        let _ = &on_drop;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(ready) => {
                ticket.returned();
                ready
            }
            Err(panic) => {
                ticket.returned();
                std::panic::resume_unwind(panic)
            }
        }
    })
}

impl TimedOut {
    fn message(&self) -> String {
        if self.dropped {
            watchdog::timeout_message(self.limit, self.grace)
        } else {
            format!("timed out after {}", crate::time::short_duration(self.limit))
        }
    }
}

fn failure(job: &ClaimedJob, error: String, registered: Option<&Registered>) -> Outcome {
    let backoff = registered
        .map(|r| r.retry.backoff(job.attempt))
        .unwrap_or_else(|| super::RetryPolicy::default().backoff(job.attempt));
    watchdog::failure(job.attempt, job.max_attempts, error, backoff)
}

pub(crate) fn panic_message(e: JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string panic payload".into()),
        Err(e) => e.to_string(),
    }
}

/// Settles its ticket when dropped: the handler's future went with it.
struct SettleOnDrop(Ticket);

impl Drop for SettleOnDrop {
    fn drop(&mut self) {
        self.0.returned();
    }
}
