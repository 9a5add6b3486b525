//! The job routes: list, get with history, enqueue, retry, cancel, delete, retry every failed job.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use outbox::JobFilter;
use outbox::ops;
use outbox::{EnqueueOpts, JobEvent, JobRecord, JobStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument;
use utoipa::{IntoParams, ToSchema};

use super::doc::{ErrorBody, JobPath};
use super::{AppState, Reply, given, limit_param, param_error};
use crate::api_error::ApiError;
use crate::duration;
use crate::extract::{Json, Path, Query};

/// Pages hold at most this many jobs.
const MAX_LIMIT: u64 = 1_000;
const DEFAULT_LIMIT: u64 = 100;

/// `GET /api/jobs`: every parameter is text here and parsed below, so an error names the parameter.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ListParams {
    /// Only this status: `pending`, `claimed`, `completed`, `failed` or `cancelled`.
    status: Option<String>,
    /// Only this kind.
    kind: Option<String>,
    /// Only this queue.
    queue: Option<String>,
    /// Only jobs changed in this stretch back from now (`15m`, `2h`, `1d`) or since this RFC 3339 time.
    since: Option<String>,
    /// Only jobs carrying this idempotency key.
    key: Option<String>,
    /// Only jobs about this subject (`order:42`).
    subject: Option<String>,
    /// The next page: jobs with an id below this one (the previous page's `next`).
    before: Option<String>,
    /// At most this many, 1 to 1000 (100 by default).
    limit: Option<String>,
}

/// A page of jobs, newest first.
#[derive(Serialize, ToSchema)]
pub(crate) struct JobPage {
    jobs: Vec<JobRecord>,
    /// Pass as `before` for the next page; `null` on the last page.
    next: Option<String>,
}

/// List jobs, newest first, a page at a time.
#[utoipa::path(get, path = "/api/jobs", tag = "jobs", params(ListParams), security(("token" = [])),
    responses((status = 200, description = "Success", body = JobPage), (status = 400, description = "A parameter is invalid: the message names it", body = ErrorBody)))]
pub(super) async fn list(State(state): State<AppState>, Query(params): Query<ListParams>) -> Reply {
    let status =
        given(params.status).map(|s| s.parse::<JobStatus>().map_err(|e| param_error("status", &e))).transpose()?;
    let since = given(params.since).map(|s| duration::since(&s).map_err(|e| param_error("since", &e))).transpose()?;
    let limit = limit_param(params.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let filter = JobFilter {
        status,
        kind: given(params.kind),
        queue: given(params.queue),
        since,
        key: given(params.key),
        subject: given(params.subject)
            .map(|s| outbox::check_subject(&s).map(|()| s).map_err(|e| param_error("subject", &e.to_string())))
            .transpose()?,
        before: given(params.before),
        limit,
        ..JobFilter::default()
    };
    let jobs = ops::list(&state.db, &filter).await?;
    // A full page may have more behind it; a short one is the last.
    let next = (jobs.len() as u64 == limit).then(|| jobs.last().map(|j| j.id.clone())).flatten();
    Ok(axum::Json(JobPage { jobs, next }).into_response())
}

/// A job and its lifecycle, oldest event first; for a workflow step, the jobs it waits for and those waiting for it.
#[derive(Serialize, ToSchema)]
pub(crate) struct JobDetail {
    job: JobRecord,
    history: Vec<JobEvent>,
    /// For a workflow step: its workflow and step name, the jobs it waits for (each with the step name it knows it
    /// by and its status) and the steps that wait for it.
    #[serde(flatten)]
    links: outbox::Links,
}

/// One job with its history.
#[utoipa::path(get, path = "/api/jobs/{id}", tag = "jobs", params(JobPath), security(("token" = [])),
    responses((status = 200, description = "Success", body = JobDetail), (status = 404, description = "No job has this id", body = ErrorBody)))]
pub(super) async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    let job = ops::get(&state.db, &id).await?;
    let history = ops::history(&state.db, &id).await?;
    let links = ops::links(&state.db, &id).await?;
    Ok(axum::Json(JobDetail { job, history, links }).into_response())
}

/// `POST /api/jobs`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewJob {
    /// A kind built into the server or recorded by a worker.
    kind: String,
    /// Validated against the kind's JSON Schema.
    payload: Value,
    /// The kind's queue unless given.
    queue: Option<String>,
    /// Higher runs first; the kind's unless given.
    priority: Option<i32>,
    /// Run no earlier than this long from now (`30s`).
    delay: Option<String>,
    /// Run no earlier than this time (RFC 3339).
    run_at: Option<String>,
    /// Attempts before the job fails for good; the kind's unless given.
    max_attempts: Option<i32>,
    /// Idempotency key.
    key: Option<String>,
    /// Sequence key.
    sequence: Option<String>,
    /// What the job counts against its kind's rate (the kind's cost, or 1, unless given): a whole number.
    cost: Option<u32>,
    /// The domain row the job is about (`order:42`): the kind's subject template applied to the payload unless given.
    subject: Option<String>,
}

/// The job an enqueue wrote, or the active job with the same idempotency key it collapsed onto.
#[derive(Serialize, ToSchema)]
pub(crate) struct EnqueuedJob {
    id: String,
    /// False when the enqueue collapsed onto an existing job.
    created: bool,
}

/// Enqueue a job of a known kind.
#[utoipa::path(post, path = "/api/jobs", tag = "jobs", request_body = NewJob, security(("token" = [])),
    responses((status = 201, description = "A new job was written", body = EnqueuedJob),
        (status = 200, description = "An active job with the same idempotency key exists", body = EnqueuedJob),
        (status = 400, description = "An option is invalid: the message names it", body = ErrorBody),
        (status = 404, description = "`unknown_kind`: no kind of this name is built in or recorded", body = ErrorBody),
        (status = 413, description = "The payload is over the server's limit", body = ErrorBody),
        (status = 422, description = "`invalid_payload`: the payload violates the kind's schema", body = ErrorBody)))]
pub(super) async fn enqueue(State(state): State<AppState>, headers: HeaderMap, Json(new): Json<NewJob>) -> Reply {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // A W3C trace context the request carries is continued by the job; an invalid one is ignored, as the
    // specification asks.
    let (span, trace) = outbox::trace::request_span("POST /api/jobs", header("traceparent"), header("tracestate"));
    enqueue_traced(state, new, trace).instrument(span).await
}

async fn enqueue_traced(state: AppState, new: NewJob, trace: Option<String>) -> Reply {
    let field = |name: &str, message: &str| ApiError::invalid(format!("field `{name}`: {message}"));
    let mut opts = EnqueueOpts::new().max_payload_bytes(state.max_payload_bytes);
    opts.trace = trace;
    opts.subject = new.subject.map(|s| subject_param("field `subject`", s)).transpose()?;
    opts.queue = new.queue;
    opts.priority = new.priority;
    opts.max_attempts = new.max_attempts;
    opts.cost = new.cost;
    opts.idempotency_key = new.key;
    opts.sequence = new.sequence;
    match (new.delay, new.run_at) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("give `delay` or `run_at`, not both")),
        (Some(delay), None) => opts.delay = Some(duration::forward(&delay).map_err(|e| field("delay", &e))?),
        (None, Some(at)) => {
            let at = DateTime::parse_from_rfc3339(&at).map_err(|_| {
                let shown = duration::quoted(&at);
                field("run_at", &format!("`{shown}` is not an rfc 3339 time like 2026-11-22T10:00:00Z"))
            })?;
            opts.run_at = Some(at.with_timezone(&Utc));
        }
        (None, None) => {}
    }
    let known = state.kinds.resolve(&state.db, &new.kind).await?;
    let enqueued = outbox::enqueue_raw(&state.db, &known.kind, new.payload, opts).await?;
    let status = if enqueued.is_new() { StatusCode::CREATED } else { StatusCode::OK };
    let body = EnqueuedJob { id: enqueued.id().to_owned(), created: enqueued.is_new() };
    Ok((status, axum::Json(body)).into_response())
}

/// The job after an operator action.
#[derive(Serialize, ToSchema)]
pub(crate) struct JobBody {
    job: JobRecord,
}

/// The job after an operator action.
async fn job_reply(state: &AppState, id: &str) -> Reply {
    let job = ops::get(&state.db, id).await?;
    Ok(axum::Json(JobBody { job }).into_response())
}

/// Put a failed or cancelled job back to pending, its attempts reset.
#[utoipa::path(post, path = "/api/jobs/{id}/retry", tag = "jobs", params(JobPath), security(("token" = [])),
    responses((status = 200, description = "Success", body = JobBody), (status = 404, description = "Not found", body = ErrorBody),
        (status = 409, description = "The job is not failed or cancelled", body = ErrorBody)))]
pub(super) async fn retry(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    ops::retry(&state.db, &id).await?;
    job_reply(&state, &id).await
}

/// Cancel a job that has not started.
#[utoipa::path(post, path = "/api/jobs/{id}/cancel", tag = "jobs", params(JobPath), security(("token" = [])),
    responses((status = 200, description = "Success", body = JobBody), (status = 404, description = "Not found", body = ErrorBody),
        (status = 409, description = "The job is claimed or finished", body = ErrorBody)))]
pub(super) async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    ops::cancel(&state.db, &id).await?;
    job_reply(&state, &id).await
}

/// The id of a deleted job.
#[derive(Serialize, ToSchema)]
pub(crate) struct Deleted {
    deleted: String,
}

/// Delete a job that is not claimed.
#[utoipa::path(delete, path = "/api/jobs/{id}", tag = "jobs", params(JobPath), security(("token" = [])),
    responses((status = 200, description = "Success", body = Deleted), (status = 404, description = "Not found", body = ErrorBody),
        (status = 409, description = "The job is claimed", body = ErrorBody)))]
pub(super) async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    ops::delete(&state.db, &id).await?;
    Ok(axum::Json(Deleted { deleted: id }).into_response())
}

/// `POST /api/jobs/retry-failed`: every failed job, or those of one kind, or of one kind and last error (a
/// group of `GET /api/failures`).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RetryFailed {
    /// Only jobs of this kind.
    kind: Option<String>,
    /// Only jobs whose last error is this one (with `kind`).
    error: Option<String>,
}

/// How many jobs were put back to pending.
#[derive(Serialize, ToSchema)]
pub(crate) struct RetriedCount {
    retried: u64,
}

/// Retry every failed job, or those of one kind, or of one kind and last error.
#[utoipa::path(post, path = "/api/jobs/retry-failed", tag = "jobs", request_body = RetryFailed, security(("token" = [])),
    responses((status = 200, description = "Success", body = RetriedCount), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody)))]
pub(super) async fn retry_failed(State(state): State<AppState>, Json(body): Json<RetryFailed>) -> Reply {
    let n = ops::retry_failed_with(&state.db, body.kind.as_deref(), body.error.as_deref()).await?;
    Ok(axum::Json(RetriedCount { retried: n }).into_response())
}

/// A subject given to the API, checked: `what` names the parameter or field.
fn subject_param(what: &str, subject: String) -> Result<String, ApiError> {
    outbox::check_subject(&subject).map_err(|e| ApiError::invalid(format!("{what}: {e}")))?;
    Ok(subject)
}

/// `POST /api/jobs/cancel-subject` and `POST /api/jobs/retry-subject`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SubjectBody {
    /// The domain row the jobs are about (`order:42`).
    subject: String,
}

/// How many jobs were cancelled.
#[derive(Serialize, ToSchema)]
pub(crate) struct CancelledCount {
    cancelled: u64,
}

/// Cancel every pending job about a subject; jobs already running finish.
#[utoipa::path(post, path = "/api/jobs/cancel-subject", tag = "jobs", request_body = SubjectBody, security(("token" = [])),
    responses((status = 200, description = "Success", body = CancelledCount), (status = 400, description = "The subject is invalid: the message says why", body = ErrorBody)))]
pub(super) async fn cancel_subject(State(state): State<AppState>, Json(body): Json<SubjectBody>) -> Reply {
    let subject = subject_param("field `subject`", body.subject)?;
    let n = ops::cancel_subject(&state.db, &subject).await?;
    Ok(axum::Json(CancelledCount { cancelled: n }).into_response())
}

/// Put every failed or cancelled job about a subject back to pending.
#[utoipa::path(post, path = "/api/jobs/retry-subject", tag = "jobs", request_body = SubjectBody, security(("token" = [])),
    responses((status = 200, description = "Success", body = RetriedCount), (status = 400, description = "The subject is invalid: the message says why", body = ErrorBody)))]
pub(super) async fn retry_subject(State(state): State<AppState>, Json(body): Json<SubjectBody>) -> Reply {
    let subject = subject_param("field `subject`", body.subject)?;
    let n = ops::retry_subject(&state.db, &subject).await?;
    Ok(axum::Json(RetriedCount { retried: n }).into_response())
}
