//! The API's OpenAPI 3.1 document: each route's `#[utoipa::path]` beside its handler, the types it answers
//! with, and what every route shares (the error body, the token, the job id in the path). The router is built
//! from the same declarations (`utoipa_axum::routes!`), so a route cannot be served without being described.

use serde::Serialize;
use utoipa::openapi::OpenApi as Document;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{IntoParams, Modify, OpenApi, ToSchema};

/// What a failed request answers, with any status.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// Stable: `invalid_request`, `invalid_payload`, `unauthorized`, `forbidden`, `not_found`, `unknown_kind`,
    /// `invalid_workflow`, `conflict`, `stale_claim`, `method_not_allowed`, `timeout`, `payload_too_large`,
    /// `unsupported_media_type`, `unavailable` or `internal`.
    code: String,
    /// What went wrong, naming the field, parameter or job at fault.
    message: String,
    /// For `invalid_payload`: each violation of the kind's schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    violations: Option<Vec<ViolationBody>>,
}

/// One violation of a payload's schema.
#[derive(Serialize, ToSchema)]
pub(crate) struct ViolationBody {
    /// Its JSON pointer (`/email`).
    path: String,
    message: String,
}

/// A job id in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read by the document only; handlers take the id as a string
pub(crate) struct JobPath {
    /// The job's id (a 26-character ULID).
    id: String,
}

/// The document's frame: what it is, its tags and its token scheme. The routes' groups add the paths.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "outbox",
        description = "The HTTP API of an outbox queue: read jobs and statistics, follow events, enqueue and \
            act on jobs, and run jobs from remote workers. Routes tagged `jobs` (GET), `overview` and `events` \
            need a token with the `read` role, enqueue and operator actions the `operate` role, `work` routes \
            the `work` role; `/api/health`, `/api/session` and this document need none. A server configured \
            without tokens answers loopback requests only, with every role."
    ),
    modifiers(&Token),
    components(schemas(ErrorBody, outbox::FeedEvent)),
    tags(
        (name = "jobs", description = "List, read, enqueue, retry, cancel and delete jobs"),
        (name = "overview", description = "Statistics, queues, kinds, workers and schedules"),
        (name = "workflows", description = "Workflows and batches: create one, read its graph and state, cancel it"),
        (name = "events", description = "The event feed as Server-Sent Events"),
        (name = "flow", description = "Flow control: pauses and holds, rates and their use, fair shares and weights"),
        (name = "work", description = "Remote workers: claim, heartbeat, complete, fail, snooze"),
        (name = "health", description = "Health for probes, Prometheus metrics, the session, this document"),
    )
)]
pub(crate) struct Frame;

/// The bearer token every guarded route takes.
struct Token;

impl Modify for Token {
    fn modify(&self, doc: &mut Document) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("A token configured with `outbox serve --token ROLE:SECRET` (or `ServerOpts::token`)"))
            .build();
        doc.components.get_or_insert_with(Default::default).add_security_scheme("token", SecurityScheme::Http(scheme));
    }
}

/// The document's frame, which the routes fill in.
pub(crate) fn frame() -> Document {
    Frame::openapi()
}

/// The answers every route of a kind may give besides its own: 401 and 403 on a route that needs a token, 413
/// and 415 on one that takes a body, 408 and 500 on all.
pub(crate) fn add_shared_responses(doc: &mut Document) {
    for item in doc.paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            let guarded = operation.security.as_ref().is_some_and(|s| !s.is_empty());
            if guarded {
                add(operation, "401", "`unauthorized`: no token, or one the server does not know");
                add(operation, "403", "`forbidden`: the token's role does not allow this route");
            }
            if operation.request_body.is_some() {
                add(operation, "413", "`payload_too_large`: the body is over the server's limit");
                add(operation, "415", "`unsupported_media_type`: the body is not `application/json`");
            }
            add(operation, "408", "`timeout`: the request was not answered within the server's request timeout");
            add(operation, "500", "`internal`: the server log has the cause");
        }
    }
}

/// `status` answered with the error body, unless the operation describes it already.
fn add(operation: &mut Operation, status: &str, description: &str) {
    let body = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
    let response = ResponseBuilder::new().description(description).content("application/json", body).build();
    operation.responses.responses.entry(status.to_owned()).or_insert(RefOr::T(response));
}
