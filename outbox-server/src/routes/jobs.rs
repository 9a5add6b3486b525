//! The job routes: list, get with history, enqueue, retry, cancel, delete, retry every failed job.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use outbox_core::JobFilter;
use outbox_core::ops;
use outbox_core::{EnqueueOpts, JobStatus};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AppState, Reply, given, limit_param, param_error};
use crate::api_error::ApiError;
use crate::duration;
use crate::extract::{Json, Path, Query};

/// Pages hold at most this many jobs.
const MAX_LIMIT: u64 = 1_000;
const DEFAULT_LIMIT: u64 = 100;

/// `GET /api/jobs`: every parameter is text here and parsed below, so an error names the parameter.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListParams {
    status: Option<String>,
    kind: Option<String>,
    queue: Option<String>,
    since: Option<String>,
    key: Option<String>,
    before: Option<String>,
    limit: Option<String>,
}

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
        before: given(params.before),
        limit,
        ..JobFilter::default()
    };
    let jobs = ops::list(&state.db, &filter).await?;
    // A full page may have more behind it; a short one is the last.
    let next = (jobs.len() as u64 == limit).then(|| jobs.last().map(|j| j.id.clone())).flatten();
    Ok(axum::Json(json!({ "jobs": jobs, "next": next })).into_response())
}

pub(super) async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    let job = ops::get(&state.db, &id).await?;
    let history = ops::history(&state.db, &id).await?;
    Ok(axum::Json(json!({ "job": job, "history": history })).into_response())
}

/// `POST /api/jobs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewJob {
    kind: String,
    payload: Value,
    queue: Option<String>,
    priority: Option<i32>,
    /// Run no earlier than this long from now (`30s`).
    delay: Option<String>,
    /// Run no earlier than this time (RFC 3339).
    run_at: Option<String>,
    max_attempts: Option<i32>,
    /// Idempotency key.
    key: Option<String>,
    /// Sequence key.
    sequence: Option<String>,
}

pub(super) async fn enqueue(State(state): State<AppState>, Json(new): Json<NewJob>) -> Reply {
    let field = |name: &str, message: &str| ApiError::invalid(format!("field `{name}`: {message}"));
    let mut opts = EnqueueOpts::new().max_payload_bytes(state.max_payload_bytes);
    opts.queue = new.queue;
    opts.priority = new.priority;
    opts.max_attempts = new.max_attempts;
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
    let enqueued = outbox_core::enqueue_raw(&state.db, &known.kind, new.payload, opts).await?;
    let status = if enqueued.is_new() { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(json!({ "id": enqueued.id(), "created": enqueued.is_new() }))).into_response())
}

/// The job after an operator action.
async fn job_reply(state: &AppState, id: &str) -> Reply {
    let job = ops::get(&state.db, id).await?;
    Ok(axum::Json(json!({ "job": job })).into_response())
}

pub(super) async fn retry(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    ops::retry(&state.db, &id).await?;
    job_reply(&state, &id).await
}

pub(super) async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    ops::cancel(&state.db, &id).await?;
    job_reply(&state, &id).await
}

pub(super) async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    ops::delete(&state.db, &id).await?;
    Ok(axum::Json(json!({ "deleted": id })).into_response())
}

/// `POST /api/jobs/retry-failed`: every failed job, or those of one kind, or of one kind and last error (a
/// group of `GET /api/failures`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RetryFailed {
    kind: Option<String>,
    error: Option<String>,
}

pub(super) async fn retry_failed(State(state): State<AppState>, Json(body): Json<RetryFailed>) -> Reply {
    let n = ops::retry_failed_with(&state.db, body.kind.as_deref(), body.error.as_deref()).await?;
    Ok(axum::Json(json!({ "retried": n })).into_response())
}
