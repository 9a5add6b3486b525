//! The request extractors of the API: axum's, with every rejection answered as a JSON error naming the
//! field or parameter at fault, never as axum's plain text.

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use crate::api_error::ApiError;

/// A JSON request body. A body is read up to the configured limit (413 past it), must be declared
/// `application/json` (415 otherwise), and must deserialize into `T` (400 naming the field otherwise; the
/// bodies of the API deny unknown fields). An empty body without a content type reads as `{}`, so a `POST`
/// whose fields are all optional can be sent bare.
pub(crate) struct Json<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let declared = req.headers().contains_key(header::CONTENT_TYPE);
        let json = is_json(req.headers());
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            let status = rejection.status();
            let message = match status {
                StatusCode::PAYLOAD_TOO_LARGE => "the request body is over the size limit".to_owned(),
                _ => format!("reading the request body: {}", lowercase(&rejection.body_text())),
            };
            ApiError::new(status, ApiError::code_for(status), message)
        })?;
        let bytes = match (bytes.is_empty(), declared, json) {
            (true, false, _) => Bytes::from_static(b"{}"),
            (_, _, true) => bytes,
            _ => {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "the request body must be json, sent with `content-type: application/json`",
                ));
            }
        };
        parse(&bytes).map(Json)
    }
}

/// `bytes` as a `T`, or a 400 naming where in the body it went wrong.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let inner = e.inner();
        if !inner.is_data() {
            return not_json(inner);
        }
        let path = e.path().to_string();
        if path == "." || path.is_empty() {
            ApiError::invalid(format!("invalid request body: {inner}"))
        } else {
            ApiError::invalid(format!("invalid request body at `{path}`: {inner}"))
        }
    })?;
    deserializer.end().map_err(|e| not_json(&e))?;
    Ok(value)
}

fn not_json(e: &serde_json::Error) -> ApiError {
    ApiError::invalid(format!("the request body is not valid json: {e}"))
}

/// Whether the request declares a JSON body (`application/json`, or a `+json` type such as
/// `application/merge-patch+json`), whatever its parameters (`; charset=utf-8`).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let mime = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// The query string as a `T` (whose fields the API keeps as text and parses itself, to name the parameter
/// at fault); unknown or repeated parameters are a 400.
pub(crate) struct Query<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(QueryRejection::FailedToDeserializeQueryString(e)) => {
                // The cause without axum's preamble: `name: unknown field `name`, expected one of ...`.
                let cause = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_else(|| e.body_text());
                let cause = cause.replace("field", "parameter");
                // Named by the path when there is one, else by the first name the cause quotes
                // (`duplicate parameter `limit``).
                let named = match cause.split_once(": ") {
                    Some((name, why)) if !name.is_empty() && !name.contains(' ') => Some((name.to_owned(), why)),
                    _ => cause.split('`').nth(1).map(|name| (name.to_owned(), cause.as_str())),
                };
                Err(ApiError::invalid(match named {
                    Some((name, why)) => format!("query parameter `{name}`: {why}"),
                    None => format!("invalid query string: {cause}"),
                }))
            }
            Err(other) => Err(ApiError::invalid(format!("invalid query string: {}", lowercase(&other.body_text())))),
        }
    }
}

/// A path parameter (a job id, a kind name); one that is not UTF-8 once percent-decoded is a 400.
pub(crate) struct Path<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => {
                Err(ApiError::invalid(format!("invalid path: {}", lowercase(&e.body_text()))))
            }
            Err(other) => Err(ApiError::internal(&other.body_text())),
        }
    }
}

/// axum's messages start with a capital; ours do not.
fn lowercase(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_lowercase().chain(chars).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_are_recognised() {
        let headers = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, value.parse().expect("header"));
            h
        };
        for ok in ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/x+json"] {
            assert!(is_json(&headers(ok)), "{ok}");
        }
        for bad in ["text/plain", "application/x-www-form-urlencoded", "application/jsonx", "json"] {
            assert!(!is_json(&headers(bad)), "{bad}");
        }
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn body_errors_name_the_field() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Body {
            kind: String,
            inner: Option<Vec<u32>>,
        }
        let message = |body: &str| parse::<Body>(body.as_bytes()).expect_err(body).into_parts().1;
        assert!(message(r#"{"kind": 1}"#).contains("at `kind`: invalid type: integer `1`"), "{}", message("{}"));
        assert!(message(r#"{"kind": "a", "inner": [1, "x"]}"#).contains("at `inner[1]`"));
        assert!(message(r#"{"kind": "a", "extra": 1}"#).contains("unknown field `extra`"));
        assert!(message(r#"{"kind": "#).starts_with("the request body is not valid json"));
        assert!(message(r#"{"kind": "a"} trailing"#).starts_with("the request body is not valid json"));
        assert!(message("{}").contains("missing field `kind`"));
        assert!(parse::<Body>(br#"{"kind": "a"}"#).is_ok());
    }

    #[test]
    fn messages_start_in_lowercase() {
        assert_eq!(lowercase("Failed to buffer"), "failed to buffer");
        assert_eq!(lowercase(""), "");
    }
}
