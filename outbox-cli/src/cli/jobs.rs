//! The arguments of the commands on jobs: `enqueue`, `list`, `retry`, `cancel`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Args;
use outbox::JobStatus;
use outbox_server::duration;

use super::flow::cost_arg;
use super::status_arg;

#[derive(Debug, Args)]
pub(crate) struct EnqueueArgs {
    /// The job kind (`outbox schema` lists them).
    pub(crate) kind: String,
    /// The payload: JSON text, `@path` to read a file, or `-` for stdin.
    #[arg(long, value_name = "JSON")]
    pub(crate) payload: String,
    /// Queue (default: the kind's).
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Priority, higher first (default: the kind's).
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) priority: Option<i32>,
    /// Run no earlier than this from now (e.g. 10m).
    #[arg(long, value_parser = duration::forward, value_name = "DURATION")]
    pub(crate) delay: Option<Duration>,
    /// Attempts before the job fails for good (default: the kind's).
    #[arg(long)]
    pub(crate) max_attempts: Option<i32>,
    /// Idempotency key (default: the kind's key fields, or a hash of the payload).
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Sequence key: run after every earlier job of this sequence (default: the kind's sequence template).
    #[arg(long, value_name = "KEY")]
    pub(crate) sequence: Option<String>,
    /// What the job counts against its kind's rate (default: the kind's cost, or 1): a whole number.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = cost_arg)]
    pub(crate) cost: Option<u32>,
    /// The domain row the job is about (`order:42`; default: the kind's subject template).
    #[arg(long, value_parser = subject_arg)]
    pub(crate) subject: Option<String>,
    /// Wait for the job to end, up to this long (forever when no duration is given), and print it as it
    /// ended: exit 0 when completed, 7 when failed or cancelled.
    #[arg(long, value_parser = duration::parse, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "5200w")]
    pub(crate) wait: Option<Duration>,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only this status: pending, claimed, completed, failed, cancelled.
    #[arg(long, value_parser = status_arg)]
    pub(crate) status: Option<JobStatus>,
    /// Only this kind.
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only jobs changed since: a duration ago (1h) or a time (2026-11-22T10:00:00Z).
    #[arg(long, value_name = "WHEN", value_parser = duration::since)]
    pub(crate) since: Option<DateTime<Utc>>,
    /// Only the jobs of one sequence (`fs:notes/a.txt`), in sequence order.
    #[arg(long, value_name = "KEY")]
    pub(crate) sequence: Option<String>,
    /// Only jobs carrying this idempotency key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Only jobs about this subject (`order:42`).
    #[arg(long, value_parser = subject_arg)]
    pub(crate) subject: Option<String>,
    /// Only jobs older than this job id: the next page after a page that ended with it.
    #[arg(long, value_name = "ID")]
    pub(crate) before: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u64,
}

#[derive(Debug, Args)]
pub(crate) struct RetryArgs {
    /// The job id.
    #[arg(required_unless_present_any = ["failed", "subject"])]
    pub(crate) id: Option<String>,
    /// Retry every failed job instead.
    #[arg(long, conflicts_with_all = ["id", "subject"])]
    pub(crate) failed: bool,
    /// With --failed: only this kind.
    #[arg(long, requires = "failed")]
    pub(crate) kind: Option<String>,
    /// Retry every failed or cancelled job about this subject (`order:42`) instead.
    #[arg(long, conflicts_with = "id", value_parser = subject_arg)]
    pub(crate) subject: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CancelArgs {
    /// The job id.
    #[arg(required_unless_present = "subject")]
    pub(crate) id: Option<String>,
    /// Cancel every pending job about this subject (`order:42`) instead.
    #[arg(long, conflicts_with = "id", value_parser = subject_arg)]
    pub(crate) subject: Option<String>,
}

/// A subject a job could carry (`order:42`).
fn subject_arg(text: &str) -> Result<String, String> {
    outbox::check_subject(text).map(|()| text.to_owned()).map_err(|e| e.to_string())
}
