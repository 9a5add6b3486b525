//! `GET /api/health` (open to every caller, for load balancers and probes) and `GET /api/workers`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use outbox_core::ops;
use serde_json::json;

use super::{AppState, Reply};

/// 200 when the database answers and its schema is current, 503 otherwise. It tells counts, never errors
/// (which may name hosts or files): the server log has those.
pub(super) async fn health(State(state): State<AppState>) -> Response {
    let db = &state.db;
    let pending = match outbox_core::pending_migrations(db).await {
        Ok(pending) => pending,
        Err(e) => {
            tracing::warn!(error = %e, "health check: the database cannot be read");
            let body = json!({ "status": "unhealthy", "database": "unreachable" });
            return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
        }
    };
    let current = pending.is_empty();
    let workers = if current { ops::workers(db).await.map(|w| w.len()).ok() } else { None };
    let oldest = if current {
        ops::queues(db).await.ok().map(|queues| queues.iter().filter_map(|q| q.oldest_available).min())
    } else {
        None
    };
    let age = oldest.flatten().map(|t| (chrono::Utc::now() - t).num_milliseconds().max(0) as f64 / 1000.0);
    let healthy = current && workers.is_some();
    let body = json!({
        "status": if healthy { "ok" } else { "unhealthy" },
        "database": "reachable",
        "migrations": { "current": current, "pending": pending },
        "workers": workers,
        "oldest_pending_age_secs": age,
    });
    let status = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(body)).into_response()
}

/// `GET /api/workers`: the live workers, in-process and remote.
pub(super) async fn workers(State(state): State<AppState>) -> Reply {
    Ok(axum::Json(json!({ "workers": ops::workers(&state.db).await? })).into_response())
}

/// `GET /api/schedules`: the periodic schedules with their last and next ticks.
pub(super) async fn schedules(State(state): State<AppState>) -> Reply {
    Ok(axum::Json(json!({ "schedules": ops::schedules(&state.db).await? })).into_response())
}

/// `GET /metrics`.
pub(super) async fn metrics(State(state): State<AppState>) -> Reply {
    let text = crate::metrics::render(&state.db, &state.counters).await?;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        .into_response())
}
