//! The flow-control routes: what is paused or held and every rate's use; pause, hold and resume; fair shares and
//! weights.

use axum::extract::State;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use outbox::flow::{self, Pause, RateUse, Share, Target};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::doc::ErrorBody;
use super::{AppState, Reply};
use crate::api_error::ApiError;
use crate::extract::{Json, Path};

/// What is paused or held, and every rate with what is left of it.
#[derive(Serialize, ToSchema)]
pub(crate) struct FlowState {
    paused: Vec<Pause>,
    rates: Vec<RateUse>,
}

/// Pauses and holds in force, and every rate's use.
#[utoipa::path(get, path = "/api/flow", tag = "flow", security(("token" = [])),
    responses((status = 200, description = "Success", body = FlowState)))]
pub(super) async fn show(State(state): State<AppState>) -> Reply {
    let body = FlowState { paused: flow::paused(&state.db).await?, rates: flow::rates(&state.db).await? };
    Ok(axum::Json(body).into_response())
}

/// A pause, or a hold when `for` is given.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PauseRequest {
    /// What to pause: `{"scope": "queue", "name": "mail"}`, `{"scope": "kind", "name": "k"}` or
    /// `{"scope": "kind", "name": "k", "key": "tenant-a"}`.
    target: Target,
    /// Why, shown with the pause.
    reason: Option<String>,
    /// Hold for this long (`30s`) instead of until resumed.
    #[serde(rename = "for")]
    hold_for: Option<String>,
}

/// What a pause did.
#[derive(Serialize, ToSchema)]
pub(crate) struct Paused {
    paused: Target,
    /// When the hold ends; absent for a pause.
    until: Option<DateTime<Utc>>,
}

/// Pause (or hold) a queue, a kind or one key of a kind, fleet-wide. Names with no jobs yet are accepted: their
/// jobs may arrive later.
#[utoipa::path(post, path = "/api/flow/pause", tag = "flow", request_body = PauseRequest, security(("token" = [])),
    responses((status = 200, description = "Paused", body = Paused),
        (status = 400, description = "Invalid request: the message names the field at fault", body = ErrorBody)))]
pub(super) async fn pause(State(state): State<AppState>, Json(req): Json<PauseRequest>) -> Reply {
    let until = match req.hold_for.as_deref() {
        None => None,
        Some(text) => {
            let d = crate::duration::forward(text).map_err(|e| ApiError::invalid(format!("field `for`: {e}")))?;
            let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
            DateTime::from_timestamp_millis(Utc::now().timestamp_millis().saturating_add(ms))
        }
    };
    match until {
        Some(until) => flow::hold(&state.db, &req.target, until, req.reason.as_deref()).await?,
        None => flow::pause(&state.db, &req.target, req.reason.as_deref()).await?,
    }
    Ok(axum::Json(Paused { paused: req.target, until }).into_response())
}

/// What to resume.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResumeRequest {
    target: Target,
}

/// What a resume did.
#[derive(Serialize, ToSchema)]
pub(crate) struct Resumed {
    resumed: Target,
    /// Whether a pause or hold was in force.
    was_paused: bool,
}

/// End the pause or hold of a queue, a kind or one key of a kind.
#[utoipa::path(post, path = "/api/flow/resume", tag = "flow", request_body = ResumeRequest, security(("token" = [])),
    responses((status = 200, description = "Resumed", body = Resumed),
        (status = 400, description = "Invalid request: the message names the field at fault", body = ErrorBody)))]
pub(super) async fn resume(State(state): State<AppState>, Json(req): Json<ResumeRequest>) -> Reply {
    let was_paused = flow::resume(&state.db, &req.target).await?;
    Ok(axum::Json(Resumed { resumed: req.target, was_paused }).into_response())
}

/// The kind whose fair share is read.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct KindPath {
    /// The kind.
    #[allow(dead_code)]
    kind: String,
}

/// The keys of a fair kind: weight, backlog, running, share.
#[derive(Serialize, ToSchema)]
pub(crate) struct Shares {
    kind: String,
    shares: Vec<Share>,
}

/// The fair share of a kind's keys.
#[utoipa::path(get, path = "/api/flow/shares/{kind}", tag = "flow", params(KindPath), security(("token" = [])),
    responses((status = 200, description = "Success", body = Shares)))]
pub(super) async fn shares(State(state): State<AppState>, Path(kind): Path<String>) -> Reply {
    let shares = flow::shares(&state.db, &kind).await?;
    Ok(axum::Json(Shares { kind, shares }).into_response())
}

/// A key's weight.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Weight {
    kind: String,
    key: String,
    /// At least 1.
    weight: u32,
}

/// Set the fair-share weight of one key of a kind (1 unless set).
#[utoipa::path(post, path = "/api/flow/weights", tag = "flow", request_body = Weight, security(("token" = [])),
    responses((status = 200, description = "Set", body = Weight),
        (status = 400, description = "Invalid request: the message names the field at fault", body = ErrorBody)))]
pub(super) async fn weight(State(state): State<AppState>, Json(w): Json<Weight>) -> Reply {
    flow::set_weight(&state.db, &w.kind, &w.key, w.weight).await?;
    Ok(axum::Json(w).into_response())
}
