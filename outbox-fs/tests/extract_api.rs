//! `AnthropicApi` against a real HTTP server on 127.0.0.1 that answers from a script and records requests.

mod common;

use std::time::Duration;

use common::fixture;
use common::http::{Reply, Server, reply};
use tokio::net::TcpListener;

use outbox_fs::extract::{AnthropicApi, ApiKey, ApiOpts, ExtractError, ExtractRequest, Extractor, Usage};

const KEY: &str = "sk-ant-canary-0123456789";

fn opts(base: &str) -> ApiOpts {
    let mut opts = ApiOpts::new("claude-sonnet-4-5").with_key(ApiKey::new(KEY));
    opts.base_url = base.to_owned();
    opts.max_tokens = 1024;
    opts.backoff = Duration::from_millis(1);
    opts
}

fn request() -> ExtractRequest {
    ExtractRequest {
        prompt: "Extract requirement R-7.".into(),
        prompt_hash: "ab12cd".into(),
        requirement_id: "R-7".into(),
    }
}

async fn extract(opts: ApiOpts) -> Result<outbox_fs::extract::Extraction, ExtractError> {
    AnthropicApi::new(opts).expect("client").extract(&request()).await
}

#[tokio::test]
async fn success_parses_the_message_and_sends_key_version_and_body() {
    let server = Server::start(vec![reply(200, fixture("api_message.json"))]).await;

    let got = extract(opts(&server.base)).await.expect("extraction");

    assert_eq!(got.text, "# Requirement R-7\nThe system shall retry.\n");
    assert_eq!(got.model, "claude-sonnet-4-5-20250929");
    let usage =
        Usage { input_tokens: 21, output_tokens: 42, cache_creation_input_tokens: 0, cache_read_input_tokens: 7 };
    assert_eq!(got.usage, usage);
    assert_eq!(got.cost_usd, None);
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].line, "POST /v1/messages HTTP/1.1");
    assert_eq!(seen[0].header("x-api-key"), Some(KEY));
    assert_eq!(seen[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_str(&seen[0].body).expect("json body");
    let expected = serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Extract requirement R-7."}],
    });
    assert_eq!(body, expected);
}

#[tokio::test]
async fn a_server_error_then_ok_succeeds_after_one_retry() {
    let replies = vec![reply(500, fixture("api_error_529.json")), reply(200, fixture("api_message.json"))];
    let server = Server::start(replies).await;
    let mut opts = opts(&server.base);
    opts.retries = 1;

    let got = extract(opts).await.expect("extraction after a retry");

    assert_eq!(got.model, "claude-sonnet-4-5-20250929");
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn overloaded_is_rate_limited_at_once_for_the_fleet_to_wait() {
    let server = Server::start(vec![reply(529, fixture("api_error_529.json"))]).await;

    let err = extract(opts(&server.base)).await.expect_err("overloaded");

    let message = "anthropic api returned 529: overloaded_error: Overloaded".to_owned();
    assert_eq!(err, ExtractError::RateLimited { message, retry_after: Duration::from_secs(2) });
    assert_eq!(server.seen().len(), 1, "no retry inside the call: the whole fleet waits");
}

#[tokio::test]
async fn rate_limit_returns_at_once_with_its_retry_after() {
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    let limited = Reply { headers: vec![("retry-after", "30")], ..reply(429, body.into()) };
    let server = Server::start(vec![limited]).await;

    let err = extract(opts(&server.base)).await.expect_err("rate limited");

    let message = "anthropic api returned 429: rate_limit_error: slow down; retry-after: 30".to_owned();
    assert_eq!(err, ExtractError::RateLimited { message, retry_after: Duration::from_secs(30) });
    assert_eq!(server.seen().len(), 1, "30 s is the fleet's to wait, not this call's");
}

#[tokio::test]
async fn unauthorized_is_permanent_with_the_error_type() {
    let server = Server::start(vec![reply(401, fixture("api_error_401.json"))]).await;

    let err = extract(opts(&server.base)).await.expect_err("unauthorized");

    let expected = "anthropic api returned 401: authentication_error: invalid x-api-key";
    assert_eq!(err, ExtractError::Permanent(expected.into()));
    assert_eq!(server.seen().len(), 1, "a 4xx is not retried");
}

#[tokio::test]
async fn answer_cut_off_at_max_tokens_is_permanent() {
    let body = fixture("api_message.json").replace("\"end_turn\"", "\"max_tokens\"");
    let server = Server::start(vec![reply(200, body)]).await;

    let err = extract(opts(&server.base)).await.expect_err("cut off");

    assert_eq!(err, ExtractError::Permanent("anthropic api answer was cut off at max_tokens".into()));
}

#[tokio::test]
async fn refused_connection_and_timeout_are_retryable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let closed = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    let mut refused = opts(&closed);
    refused.retries = 0;
    let err = extract(refused).await.expect_err("refused");
    assert!(matches!(&err, ExtractError::Retryable(m) if m.starts_with("anthropic api request failed")), "{err:?}");

    let slow = Reply { delay: Duration::from_secs(5), ..reply(200, fixture("api_message.json")) };
    let server = Server::start(vec![slow]).await;
    let mut timing_out = opts(&server.base);
    timing_out.timeout = Duration::from_millis(300);
    let err = extract(timing_out).await.expect_err("timeout");
    assert!(matches!(&err, ExtractError::Retryable(m) if m.starts_with("anthropic api request failed")), "{err:?}");
    assert_eq!(server.seen().len(), 1, "a timeout is not retried inside the call");
}

#[test]
fn missing_key_variable_is_permanent_and_named() {
    let mut opts = ApiOpts::new("claude-sonnet-4-5");
    opts.key_var = "OUTBOX_TEST_UNSET_KEY_VAR_5D1C".into();

    let err = AnthropicApi::new(opts).expect_err("no key");

    let expected = "anthropic api key missing: environment variable OUTBOX_TEST_UNSET_KEY_VAR_5D1C is not set";
    assert_eq!(err, ExtractError::Permanent(expected.into()));
}

/// Set in the child processes of [`run_child`]; the `_child` tests do nothing without it.
const CHILD: &str = "OUTBOX_TEST_EXTRACT_API_CHILD";

/// Runs the ignored test `name` alone in a child process of this test binary, with `env` set.
fn run_child(name: &str, env: &[(&str, &str)]) {
    outbox_tests::run_child(name, CHILD, |c| {
        c.envs(env.iter().copied());
    })
    .assert_passed();
}

/// Another test's first event can cache "nobody listens" for a callsite while this test installs its
/// subscriber, so the log capture gets a process of its own.
#[test]
fn key_never_leaks_into_debug_errors_or_logs() {
    run_child("key_never_leaks_into_debug_errors_or_logs_child", &[]);
}

#[tokio::test]
#[ignore = "half of key_never_leaks_into_debug_errors_or_logs, which runs it alone in a process"]
async fn key_never_leaks_into_debug_errors_or_logs_child() {
    outbox_tests::child_half(CHILD, "key_never_leaks_into_debug_errors_or_logs");
    let echoed =
        format!(r#"{{"type":"error","error":{{"type":"permission_error","message":"key {KEY} is revoked"}}}}"#);
    let server = Server::start(vec![reply(403, echoed), reply(200, fixture("api_message.json"))]).await;
    let logs = outbox_tests::Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let opts = opts(&server.base);
    let api = AnthropicApi::new(opts.clone()).expect("client");

    let err = api.extract(&request()).await.expect_err("revoked");
    api.extract(&request()).await.expect("extraction");

    let logs = String::from_utf8(logs.bytes()).expect("utf-8 logs");
    assert!(logs.contains("anthropic api failed") && logs.contains("anthropic api answered"), "{logs}");
    assert!(logs.contains("requirement_id=R-7") && logs.contains("prompt_hash=ab12cd"), "{logs}");
    assert!(!logs.contains("Extract requirement"), "the prompt is not logged: {logs}");
    assert_eq!(
        err,
        ExtractError::Permanent("anthropic api returned 403: permission_error: key [redacted] is revoked".into())
    );
    for (what, text) in [("debug of opts", format!("{opts:?}")), ("debug of api", format!("{api:?}")), ("logs", logs)] {
        assert!(!text.contains(KEY), "key leaked into {what}: {text}");
    }
    assert!(!format!("{err:?}").contains(KEY));
    assert_eq!(server.seen()[0].header("x-api-key"), Some(KEY), "the key was used all the same");
}

const KEY_VAR: &str = "OUTBOX_TEST_API_KEY_FROM_ENV_9F2A";

/// Setting variables in this process needs `unsafe`, so the child process starts with the variable set.
#[test]
fn key_is_read_from_the_named_variable() {
    run_child("key_is_read_from_the_named_variable_child", &[(KEY_VAR, KEY)]);
}

#[tokio::test]
#[ignore = "half of key_is_read_from_the_named_variable, which runs it with the variable set"]
async fn key_is_read_from_the_named_variable_child() {
    outbox_tests::child_half(CHILD, "key_is_read_from_the_named_variable");
    let server = Server::start(vec![reply(200, fixture("api_message.json"))]).await;
    let mut opts = ApiOpts::new("claude-sonnet-4-5");
    opts.base_url = server.base.clone();
    opts.key_var = KEY_VAR.into();

    extract(opts).await.expect("extraction");

    assert_eq!(server.seen()[0].header("x-api-key"), Some(KEY));
}
