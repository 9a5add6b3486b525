//! An HTTP API over an outbox queue: an [axum] [`Router`](axum::Router) an application mounts under any
//! prefix, and what `outbox serve` runs.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use outbox_server::{Role, ServerOpts, Token};
//!
//! let db = outbox_core::connect("sqlite::memory:").await?;
//! outbox_core::migrate(&db).await?;
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
//! | `GET /api/stats?window=1h` | read | the six answers of [`outbox_core::ops::stats`] |
//! | `GET /api/queues` | read | `{"queues": [...]}` |
//! | `GET /api/kinds` | read | `{"kinds": [{name, source, schema_hash, options, recorded}]}` |
//! | `GET /api/kinds/{kind}` | read | one kind with its `schema`; 404 `unknown_kind` |
//! | `GET /api/jobs?status=&kind=&queue=&since=&key=&before=&limit=` | read | `{"jobs": [...], "next": id or null}` |
//! | `GET /api/jobs/{id}` | read | `{"job", "history"}`; 404 `not_found` |
//! | `POST /api/jobs` | operate | 201 `{"id", "created": true}`, or 200 `{"id", "created": false}` for a duplicate |
//! | `POST /api/jobs/{id}/retry` | operate | `{"job"}`; 409 `conflict` when its status does not allow it |
//! | `POST /api/jobs/{id}/cancel` | operate | `{"job"}`; 409 `conflict` |
//! | `DELETE /api/jobs/{id}` | operate | `{"deleted": id}`; 409 `conflict` for an active job |
//! | `POST /api/jobs/retry-failed` | operate | `{"retried": n}`; body `{"kind"}` optional |
//!
//! `GET /api/jobs` lists newest first, `limit` (1 to 1000, default 100) at a time; `next` is set when the
//! page is full, and `before=<next>` asks for the page after it. `since` is a duration ago (`1h`) or a time.
//! An empty parameter counts as not given.
//!
//! `POST /api/jobs` takes `{"kind", "payload", "queue", "priority", "delay", "run_at", "max_attempts",
//! "key", "sequence"}`, all but `kind` and `payload` optional; `delay` and `run_at` exclude each other.
//!
//! # Errors
//!
//! Every error is `{"code", "message", "violations"?}` with a stable `code`: `invalid_request` (400, the
//! message names the field or parameter), `unauthorized` (401, with `WWW-Authenticate: Bearer`),
//! `forbidden` (403), `not_found` and `unknown_kind` (404, the latter listing the known kinds),
//! `method_not_allowed` (405), `timeout` (408), `conflict` (409), `payload_too_large` (413),
//! `unsupported_media_type` (415), `invalid_payload` (422, with every `violations` entry `{path, message}`),
//! `internal` (500, the cause is in the server log) and `unavailable` (503, the database is unreachable for
//! now: try again).
//!
//! # Tokens
//!
//! A request carries `Authorization: Bearer <secret>`. A `read` token may call the `GET` routes, an
//! `operate` token those and the actions, a `work` token the remote-worker routes. Without any token
//! configured every route is open, to requests addressed to a loopback host only, and [`serve`] refuses a
//! non-loopback listener.

mod api_error;
mod auth;
pub mod duration;
mod error;
mod extract;
mod feed;
mod kinds;
mod metrics;
mod opts;
mod routes;
mod serve;

pub use error::{Error, Result};
pub use kinds::{KindSource, KnownKind, KnownKinds};
pub use opts::{Role, ServerOpts, Token};
pub use routes::router;
pub use serve::serve;
