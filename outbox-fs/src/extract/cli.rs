//! The Claude Code CLI in headless mode (`claude -p --output-format json`) as an [`Extractor`].
//!
//! The prompt goes to the child on stdin, never on the command line, where every user of the machine could
//! read it in `ps`. The child sees only allow-listed environment variables and runs in its own process group,
//! so a timeout takes down the tools it started as well.
//!
//! How an outcome is classified:
//!
//! | outcome | error |
//! |---|---|
//! | no answer within `timeout` (child group killed) | `Retryable` |
//! | program missing or not executable | `Permanent` |
//! | result JSON, `is_error: true`, text names a rate limit, overload, 429/5xx, timeout or connection error | `Retryable` |
//! | result JSON, `is_error: true`, subtype `error_during_execution` | `Retryable` |
//! | result JSON, any other error (`error_max_turns`, `error_max_budget_usd`, invalid key, ...) | `Permanent` |
//! | no readable result JSON, exit code 0 | `Permanent`: the program claims success in a format we cannot read |
//! | no readable result JSON, non-zero exit or killed by a signal | `Retryable`: a crash |
//!
//! The JSON is read whatever the exit code: the CLI exits 1 on `is_error` results and says why on stdout.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tracing::Instrument;

use super::{ExtractError, ExtractRequest, Extraction, Extractor, WireUsage};

/// Environment variables the child sees unless [`CliOpts::env_allow`] says otherwise.
#[rustfmt::skip]
const DEFAULT_ENV_ALLOW: &[&str] = &[
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "XDG_CONFIG_HOME", "ANTHROPIC_*", "CLAUDE_CODE_*",
    "CLAUDE_CONFIG_DIR",
];
/// Fewer turns leave no room for the answer after the CLI's own first turn and end in `error_max_turns`.
const MIN_TURNS: u32 = 2;
/// Answers are files of text; anything bigger is a runaway child, not an answer.
const STDOUT_CAP: usize = 16 << 20;
const STDERR_CAP: usize = 64 << 10;
/// How much of stderr an error message carries (its tail, where the reason usually is).
const STDERR_SHOWN: usize = 500;
/// Errors the model provider or the network will likely get over by themselves.
#[rustfmt::skip]
const TRANSIENT_MARKERS: &[&str] = &[
    "rate limit", "rate_limit", "usage limit", "overloaded", "api error: 429", "api error: 5", "timed out",
    "timeout", "connection error", "econnreset", "etimedout", "socket hang up",
];

/// Options of [`ClaudeCli`]. Start from [`CliOpts::default`] and set fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CliOpts {
    /// The program to run, looked up on `PATH` when it has no slash. Default `claude`.
    pub program: PathBuf,
    /// `--model`; the CLI's own default when `None` (the default).
    pub model: Option<String>,
    /// `--max-turns`, at least 2. Default 3.
    pub max_turns: u32,
    /// `--allowedTools`, joined with commas; not passed when empty (the default).
    pub allowed_tools: Vec<String>,
    /// Working directory of the child; the worker's when `None` (the default).
    pub working_dir: Option<PathBuf>,
    /// How long the child may run before its process group is killed. Default 5 minutes.
    pub timeout: Duration,
    /// Names of the environment variables passed to the child; a trailing `*` matches a prefix. Default
    /// `PATH`, `HOME`, `USER`, `LANG`, `LC_ALL`, `TMPDIR`, `XDG_CONFIG_HOME`, `ANTHROPIC_*`, `CLAUDE_CODE_*`,
    /// `CLAUDE_CONFIG_DIR`.
    pub env_allow: Vec<String>,
}

impl Default for CliOpts {
    fn default() -> Self {
        Self {
            program: PathBuf::from("claude"),
            model: None,
            max_turns: 3,
            allowed_tools: Vec::new(),
            working_dir: None,
            timeout: Duration::from_secs(300),
            env_allow: DEFAULT_ENV_ALLOW.iter().map(|name| (*name).to_owned()).collect(),
        }
    }
}

/// Runs prompts through the Claude Code CLI in headless mode.
#[derive(Debug, Clone)]
pub struct ClaudeCli {
    opts: CliOpts,
}

impl ClaudeCli {
    /// Checks `opts`; a `max_turns` below 2 is a `Permanent` error.
    pub fn new(opts: CliOpts) -> Result<Self, ExtractError> {
        if opts.max_turns < MIN_TURNS {
            return Err(ExtractError::Permanent(format!(
                "invalid claude cli options: max_turns must be at least {MIN_TURNS}, got {}",
                opts.max_turns
            )));
        }
        Ok(Self { opts })
    }

    fn command(&self, env: &[(OsString, OsString)]) -> Command {
        let opts = &self.opts;
        let mut cmd = Command::new(&opts.program);
        cmd.args(["-p", "--output-format", "json"]);
        if let Some(model) = &opts.model {
            cmd.arg("--model").arg(model);
        }
        cmd.arg("--max-turns").arg(opts.max_turns.to_string());
        if !opts.allowed_tools.is_empty() {
            cmd.arg("--allowedTools").arg(opts.allowed_tools.join(","));
        }
        if let Some(dir) = &opts.working_dir {
            cmd.current_dir(dir);
        }
        cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // A dropped extraction (cancelled job, shutdown) must not leave a paid model run behind.
        cmd.kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        cmd
    }

    async fn run(&self, request: &ExtractRequest) -> Result<Extraction, ExtractError> {
        let started = Instant::now();
        let outcome = self.answer(request).await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match &outcome {
            Ok(x) => {
                tracing::info!(model = %x.model, duration_ms, cost_usd = x.cost_usd, usage = ?x.usage, "claude cli answered")
            }
            Err(error) => tracing::warn!(duration_ms, %error, "claude cli failed"),
        }
        outcome
    }

    async fn answer(&self, request: &ExtractRequest) -> Result<Extraction, ExtractError> {
        let env = forwarded_env(&self.opts.env_allow);
        let secrets = secret_values(&env);
        let mut child = spawn(self.command(&env), &self.opts.program).await?;
        let talked = tokio::time::timeout(self.opts.timeout, talk(&mut child, &request.prompt)).await;
        let Ok(talked) = talked else {
            kill_group(&mut child).await;
            return Err(ExtractError::Retryable(format!(
                "claude timed out after {:?} and was killed",
                self.opts.timeout
            )));
        };
        let (status, stdout, stderr) =
            talked.map_err(|e| ExtractError::Retryable(format!("talking to claude failed: {e}")))?;
        let stderr = scrub(&String::from_utf8_lossy(&stderr), &secrets);
        interpret(status, &stdout, &stderr, self.opts.model.as_deref(), &secrets)
            .map_err(|e| e.map_message(|m| scrub(&m, &secrets)))
    }
}

impl Extractor for ClaudeCli {
    fn extract<'a>(
        &'a self,
        request: &'a ExtractRequest,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Extraction, ExtractError>> + Send + 'a>> {
        let span = tracing::info_span!(
            "claude_cli",
            requirement_id = %request.requirement_id,
            prompt_hash = %request.prompt_hash,
        );
        Box::pin(self.run(request).instrument(span))
    }
}

/// Spawns, retrying "text file busy": a just-written program can be briefly held open by a forking thread.
async fn spawn(mut cmd: Command, program: &std::path::Path) -> Result<Child, ExtractError> {
    let mut busy_retries = 3;
    loop {
        match cmd.spawn() {
            Ok(child) => return Ok(child),
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && busy_retries > 0 => {
                busy_retries -= 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                let msg = format!("cannot start claude program {}: {e}", program.display());
                return Err(match e.kind() {
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied => ExtractError::Permanent(msg),
                    _ => ExtractError::Retryable(msg),
                });
            }
        }
    }
}

/// Feeds the prompt and drains both pipes at once: a child blocked on a full pipe would never exit.
async fn talk(child: &mut Child, prompt: &str) -> io::Result<(ExitStatus, Vec<u8>, Vec<u8>)> {
    let stdin = child.stdin.take();
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // A child that exits without reading (bad flag, crash) explains itself on stdout; EPIPE adds nothing.
            let _ = stdin.write_all(prompt.as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
    };
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let ((), stdout, stderr) = tokio::join!(feed, read_capped(stdout, STDOUT_CAP), read_capped(stderr, STDERR_CAP));
    let status = child.wait().await?;
    Ok((status, stdout?, stderr?))
}

/// Reads to the end but keeps at most `cap` bytes, so a chatty child neither blocks nor fills memory.
async fn read_capped(reader: Option<impl AsyncRead + Unpin>, cap: usize) -> io::Result<Vec<u8>> {
    let (mut kept, mut buf) = (Vec::new(), vec![0u8; 8192]);
    let Some(mut reader) = reader else { return Ok(kept) };
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok(kept);
        }
        let room = cap.saturating_sub(kept.len()).min(n);
        kept.extend_from_slice(&buf[..room]);
    }
}

async fn kill_group(child: &mut Child) {
    #[cfg(unix)]
    if let Some(pid) = child.id() {
        // Without unsafe code there is no killpg; kill(1) takes a negative pid as "the whole group".
        let group = format!("-{pid}");
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stdout(Stdio::null()).status().await;
    }
    // Also reaps the child, so no zombie is left behind.
    let _ = child.kill().await;
}

fn forwarded_env(allow: &[String]) -> Vec<(OsString, OsString)> {
    let allowed = |name: &str| {
        allow.iter().any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == pattern,
        })
    };
    std::env::vars_os().filter(|(name, _)| name.to_str().is_some_and(allowed)).collect()
}

/// Values of forwarded variables that look like credentials, to be cut out of anything we repeat.
fn secret_values(env: &[(OsString, OsString)]) -> Vec<String> {
    const SECRET_NAMES: &[&str] = &["KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH"];
    env.iter()
        .filter(|(name, _)| SECRET_NAMES.iter().any(|s| name.to_string_lossy().to_uppercase().contains(s)))
        .filter_map(|(_, value)| value.to_str().filter(|v| v.len() >= 8).map(str::to_owned))
        .collect()
}

fn scrub(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |text, secret| text.replace(secret.as_str(), "[redacted]"))
}

/// The `type: result` object the CLI prints; fields we do not use are ignored.
#[derive(Default, Deserialize)]
#[serde(default)]
struct CliResult {
    #[serde(rename = "type")]
    kind: String,
    subtype: String,
    is_error: bool,
    result: Option<String>,
    /// Set instead of `result` by some error subtypes.
    errors: Vec<serde_json::Value>,
    total_cost_usd: Option<f64>,
    usage: WireUsage,
    #[serde(rename = "modelUsage")]
    model_usage: BTreeMap<String, ModelUsage>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ModelUsage {
    #[serde(rename = "costUSD")]
    cost_usd: f64,
}

fn interpret(
    status: ExitStatus,
    stdout: &[u8],
    stderr: &str,
    configured_model: Option<&str>,
    secrets: &[String],
) -> Result<Extraction, ExtractError> {
    let parsed = serde_json::from_slice::<CliResult>(stdout).ok().filter(|r| r.kind == "result");
    let Some(res) = parsed else {
        let what = if stdout.trim_ascii().is_empty() { "no output" } else { "output that is not a result json" };
        let stderr = stderr_note(stderr);
        return Err(if status.success() {
            ExtractError::Permanent(format!("claude exited 0 with {what}{stderr}"))
        } else {
            ExtractError::Retryable(format!("claude {} with {what}{stderr}", describe(status)))
        });
    };
    if res.is_error || res.subtype != "success" {
        return Err(classify(&res, secrets));
    }
    let Some(text) = res.result else {
        return Err(ExtractError::Permanent("claude reported success without a result text".into()));
    };
    // The main model costs the most; cheaper auxiliary models (titles, summaries) show up next to it.
    let model = res
        .model_usage
        .iter()
        .max_by(|a, b| a.1.cost_usd.total_cmp(&b.1.cost_usd))
        .map(|(name, _)| name.split('[').next().unwrap_or(name).to_owned())
        .or_else(|| configured_model.map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    // The answer is the job's product and is written as it came; the model's name goes to logs and rows.
    let model = scrub(&model, secrets);
    Ok(Extraction { text, model, usage: res.usage.into(), cost_usd: res.total_cost_usd })
}

fn classify(res: &CliResult, secrets: &[String]) -> ExtractError {
    let detail = match &res.result {
        Some(text) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => res
            .errors
            .iter()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join("; "),
    };
    // Before the tail is cut: a secret the cut runs through would leave a piece no scrub can recognise.
    let detail = scrub(&detail, secrets);
    let subtype = if res.subtype.is_empty() { "an error" } else { res.subtype.as_str() };
    let message = format!("claude reported {subtype}: {}", truncate_tail(&detail, STDERR_SHOWN));
    let lower = detail.to_lowercase();
    if TRANSIENT_MARKERS.iter().any(|m| lower.contains(m)) || subtype == "error_during_execution" {
        ExtractError::Retryable(message)
    } else {
        ExtractError::Permanent(message)
    }
}

fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with code {code}"),
        None => "was killed by a signal".to_owned(),
    }
}

fn stderr_note(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() { String::new() } else { format!("; stderr: {}", truncate_tail(stderr, STDERR_SHOWN)) }
}

fn truncate_tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max { text.to_owned() } else { format!("...{}", text.chars().skip(count - max).collect::<String>()) }
}
