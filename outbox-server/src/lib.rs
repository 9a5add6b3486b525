//! An HTTP API over an outbox queue: an [axum] [`Router`](axum::Router) an application mounts under any
//! prefix, and what `outbox serve` runs.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_server::{Role, ServerOpts, Token};
//!
//! let db = outbox::connect("sqlite::memory:").await?;
//! outbox::migrate(&db).await?;
//! let opts = ServerOpts::new()
//!     .token(Token::new(Role::Read, "a-long-random-secret-for-dashboards")?)
//!     .token(Token::new(Role::Operate, "another-long-random-secret")?);
//! // The API answers under /outbox/api/... beside the application's own routes.
//! let app: axum::Router = axum::Router::new().nest("/outbox", outbox_server::router(db, opts));
//! # let _ = app;
//! # Ok(()) }
//! ```
//!
//! # Routes
//!
//! Bodies are JSON; ids are strings; times are RFC 3339. Durations are written `30s`, `15m`, `1h30m`.
//!
//! | route | role | answer |
//! |---|---|---|
//! | `GET /` | none | the dashboard page (its script and style under `/assets/`); it reads everything else with a token |
//! | `GET /api/openapi.json` | none | this API as an OpenAPI 3.1 document, generated from the routes' own types |
//! | `GET /api/session` | none | `{"tokens", "role", "token"}`: the role the request's token grants (`null` without one) |
//! | `GET /api/stats?window=1h` | read | the six answers of [`outbox::ops::stats`] |
//! | `GET /api/activity?window=1h&bucket=1m` | read | `{"window_secs", "bucket_secs", "points": [{at, completed, failed}]}` |
//! | `GET /api/failures?limit=` | read | `{"groups": [{kind, error, count, latest_at, latest_id}]}`, largest first |
//! | `GET /api/queues` | read | `{"queues": [...]}` |
//! | `GET /api/kinds` | read | `{"kinds": [{name, source, schema_hash, options, recorded}]}` |
//! | `GET /api/kinds/{kind}` | read | one kind with its `schema`; 404 `unknown_kind` |
//! | `GET /api/jobs?status=&kind=&queue=&since=&key=&before=&limit=` | read | `{"jobs": [...], "next": id or null}` |
//! | `GET /api/jobs/{id}` | read | `{"job", "history"}`; 404 `not_found` |
//! | `POST /api/jobs` | operate | 201 `{"id", "created": true}`, or 200 `{"id", "created": false}` for a duplicate |
//! | `POST /api/jobs/{id}/retry` | operate | `{"job"}`; 409 `conflict` when its status does not allow it |
//! | `POST /api/jobs/{id}/cancel` | operate | `{"job"}`; 409 `conflict` |
//! | `DELETE /api/jobs/{id}` | operate | `{"deleted": id}`; 409 `conflict` for an active job |
//! | `POST /api/jobs/retry-failed` | operate | `{"retried": n}`; body `{"kind", "error"}`, both optional |
//! | `GET /api/health` | none | `{"status": "ok", ...}`; 503 `{"status": "unhealthy", ...}` (below) |
//! | `GET /api/workers` | read | `{"workers": [...]}`: the live workers, in-process and remote |
//! | `GET /api/schedules` | read | `{"schedules": [...]}`: the periodic schedules with their last and next ticks |
//! | `GET /api/events?kind=&queue=&job=&event=&after=` | read | Server-Sent Events, one per job transition |
//! | `GET /metrics` | read | OpenMetrics text for Prometheus |
//! | `POST /api/work/claim` | work | `{"jobs": [...]}`: the claimed jobs, up to `limit`; with `wait`, once one is due |
//! | `POST /api/work/jobs/{id}/heartbeat` | work | `{"id", "lease_expires_at"}`; 409 `stale_claim` |
//! | `POST /api/work/jobs/{id}/complete` | work | `{"id", "status": "completed"}`; 409 `stale_claim` |
//! | `POST /api/work/jobs/{id}/fail` | work | `{"id", "status": "pending" or "failed"}`; 409 `stale_claim` |
//! | `POST /api/work/jobs/{id}/snooze` | work | `{"id", "status": "pending"}`; 409 `stale_claim` |
//!
//! `GET /api/jobs` lists newest first, `limit` (1 to 1000, default 100) at a time; `next` is set when the
//! page is full, and `before=<next>` asks for the page after it. `since` is a duration ago (`1h`) or a time.
//! An empty parameter counts as not given.
//!
//! `POST /api/jobs` takes `{"kind", "payload", "queue", "priority", "delay", "run_at", "max_attempts",
//! "key", "sequence"}`, all but `kind` and `payload` optional; `delay` and `run_at` exclude each other.
//!
//! `GET /api/health` needs no token, so load balancers and probes can call it. It answers `{"status",
//! "database", "migrations": {"current", "pending"}, "workers", "oldest_pending_age_secs"}`, with 503 when
//! the database cannot be read (`"database": "unreachable"`) or has migrations pending. It tells counts,
//! never errors: the server log has those.
//!
//! `GET /api/workers` lists the registry's live entries, each `{"id", "host", "pid", "queues", "kinds",
//! "concurrency", "running", "remote", "started_at", "last_seen_at", "expires_at"}` (see
//! [`outbox::WorkerRecord`]); an entry whose worker stopped heartbeating drops out when it expires.
//!
//! `GET /api/events` streams the event feed: each event's `id` is its position in the feed, its `event` the
//! transition (`enqueued`, `claimed`, `completed`, `retried`, `failed`, `snoozed`, `released`, `rescued`,
//! `rescued_failed`, `cancelled`, `retried_by_operator`) and its `data` `{"id", "job_id", "kind", "queue",
//! "event", "attempt", "worker", "error", "at"}`. A client that reconnects with `Last-Event-ID` (or
//! `?after=<id>`) gets exactly the events it missed; without either, the stream starts with what is
//! committed from then on. `event` takes a comma-separated list (`completed,failed`); `kind`, `queue` and
//! `job` take one value each. Other processes' events arrive within [`ServerOpts::events_poll`].
//!
//! `GET /metrics` reads `outbox_jobs{kind,status}`, `outbox_queue_jobs{queue,state}`,
//! `outbox_oldest_pending_age_seconds` and `outbox_workers` from the database at each scrape, so every
//! process sharing it is counted; `outbox_jobs_enqueued_total`, `outbox_jobs_completed_total`,
//! `outbox_jobs_failed_total`, `outbox_jobs_retried_total` (by `kind` and `queue`) and the
//! `outbox_job_duration_seconds{kind}` histogram (claim to completion) count the event feed from the moment
//! the server started.
//!
//! A remote worker claims with `{"worker", "kinds", "queues", "limit", "lease", "host", "pid"}`, all but
//! `worker` and `kinds` optional (`limit` 1 to 1000, default 10; `lease` `60s` by default), which also
//! records it in the worker registry. Every later call names the claim: `{"worker", "run"}`, plus
//! `lease` (heartbeat), `output` (complete), `error`, `retryable` (default true) and `retry_in` (fail), or
//! `delay` (snooze). A claimed job is `{"id", "kind", "queue", "payload", "attempt", "run", "max_attempts",
//! "lease_expires_at"}`: `run` counts the job's claims and is the claim's token (an operator's retry starts
//! `attempt` over, never `run`). A call for a claim that expired and was rescued, or that already ended, answers 409
//! `stale_claim` and changes nothing: the worker drops the job.
//!
//! # Errors
//!
//! Every error is `{"code", "message", "violations"?}` with a stable `code`: `invalid_request` (400, the
//! message names the field or parameter), `unauthorized` (401, with `WWW-Authenticate: Bearer`),
//! `forbidden` (403), `not_found` and `unknown_kind` (404, the latter listing the known kinds),
//! `method_not_allowed` (405), `timeout` (408), `conflict` (409), `stale_claim` (409, a remote worker's
//! claim is no longer its own), `payload_too_large` (413), `unsupported_media_type` (415), `invalid_payload`
//! (422, with every `violations` entry `{path, message}`), `internal` (500, the cause is in the server log)
//! and `unavailable` (503, the database is unreachable for now: try again).
//!
//! # Tokens
//!
//! A request carries `Authorization: Bearer <secret>`. A `read` token may call the `GET` routes, an
//! `operate` token those and the actions, a `work` token the remote-worker routes; `GET /api/health` needs
//! none. Without any token configured every route is open, to requests addressed to a loopback host only,
//! and [`serve`] refuses a non-loopback listener.

mod api_error;
mod auth;
pub mod duration;
mod error;
mod extract;
mod feed;
mod kinds;
mod metrics;
mod opts;
#[cfg(feature = "otel")]
mod otel;
mod pages;
mod routes;
mod serve;
mod workflow_spec;

pub use error::{Error, Result};
pub use kinds::{KindSource, KnownKind, KnownKinds};
pub use opts::{Role, ServerOpts, Token};
#[cfg(feature = "otel")]
pub use otel::{OtelMetrics, otel_metrics};
pub use routes::{openapi_json, router};
pub use serve::serve;
pub use workflow_spec::{StepSpec, WorkflowSpec};
