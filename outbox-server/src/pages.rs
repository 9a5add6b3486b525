//! The dashboard: one page and its script and style, compiled into the binary, served at `/` of the router.
//! The page holds no data and needs no token; everything it shows it reads from the API with the token the
//! operator enters (kept in the browser's session storage, sent as a header, never in a URL).

use axum::Router;
use axum::extract::OriginalUri;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// Only the page's own script, style and API; no inline script, no frames, no forms posted anywhere.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/assets/app.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
}

/// The page, with the path it is served at (the router's mount prefix) as the base of its links, so that
/// they reach the assets and the API under the same prefix whether or not the address ends with a slash.
async fn index(OriginalUri(uri): OriginalUri) -> Response {
    let path = uri.path();
    let base = if path.ends_with('/') { path.to_owned() } else { format!("{path}/") };
    let mut response = asset("text/html; charset=utf-8", INDEX.replace("{base}", &attribute(&base)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `text` inside a double-quoted HTML attribute.
fn attribute(text: &str) -> String {
    text.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;")
}

fn asset(content_type: &'static str, body: impl Into<axum::body::Body>) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        ],
        body.into(),
    )
        .into_response()
}
