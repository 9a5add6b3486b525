//! What the API answers when a request fails: a status and a JSON body
//! `{"code": "...", "message": "...", "violations": [{"path", "message"}]}` whose `code` is stable.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use outbox::Violation;
use serde::Serialize;

use crate::error::Error;

/// A failed request, as the client sees it.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    violations: Vec<Violation>,
    /// `WWW-Authenticate`, for 401.
    challenge: Option<&'static str>,
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    violations: Option<Vec<ViolationBody<'a>>>,
}

#[derive(Serialize)]
struct ViolationBody<'a> {
    path: &'a str,
    message: &'a str,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), violations: Vec::new(), challenge: None }
    }

    /// 400 `invalid_request`: the message names the field or parameter at fault.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 401 `unauthorized`, with the challenge a client needs to know what to send.
    pub(crate) fn unauthorized(message: impl Into<String>, challenge: &'static str) -> Self {
        ApiError { challenge: Some(challenge), ..ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message) }
    }

    /// 403 `forbidden`.
    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 500 `internal`: what went wrong is logged, not told (it may name tables, files or hosts).
    pub(crate) fn internal(logged: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %logged, "request failed");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error; the server log has the cause")
    }

    /// The stable code a status gets when nothing more specific is known: for responses made outside the
    /// API's handlers (an unmatched method, a timeout).
    pub(crate) fn code_for(status: StatusCode) -> &'static str {
        match status {
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            StatusCode::REQUEST_TIMEOUT => "timeout",
            StatusCode::CONFLICT => "conflict",
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_payload",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable",
            s if s.is_server_error() => "internal",
            _ => "invalid_request",
        }
    }
}

#[cfg(test)]
impl ApiError {
    /// The status and message, for tests of the extractors.
    pub(crate) fn into_parts(self) -> (StatusCode, String) {
        (self.status, self.message)
    }
}

impl From<outbox::Error> for ApiError {
    fn from(e: outbox::Error) -> Self {
        use outbox::Error as E;
        let message = e.to_string();
        match e {
            E::NotFound { .. } => ApiError::new(StatusCode::NOT_FOUND, "not_found", message),
            E::InvalidTransition { .. } => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            E::StaleClaim { .. } => ApiError::new(StatusCode::CONFLICT, "stale_claim", message),
            E::InvalidPayload { violations, .. } => {
                ApiError { violations, ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_payload", message) }
            }
            E::InvalidWorkflow { .. } => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_workflow", message),
            E::Serde { .. } => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_payload", message),
            E::PayloadTooLarge { .. } => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message),
            E::InvalidOpts { .. } | E::Invalid(_) => ApiError::invalid(message),
            // PostgreSQL refuses text holding NUL (an id, a name, a key a client sent): nothing stored can
            // match it, and it is the request that is at fault.
            ref e if e.to_string().contains("invalid byte sequence for encoding \"UTF8\": 0x00") => ApiError::invalid(
                "a value of the request (a path segment, a parameter or a field) contains the NUL character, \
                 which the database cannot store or match",
            ),
            ref e if e.is_transient() => {
                tracing::warn!(error = %e, "database unavailable");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the database is unavailable; try again")
            }
            e => ApiError::internal(&e),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::UnknownKind { .. } => ApiError::new(StatusCode::NOT_FOUND, "unknown_kind", e.to_string()),
            Error::InvalidField { .. } => ApiError::invalid(e.to_string()),
            Error::Outbox(e) => e.into(),
            e => ApiError::internal(&e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let violations = (!self.violations.is_empty())
            .then(|| self.violations.iter().map(|v| ViolationBody { path: &v.path, message: &v.message }).collect());
        let body = Body { code: self.code, message: &self.message, violations };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
        }
        response
    }
}
