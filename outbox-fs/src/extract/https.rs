//! The HTTP client [`AnthropicApi`](super::AnthropicApi) sends with: hyper over rustls on ring, with the
//! platform's trust store.
//!
//! The crypto provider is handed to this client's connector alone. Installing a process-wide default, or
//! turning on a reqwest feature that expects one, would change how the application's other clients build
//! (reqwest's `rustls-no-provider` makes every `reqwest::Client` of the process panic without a default).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;

/// An HTTP/1 client for `https` and `http` URLs (plain `http` serves local servers and tests), with a limit
/// on each request from connect to the last byte of the body.
#[derive(Clone)]
pub(super) struct HttpsClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

/// A whole answer.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

/// Why no whole answer came. Each message holds the error and its sources.
pub(super) enum Failure {
    /// No connection was made: the request never reached the server.
    Connect(String),
    /// The request may have reached the server; no status came back (a timeout, a broken connection).
    Send(String),
    /// The status came, the whole body did not.
    Body { status: StatusCode, message: String },
}

impl HttpsClient {
    /// A client whose requests take at most `timeout` each, of which at most `connect_timeout` to connect.
    /// Fails when the platform's trust store holds no usable certificate.
    pub(super) fn new(timeout: Duration, connect_timeout: Duration) -> std::io::Result<Self> {
        let mut http = HttpConnector::new();
        // The TLS layer above takes `https` URLs; this one only opens the TCP connection.
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let connector = HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider)?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).pool_timer(TokioTimer::new()).build(connector);
        Ok(Self { client, timeout })
    }

    /// POSTs `body` to `uri` with `headers` and reads the whole answer, all within the client's timeout.
    pub(super) async fn post(&self, uri: &Uri, headers: HeaderMap, body: Bytes) -> Result<Answer, Failure> {
        let deadline = Instant::now() + self.timeout;
        let timed_out = || format!("timed out after {:?}", self.timeout);
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = headers;
        let response = match tokio::time::timeout_at(deadline, self.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) if e.is_connect() => return Err(Failure::Connect(chain(&e))),
            Ok(Err(e)) => return Err(Failure::Send(chain(&e))),
            Err(_) => return Err(Failure::Send(timed_out())),
        };
        let (parts, body) = response.into_parts();
        let body = match tokio::time::timeout_at(deadline, body.collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) => return Err(Failure::Body { status: parts.status, message: chain(&e) }),
            Err(_) => return Err(Failure::Body { status: parts.status, message: timed_out() }),
        };
        Ok(Answer { status: parts.status, headers: parts.headers, body })
    }
}

/// An error and its sources, which hold the useful part ("connection refused", "connection closed").
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    std::iter::successors(Some(error), |e| e.source()).map(ToString::to_string).collect::<Vec<_>>().join(": ")
}
