//! Remote workers: claim a batch, then heartbeat, complete, fail or snooze each job. Every call after the
//! claim names the worker and the claim's run and is fenced like an in-process worker's write: a claim
//! that expired and was rescued, or that already ended, answers 409 `stale_claim` and changes nothing.

use std::time::Duration;

use axum::extract::State;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use outbox::JobStatus;
use outbox::remote::{self, ClaimRequest, RemoteJob};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::doc::{ErrorBody, JobPath};
use super::{AppState, Reply};
use crate::api_error::ApiError;
use crate::duration;
use crate::extract::{Json, Path};

/// The lease of a claim that names none.
const DEFAULT_LEASE: Duration = Duration::from_secs(60);

fn lease_of(field: &str, text: Option<String>) -> Result<Duration, ApiError> {
    text.map(|t| duration::parse(&t).map_err(|e| ApiError::invalid(format!("field `{field}`: {e}"))))
        .transpose()
        .map(|d| d.unwrap_or(DEFAULT_LEASE))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ClaimBody {
    /// The worker's id, named again by every call about the jobs it claims.
    worker: String,
    /// The kinds it runs.
    kinds: Vec<String>,
    /// Only jobs of these queues (every queue by default).
    queues: Option<Vec<String>>,
    /// At most this many jobs (10 by default).
    limit: Option<usize>,
    /// How long the claims hold unless renewed (`60s` by default).
    lease: Option<String>,
    /// The host it runs on, shown with the worker.
    host: Option<String>,
    /// Its process id, shown with the worker.
    pid: Option<i64>,
    /// When no job is due, wait for one up to this long (at most `5m`, and a second less than the server's
    /// request timeout, 30 s by default) instead of answering an empty list at once.
    wait: Option<String>,
}

/// The jobs a claim took.
#[derive(Serialize, ToSchema)]
pub(crate) struct Claimed {
    jobs: Vec<RemoteJob>,
}

/// Claim up to `limit` due jobs of the given kinds, each leased to the worker; with `wait`, wait for one.
#[utoipa::path(post, path = "/api/work/claim", tag = "work", request_body = ClaimBody, security(("token" = [])),
    responses((status = 200, description = "The claimed jobs, possibly none", body = Claimed), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody)))]
// The claim runs in a task of its own, which outlives the request: a client that goes away (or a request that
// times out) stops a waiting claim between looks, and the jobs of a claim that was running then are given
// back at once, their attempts unused, instead of staying claimed by no one until their leases run out.
pub(super) async fn claim(State(state): State<AppState>, Json(body): Json<ClaimBody>) -> Reply {
    let req = ClaimRequest {
        worker: body.worker,
        host: body.host,
        pid: body.pid,
        kinds: body.kinds,
        queues: body.queues,
        limit: body.limit.unwrap_or(10),
        lease: lease_of("lease", body.lease)?,
    };
    let wait = match body.wait {
        Some(text) => {
            let wait = duration::parse(&text).map_err(|e| ApiError::invalid(format!("field `wait`: {e}")))?;
            if wait > remote::MAX_CLAIM_WAIT {
                return Err(ApiError::invalid(format!(
                    "field `wait`: {text} is longer than the longest wait, {}s",
                    remote::MAX_CLAIM_WAIT.as_secs()
                )));
            }
            // Answered a second before the request would time out: an empty list, not a 408.
            Some(wait.min(state.request_timeout.saturating_sub(Duration::from_secs(1))))
        }
        None => None,
    };
    let (mut reply, answer) = tokio::sync::oneshot::channel();
    let db = state.db.clone();
    tokio::spawn(async move {
        let claimed = match wait {
            Some(wait) => remote::claim_waiting_until(&db, &req, wait, reply.closed()).await,
            None => remote::claim(&db, &req).await,
        };
        if let Err(Ok(jobs)) = reply.send(claimed) {
            // The request is gone: no one will run these.
            if let Err(e) = remote::release(&db, &req.worker, &jobs).await {
                tracing::warn!(worker = %req.worker, jobs = jobs.len(), error = %e,
                    "could not give back the jobs of a claim whose client went away; their leases will run out");
            }
        }
    });
    let jobs = answer.await.map_err(|_| ApiError::internal(&"the claim's task ended without an answer"))??;
    Ok(axum::Json(Claimed { jobs }).into_response())
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct HeartbeatBody {
    /// The worker that claimed the job.
    worker: String,
    /// The claim's `run`, as the claim answered it (`attempt`, its name before, is still taken: a value that
    /// is not the claim's run is refused as stale).
    #[serde(alias = "attempt")]
    run: i32,
    /// Keep the claim this long from now (`60s` by default); never shortens it.
    lease: Option<String>,
}

/// A claim's lease as stored.
#[derive(Serialize, ToSchema)]
pub(crate) struct Lease {
    id: String,
    lease_expires_at: DateTime<Utc>,
}

/// A job's state after a remote worker's outcome.
#[derive(Serialize, ToSchema)]
pub(crate) struct Outcome {
    id: String,
    /// `completed`, `pending` (it runs again) or `failed`.
    status: JobStatus,
}

/// Renew a claim's lease.
#[utoipa::path(post, path = "/api/work/jobs/{id}/heartbeat", tag = "work", params(JobPath), request_body = HeartbeatBody,
    security(("token" = [])), responses((status = 200, description = "Success", body = Lease), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody),
        (status = 409, description = "`stale_claim`: the claim expired and was rescued, or already ended", body = ErrorBody)))]
pub(super) async fn heartbeat(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<HeartbeatBody>,
) -> Reply {
    let lease = lease_of("lease", body.lease)?;
    let until = remote::heartbeat(&state.db, &body.worker, &id, body.run, lease).await?;
    Ok(axum::Json(Lease { id, lease_expires_at: until }).into_response())
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CompleteBody {
    /// The worker that claimed the job.
    worker: String,
    /// The claim's `run`, as the claim answered it (`attempt`, its name before, is still taken: a value that
    /// is not the claim's run is refused as stale).
    #[serde(alias = "attempt")]
    run: i32,
    /// What the job produced, stored as its output.
    output: Option<Value>,
}

/// Complete a claimed job.
#[utoipa::path(post, path = "/api/work/jobs/{id}/complete", tag = "work", params(JobPath), request_body = CompleteBody,
    security(("token" = [])), responses((status = 200, description = "Success", body = Outcome), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody),
        (status = 409, description = "`stale_claim`: nothing was changed", body = ErrorBody)))]
pub(super) async fn complete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<CompleteBody>,
) -> Reply {
    remote::complete(&state.db, &body.worker, &id, body.run, body.output).await?;
    Ok(axum::Json(Outcome { id, status: JobStatus::Completed }).into_response())
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FailBody {
    /// The worker that claimed the job.
    worker: String,
    /// The claim's `run`, as the claim answered it (`attempt`, its name before, is still taken: a value that
    /// is not the claim's run is refused as stale).
    #[serde(alias = "attempt")]
    run: i32,
    /// What went wrong.
    error: String,
    /// Whether another attempt may succeed (default true); false fails the job for good.
    retryable: Option<bool>,
    /// When to try again (`30s`); the default backoff when absent.
    retry_in: Option<String>,
}

/// Fail a claimed job's attempt: retried after a backoff while attempts are left, failed for good otherwise.
#[utoipa::path(post, path = "/api/work/jobs/{id}/fail", tag = "work", params(JobPath), request_body = FailBody,
    security(("token" = [])), responses((status = 200, description = "Success", body = Outcome), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody),
        (status = 409, description = "`stale_claim`: nothing was changed", body = ErrorBody)))]
pub(super) async fn fail(State(state): State<AppState>, Path(id): Path<String>, Json(body): Json<FailBody>) -> Reply {
    if body.error.trim().is_empty() {
        return Err(ApiError::invalid("field `error`: say what went wrong"));
    }
    let retry_in = body
        .retry_in
        .map(|t| duration::forward(&t).map_err(|e| ApiError::invalid(format!("field `retry_in`: {e}"))))
        .transpose()?;
    let status =
        remote::fail(&state.db, &body.worker, &id, body.run, &body.error, body.retryable.unwrap_or(true), retry_in)
            .await?;
    Ok(axum::Json(Outcome { id, status }).into_response())
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SnoozeBody {
    /// The worker that claimed the job.
    worker: String,
    /// The claim's `run`, as the claim answered it (`attempt`, its name before, is still taken: a value that
    /// is not the claim's run is refused as stale).
    #[serde(alias = "attempt")]
    run: i32,
    /// How long to wait (`5m`).
    delay: String,
}

/// Run a claimed job again later, giving its attempt back.
#[utoipa::path(post, path = "/api/work/jobs/{id}/snooze", tag = "work", params(JobPath), request_body = SnoozeBody,
    security(("token" = [])), responses((status = 200, description = "Success", body = Outcome), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody),
        (status = 409, description = "`stale_claim`: nothing was changed", body = ErrorBody)))]
pub(super) async fn snooze(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(body): Json<SnoozeBody>,
) -> Reply {
    let delay = duration::forward(&body.delay).map_err(|e| ApiError::invalid(format!("field `delay`: {e}")))?;
    remote::snooze(&state.db, &body.worker, &id, body.run, delay).await?;
    Ok(axum::Json(Outcome { id, status: JobStatus::Pending }).into_response())
}
