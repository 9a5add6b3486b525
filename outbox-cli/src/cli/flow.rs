//! The arguments of the flow-control commands (`pause`, `resume`, `flow`, `weight`) and of the rate and cost
//! options.

use std::time::Duration;

use outbox_server::duration;

/// What `outbox pause` pauses, and for how long.
#[derive(Debug, clap::Args)]
pub(crate) struct PauseArgs {
    #[command(flatten)]
    pub(crate) what: ResumeArgs,
    /// Why, shown with the pause.
    #[arg(long)]
    pub(crate) reason: Option<String>,
    /// Hold for this long instead of until resumed (e.g. 30s, 5m).
    #[arg(long = "for", value_parser = duration::forward, value_name = "DURATION")]
    pub(crate) hold_for: Option<Duration>,
}

/// What `outbox pause` and `outbox resume` name.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["queue", "kind"])))]
pub(crate) struct ResumeArgs {
    /// A queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// A kind (with --key, one key of it).
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// One key of the kind's rate or fair share.
    #[arg(long, requires = "kind")]
    pub(crate) key: Option<String>,
}

/// What `outbox flow` shows.
#[derive(Debug, clap::Args)]
pub(crate) struct FlowArgs {
    /// Also the fair share of this kind's keys (repeat for several).
    #[arg(long)]
    pub(crate) kind: Vec<String>,
}

/// What `outbox weight` sets.
#[derive(Debug, clap::Args)]
pub(crate) struct WeightArgs {
    /// The kind.
    pub(crate) kind: String,
    /// The key.
    pub(crate) key: String,
    /// Its weight, at least 1.
    #[arg(value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) weight: u32,
}

pub(super) fn cost_arg(text: &str) -> Result<u32, String> {
    text.trim().parse().map_err(|_| format!("a cost is a whole number from 0 to {}, not `{text}`", u32::MAX))
}

pub(super) fn rate_arg(text: &str) -> Result<(String, outbox::flow::Rate), String> {
    let (kind, rate) =
        text.split_once('=').ok_or_else(|| format!("`{text}` is not KIND=RATE (e.g. claude_extraction=50/1m)"))?;
    if kind.is_empty() {
        return Err(format!("`{text}` names no kind before `=`"));
    }
    Ok((kind.to_owned(), rate.parse().map_err(|e: outbox::flow::RateError| e.to_string())?))
}
