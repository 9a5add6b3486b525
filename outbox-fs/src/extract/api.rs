//! The Anthropic Messages API over HTTP as an [`Extractor`].
//!
//! How an outcome is classified:
//!
//! | outcome | error |
//! |---|---|
//! | 429 (rate limited), 529 (overloaded) | `RateLimited` with its `retry-after` (2 s when absent): the worker holds the kind fleet-wide until then, no attempt used, no in-call retry |
//! | 408, other 5xx (after the in-call retries) | `Retryable`, with `retry-after` when sent |
//! | other 4xx (400, 401, 403, 404, 413, ...) | `Permanent`, with the API's error type and message |
//! | connection refused/reset, timeout, body cut off | `Retryable` |
//! | 200 that is not a message | `Retryable`: a proxy or a cut-off body, not the API's answer |
//! | 200 stopped by `max_tokens` or `refusal`, or without text | `Permanent`: the same request gets the same answer |
//! | key variable missing, base url not http(s), client cannot be built | `Permanent`, from [`AnthropicApi::new`] |
//!
//! The key lives in an [`ApiKey`] and a header marked sensitive; errors and logs carry neither.

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use http::{StatusCode, Uri};
use serde::Deserialize;
use tracing::Instrument;

use super::https::{Answer, Failure, HttpsClient};
use super::{ExtractError, ExtractRequest, Extraction, Extractor, WireUsage};

const ANTHROPIC_VERSION: &str = "2023-06-01";
/// How long a 429 or 529 without `retry-after` holds the kind.
const DEFAULT_RATE_LIMIT_WAIT: Duration = Duration::from_secs(2);
/// A `retry-after` longer than this is the caller's to wait out, not a worker slot's.
const MAX_IN_CALL_WAIT: Duration = Duration::from_secs(10);
const BODY_SHOWN: usize = 300;

/// An API key. `Debug` and `Display` print `[redacted]`, so the key cannot leak through formatting.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Options of [`AnthropicApi`]. Start from [`ApiOpts::new`] and set fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApiOpts {
    /// Scheme, host and port of the API. Default `https://api.anthropic.com`.
    pub base_url: String,
    /// The environment variable holding the key when [`ApiOpts::key`] is `None`. Default `ANTHROPIC_API_KEY`.
    pub key_var: String,
    /// The key itself; wins over `key_var`. Default `None`.
    pub key: Option<ApiKey>,
    /// The model, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// `max_tokens` of the answer. Default 8192.
    pub max_tokens: u32,
    /// Limit on one HTTP request, connect to last byte. Default 2 minutes.
    pub timeout: Duration,
    /// How often a 429/408/5xx/529 or a refused connection is retried inside one call. Default 2.
    pub retries: u32,
    /// First wait between in-call retries; doubled each time, raised to `retry-after` when sent. Default 500 ms.
    pub backoff: Duration,
}

impl ApiOpts {
    /// Options for `model` with the defaults above.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: "https://api.anthropic.com".to_owned(),
            key_var: "ANTHROPIC_API_KEY".to_owned(),
            key: None,
            model: model.into(),
            max_tokens: 8192,
            timeout: Duration::from_secs(120),
            retries: 2,
            backoff: Duration::from_millis(500),
        }
    }

    /// Uses `key` instead of reading [`ApiOpts::key_var`].
    #[must_use]
    pub fn with_key(mut self, key: ApiKey) -> Self {
        self.key = Some(key);
        self
    }
}

/// Runs prompts through the Anthropic Messages API.
#[derive(Clone)]
pub struct AnthropicApi {
    client: HttpsClient,
    url: Uri,
    key: ApiKey,
    opts: ApiOpts,
}

impl fmt::Debug for AnthropicApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicApi")
            .field("url", &self.url)
            .field("model", &self.opts.model)
            .field("max_tokens", &self.opts.max_tokens)
            .field("timeout", &self.opts.timeout)
            .field("retries", &self.opts.retries)
            .field("key", &"[redacted]")
            .finish()
    }
}

impl AnthropicApi {
    /// Resolves the key and builds the HTTP client. A missing key is a `Permanent` error naming the variable.
    ///
    /// TLS is rustls on `ring` with the platform's trust store. The provider belongs to this client: the
    /// process-wide default and the application's other HTTP clients are left as they are.
    pub fn new(mut opts: ApiOpts) -> Result<Self, ExtractError> {
        let unusable = |why: &str| {
            ExtractError::Permanent(format!("anthropic api key missing: environment variable {} {why}", opts.key_var))
        };
        let key = match opts.key.take() {
            Some(key) => key,
            None => match std::env::var(&opts.key_var) {
                Ok(key) if !key.trim().is_empty() => ApiKey::new(key),
                Ok(_) => return Err(unusable("is empty")),
                Err(std::env::VarError::NotPresent) => return Err(unusable("is not set")),
                Err(std::env::VarError::NotUnicode(_)) => return Err(unusable("is not valid unicode")),
            },
        };
        if HeaderValue::from_str(&key.0).is_err() {
            return Err(ExtractError::Permanent("anthropic api key is not a valid http header value".into()));
        }
        let url = messages_url(&opts.base_url)?;
        let client = HttpsClient::new(opts.timeout, opts.timeout.min(Duration::from_secs(10)))
            .map_err(|e| ExtractError::Permanent(format!("cannot build http client: {e}")))?;
        Ok(Self { client, url, key, opts })
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(mut key) = HeaderValue::from_str(&self.key.0) {
            // Keeps the value out of hyper's Debug output.
            key.set_sensitive(true);
            headers.insert("x-api-key", key);
        }
        headers.insert("anthropic-version", HeaderValue::from_static(ANTHROPIC_VERSION));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        headers
    }

    async fn call(&self, request: &ExtractRequest) -> Result<Extraction, ExtractError> {
        let body = serde_json::json!({
            "model": self.opts.model,
            "max_tokens": self.opts.max_tokens,
            "messages": [{"role": "user", "content": request.prompt}],
        });
        let body = Bytes::from(body.to_string());
        let mut attempt = 0;
        loop {
            let started = Instant::now();
            let (status, outcome) = self.attempt(&body).await;
            let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let result = match outcome {
                Outcome::Done(result) => result.map_err(|e| self.scrub(e)),
                Outcome::Again { error, wait } => {
                    let error = self.scrub(error);
                    let delay = self.opts.backoff.saturating_mul(1 << attempt.min(16)).max(wait.unwrap_or_default());
                    if attempt >= self.opts.retries || delay > MAX_IN_CALL_WAIT.max(self.opts.backoff) {
                        Err(error)
                    } else {
                        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                        tracing::info!(status, duration_ms, attempt, delay_ms, %error, "anthropic api retrying");
                        tokio::time::sleep(delay).await;
                        attempt += 1;
                        continue;
                    }
                }
            };
            match &result {
                Ok(x) => tracing::info!(status, duration_ms, attempt, usage = ?x.usage, "anthropic api answered"),
                Err(error) => tracing::warn!(status, duration_ms, attempt, %error, "anthropic api failed"),
            }
            return result;
        }
    }

    /// One request; returns the HTTP status (0 when none) for the logs.
    async fn attempt(&self, body: &Bytes) -> (u16, Outcome) {
        let answer = match self.client.post(&self.url, self.headers(), body.clone()).await {
            Ok(answer) => answer,
            // A refused connection never reached the API; a timeout may have, and already cost a slot.
            Err(Failure::Connect(why)) => {
                let error = ExtractError::Retryable(format!("anthropic api request failed: {why}"));
                return (0, Outcome::Again { error, wait: None });
            }
            Err(Failure::Send(why)) => {
                let error = ExtractError::Retryable(format!("anthropic api request failed: {why}"));
                return (0, Outcome::Done(Err(error)));
            }
            Err(Failure::Body { status, message }) => {
                let error = ExtractError::Retryable(format!("anthropic api {status} body cut off: {message}"));
                return (status.as_u16(), Outcome::Done(Err(error)));
            }
        };
        let Answer { status, headers, body: bytes } = answer;
        let retry_after = headers.get("retry-after").and_then(|v| v.to_str().ok()).map(|v| self.redact(v));
        if status.is_success() {
            return (status.as_u16(), judge(status, retry_after.as_deref(), &bytes));
        }
        // An error body may echo the key. Scrubbing the message afterwards is too late: the message keeps only
        // the start of a body, which can end inside the key and leave a piece of it.
        let body = self.redact(&String::from_utf8_lossy(&bytes));
        (status.as_u16(), judge(status, retry_after.as_deref(), body.as_bytes()))
    }

    /// The key may come back in an echoed body; it never goes further.
    fn scrub(&self, error: ExtractError) -> ExtractError {
        error.map_message(|m| self.redact(&m))
    }

    fn redact(&self, text: &str) -> String {
        text.replace(self.key.0.as_str(), "[redacted]")
    }
}

impl Extractor for AnthropicApi {
    fn extract<'a>(
        &'a self,
        request: &'a ExtractRequest,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Extraction, ExtractError>> + Send + 'a>> {
        let span = tracing::info_span!(
            "anthropic_api",
            requirement_id = %request.requirement_id,
            prompt_hash = %request.prompt_hash,
            model = %self.opts.model,
        );
        Box::pin(self.call(request).instrument(span))
    }
}

enum Outcome {
    Done(Result<Extraction, ExtractError>),
    /// Worth another try inside this call, after at least `wait` when the API said so.
    Again {
        error: ExtractError,
        wait: Option<Duration>,
    },
}

fn judge(status: StatusCode, retry_after: Option<&str>, body: &[u8]) -> Outcome {
    if status.is_success() {
        return Outcome::Done(parse_message(status, body));
    }
    let code = status.as_u16();
    let transient = code == 429 || code == 408 || status.is_server_error() || code == 529;
    let mut message = format!("anthropic api returned {code}: {}", error_detail(body));
    if let Some(after) = retry_after {
        message.push_str(&format!("; retry-after: {}", after.chars().take(40).collect::<String>()));
    }
    let wait = retry_after.and_then(|s| s.trim().parse::<f64>().ok()).and_then(|s| Duration::try_from_secs_f64(s).ok());
    if code == 429 || code == 529 {
        // Every worker of the fleet is told to wait, not this call alone: retrying here would send the next
        // request while the others keep sending theirs.
        let retry_after = wait.unwrap_or(DEFAULT_RATE_LIMIT_WAIT);
        return Outcome::Done(Err(ExtractError::RateLimited { message, retry_after }));
    }
    if transient {
        Outcome::Again { error: ExtractError::Retryable(message), wait }
    } else {
        Outcome::Done(Err(ExtractError::Permanent(message)))
    }
}

/// `error.type: error.message` of an API error body, or the start of whatever else came back.
fn error_detail(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Envelope {
        error: ApiError,
    }
    #[derive(Deserialize)]
    struct ApiError {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Envelope>(body) {
        Ok(Envelope { error }) => format!("{}: {}", error.kind, error.message),
        Err(_) => String::from_utf8_lossy(body).trim().chars().take(BODY_SHOWN).collect(),
    }
}

fn parse_message(status: StatusCode, body: &[u8]) -> Result<Extraction, ExtractError> {
    #[derive(Deserialize)]
    struct Message {
        model: String,
        #[serde(default)]
        content: Vec<Block>,
        stop_reason: Option<String>,
        #[serde(default)]
        usage: WireUsage,
    }
    #[derive(Default, Deserialize)]
    #[serde(default)]
    struct Block {
        #[serde(rename = "type")]
        kind: String,
        text: String,
    }
    let message: Message = serde_json::from_slice(body).map_err(|e| {
        ExtractError::Retryable(format!("anthropic api returned {status} with a body that is not a message: {e}"))
    })?;
    match message.stop_reason.as_deref() {
        Some("max_tokens") => {
            return Err(ExtractError::Permanent("anthropic api answer was cut off at max_tokens".into()));
        }
        Some("refusal") => return Err(ExtractError::Permanent("anthropic api refused to answer".into())),
        _ => {}
    }
    let text: String = message.content.iter().filter(|b| b.kind == "text").map(|b| b.text.as_str()).collect();
    if text.is_empty() {
        return Err(ExtractError::Permanent("anthropic api answer has no text".into()));
    }
    Ok(Extraction { text, model: message.model, usage: message.usage.into(), cost_usd: None })
}

/// `<base>/v1/messages`, when `base` is an `http` or `https` URL with a host.
fn messages_url(base: &str) -> Result<Uri, ExtractError> {
    let invalid = |why: String| ExtractError::Permanent(format!("anthropic api base url {base:?} {why}"));
    let url = format!("{}/v1/messages", base.trim_end_matches('/'));
    let uri: Uri = url.parse().map_err(|e| invalid(format!("is not a valid url: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") if uri.host().is_some_and(|h| !h.is_empty()) => Ok(uri),
        _ => Err(invalid("is not an http or https url with a host".into())),
    }
}
