//! `ClaudeCli` against real executables: shell scripts standing in for `claude`, one tempdir per test.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use outbox_fs::extract::{ClaudeCli, CliOpts, ExtractError, ExtractRequest, Extractor, Usage};

const PROMPT: &str = "Extract requirement R-7.\nQuote it exactly; it's \"frozen\" & $HOME stays literal.";

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/extract").join(name);
    path.to_str().expect("utf-8 path").to_owned()
}

/// Writes an executable `sh` script named `claude` into `dir`.
fn script(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("claude");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod script");
    path
}

fn cli(program: PathBuf, configure: impl FnOnce(&mut CliOpts)) -> ClaudeCli {
    let mut opts = CliOpts::default();
    opts.program = program;
    configure(&mut opts);
    ClaudeCli::new(opts).expect("valid options")
}

fn request() -> ExtractRequest {
    ExtractRequest { prompt: PROMPT.into(), prompt_hash: "ab12cd".into(), requirement_id: "R-7".into() }
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Running, as opposed to gone or a zombie waiting for a parent that will not reap it.
fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Ok(stat) => !matches!(stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()), Some('Z' | 'X')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn success_sends_prompt_on_stdin_and_parses_the_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let d = dir.path().display();
    let program = script(
        dir.path(),
        &format!(
            "printf '%s\\n' \"$@\" > '{d}/argv'\ncat > '{d}/stdin'\npwd > '{d}/cwd'\ncat '{}'",
            fixture("cli_success.json")
        ),
    );
    let claude = cli(program, |o| {
        o.model = Some("sonnet".into());
        o.max_turns = 4;
        o.allowed_tools = vec!["Read".into(), "Grep".into()];
        o.working_dir = Some(work.clone());
    });

    let got = claude.extract(&request()).await.expect("extraction");

    assert_eq!(got.text, "# Requirement R-7\nThe system shall retry.\n");
    assert_eq!(got.model, "claude-sonnet-4-5-20250929", "the costliest model, without its [1m] suffix");
    let usage =
        Usage { input_tokens: 12, output_tokens: 56, cache_creation_input_tokens: 3, cache_read_input_tokens: 4 };
    assert_eq!(got.usage, usage);
    assert_eq!(got.cost_usd, Some(0.0123));
    let argv = read(dir.path().join("argv"));
    let expected = "-p\n--output-format\njson\n--model\nsonnet\n--max-turns\n4\n--allowedTools\nRead,Grep\n";
    assert_eq!(argv, expected, "the prompt is not on the command line");
    assert_eq!(read(dir.path().join("stdin")), PROMPT);
    let cwd = PathBuf::from(read(dir.path().join("cwd")).trim());
    assert_eq!(cwd.canonicalize().expect("cwd"), work.canonicalize().expect("work"));
}

#[tokio::test]
async fn max_turns_error_with_exit_1_is_permanent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let program =
        script(dir.path(), &format!("cat > /dev/null\ncat '{}'\nexit 1", fixture("cli_error_max_turns.json")));

    let err = cli(program, |_| {}).extract(&request()).await.expect_err("max turns");

    let ExtractError::Permanent(message) = err else { panic!("expected permanent, got {err:?}") };
    assert!(message.contains("error_max_turns"), "{message}");
    assert!(message.contains("Reached maximum number of turns (3)"), "{message}");
}

#[tokio::test]
async fn overloaded_api_error_with_exit_1_is_retryable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let program =
        script(dir.path(), &format!("cat > /dev/null\ncat '{}'\nexit 1", fixture("cli_error_overloaded.json")));

    let err = cli(program, |_| {}).extract(&request()).await.expect_err("overloaded");

    let ExtractError::Retryable(message) = err else { panic!("expected retryable, got {err:?}") };
    assert!(message.contains("API Error: 529") && message.contains("overloaded_error"), "{message}");
}

#[tokio::test]
async fn hang_is_killed_at_the_timeout_with_its_children() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display();
    let program = script(dir.path(), &format!("echo $$ > '{d}/pid'\nsleep 60 &\necho $! > '{d}/grandchild'\nwait"));
    let claude = cli(program, |o| o.timeout = Duration::from_millis(500));

    let started = Instant::now();
    let err = claude.extract(&request()).await.expect_err("timeout");

    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(err, ExtractError::Retryable("claude timed out after 500ms and was killed".into()));
    let (pid, grandchild) = (read(dir.path().join("pid")), read(dir.path().join("grandchild")));
    let deadline = Instant::now() + Duration::from_secs(2);
    while (alive(&pid) || alive(&grandchild)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(&pid), "claude stand-in {} still runs", pid.trim());
    assert!(!alive(&grandchild), "its child {} still runs", grandchild.trim());
}

#[tokio::test]
async fn garbage_with_exit_0_is_permanent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let program = script(dir.path(), "cat > /dev/null\necho 'Welcome to Claude Code!'");

    let err = cli(program, |_| {}).extract(&request()).await.expect_err("garbage");

    let ExtractError::Permanent(message) = err else { panic!("expected permanent, got {err:?}") };
    assert!(message.starts_with("claude exited 0 with output that is not a result json"), "{message}");
}

#[tokio::test]
async fn crash_without_result_is_retryable_and_quotes_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let program =
        script(dir.path(), "cat > /dev/null\nprintf '{\"type\":\"res'\necho 'fatal: heap out of memory' >&2\nexit 3");

    let err = cli(program, |_| {}).extract(&request()).await.expect_err("crash");

    let expected = "claude exited with code 3 with output that is not a result json; stderr: fatal: heap out of memory";
    assert_eq!(err, ExtractError::Retryable(expected.into()));
}

#[tokio::test]
async fn killed_by_a_signal_is_retryable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let program = script(dir.path(), "cat > /dev/null\nkill -9 $$");

    let err = cli(program, |_| {}).extract(&request()).await.expect_err("killed");

    assert_eq!(err, ExtractError::Retryable("claude was killed by a signal with no output".into()));
}

#[test]
fn max_turns_below_two_is_rejected() {
    let mut opts = CliOpts::default();
    opts.max_turns = 1;

    let err = ClaudeCli::new(opts).expect_err("one turn");

    let expected = "invalid claude cli options: max_turns must be at least 2, got 1";
    assert_eq!(err, ExtractError::Permanent(expected.into()));
}

#[tokio::test]
async fn missing_program_is_permanent() {
    let dir = tempfile::tempdir().expect("tempdir");

    let err = cli(dir.path().join("no-such-claude"), |_| {}).extract(&request()).await.expect_err("missing");

    let ExtractError::Permanent(message) = err else { panic!("expected permanent, got {err:?}") };
    assert!(message.starts_with("cannot start claude program"), "{message}");
}

const CANARY: &str = "OUTBOX_SECRET_CANARY";
const KEY: &str = "sk-ant-canary-0123456789";

/// Setting variables in this process needs `unsafe`, so the test runs its half in a child test process that
/// starts with them set.
#[test]
fn environment_is_allow_listed() {
    outbox_tests::run_child("environment_is_allow_listed_child", CANARY, |c| {
        c.env("ANTHROPIC_API_KEY", KEY).env("OUTBOX_VISIBLE_VAR", "visible");
    })
    .assert_passed();
}

#[tokio::test]
#[ignore = "half of environment_is_allow_listed, which runs it with the variables set"]
async fn environment_is_allow_listed_child() {
    outbox_tests::child_half(CANARY, "environment_is_allow_listed");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display();
    let program =
        script(dir.path(), &format!("env > '{d}/env'\ncat > /dev/null\ncat '{}'", fixture("cli_success.json")));
    cli(program, |o| o.env_allow.push("OUTBOX_VISIBLE_VAR".into())).extract(&request()).await.expect("extraction");

    let env = read(dir.path().join("env"));
    assert!(!env.contains(CANARY), "unlisted variable leaked:\n{env}");
    assert!(env.lines().any(|l| l == "OUTBOX_VISIBLE_VAR=visible"), "{env}");
    assert!(env.lines().any(|l| l == format!("ANTHROPIC_API_KEY={KEY}")), "{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");

    // The key is forwarded, so a child that prints it must not get it into our error.
    let program =
        script(dir.path(), "cat > /dev/null\necho \"auth failed for $ANTHROPIC_API_KEY\" >&2\necho nope\nexit 2");
    let err = cli(program, |_| {}).extract(&request()).await.expect_err("crash");
    let ExtractError::Retryable(message) = err else { panic!("expected retryable, got {err:?}") };
    assert!(message.ends_with("stderr: auth failed for [redacted]"), "{message}");
}
