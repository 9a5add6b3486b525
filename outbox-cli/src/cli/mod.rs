//! The command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use outbox::JobStatus;

use crate::fail::{code, quoted};
use crate::render::Format;
use outbox_server::duration;

mod flow;
mod jobs;
use flow::rate_arg;
pub(crate) use flow::{FlowArgs, PauseArgs, ResumeArgs, WeightArgs};
pub(crate) use jobs::{CancelArgs, EnqueueArgs, ListArgs, RetryArgs};

const AFTER_HELP: &str = "\
Logs go to stderr: warnings, and progress for `work` and `serve`. OUTBOX_LOG takes a filter (`debug`;
`outbox=debug` for every outbox crate, which all start so; `outbox::worker=debug` for the worker alone), or
RUST_LOG when OUTBOX_LOG is unset; colours only on a terminal, never with NO_COLOR set.

Exit codes:
  0  success (reconcile: no discrepancy)
  1  the database, the filesystem or a worker failed
  2  bad input: invalid JSON or UTF-8, a payload violating its schema, an unknown kind, a bad option or duration
  3  no job with the given id
  4  the action does not apply to the job's status (retry a pending job, cancel a completed one)
  5  reconcile found discrepancies
  6  complete, fail, extend, snooze: the claim is not held any more (its lease expired and the job was
     rescued, or the attempt already ended); nothing was changed
  7  enqueue --wait: the job ended failed or cancelled (printed like a completed one)";

/// Operate an outbox job queue: see what is outstanding, failed, stuck or slow, act on it, run a worker.
#[derive(Debug, Parser)]
#[command(name = "outbox", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    /// The database: a sea-orm URL (`sqlite://app.db`, `postgres://user@host/db`) or the path of an SQLite file.
    #[arg(long, global = true, env = "OUTBOX_DATABASE_URL", default_value = "sqlite://outbox.db", value_name = "URL")]
    pub(crate) database_url: String,

    /// Output for people (`table`) or programs (`json`).
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or update the outbox tables (the only command that creates a missing SQLite file).
    Migrate,
    /// Enqueue a job, validated against its kind's JSON Schema.
    Enqueue(EnqueueArgs),
    /// List jobs, newest first (by enqueue order).
    List(ListArgs),
    /// Show one job with its history.
    Get {
        /// The job id.
        id: String,
    },
    /// Answer all six questions at once: outstanding, failed, stuck, durations, duplicates, recent.
    Stats {
        /// The window of "durations" and "recent" (e.g. 1h, 30m, 7d).
        #[arg(long, default_value = "1h", value_parser = duration::back, value_name = "DURATION")]
        window: Duration,
        /// Failed jobs and duplicate keys listed at most.
        #[arg(long, default_value_t = 10)]
        limit: u64,
    },
    /// Jobs of every queue: available, scheduled, waiting (in a sequence), claimed, stuck, completed, failed,
    /// cancelled.
    Queues,
    /// The live workers, in-process and remote: what they run, how busy they are, when they were last seen.
    Workers,
    /// The periodic schedules workers registered: when each ticks, its last tick and job, its next tick.
    Schedules,
    /// Retry a failed or cancelled job (attempts start over), or every failed job.
    Retry(RetryArgs),
    /// Cancel a pending job, or let a sequence held by a failed or cancelled job go on; or cancel every pending
    /// job about a subject.
    Cancel(CancelArgs),
    /// Delete finished jobs older than a duration.
    Purge {
        /// Statuses to purge: completed, failed, cancelled (repeat or separate with commas).
        #[arg(long, value_delimiter = ',', required = true, value_parser = status_arg)]
        status: Vec<JobStatus>,
        /// Only jobs that finished longer ago than this (e.g. 7d, 12h).
        #[arg(long, value_parser = duration::back, value_name = "DURATION")]
        older_than: Duration,
    },
    /// Print kinds and their JSON Schemas (built in, or recorded by any application's workers).
    Schema {
        /// One kind; all when omitted.
        kind: Option<String>,
    },
    /// Check files (and with --aws, AWS resources) against their latest completed jobs; report, never fix.
    Reconcile(ReconcileArgs),
    /// Run a worker with the built-in handlers until Ctrl-C or SIGTERM.
    Work(WorkArgs),
    /// Record a kind (JSON Schema and defaults) for jobs that no Rust worker defines: a shell worker's.
    DefineKind(DefineKindArgs),
    /// Claim jobs for a worker of your own (a shell loop): each claimed job is printed as one line of JSON;
    /// nothing is printed, and the exit code is 0, when there is none.
    #[command(after_help = CLAIM_HELP)]
    Claim(ClaimArgs),
    /// Complete a job this worker claimed.
    Complete(CompleteArgs),
    /// End a claimed attempt with an error: retried after a backoff while attempts are left, unless permanent.
    Fail(FailArgs),
    /// Renew the lease of a claimed job (a heartbeat for long work).
    Extend(ExtendArgs),
    /// Put a claimed job back to pending for a while, giving its attempt back.
    Snooze(SnoozeArgs),
    /// Pause a queue, a kind or one key of a kind fleet-wide (or hold it for a while with --for): no claim takes
    /// its jobs until `outbox resume`; running jobs finish. A queue or kind with no jobs yet can be paused.
    Pause(PauseArgs),
    /// End the pause or hold of a queue, a kind or one key of a kind.
    Resume(ResumeArgs),
    /// Show what is paused or held and until when, every rate and what is left of it, and with --kind the fair
    /// share of a kind's keys.
    Flow(FlowArgs),
    /// Set the fair-share weight of one key of a kind (1 unless set).
    Weight(WeightArgs),
    /// Create a workflow or batch from JSON, show one's steps and what each waits for, or cancel it.
    #[command(subcommand)]
    Workflow(WorkflowCommand),
    /// Serve the HTTP API (JSON) and the dashboard (at /) until Ctrl-C or SIGTERM.
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Print the HTTP API's OpenAPI 3.1 document (what `outbox serve` answers at /api/openapi.json).
    Openapi,
    /// Print a completion script for a shell: `outbox completions bash > /etc/bash_completion.d/outbox`,
    /// `outbox completions zsh > "${fpath[1]}/_outbox"`, `outbox completions fish >
    /// ~/.config/fish/completions/outbox.fish`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// What `outbox workflow` does.
#[derive(Debug, Subcommand)]
pub(crate) enum WorkflowCommand {
    /// Write a workflow in one transaction, or nothing: `{"name", "steps": [{"name", "kind", "payload", "after",
    /// "after_jobs", "on_parent_failure", "queue", "priority", "max_attempts", "delay", "subject"}]}` (the body of
    /// `POST /api/workflows`). Prints its id and each step's job id.
    Create {
        /// The workflow as JSON text, `@path` to read a file, or `-` for stdin.
        spec: String,
    },
    /// Show a workflow's steps, their state and what each waits for.
    Show {
        /// The workflow id.
        id: String,
    },
    /// Cancel every step of a workflow that has not started; running steps finish.
    Cancel {
        /// The workflow id.
        id: String,
    },
}

const SERVE_HELP: &str = "\
Tokens: each is ROLE:SECRET, the role `read` (the GET routes), `operate` (those, and enqueue, retry, cancel,
delete) or `work` (remote workers). Give them in OUTBOX_TOKENS, comma-separated
(`OUTBOX_TOKENS=read:s3cret,operate:0ther`), rather than with --token: a command line is visible to every user
of the machine, the environment of a process only to its owner. Both may be used; their tokens add up.
Clients send `Authorization: Bearer SECRET`. Without any token every route is open, and only a loopback
address (127.0.0.1, ::1) may be served.";

const CLAIM_HELP: &str = "\
Each line is {\"id\", \"kind\", \"queue\", \"payload\", \"attempt\", \"run\", \"max_attempts\",
\"lease_expires_at\", \"worker\"}. Every later call for the job names the same worker and run (`outbox complete
ID --worker W --run N`): the run counts the job's claims, so it tells this claim from any other, even after an
operator's retry starts the attempts over. A call for a claim that is not held any more exits 6 and changes
nothing. A job not completed, failed or snoozed before its lease runs out (renew it with `outbox extend`) is
rescued and claimed again.";

/// The worker and run every call after a claim names.
#[derive(Debug, Args)]
pub(crate) struct ClaimRef {
    /// The job id.
    pub(crate) id: String,
    /// The worker that claimed it.
    #[arg(long, env = "OUTBOX_WORKER", value_name = "NAME")]
    pub(crate) worker: String,
    /// The run its claim printed (the claim's token). `--attempt`, its name before, is still taken: a value
    /// that is not the claim's run is refused as stale, never written to another claim.
    #[arg(long, alias = "attempt")]
    pub(crate) run: i32,
}

#[derive(Debug, Args)]
pub(crate) struct DefineKindArgs {
    /// The kind name.
    pub(crate) kind: String,
    /// Its payloads' JSON Schema: JSON text, `@path` to read a file, or `-` for stdin.
    #[arg(long, value_name = "JSON")]
    pub(crate) schema: String,
    /// Its jobs' default queue.
    #[arg(long, default_value = "default")]
    pub(crate) queue: String,
    /// Its jobs' default priority, higher first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(crate) priority: i32,
    /// Attempts before a job fails for good.
    #[arg(long, default_value_t = 3)]
    pub(crate) max_attempts: i32,
    /// At most this many of its jobs run at once across every worker.
    #[arg(long)]
    pub(crate) concurrency: Option<u32>,
}

#[derive(Debug, Args)]
pub(crate) struct ClaimArgs {
    /// The worker's name, recorded as the claims' owner (unique per process: `sh-$$`).
    #[arg(long, env = "OUTBOX_WORKER", value_name = "NAME")]
    pub(crate) worker: String,
    /// Only jobs of these kinds (repeat for several); every recorded kind when omitted.
    #[arg(long = "kind", value_name = "KIND")]
    pub(crate) kinds: Vec<String>,
    /// Only jobs of these queues (repeat for several); all when omitted.
    #[arg(long = "queue", value_name = "QUEUE")]
    pub(crate) queues: Vec<String>,
    /// At most this many jobs.
    #[arg(long, default_value_t = 1)]
    pub(crate) limit: usize,
    /// How long the claims hold unless renewed with `outbox extend`.
    #[arg(long, default_value = "60s", value_parser = duration::parse, value_name = "DURATION")]
    pub(crate) lease: Duration,
    /// When no job is due, wait for one up to this long (5m when no duration is given) instead of returning
    /// at once.
    #[arg(long, value_parser = duration::parse, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "5m")]
    pub(crate) wait: Option<Duration>,
}

#[derive(Debug, Args)]
pub(crate) struct CompleteArgs {
    #[command(flatten)]
    pub(crate) claim: ClaimRef,
    /// The job's output: JSON text, `@path` to read a file, or `-` for stdin.
    #[arg(long, value_name = "JSON")]
    pub(crate) output: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct FailArgs {
    #[command(flatten)]
    pub(crate) claim: ClaimRef,
    /// What went wrong, recorded as the job's last error.
    #[arg(long, default_value = "failed")]
    pub(crate) reason: String,
    /// Fail for good now, whatever attempts are left.
    #[arg(long, alias = "dead", conflicts_with = "retry_in")]
    pub(crate) permanent: bool,
    /// Retry after this long instead of the default backoff (while attempts are left).
    #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
    pub(crate) retry_in: Option<Duration>,
}

#[derive(Debug, Args)]
pub(crate) struct ExtendArgs {
    #[command(flatten)]
    pub(crate) claim: ClaimRef,
    /// The lease from now.
    #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
    pub(crate) by: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct SnoozeArgs {
    #[command(flatten)]
    pub(crate) claim: ClaimRef,
    /// Run again no earlier than this from now.
    #[arg(long, value_parser = duration::parse, value_name = "DURATION")]
    pub(crate) delay: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct ReconcileArgs {
    /// The directory the file jobs write beneath (checks file jobs).
    #[arg(long, required_unless_present = "aws")]
    pub(crate) root: Option<PathBuf>,
    /// Also check the resources of completed `sync_aws` jobs (AWS configuration from the environment).
    #[arg(long)]
    pub(crate) aws: bool,
    /// List at most this many discrepancies (all are counted).
    #[arg(long)]
    pub(crate) max_listed: Option<usize>,
    /// Draw the progress bar on stderr even when it is not a terminal.
    #[arg(long)]
    pub(crate) progress: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WorkArgs {
    /// The directory the file jobs write beneath.
    #[arg(long)]
    pub(crate) root: PathBuf,
    /// Jobs run at once.
    #[arg(long, default_value_t = 10)]
    pub(crate) concurrency: usize,
    /// Only these queues (repeat for several); all when omitted.
    #[arg(long = "queue", value_name = "QUEUE")]
    pub(crate) queues: Vec<String>,
    /// Run `claude_extraction` jobs through the Claude Code CLI (`claude`, or the program given).
    #[arg(long, value_name = "PROGRAM", num_args = 0..=1, default_missing_value = "claude", conflicts_with = "anthropic_model")]
    pub(crate) claude_cli: Option<PathBuf>,
    /// Run `claude_extraction` jobs through the Anthropic Messages API with this model (key from
    /// ANTHROPIC_API_KEY).
    #[arg(long, value_name = "MODEL")]
    pub(crate) anthropic_model: Option<String>,
    /// The Messages API's address, for a proxy or gateway in front of it (default https://api.anthropic.com).
    #[arg(long, value_name = "URL", env = "ANTHROPIC_BASE_URL")]
    pub(crate) anthropic_base_url: Option<String>,
    /// Run `sync_aws` jobs (AWS configuration from the standard environment).
    #[arg(long)]
    pub(crate) aws: bool,
    /// At most N jobs of KIND running at once across every worker sharing the database (repeat for several):
    /// `--limit claude_extraction=2`.
    #[arg(long = "limit", value_name = "KIND=N", value_parser = limit_arg)]
    pub(crate) limits: Vec<(String, u32)>,
    /// At most RATE of KIND claimed across every worker sharing the database (repeat for several):
    /// `--rate claude_extraction=50/1m`, `--rate claude_extraction="40/1m burst 5"`.
    #[arg(long = "rate", value_name = "KIND=RATE", value_parser = rate_arg)]
    pub(crate) rates: Vec<(String, outbox::flow::Rate)>,
    /// Before the first claim, remove leftover temp files under the root and reconcile the filesystem (and
    /// with --aws, AWS resources); the report is logged and its counts show in `outbox stats`.
    #[arg(long)]
    pub(crate) reconcile: bool,
    /// How long a handler may run before it is cancelled and its attempt counts as a retryable failure
    /// (e.g. 30s, 5m); KIND=DURATION for one kind (repeat for several).
    #[arg(long = "timeout", value_name = "[KIND=]DURATION", value_parser = timeout_arg)]
    pub(crate) timeouts: Vec<(Option<String>, Duration)>,
    /// A JSON file of periodic jobs: `[{"name", "schedule": "0 * * * *" or "every 30s", "kind", "payload",
    /// "time_zone"?, "catch_up"?}]`; `{tick}` in a payload string becomes the tick's time (RFC 3339).
    #[arg(long, value_name = "FILE")]
    pub(crate) schedules: Option<PathBuf>,
    /// Keep completed jobs this long before retention deletes them (e.g. 1d; `forever` to keep them).
    #[arg(long, default_value = "1d", value_parser = retention_arg, value_name = "DURATION")]
    pub(crate) keep_completed: Keep,
    /// Keep failed and cancelled jobs this long (e.g. 7d; `forever` to keep them).
    #[arg(long, default_value = "7d", value_parser = retention_arg, value_name = "DURATION")]
    pub(crate) keep_failed: Keep,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on, IP and port; any address but a loopback one needs tokens.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub(crate) listen: SocketAddr,
    /// A token ROLE:SECRET (repeat for several); OUTBOX_TOKENS is safer, see below.
    // Parsed by the command, not clap, whose errors would print the secret.
    #[arg(long = "token", value_name = "ROLE:SECRET")]
    pub(crate) tokens: Vec<String>,
    /// An origin whose pages may call the API from a browser (`https://ops.example.com`); repeat for several.
    /// None by default: no CORS headers.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub(crate) cors_origins: Vec<String>,
    /// Answer 408 to a request not answered within this long (e.g. 30s).
    #[arg(long, default_value = "30s", value_parser = duration::parse, value_name = "DURATION")]
    pub(crate) request_timeout: Duration,
}

fn limit_arg(text: &str) -> Result<(String, u32), String> {
    let (kind, n) = text.split_once('=').ok_or_else(|| format!("`{text}` is not KIND=N (e.g. claude_extraction=2)"))?;
    let n: u32 = n.parse().map_err(|_| format!("`{n}` in `{text}` is not a whole number of jobs"))?;
    if kind.is_empty() || n == 0 {
        return Err(format!("`{text}` needs a kind and a limit of at least 1"));
    }
    Ok((kind.to_owned(), n))
}

fn timeout_arg(text: &str) -> Result<(Option<String>, Duration), String> {
    let (kind, d) = match text.split_once('=') {
        Some((kind, d)) if !kind.is_empty() => (Some(kind.to_owned()), d),
        Some(_) => return Err(format!("`{text}` names no kind before `=`")),
        None => (None, text),
    };
    let d = duration::parse(d)?;
    if d.is_zero() {
        return Err(format!("the timeout in `{text}` must be longer than 0s"));
    }
    Ok((kind, d))
}

/// How long retention keeps finished jobs; `None`: forever.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keep(pub(crate) Option<Duration>);

fn retention_arg(text: &str) -> Result<Keep, String> {
    if text == "forever" { Ok(Keep(None)) } else { duration::parse(text).map(|d| Keep(Some(d))) }
}

pub(super) fn status_arg(text: &str) -> Result<JobStatus, String> {
    text.parse()
}

/// Prints a usage error on one line with a hint, and returns its exit code (help and version print as
/// usual and succeed).
pub(crate) fn usage_error(e: clap::Error) -> ExitCode {
    let Some(message) = usage_message(&e) else {
        let _ = e.print();
        let missing = e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand;
        return ExitCode::from(if missing { code::INVALID } else { code::OK });
    };
    eprintln!("error: {message} (hint: `outbox --help` or `outbox <command> --help` lists the options)");
    ExitCode::from(code::INVALID)
}

/// A usage error's message on one line, without clap's usage and help lines; `None` for help and version
/// (and help shown for a missing command), which print as clap renders them.
pub(crate) fn usage_message(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return None;
    }
    let rendered = e.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    let message = quoted(&message.join(" "));
    let mut message = message.strip_prefix("error: ").unwrap_or(&message).to_owned();
    // clap drops most control characters from the values it quotes (`unexpected argument '' found` for a
    // NUL), so such a value is named again, escaped.
    for kind in [ContextKind::InvalidArg, ContextKind::InvalidValue] {
        if let Some(ContextValue::String(value)) = e.get(kind)
            && value.contains(char::is_control)
        {
            message.push_str(&format!(" (`{}` with its control characters escaped)", quoted(value)));
        }
    }
    Some(message)
}
