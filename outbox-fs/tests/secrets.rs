//! Canary secrets in the worker's environment never leave it, on every failure path of the extractors: the
//! Anthropic Messages API answering 401, 403, 429, 500, a malformed body, or nothing at all, with the key
//! echoed back; and a `claude` program that fails while printing its environment and arguments. Searched:
//! everything logged at trace level by every crate (`log` records included), every column of every job and
//! event row, the errors the extractors returned, and every file the test left (database, answers, sidecars).
//!
//! The bearer-token canary is `AWS_SESSION_TOKEN`: the API backend sends no bearer token of its own
//! (`ANTHROPIC_AUTH_TOKEN` is a variable of the CLI, forwarded to it, and is a canary too).

mod common;

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::http::{Reply, Server, reply};
use outbox::{EnqueueOpts, JobStatus, Worker};
use outbox_fs::ClaudeExtraction;
use outbox_fs::extract::{
    AnthropicApi, ApiOpts, ClaudeCli, CliOpts, ExtractError, ExtractRequest, Extraction, Extractor,
};

/// `(variable, canary)`: random enough that any 12 characters of one found anywhere are a leak.
const CANARIES: &[(&str, &str)] = &[
    ("ANTHROPIC_API_KEY", "sk-ant-cnry-Q7xK2mZ9vW4pL8dF"),
    ("AWS_SECRET_ACCESS_KEY", "cnry/R3tY6uI1oP5aS0gJ+awsSecret"),
    ("AWS_SESSION_TOKEN", "cnryBearer.H8jK2lZ4xC7vB1nM5"),
    ("ANTHROPIC_AUTH_TOKEN", "cnry-auth-N5mQ9wE3rT6yU2iO"),
];
const FRAGMENT: usize = 12;
const CHILD: &str = "OUTBOX_TEST_FS_SECRETS_CHILD";

/// The search runs in a child process of this test binary, started with the canaries in its environment.
#[test]
fn canaries_in_the_environment_never_leak_from_failing_extractions() {
    let name = "canaries_in_the_environment_never_leak_from_failing_extractions_child";
    let run = outbox_tests::run_child(name, CHILD, |c| {
        c.envs(CANARIES.iter().copied());
    });
    for (what, text) in [("the child's stdout", &run.stdout), ("the child's stderr", &run.stderr)] {
        assert_eq!(leaks(text), Vec::<String>::new(), "in {what}");
    }
    run.assert_passed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "half of canaries_in_the_environment_never_leak_from_failing_extractions, which runs it with the canaries set"]
async fn canaries_in_the_environment_never_leak_from_failing_extractions_child() {
    outbox_tests::child_half(CHILD, "canaries_in_the_environment_never_leak_from_failing_extractions");
    let logs = outbox_tests::Captured::everything();
    let e = common::env(outbox_tests::fresh_db().await);
    let errors = Arc::new(Mutex::new(Vec::new()));
    let mut shown = Vec::new();

    let key = canary("ANTHROPIC_API_KEY");
    let error_body = |kind: &str| {
        format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"request with x-api-key {key} refused"}}}}"#)
    };
    // The key cut in two by the 300 characters of a body an error message keeps.
    let cut = format!("upstream said: {} x-api-key: {key} and more", ".".repeat(300 - 15 - 12 - 20));
    let api_cases: Vec<(&str, Vec<Reply>)> = vec![
        ("401", vec![reply(401, error_body("authentication_error"))]),
        ("403", vec![reply(403, error_body("permission_error"))]),
        ("500", vec![reply(500, error_body("api_error")), reply(500, cut.clone())]),
        ("malformed", vec![reply(200, format!("<html>proxy for x-api-key {key}</html>"))]),
        // serde's message about a value of the wrong type quotes the value.
        ("mistyped", vec![reply(200, format!(r#"{{"model":"m","content":[],"usage":{{"input_tokens":"{key}"}}}}"#))]),
    ];
    for (case, replies) in api_cases {
        let server = Server::start(replies).await;
        let api = api(&server.base, Duration::from_secs(5));
        shown.push(format!("{api:?}"));
        run_failing(&e, &format!("api-{case}"), Box::new(api), &errors).await;
        assert!(
            server.seen().iter().all(|s| s.header("x-api-key") == Some(key)),
            "the key from the environment was sent"
        );
    }
    // Rate limited: the job waits (the fleet is held), then runs; the message of the 429 keeps the key out.
    let limited = Reply { headers: vec![("retry-after", "0")], ..reply(429, error_body("rate_limit_error")) };
    let answer = r#"{"model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}"#;
    let server = Server::start(vec![limited, reply(200, answer.into())]).await;
    let limited_api = api(&server.base, Duration::from_secs(5));
    shown.push(format!("{limited_api:?}"));
    let id = run(&e, "api-429", Box::new(limited_api), &errors).await;
    assert_eq!(common::job(&e.db, &id).await.status, JobStatus::Completed, "the rate-limited job ran after its hold");
    assert_eq!(server.seen().len(), 2);
    // A server that takes the request and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", silent.local_addr().expect("addr"));
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            sockets.push(socket);
        }
    });
    run_failing(&e, "api-timeout", Box::new(api(&base, Duration::from_millis(500))), &errors).await;
    held.abort();

    let bin = e.t.dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    let dump = "env; echo \"args: $*\"";
    let result = |subtype: &str, text: &str| {
        format!(
            "printf '{{\"type\":\"result\",\"subtype\":\"{subtype}\",\"is_error\":true,\"result\":\"%s\"}}' \"{text}\""
        )
    };
    let every = "key=$ANTHROPIC_API_KEY auth=$ANTHROPIC_AUTH_TOKEN aws=$AWS_SECRET_ACCESS_KEY token=$AWS_SESSION_TOKEN";
    // The key cut in two by the 500 characters of a result an error message keeps (its tail).
    let long_tail = format!("${{ANTHROPIC_API_KEY}}{}", "x".repeat(480));
    let errors_array = "printf '{\"type\":\"result\",\"subtype\":\"error_max_turns\",\"is_error\":true,\"errors\":[\"%s\"]}' \
                        \"$ANTHROPIC_AUTH_TOKEN\"";
    let cli_cases = [
        ("env-on-stdout-exit-1", format!("{dump}; exit 1")),
        ("env-on-stderr-exit-1", format!("({dump}) >&2; exit 1")),
        ("env-on-stderr-exit-0", format!("({dump}) >&2; echo '{{}}'")),
        ("killed", format!("({dump}) >&2; kill -9 $$")),
        ("is-error-result", format!("({dump}) >&2; {}; exit 1", result("error_during_execution", every))),
        ("key-cut-by-the-tail", format!("{}; exit 1", result("error_max_turns", &long_tail))),
        ("errors-array", format!("{errors_array}; exit 1")),
        ("timeout", format!("({dump}) >&2; sleep 30")),
    ];
    for everything in [false, true] {
        for (case, body) in &cli_cases {
            let program = bin.join(format!("{case}-{everything}"));
            std::fs::write(&program, format!("#!/bin/sh\ncat > /dev/null\n{body}\n")).expect("write script");
            set_executable(&program);
            let cli = cli(program, everything);
            shown.push(format!("{cli:?}"));
            run_failing(&e, &format!("cli-{case}-{everything}"), Box::new(cli), &errors).await;
        }
    }
    // Success, with the environment on stderr and a token where the model's name goes.
    let program = bin.join("success");
    let success = r#"#!/bin/sh
cat > /dev/null
env >&2
printf '{"type":"result","subtype":"success","is_error":false,"result":"answer\\n","modelUsage":{"model-%s":{"costUSD":1}}}' "$ANTHROPIC_AUTH_TOKEN"
"#;
    std::fs::write(&program, success).expect("write script");
    set_executable(&program);
    let id = run(&e, "cli-success", Box::new(cli(program, true)), &errors).await;
    let done = common::job(&e.db, &id).await;
    assert_eq!(done.status, JobStatus::Completed, "{:?}", done.last_error);
    assert_eq!(std::fs::read_to_string(e.root_dir.join("answers/cli-success.md")).expect("answer"), "answer\n");

    let logs = logs.text();
    let rows = outbox_tests::job_rows(&e.db).await;
    let errors = errors.lock().expect("lock").join("\n");
    let files = files(e.t.dir.path());
    // The capture is real: our events, the HTTP stack's traces, the errors in rows and files.
    for needle in ["anthropic api failed", "anthropic api retrying", "claude cli failed", "TRACE", "hyper"] {
        assert!(logs.contains(needle), "the logs hold `{needle}`");
    }
    for needle in ["authentication_error", "429", "timed out", "claude exited with code 1", "[redacted]"] {
        assert!(rows.contains(needle) && errors.contains(needle), "rows and errors hold `{needle}`");
    }
    assert!(files.iter().any(|(name, _)| name.ends_with("outbox.db")), "the database file is searched");
    let mut found = Vec::new();
    for (what, text) in [("logs", &logs), ("job rows", &rows), ("errors", &errors), ("debug output", &shown.join("\n"))]
    {
        found.extend(leaks(text).into_iter().map(|l| format!("{what}: {l}")));
    }
    for (name, bytes) in &files {
        found.extend(leaks(&String::from_utf8_lossy(bytes)).into_iter().map(|l| format!("{name}: {l}")));
    }
    assert!(found.is_empty(), "{} leak(s):\n{}", found.len(), found.join("\n"));
}

fn canary(var: &str) -> &'static str {
    CANARIES.iter().find(|(v, _)| *v == var).map(|(_, c)| *c).expect("a canary")
}

/// Where `text` holds a canary or a piece of one, described without repeating it.
fn leaks(text: &str) -> Vec<String> {
    outbox_tests::leaks(text, CANARIES, FRAGMENT)
}

fn api(base: &str, timeout: Duration) -> AnthropicApi {
    // The key comes from ANTHROPIC_API_KEY, as it does by default.
    let mut opts = ApiOpts::new("claude-sonnet-4-5");
    opts.base_url = base.to_owned();
    opts.timeout = timeout;
    opts.retries = 1;
    opts.backoff = Duration::from_millis(1);
    AnthropicApi::new(opts).expect("client")
}

/// The CLI backend running `program`, with the default environment allow-list, or every variable.
fn cli(program: PathBuf, everything: bool) -> ClaudeCli {
    let mut opts = CliOpts::default();
    opts.program = program;
    opts.timeout = Duration::from_millis(500);
    if everything {
        opts.env_allow = vec!["*".into()];
    }
    ClaudeCli::new(opts).expect("cli")
}

fn set_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Runs one extraction job named `case` through a worker with `extractor`; it must fail.
async fn run_failing(e: &common::Env, case: &str, extractor: Box<dyn Extractor>, errors: &Arc<Mutex<Vec<String>>>) {
    let id = run(e, case, extractor, errors).await;
    let j = common::job(&e.db, &id).await;
    assert_eq!(j.status, JobStatus::Failed, "{case}");
}

async fn run(e: &common::Env, case: &str, extractor: Box<dyn Extractor>, errors: &Arc<Mutex<Vec<String>>>) -> String {
    let job = ClaudeExtraction::new(format!("Extract {case}."), format!("answers/{case}.md"), case);
    let id = outbox::enqueue(&e.db, &job, EnqueueOpts::new().max_attempts(1)).await.expect("enqueue");
    let recording = Arc::new(Recording { inner: extractor, errors: Arc::clone(errors) });
    let builder = Worker::builder(&e.db).poll_interval(Duration::from_millis(20));
    outbox_fs::register_handlers(builder, &e.root, Some(recording))
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
    id.id().to_owned()
}

/// Passes extractions through, keeping every error returned (as `Display` and `Debug`).
struct Recording {
    inner: Box<dyn Extractor>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Extractor for Recording {
    fn extract<'a>(
        &'a self,
        request: &'a ExtractRequest,
    ) -> Pin<Box<dyn Future<Output = Result<Extraction, ExtractError>> + Send + 'a>> {
        Box::pin(async move {
            let result = self.inner.extract(request).await;
            if let Err(e) = &result {
                self.errors.lock().expect("lock").push(format!("{e}\n{e:?}"));
            }
            result
        })
    }
}

/// Every file under `dir`, with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path.display().to_string(), bytes));
            }
        }
    }
    out
}
