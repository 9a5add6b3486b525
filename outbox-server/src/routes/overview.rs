//! The routes that look at the queue as a whole: stats, queues, kinds.

use std::time::Duration;

use axum::extract::State;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use outbox::SequenceFailure;
use outbox::ops::{self, ActivityPoint, FailureGroup, QueueCounts, Stats};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::doc::ErrorBody;
use super::{AppState, Reply, duration_param, limit_param, param_error};
use crate::extract::{Path, Query};
use crate::kinds::{KindSource, KnownKind};

/// `GET /api/stats`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct StatsParams {
    /// The window of durations and recent activity (`1h` by default).
    window: Option<String>,
}

/// Counts by kind and status, recent failures, stuck claims, durations, duplicates, blocked sequences and
/// the latest reconciliation reports.
#[utoipa::path(get, path = "/api/stats", tag = "overview", params(StatsParams), security(("token" = [])),
    responses((status = 200, description = "Success", body = Stats), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody)))]
pub(super) async fn stats(State(state): State<AppState>, Query(params): Query<StatsParams>) -> Reply {
    let window = duration_param(params.window, "window", Duration::from_secs(3_600))?;
    Ok(axum::Json(ops::stats(&state.db, window).await?).into_response())
}

/// `GET /api/activity`: completed and failed jobs per `bucket` over the last `window`.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ActivityParams {
    /// How far back (`1h` by default).
    window: Option<String>,
    /// The stretch each point counts (`1m` by default).
    bucket: Option<String>,
}

/// The most points one answer holds.
const MAX_POINTS: u64 = 1_440;

/// Completed and failed jobs per bucket.
#[derive(Serialize, ToSchema)]
pub(crate) struct Activity {
    window_secs: u64,
    bucket_secs: u64,
    points: Vec<ActivityPoint>,
}

/// Completed and failed jobs per `bucket` over the last `window` (at most 1440 points).
#[utoipa::path(get, path = "/api/activity", tag = "overview", params(ActivityParams), security(("token" = [])),
    responses((status = 200, description = "Success", body = Activity), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody)))]
pub(super) async fn activity(State(state): State<AppState>, Query(params): Query<ActivityParams>) -> Reply {
    let window = duration_param(params.window, "window", Duration::from_secs(3_600))?;
    let bucket = duration_param(params.bucket, "bucket", Duration::from_secs(60))?;
    if bucket < Duration::from_secs(1) {
        return Err(param_error("bucket", "must be at least 1s"));
    }
    if window.as_secs() / bucket.as_secs() > MAX_POINTS {
        let most = format!("`window` / `bucket` must be at most {MAX_POINTS} points; take a longer bucket");
        return Err(param_error("bucket", &most));
    }
    let points = ops::activity(&state.db, window, bucket).await?;
    let body = Activity { window_secs: window.as_secs(), bucket_secs: bucket.as_secs(), points };
    Ok(axum::Json(body).into_response())
}

/// `GET /api/failures`: failed jobs grouped by kind and last error.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct FailuresParams {
    /// At most this many groups, 1 to 1000 (100 by default).
    limit: Option<String>,
}

/// Failed jobs grouped by kind and last error, largest group first.
#[derive(Serialize, ToSchema)]
pub(crate) struct FailureGroups {
    groups: Vec<FailureGroup>,
}

/// Failed jobs grouped by kind and last error.
#[utoipa::path(get, path = "/api/failures", tag = "overview", params(FailuresParams), security(("token" = [])),
    responses((status = 200, description = "Success", body = FailureGroups), (status = 400, description = "Invalid request: the message names the parameter or field at fault", body = ErrorBody)))]
pub(super) async fn failures(State(state): State<AppState>, Query(params): Query<FailuresParams>) -> Reply {
    let limit = limit_param(params.limit, 100, 1_000)?;
    Ok(axum::Json(FailureGroups { groups: ops::failure_groups(&state.db, limit).await? }).into_response())
}

/// Jobs of each queue by state.
#[derive(Serialize, ToSchema)]
pub(crate) struct Queues {
    queues: Vec<QueueCounts>,
}

/// Every queue with its jobs by state.
#[utoipa::path(get, path = "/api/queues", tag = "overview", security(("token" = [])), responses((status = 200, description = "Success", body = Queues)))]
pub(super) async fn queues(State(state): State<AppState>) -> Reply {
    Ok(axum::Json(Queues { queues: ops::queues(&state.db).await? }).into_response())
}

/// Every kind the server knows.
#[derive(Serialize, ToSchema)]
pub(crate) struct Kinds {
    kinds: Vec<KindDoc>,
}

/// Every kind the server knows: built in, or recorded by a worker.
#[utoipa::path(get, path = "/api/kinds", tag = "overview", security(("token" = [])), responses((status = 200, description = "Success", body = Kinds)))]
pub(super) async fn kinds(State(state): State<AppState>) -> Reply {
    let all = state.kinds.all(&state.db).await?;
    let kinds = all.iter().map(|(name, known)| describe(name, known, false)).collect();
    Ok(axum::Json(Kinds { kinds }).into_response())
}

/// One kind with its payload's JSON Schema.
#[utoipa::path(get, path = "/api/kinds/{kind}", tag = "overview", security(("token" = [])),
    params(("kind" = String, Path, description = "The kind's name")),
    responses((status = 200, description = "Success", body = KindDoc), (status = 404, description = "No kind of this name is known", body = ErrorBody)))]
pub(super) async fn kind(State(state): State<AppState>, Path(name): Path<String>) -> Reply {
    let known = state.kinds.resolve(&state.db, &name).await?;
    Ok(axum::Json(describe(&name, &known, true)).into_response())
}

/// A kind's name, where it came from, its schema hash and options, and when a worker recorded it.
#[derive(Serialize, ToSchema)]
pub(crate) struct KindDoc {
    name: String,
    source: KindSource,
    /// The first 16 hex digits of the sha256 of the canonical schema, as stored on each job.
    schema_hash: String,
    options: KindOptions,
    /// `null` when no worker recorded the kind.
    recorded: Option<Recorded>,
    /// The payload's JSON Schema (`GET /api/kinds/{kind}` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<Value>,
}

/// A kind's defaults.
#[derive(Serialize, ToSchema)]
pub(crate) struct KindOptions {
    queue: String,
    priority: i32,
    max_attempts: i32,
    unique: bool,
    key_fields: Vec<String>,
    sequence: Option<String>,
    on_sequence_failure: SequenceFailure,
    concurrency: Option<u32>,
    /// The fleet-wide rate (`50/1m burst 5`).
    rate: Option<String>,
    /// Whether the rate applies to each key apart.
    rate_per_key: bool,
    /// The template of the rate's and fair share's key.
    flow_key: Option<String>,
    /// Whether claims share out between keys by weight.
    fair: bool,
}

/// When a worker recorded a kind.
#[derive(Serialize, ToSchema)]
pub(crate) struct Recorded {
    by: Option<String>,
    first_seen_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

fn describe(name: &str, known: &KnownKind, with_schema: bool) -> KindDoc {
    let kind = &known.kind;
    KindDoc {
        name: name.to_owned(),
        source: known.source,
        schema_hash: kind.schema_hash().to_owned(),
        options: KindOptions {
            queue: kind.queue().to_owned(),
            priority: kind.priority(),
            max_attempts: kind.max_attempts(),
            unique: kind.is_unique(),
            key_fields: kind.key_fields().iter().map(|f| f.to_string()).collect(),
            sequence: kind.sequence().map(|s| s.to_string()),
            on_sequence_failure: kind.on_sequence_failure(),
            concurrency: kind.concurrency(),
            rate: kind.rate().map(|r| r.to_string()),
            rate_per_key: kind.rate_per_key(),
            flow_key: kind.flow_key_template().map(str::to_owned),
            fair: kind.fair(),
        },
        recorded: known.recorded.as_ref().map(|r| Recorded {
            by: r.recorded_by.clone(),
            first_seen_at: r.first_seen_at,
            updated_at: r.updated_at,
        }),
        schema: with_schema.then(|| known.kind.schema().clone()),
    }
}
