//! The routes that look at the queue as a whole: stats, queues, kinds.

use std::time::Duration;

use axum::extract::State;
use axum::response::IntoResponse;
use outbox_core::ops;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AppState, Reply, duration_param, limit_param, param_error};
use crate::extract::{Path, Query};
use crate::kinds::KnownKind;

/// `GET /api/stats`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StatsParams {
    /// The window of durations and recent activity (`1h` by default).
    window: Option<String>,
}

pub(super) async fn stats(State(state): State<AppState>, Query(params): Query<StatsParams>) -> Reply {
    let window = duration_param(params.window, "window", Duration::from_secs(3_600))?;
    Ok(axum::Json(ops::stats(&state.db, window).await?).into_response())
}

/// `GET /api/activity`: completed and failed jobs per `bucket` over the last `window`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActivityParams {
    /// How far back (`1h` by default).
    window: Option<String>,
    /// The stretch each point counts (`1m` by default).
    bucket: Option<String>,
}

/// The most points one answer holds.
const MAX_POINTS: u64 = 1_440;

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
    let body = json!({ "window_secs": window.as_secs(), "bucket_secs": bucket.as_secs(), "points": points });
    Ok(axum::Json(body).into_response())
}

/// `GET /api/failures`: failed jobs grouped by kind and last error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FailuresParams {
    limit: Option<String>,
}

pub(super) async fn failures(State(state): State<AppState>, Query(params): Query<FailuresParams>) -> Reply {
    let limit = limit_param(params.limit, 100, 1_000)?;
    Ok(axum::Json(json!({ "groups": ops::failure_groups(&state.db, limit).await? })).into_response())
}

pub(super) async fn queues(State(state): State<AppState>) -> Reply {
    Ok(axum::Json(json!({ "queues": ops::queues(&state.db).await? })).into_response())
}

pub(super) async fn kinds(State(state): State<AppState>) -> Reply {
    let all = state.kinds.all(&state.db).await?;
    let kinds: Vec<Value> = all.iter().map(|(name, known)| describe(name, known)).collect();
    Ok(axum::Json(json!({ "kinds": kinds })).into_response())
}

pub(super) async fn kind(State(state): State<AppState>, Path(name): Path<String>) -> Reply {
    let known = state.kinds.resolve(&state.db, &name).await?;
    let mut doc = describe(&name, &known);
    doc["schema"] = known.kind.schema().clone();
    Ok(axum::Json(doc).into_response())
}

/// A kind's name, where it came from, its schema hash and options, and when a worker recorded it.
fn describe(name: &str, known: &KnownKind) -> Value {
    let kind = &known.kind;
    json!({
        "name": name,
        "source": known.source,
        "schema_hash": kind.schema_hash(),
        "options": {
            "queue": kind.queue(),
            "priority": kind.priority(),
            "max_attempts": kind.max_attempts(),
            "unique": kind.is_unique(),
            "key_fields": kind.key_fields(),
            "sequence": kind.sequence(),
            "on_sequence_failure": kind.on_sequence_failure(),
            "concurrency": kind.concurrency(),
        },
        "recorded": known.recorded.as_ref().map(|r| json!({
            "by": r.recorded_by,
            "first_seen_at": r.first_seen_at,
            "updated_at": r.updated_at,
        })),
    })
}
