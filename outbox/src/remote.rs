//! Workers outside this process: a program in any language claims jobs through a server that holds the
//! database connection (`outbox-server`), and reports each outcome. Every call after the claim is fenced
//! exactly like the in-process worker's writes: by job id, the claiming worker and the claim's run; a call for
//! a claim that expired and was rescued, or that already ended, fails with [`Error::StaleClaim`] and changes
//! nothing.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::DatabaseConnection;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::kind::{Kind, MAX_NAME_BYTES};
use crate::record::JobStatus;
use crate::storage::workers::WorkerRow;
use crate::storage::{self, ClaimedJob, Finished, Keep, Outcome, WorkerStoreOpts, now_ms};
use crate::time::{from_ms, ms_after};
use crate::worker::RetryPolicy;
pub use crate::worker::presence::host_name;

/// The most jobs one claim may take.
pub const MAX_CLAIM: usize = 1_000;
/// The shortest and longest lease a remote claim or heartbeat may ask for.
pub const LEASE_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(24 * 3600));

/// What a remote worker asks for.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The worker's id: recorded as the claim's owner, and every later call must give it.
    pub worker: String,
    /// The host it runs on, for the worker registry.
    pub host: Option<String>,
    /// Its process id, for the worker registry.
    pub pid: Option<i64>,
    /// The kinds it runs (at least one).
    pub kinds: Vec<String>,
    /// The queues it serves; `None` for all.
    pub queues: Option<Vec<String>>,
    /// At most this many jobs (1 to [`MAX_CLAIM`]).
    pub limit: usize,
    /// How long the claims hold unless renewed with [`heartbeat`].
    pub lease: Duration,
}

/// A job handed to a remote worker.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RemoteJob {
    /// The job id.
    pub id: String,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// The payload, valid against the kind's recorded schema.
    pub payload: Value,
    /// This claim's attempt, counted from 1 (an operator's retry starts it over).
    pub attempt: i32,
    /// The claim's token: how many times the job has been claimed, this claim included. Every later call for
    /// the job gives it back. No action ever lowers it, so a call for an earlier claim of the job never lands
    /// on this one, even from the same worker id.
    pub run: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// When the claim runs out unless renewed.
    pub lease_expires_at: DateTime<Utc>,
    /// The W3C trace context the job was enqueued in (`traceparent`), to continue its trace: as a child on the
    /// job's first run (`run` 1), as a new trace linked to it after.
    pub traceparent: Option<String>,
    /// The `tracestate` that goes with [`RemoteJob::traceparent`].
    pub tracestate: Option<String>,
}

fn check_name(what: &str, name: &str) -> Result<()> {
    if name.trim().is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(Error::Invalid(format!("the {what} must be 1 to {MAX_NAME_BYTES} bytes and not blank")));
    }
    Ok(())
}

fn check_lease(lease: Duration) -> Result<()> {
    if lease < LEASE_RANGE.0 || lease > LEASE_RANGE.1 {
        return Err(Error::Invalid(format!(
            "the lease of {lease:?} is out of range: it must be from {:?} to {:?}",
            LEASE_RANGE.0, LEASE_RANGE.1
        )));
    }
    Ok(())
}

/// Claims up to `req.limit` due jobs of the given kinds and queues, with the fleet-wide limits and sequence
/// order that in-process workers keep, and records the worker in the registry. A claimed job whose payload
/// no longer matches its kind's recorded schema fails at once, permanently, and is not handed out.
pub async fn claim(db: &DatabaseConnection, req: &ClaimRequest) -> Result<Vec<RemoteJob>> {
    claim_as(db, req, true).await
}

/// [`claim`], recording the worker in the registry only when `register` (a write of its own, which a waiting
/// claim makes once and then every [`REGISTER_EVERY`], not on every look).
async fn claim_as(db: &DatabaseConnection, req: &ClaimRequest, register: bool) -> Result<Vec<RemoteJob>> {
    check_name("worker id", &req.worker)?;
    if req.kinds.is_empty() {
        return Err(Error::Invalid("a claim must name at least one kind".into()));
    }
    for kind in &req.kinds {
        check_name("kind name", kind)?;
    }
    for queue in req.queues.iter().flatten() {
        check_name("queue name", queue)?;
    }
    if req.limit == 0 || req.limit > MAX_CLAIM {
        return Err(Error::Invalid(format!("the claim limit {} is out of range: 1 to {MAX_CLAIM}", req.limit)));
    }
    check_lease(req.lease)?;
    let mut kinds = req.kinds.clone();
    kinds.sort();
    kinds.dedup();
    let recorded: HashMap<String, Kind> = crate::kind::registry::kinds(db)
        .await?
        .into_iter()
        .filter(|r| kinds.contains(&r.name))
        .filter_map(|r| Some((r.name.clone(), Kind::from_record(&r).ok()?)))
        .collect();
    let mut flows: Vec<crate::flow::FlowKind> =
        recorded.values().filter_map(|k| crate::flow::FlowKind::of(k, None, None)).collect();
    flows.sort_by(|a, b| a.kind.cmp(&b.kind));
    let now = now_ms();
    let presence = WorkerRow {
        id: req.worker.clone(),
        host: req.host.clone().unwrap_or_else(|| "remote".into()),
        pid: req.pid,
        queues: req.queues.as_ref().map(|q| encode(q)).transpose()?,
        kinds: encode(&kinds)?,
        concurrency: None,
        running: 0,
        remote: true,
        now,
        expires_at: ms_after(now, req.lease.max(Duration::from_secs(30))),
    };
    if register {
        storage::workers::upsert(db, &presence).await?;
    }
    let opts = WorkerStoreOpts { worker_id: req.worker.clone(), kinds, flows, queues: req.queues.clone() };
    let lease_until = ms_after(now, req.lease);
    let claimed = storage::remote::claim(db, opts, req.limit, now, lease_until).await?;
    let mut jobs = Vec::with_capacity(claimed.len());
    for job in claimed {
        match payload_of(&job, recorded.get(&job.kind)) {
            Ok(payload) => {
                tracing::debug!(job_id = %job.id, kind = %job.kind, queue = %job.queue, attempt = job.attempt, worker = %req.worker, "job claimed by a remote worker");
                let (traceparent, tracestate) = match job.trace.as_deref().map(crate::trace::headers) {
                    Some((parent, state)) => (Some(parent.to_owned()), state.map(str::to_owned)),
                    None => (None, None),
                };
                jobs.push(RemoteJob {
                    traceparent,
                    tracestate,
                    id: job.id,
                    kind: job.kind,
                    queue: job.queue,
                    payload,
                    attempt: job.attempt,
                    run: job.run,
                    max_attempts: job.max_attempts,
                    lease_expires_at: from_ms(lease_until),
                });
            }
            Err(error) => {
                storage::remote::finish(db, &req.worker, job.finished(Outcome::Failed { error })).await?;
            }
        }
    }
    Ok(jobs)
}

/// The longest a claim may wait for work.
pub const MAX_CLAIM_WAIT: Duration = Duration::from_secs(300);

/// How often a waiting claim records its worker in the registry again (its entry lasts at least 30 s).
const REGISTER_EVERY: Duration = Duration::from_secs(10);

/// How often a waiting claim looks again when nothing wakes it: a wake-up of this process (an enqueue here,
/// or another process's commit heard through a [`crate::Watch`]) makes it look at once.
const CLAIM_WAIT_POLL: Duration = Duration::from_millis(500);

/// [`claim`], waiting up to `wait` (at most [`MAX_CLAIM_WAIT`]) for a job when none is due: it claims again
/// whenever this process is woken, and every half second otherwise. Returns as soon as a claim takes a job,
/// or empty once `wait` has passed. An empty look writes nothing, so waiting claims do not wake each other.
/// Hold a [`crate::ops::watch`] for wake-ups from other processes.
pub async fn claim_waiting(db: &DatabaseConnection, req: &ClaimRequest, wait: Duration) -> Result<Vec<RemoteJob>> {
    claim_waiting_until(db, req, wait, std::future::pending()).await
}

/// [`claim_waiting`] that also stops waiting once `stop` resolves (a signal, a client gone). A claim already
/// running when it does is never abandoned halfway: it runs to its end, and what it took is returned, so the
/// caller can hand those jobs out or give them back ([`release`]) rather than leave them claimed for their lease.
pub async fn claim_waiting_until(
    db: &DatabaseConnection,
    req: &ClaimRequest,
    wait: Duration,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Vec<RemoteJob>> {
    if wait > MAX_CLAIM_WAIT {
        return Err(Error::Invalid(format!(
            "the claim wait of {wait:?} is out of range: it must be at most {MAX_CLAIM_WAIT:?}"
        )));
    }
    tokio::pin!(stop);
    let start = tokio::time::Instant::now();
    let deadline = start + wait;
    let mut registered: Option<tokio::time::Instant> = None;
    loop {
        // Registered before the claim: a wake-up while it runs makes the next look immediate.
        let woken = crate::wake::notifier().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let register = registered.is_none_or(|at| at.elapsed() >= REGISTER_EVERY);
        let jobs = claim_as(db, req, register).await?;
        let now = tokio::time::Instant::now();
        if register {
            registered = Some(now);
        }
        if !jobs.is_empty() || now >= deadline {
            return Ok(jobs);
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep(CLAIM_WAIT_POLL.min(deadline - now)) => {}
            () = &mut stop => return Ok(Vec::new()),
        }
    }
}

/// Gives back claimed jobs that never reached their worker (its client went away, the pipe it printed to
/// closed): each goes back to pending at once with its attempt given back, fenced like any outcome. A job whose
/// claim is no longer this one is left as it is. Returns how many were given back; the first error stops it
/// (the rest are left to their leases).
pub async fn release(db: &DatabaseConnection, worker: &str, jobs: &[RemoteJob]) -> Result<usize> {
    let mut released = 0;
    for job in jobs {
        let f = Finished {
            id: job.id.clone(),
            kind: job.kind.clone(),
            queue: job.queue.clone(),
            attempt: job.attempt,
            run: job.run,
            outcome: Outcome::Released,
            keep: Keep::Row,
            parent: false,
        };
        if storage::remote::finish(db, worker, f).await? {
            released += 1;
        }
    }
    if released > 0 {
        tracing::info!(worker, jobs = released, "gave back claimed jobs that never reached their worker");
        crate::wake::wake();
    }
    Ok(released)
}

fn encode(names: &[String]) -> Result<String> {
    serde_json::to_string(names).map_err(|e| Error::Internal(format!("encoding names: {e}")))
}

/// The payload of a claimed job, or why it cannot run.
fn payload_of(job: &ClaimedJob, kind: Option<&Kind>) -> std::result::Result<Value, String> {
    let payload: Value = serde_json::from_str(&job.payload)
        .map_err(|e| format!("payload is not valid JSON: {e}; failed without running"))?;
    if let Some(kind) = kind {
        let violations = kind.violations(&payload);
        if !violations.is_empty() {
            return Err(format!(
                "invalid payload: {}; failed without running",
                crate::error::join_violations(&violations)
            ));
        }
    }
    Ok(payload)
}

fn finished(job: &crate::record::JobRecord, run: i32, outcome: Outcome) -> Finished {
    Finished {
        id: job.id.clone(),
        kind: job.kind.clone(),
        queue: job.queue.clone(),
        attempt: job.attempts,
        run,
        outcome,
        keep: Keep::Row,
        parent: false,
    }
}

fn stale(id: &str, worker: &str, run: i32) -> Error {
    Error::StaleClaim { id: id.to_owned(), worker: worker.to_owned(), run }
}

/// Renews the lease of a claim to `lease` from now, unless it already runs longer: a renewal never shortens a
/// lease (a shorter heartbeat after a longer one changes nothing). Returns when the lease runs out as stored,
/// which is later than `lease` from now when it already ran longer.
pub async fn heartbeat(
    db: &DatabaseConnection,
    worker: &str,
    id: &str,
    run: i32,
    lease: Duration,
) -> Result<DateTime<Utc>> {
    check_lease(lease)?;
    let until = ms_after(now_ms(), lease);
    match storage::remote::extend(db, worker, id, run, until).await? {
        Some(stored) => Ok(from_ms(stored)),
        None => Err(stale(id, worker, run)),
    }
}

/// The claim `(id, worker, run)` as it stands, or [`Error::StaleClaim`] when it is not that claim any more.
async fn current(db: &DatabaseConnection, worker: &str, id: &str, run: i32) -> Result<crate::record::JobRecord> {
    let job = match crate::ops::get(db, id).await {
        Ok(job) => job,
        Err(Error::NotFound { .. }) => return Err(stale(id, worker, run)),
        Err(e) => return Err(e),
    };
    if job.status != JobStatus::Claimed || job.locked_by.as_deref() != Some(worker) || job.runs != run {
        return Err(stale(id, worker, run));
    }
    Ok(job)
}

async fn write(db: &DatabaseConnection, worker: &str, f: Finished) -> Result<()> {
    let (id, run) = (f.id.clone(), f.run);
    storage::Dialect::of(db)?;
    if !storage::remote::finish(db, worker, f).await? {
        return Err(stale(&id, worker, run));
    }
    crate::wake::outcome_written();
    Ok(())
}

/// Completes a claimed job with the handler's output; `run` is the claim's (see [`RemoteJob::run`]).
pub async fn complete(db: &DatabaseConnection, worker: &str, id: &str, run: i32, output: Option<Value>) -> Result<()> {
    let job = current(db, worker, id, run).await?;
    let output = output
        .map(|v| serde_json::to_string(&v))
        .transpose()
        .map_err(|e| Error::Internal(format!("encoding the output of job `{id}`: {e}")))?;
    write(db, worker, finished(&job, run, Outcome::Completed { output })).await
}

/// Ends a claimed attempt with `error`. A retryable failure with attempts left goes back to pending after
/// `retry_in` (or the default backoff); otherwise the job fails for good. Returns the job's new status.
pub async fn fail(
    db: &DatabaseConnection,
    worker: &str,
    id: &str,
    run: i32,
    error: &str,
    retryable: bool,
    retry_in: Option<Duration>,
) -> Result<JobStatus> {
    let job = current(db, worker, id, run).await?;
    let attempt = job.attempts;
    let (outcome, status) = if retryable && attempt < job.max_attempts {
        let delay = retry_in.unwrap_or_else(|| RetryPolicy::default().backoff(attempt));
        (Outcome::Retry { run_at: ms_after(now_ms(), delay), error: error.to_owned() }, JobStatus::Pending)
    } else {
        let error =
            if retryable { format!("{error} (attempt {attempt} of {})", job.max_attempts) } else { error.to_owned() };
        (Outcome::Failed { error }, JobStatus::Failed)
    };
    write(db, worker, finished(&job, run, outcome)).await?;
    Ok(status)
}

/// Puts a claimed job back to pending for `delay`, giving its attempt back.
pub async fn snooze(db: &DatabaseConnection, worker: &str, id: &str, run: i32, delay: Duration) -> Result<()> {
    let job = current(db, worker, id, run).await?;
    let run_at = ms_after(now_ms(), delay);
    write(db, worker, finished(&job, run, Outcome::Snoozed { run_at })).await
}
