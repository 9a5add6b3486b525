//! The routes that look at the queue as a whole: stats, queues, kinds.

use std::time::Duration;

use axum::extract::State;
use axum::response::IntoResponse;
use outbox_core::ops;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AppState, Reply, given, param_error};
use crate::duration;
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
    let window = match given(params.window) {
        Some(text) => duration::back(&text).map_err(|e| param_error("window", &e))?,
        None => Duration::from_secs(3_600),
    };
    Ok(axum::Json(ops::stats(&state.db, window).await?).into_response())
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
