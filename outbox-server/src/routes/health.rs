//! `GET /api/health` (open to every caller, for load balancers and probes) and `GET /api/workers`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use outbox::{ScheduleRecord, WorkerRecord, ops};
use serde::Serialize;
use utoipa::ToSchema;

use super::{AppState, Reply};

/// The server's health: counts, never errors (which may name hosts or files).
#[derive(Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok` or `unhealthy`.
    status: &'static str,
    /// `reachable` or `unreachable`.
    database: &'static str,
    /// Absent when the database is unreachable.
    #[serde(skip_serializing_if = "Option::is_none")]
    migrations: Option<Migrations>,
    /// Live workers; `null` when they cannot be read or migrations are pending (absent when the database is
    /// unreachable).
    #[serde(skip_serializing_if = "Option::is_none")]
    workers: Option<Option<usize>>,
    /// How long the oldest job that could run now has waited; `null` when none waits, when the queues cannot be
    /// read or migrations are pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    oldest_pending_age_secs: Option<Option<f64>>,
}

/// Whether the schema is current.
#[derive(Serialize, ToSchema)]
pub(crate) struct Migrations {
    current: bool,
    /// Migrations the database lacks.
    pending: Vec<String>,
}

/// 200 when the database answers and its schema is current, 503 otherwise. It tells counts, never errors
/// (which may name hosts or files): the server log has those.
#[utoipa::path(get, path = "/api/health", tag = "health",
    responses((status = 200, description = "Healthy", body = Health), (status = 503, description = "Unhealthy", body = Health)))]
pub(super) async fn health(State(state): State<AppState>) -> Response {
    let db = &state.db;
    let pending = match outbox::pending_migrations(db).await {
        Ok(pending) => pending,
        Err(e) => {
            tracing::warn!(error = %e, "health check: the database cannot be read");
            let body = Health {
                status: "unhealthy",
                database: "unreachable",
                migrations: None,
                workers: None,
                oldest_pending_age_secs: None,
            };
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
    let body = Health {
        status: if healthy { "ok" } else { "unhealthy" },
        database: "reachable",
        migrations: Some(Migrations { current, pending }),
        workers: Some(workers),
        oldest_pending_age_secs: Some(age),
    };
    let status = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(body)).into_response()
}

/// The live workers.
#[derive(Serialize, ToSchema)]
pub(crate) struct Workers {
    workers: Vec<WorkerRecord>,
}

/// The live workers, in-process and remote, oldest first.
#[utoipa::path(get, path = "/api/workers", tag = "overview", security(("token" = [])), responses((status = 200, description = "Success", body = Workers)))]
pub(super) async fn workers(State(state): State<AppState>) -> Reply {
    Ok(axum::Json(Workers { workers: ops::workers(&state.db).await? }).into_response())
}

/// The periodic schedules.
#[derive(Serialize, ToSchema)]
pub(crate) struct Schedules {
    schedules: Vec<ScheduleRecord>,
}

/// The periodic schedules with their last and next ticks.
#[utoipa::path(get, path = "/api/schedules", tag = "overview", security(("token" = [])), responses((status = 200, description = "Success", body = Schedules)))]
pub(super) async fn schedules(State(state): State<AppState>) -> Reply {
    Ok(axum::Json(Schedules { schedules: ops::schedules(&state.db).await? }).into_response())
}

/// Prometheus metrics in the OpenMetrics text format: job counts by queue, kind and state, and the fleet's
/// job counters.
#[utoipa::path(get, path = "/metrics", tag = "health", security(("token" = [])),
    responses((status = 200, description = "OpenMetrics text", body = String, content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")))]
pub(super) async fn metrics(State(state): State<AppState>) -> Reply {
    let text = crate::metrics::render(&state.db, &state.counters).await?;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        .into_response())
}

/// What `GET /api/session` answers.
#[derive(Serialize, ToSchema)]
pub(crate) struct Session {
    /// Whether the server is configured with tokens.
    tokens: bool,
    /// The strongest role the request's token grants (`operate`, `read` or `work`); `null` for none.
    role: Option<&'static str>,
    /// `valid`, `invalid` or `none`.
    token: &'static str,
}

impl Session {
    pub(crate) fn new(tokens: bool, role: Option<&'static str>, token: &'static str) -> Self {
        Session { tokens, role, token }
    }
}

/// Whether the server needs tokens and which role the request's token grants; never an error, so a page can
/// ask before it has a token.
#[utoipa::path(get, path = "/api/session", tag = "health", responses((status = 200, description = "Success", body = Session)))]
pub(super) async fn session(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    axum::Json(state.auth.session(&headers)).into_response()
}

/// The OpenAPI document, serialized once when the router is built, or why it could not be.
#[derive(Clone)]
pub(crate) struct Document(std::sync::Arc<Result<String, String>>);

impl Document {
    pub(crate) fn new(doc: &utoipa::openapi::OpenApi) -> Self {
        Document(std::sync::Arc::new(doc.to_json().map_err(|e| e.to_string())))
    }
}

/// This API described as an OpenAPI 3.1 document, for clients in other languages.
#[utoipa::path(get, path = "/api/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
pub(super) async fn openapi(axum::Extension(doc): axum::Extension<Document>) -> Reply {
    match doc.0.as_ref() {
        Ok(text) => Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], text.clone()).into_response()),
        Err(e) => Err(crate::api_error::ApiError::internal(&format_args!("serializing the openapi document: {e}"))),
    }
}
