//! The router: which route needs which role, and the layers every request passes (panic catching, JSON
//! errors, logging, CORS, timeout, body limit).

pub(crate) mod doc;
mod events;
mod flow;
mod health;
mod jobs;
mod overview;
mod work;
mod workflows;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use sea_orm::DatabaseConnection;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::CorsLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api_error::ApiError;
use crate::auth::Auth;
use crate::kinds::KnownKinds;
use crate::metrics::FleetCounters;
use crate::opts::{Role, ServerOpts};
pub(crate) use health::Session;

/// What every handler reaches.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) db: DatabaseConnection,
    pub(crate) kinds: KnownKinds,
    /// How often event readers look for other processes' events.
    pub(crate) events_poll: Duration,
    /// The largest payload `POST /api/jobs` enqueues.
    pub(crate) max_payload_bytes: usize,
    /// The fleet's job counters for `/metrics`, driven by the event feed.
    pub(crate) counters: Arc<FleetCounters>,
    /// How long a request may take before it is answered 408: a waiting claim answers a second before.
    pub(crate) request_timeout: Duration,
    /// Which roles the request's token grants, for `GET /api/session`.
    pub(crate) auth: Arc<Auth>,
}

/// What a handler answers.
pub(crate) type Reply = Result<Response, ApiError>;

/// The outbox API as an axum [`Router`], to serve with [`crate::serve`] or mount in an application's router
/// under any prefix with [`Router::nest`]. See the crate docs for its routes.
///
/// Routes are grouped by the role their tokens need; a route added to a group is guarded with the group.
pub fn router(db: DatabaseConnection, opts: ServerOpts) -> Router {
    let auth = Auth::new(&opts);
    let counters = FleetCounters::new();
    counters.follow(db.clone(), opts.events_poll);
    let state = AppState {
        db,
        kinds: KnownKinds::new(opts.kinds.clone()),
        events_poll: opts.events_poll,
        max_payload_bytes: opts.max_payload_bytes,
        counters,
        request_timeout: opts.request_timeout,
        auth: Arc::clone(&auth),
    };
    let (routes, document) = api(&auth);
    let mut api = routes
        .merge(crate::pages::routes())
        .fallback(unknown_route)
        .with_state(state)
        .layer(axum::Extension(health::Document::new(&document)))
        .layer(DefaultBodyLimit::max(opts.effective_body_limit()))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, opts.request_timeout));
    if !opts.cors_origins.is_empty() {
        api = api.layer(cors(&opts.cors_origins));
    }
    let timeout = opts.request_timeout;
    api.layer(middleware::from_fn(log))
        .layer(middleware::from_fn(move |req: Request, next: Next| json_errors(timeout, req, next)))
        .layer(CatchPanicLayer::custom(panicked))
}

/// Every API route, each guarded by the role its group needs, and the document describing them: one router
/// split once, so that a route is served only as the document describes it. Each route is declared once, by its
/// handler's `#[utoipa::path]`: `routes!` serves it and describes it.
fn api(auth: &Arc<Auth>) -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let open = OpenApiRouter::new()
        .routes(routes!(health::health))
        .routes(routes!(health::session))
        .routes(routes!(health::openapi));
    let read = OpenApiRouter::new()
        .routes(routes!(overview::stats))
        .routes(routes!(overview::activity))
        .routes(routes!(overview::failures))
        .routes(routes!(overview::queues))
        .routes(routes!(overview::kinds))
        .routes(routes!(overview::kind))
        .routes(routes!(jobs::list))
        .routes(routes!(jobs::get))
        .routes(routes!(workflows::get))
        .routes(routes!(health::workers))
        .routes(routes!(health::schedules))
        .routes(routes!(events::events))
        .routes(routes!(flow::show))
        .routes(routes!(flow::shares))
        .routes(routes!(health::metrics));
    let operate = OpenApiRouter::new()
        .routes(routes!(jobs::enqueue))
        .routes(routes!(workflows::create))
        .routes(routes!(workflows::cancel))
        .routes(routes!(jobs::retry_failed))
        .routes(routes!(jobs::cancel_subject))
        .routes(routes!(jobs::retry_subject))
        .routes(routes!(jobs::retry))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::delete))
        .routes(routes!(flow::pause))
        .routes(routes!(flow::resume))
        .routes(routes!(flow::weight));
    let work = OpenApiRouter::new()
        .routes(routes!(work::claim))
        .routes(routes!(work::heartbeat))
        .routes(routes!(work::complete))
        .routes(routes!(work::fail))
        .routes(routes!(work::snooze));
    let (routes, mut document) = OpenApiRouter::with_openapi(doc::frame())
        .merge(open)
        .merge(auth.require(Role::Read, read))
        .merge(auth.require(Role::Operate, operate))
        .merge(auth.require(Role::Work, work))
        .split_for_parts();
    doc::add_shared_responses(&mut document);
    (routes, document)
}

/// The API's OpenAPI 3.1 document, as `GET /api/openapi.json` serves it (pretty-printed here).
pub fn openapi_json() -> Result<String, serde_json::Error> {
    api(&Auth::new(&ServerOpts::new())).1.to_pretty_json()
}

/// Browsers on the configured origins may call every route with a token.
fn cors(origins: &[HeaderValue]) -> CorsLayer {
    CorsLayer::new()
        .allow_origin(origins.to_vec())
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
        .max_age(Duration::from_secs(600))
}

/// A query parameter or field that was given: an empty value (`?status=`, as forms send for "any") counts
/// as not given.
pub(crate) fn given(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

/// Query parameter `name`, a duration back from now (`1h`), or `default` when not given.
pub(crate) fn duration_param(value: Option<String>, name: &str, default: Duration) -> Result<Duration, ApiError> {
    match given(value) {
        Some(text) => crate::duration::back(&text).map_err(|e| param_error(name, &e)),
        None => Ok(default),
    }
}

/// Query parameter `limit`, a whole number from 1 to `max`, or `default` when not given.
pub(crate) fn limit_param(value: Option<String>, default: u64, max: u64) -> Result<u64, ApiError> {
    match given(value) {
        None => Ok(default),
        Some(text) => text.parse().ok().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
            let shown = crate::duration::quoted(&text);
            param_error("limit", &format!("`{shown}` is not a whole number from 1 to {max}"))
        }),
    }
}

/// 400 naming the query parameter at fault.
pub(crate) fn param_error(name: &str, message: &str) -> ApiError {
    ApiError::invalid(format!("query parameter `{name}`: {message}"))
}

async fn unknown_route(method: Method, uri: axum::http::Uri) -> ApiError {
    let path = crate::duration::quoted(uri.path());
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no route for {method} {path}"))
}

/// Answers as JSON every error response made outside the handlers (a method a route does not answer, a
/// timeout), keeping its status and headers.
async fn json_errors(timeout: Duration, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = crate::duration::quoted(req.uri().path());
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let message = match status {
        // The route adds `Allow` once this answer leaves the layers.
        StatusCode::METHOD_NOT_ALLOWED => format!("{path} does not answer {method}; `Allow` lists what it answers"),
        StatusCode::REQUEST_TIMEOUT => format!("the request was not answered within {}s", timeout.as_secs_f64()),
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is over the size limit".to_owned(),
        other => other.canonical_reason().unwrap_or("the request failed").to_lowercase(),
    };
    let (mut parts, _) = response.into_parts();
    let reply = ApiError::new(status, ApiError::code_for(status), message).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.extend(reply.headers().clone());
    Response::from_parts(parts, reply.into_body())
}

/// One line per request: method, route (never the query string or headers, which may carry keys or
/// tokens), status and time taken.
async fn log(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_owned();
    let start = Instant::now();
    let response = next.run(req).await;
    let status = response.status().as_u16();
    let elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    if response.status().is_server_error() {
        tracing::warn!(%method, %route, status, elapsed_ms, "request failed");
    } else {
        tracing::debug!(%method, %route, status, elapsed_ms, "request");
    }
    response
}

/// A panicking handler is a bug: the client gets 500 `internal`, the log gets the panic.
fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    ApiError::internal(&format_args!("handler panicked: {what}")).into_response()
}
