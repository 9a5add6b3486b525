//! Flow control, fleet-wide: rate limits, pauses and holds, fair share. Everything here is stored in the database
//! and enforced by it at claim time, so every worker process and machine sharing the database sees the same
//! limits, the same pauses and the same shares.
//!
//! - A kind declares a **rate** (`#[job(rate = "50/1m")]`, or [`crate::WorkerBuilder::rate`] for a kind defined
//!   elsewhere), optionally **per key** (`rate_key = "{tenant}"`), counting each job's **cost**
//!   (`cost = "{estimatedTokens}"`, or [`crate::EnqueueOpts::cost`]). Code outside jobs shares the same budget
//!   with [`take`].
//! - A handler answering [`crate::JobError::rate_limited`] gives its attempt back and **holds** the kind (or its
//!   key) for every worker until the time it names.
//! - Operators **pause** and **resume** a queue, a kind or one key of a kind ([`pause`], [`resume`]); a pause
//!   survives restarts and lasts until resumed.
//! - A kind declares a **fair-share** key (`fair = "{tenant}"`): while several keys have ready jobs, claims
//!   alternate between them in proportion to their weights ([`set_weight`]).
//!
//! ```
//! use outbox::flow::{self, Target};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> outbox::Result<()> {
//! # let db = outbox::connect("sqlite::memory:").await?;
//! # outbox::migrate(&db).await?;
//! flow::pause(&db, &Target::queue("mail"), Some("provider down")).await?;
//! assert_eq!(flow::paused(&db).await?.len(), 1);
//! assert!(flow::resume(&db, &Target::queue("mail")).await?);
//!
//! // A request handler and the workers of `claude_extraction` share one budget.
//! flow::define_rate(&db, "claude_extraction", "50/1m".parse()?).await?;
//! assert!(flow::take(&db, "claude_extraction", None, 1).await?.granted());
//! # Ok(())
//! # }
//! ```

mod plan;
mod rate;

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;

use crate::error::{Error, Result};
use crate::storage::{self, now_ms};
use crate::time::from_ms;
pub(crate) use plan::{Candidate, FlowKind, FlowState, Pauses, Plan, plan, quotas};
pub(crate) use rate::Bucket;
pub use rate::{Rate, RateError};

impl FlowKind {
    /// How claims of `kind` are controlled, with a worker's own `concurrency` and `rate` in place of the kind's;
    /// `None` when nothing controls them.
    pub(crate) fn of(kind: &crate::Kind, concurrency: Option<u32>, rate: Option<Rate>) -> Option<FlowKind> {
        let flow = FlowKind {
            kind: kind.name().to_owned(),
            concurrency: concurrency.or(kind.concurrency()),
            rate: rate.or(kind.rate()),
            rate_per_key: kind.rate_per_key(),
            fair: kind.fair(),
        };
        (flow.concurrency.is_some() || flow.rate.is_some() || flow.fair).then_some(flow)
    }
}

/// The end of the latest hold this process wrote (ms; 0 for none), so its workers claim again when it ends.
static HOLD_ENDS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Notes a hold this process wrote, ending at `at`.
pub(crate) fn note_hold(at: i64) {
    HOLD_ENDS.fetch_max(at, std::sync::atomic::Ordering::Relaxed);
}

/// When a hold this process wrote ends, if after `now`.
pub(crate) fn hold_ends_after(now: i64) -> Option<i64> {
    Some(HOLD_ENDS.load(std::sync::atomic::Ordering::Relaxed)).filter(|at| *at > now)
}

/// Work that can be paused or held: a queue, a kind, or one key of a kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "scope", rename_all = "lowercase")]
#[non_exhaustive]
pub enum Target {
    /// Every job of a queue.
    Queue {
        /// The queue.
        name: String,
    },
    /// Every job of a kind, or those of one key of it.
    Kind {
        /// The kind.
        name: String,
        /// One key of the kind's rate or fair share; `None` for all of the kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
}

impl Target {
    /// A queue.
    pub fn queue(name: impl Into<String>) -> Target {
        Target::Queue { name: name.into() }
    }

    /// A kind.
    pub fn kind(name: impl Into<String>) -> Target {
        Target::Kind { name: name.into(), key: None }
    }

    /// One key of a kind (its rate or fair-share key).
    pub fn key(kind: impl Into<String>, key: impl Into<String>) -> Target {
        Target::Kind { name: kind.into(), key: Some(key.into()) }
    }

    /// The stored scope, name and key.
    fn parts(&self) -> Result<(&'static str, &str, &str)> {
        let (scope, name, key) = match self {
            Target::Queue { name } => ("queue", name.as_str(), ""),
            Target::Kind { name, key } => ("kind", name.as_str(), key.as_deref().unwrap_or("")),
        };
        if name.is_empty() {
            return Err(Error::Invalid(format!("the {scope} to pause or resume has an empty name")));
        }
        if name.len() > crate::MAX_NAME_BYTES || key.len() > crate::MAX_KEY_BYTES {
            return Err(Error::Invalid(format!(
                "the {scope} name or key to pause is too long (at most {} and {} bytes)",
                crate::MAX_NAME_BYTES,
                crate::MAX_KEY_BYTES
            )));
        }
        if name.contains('\0') || key.contains('\0') {
            return Err(Error::Invalid(format!("the {scope} name or key to pause contains the NUL character")));
        }
        if let Target::Kind { key: Some(k), .. } = self
            && k.is_empty()
        {
            return Err(Error::Invalid(format!("the key of kind `{name}` to pause is empty")));
        }
        Ok((scope, name, key))
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Queue { name } => write!(f, "queue `{name}`"),
            Target::Kind { name, key: None } => write!(f, "kind `{name}`"),
            Target::Kind { name, key: Some(key) } => write!(f, "key `{key}` of kind `{name}`"),
        }
    }
}

/// A pause or hold in force.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct Pause {
    /// What is paused.
    pub target: Target,
    /// When a hold ends; `None` for a pause, which lasts until resumed.
    pub until: Option<DateTime<Utc>>,
    /// Why, as given.
    pub reason: Option<String>,
    /// Since when.
    pub since: DateTime<Utc>,
}

/// Pauses `target` fleet-wide until [`resume`]d: no claim takes its jobs (running ones finish), and the pause
/// survives restarts. A queue or kind that does not exist yet can be paused: its jobs may arrive later.
pub async fn pause<C: ConnectionTrait>(conn: &C, target: &Target, reason: Option<&str>) -> Result<()> {
    let (scope, name, key) = target.parts()?;
    storage::flow::pause(conn, scope, name, key, None, reason, now_ms()).await?;
    tracing::info!(scope, name, key, reason, "paused");
    Ok(())
}

/// Holds `target` fleet-wide until `until` (what [`crate::JobError::rate_limited`] does for a kind or key): like
/// a pause that ends by itself. A hold never shortens a pause or a longer hold.
pub async fn hold<C: ConnectionTrait>(
    conn: &C,
    target: &Target,
    until: DateTime<Utc>,
    reason: Option<&str>,
) -> Result<()> {
    let (scope, name, key) = target.parts()?;
    storage::flow::pause(conn, scope, name, key, Some(until.timestamp_millis()), reason, now_ms()).await?;
    tracing::info!(scope, name, key, until = %until, reason, "held");
    Ok(())
}

/// Ends the pause or hold of `target`; whether one was in force. Workers of this process claim at once; those
/// of other processes at their next claim, wake-up or poll.
pub async fn resume<C: ConnectionTrait>(conn: &C, target: &Target) -> Result<bool> {
    let (scope, name, key) = target.parts()?;
    let was = storage::flow::resume(conn, scope, name, key, now_ms()).await?;
    tracing::info!(scope, name, key, was_paused = was, "resumed");
    crate::wake::wake();
    Ok(was)
}

/// The pauses and holds in force.
pub async fn paused<C: ConnectionTrait>(conn: &C) -> Result<Vec<Pause>> {
    let rows = storage::flow::paused(conn, now_ms()).await?;
    Ok(rows
        .into_iter()
        .map(|(scope, name, key, ends_at, reason, since)| Pause {
            target: match scope.as_str() {
                "queue" => Target::Queue { name },
                _ => Target::Kind { name, key: (!key.is_empty()).then_some(key) },
            },
            until: ends_at.map(from_ms),
            reason,
            since: from_ms(since),
        })
        .collect())
}

/// Records the rate limit `name` (a kind's name, or any name code shares a budget under). Workers record the
/// rates of their kinds when they start; [`take`] needs the rate recorded.
pub async fn define_rate<C: ConnectionTrait>(conn: &C, name: &str, rate: Rate) -> Result<()> {
    if name.is_empty() || name.len() > crate::MAX_NAME_BYTES || name.contains('\0') {
        return Err(Error::Invalid(format!("the rate name {name:?} is empty, too long or contains NUL")));
    }
    let parts = (to_i64(rate.amount()), to_i64(rate.window_ms()), to_i64(rate.burst()));
    storage::flow::define_rate(conn, name, parts, now_ms()).await
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What [`take`] answers.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Taken {
    /// Taken: the units left in the bucket (negative after a cost larger than the bucket).
    Granted {
        /// Units left.
        left: f64,
    },
    /// Not enough now; the cost fits at `at`, unless something else takes from the bucket first.
    Wait {
        /// When to ask again.
        at: DateTime<Utc>,
    },
}

impl Taken {
    /// Whether the units were taken.
    pub fn granted(&self) -> bool {
        matches!(self, Taken::Granted { .. })
    }
}

/// Takes `cost` units from the rate `name` (and its `key`), shared with the workers claiming jobs under it, in one
/// statement: a request handler that calls the same API as the jobs spends the same budget.
pub async fn take<C: ConnectionTrait>(conn: &C, name: &str, key: Option<&str>, cost: u64) -> Result<Taken> {
    let now = now_ms();
    let key = key.unwrap_or("");
    if let Some(left) = storage::flow::take(conn, name, key, to_i64(cost), now).await? {
        return Ok(Taken::Granted { left });
    }
    let budget = budget(conn, name, Some(key).filter(|k| !k.is_empty())).await?;
    let at = budget.bucket.ready_at(&budget.rate, now, cost);
    Ok(Taken::Wait { at: from_ms(at.max(now)) })
}

/// A rate limit and how much of it is left now.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct RateUse {
    /// The rate's name (a kind's, or a shared budget's).
    pub name: String,
    /// The key, for a rate per key; `None` for the name's own bucket.
    pub key: Option<String>,
    /// The rate, as written (`50/1m burst 5`).
    pub rate: String,
    /// Units that may be taken now.
    pub available: f64,
    /// The bucket's size.
    pub burst: u64,
}

/// A stored rate and bucket.
struct Budget {
    rate: Rate,
    bucket: Bucket,
}

async fn budget<C: ConnectionTrait>(conn: &C, name: &str, key: Option<&str>) -> Result<Budget> {
    let rows = storage::flow::rates(conn, Some(name)).await?;
    let own = rows.iter().find(|r| r.1.is_empty());
    let row = key.and_then(|k| rows.iter().find(|r| r.1 == k)).or(own);
    let Some((_, _, amount, window, burst, level, at)) = row else {
        return Err(Error::Invalid(format!(
            "no rate named `{name}`: a worker records its kinds' rates when it starts, or call flow::define_rate"
        )));
    };
    let rate = Rate::from_parts(*amount, *window, *burst)
        .ok_or_else(|| Error::CorruptRow { id: format!("rate {name}"), reason: "its rate is out of range".into() })?;
    let bucket = if key.is_some() && row.map(|r| &r.1) != key.map(str::to_owned).as_ref() {
        Bucket::full(&rate, now_ms())
    } else {
        Bucket { level: *level, at: *at }
    };
    Ok(Budget { rate, bucket })
}

/// Every rate and each key's bucket, with what is available now.
pub async fn rates<C: ConnectionTrait>(conn: &C) -> Result<Vec<RateUse>> {
    let now = now_ms();
    let rows = storage::flow::rates(conn, None).await?;
    Ok(rows
        .into_iter()
        .filter_map(|(name, key, amount, window, burst, level, at)| {
            let rate = Rate::from_parts(amount, window, burst)?;
            Some(RateUse {
                available: Bucket { level, at }.level_at(&rate, now),
                burst: rate.burst(),
                rate: rate.to_string(),
                key: (!key.is_empty()).then_some(key),
                name,
            })
        })
        .collect())
}

/// Sets the fair-share weight of `key` among the jobs of `kind` (1 unless set): while several keys have ready
/// jobs, each is served in proportion to its weight.
pub async fn set_weight<C: ConnectionTrait>(conn: &C, kind: &str, key: &str, weight: u32) -> Result<()> {
    if weight == 0 {
        return Err(Error::Invalid(format!(
            "the weight of key `{key}` of kind `{kind}` is 0: weights start at 1 (pause the key to stop it)"
        )));
    }
    if key.is_empty() {
        return Err(Error::Invalid(format!("the key to weight of kind `{kind}` is empty")));
    }
    storage::flow::set_weight(conn, kind, key, i64::from(weight)).await
}

/// One key's share of a fair kind.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub struct Share {
    /// The key.
    pub key: String,
    /// Its weight.
    pub weight: u32,
    /// Its jobs waiting to run.
    pub backlog: u64,
    /// Its jobs running.
    pub running: u64,
    /// The share of claims it gets while every key with a backlog has one: its weight over theirs.
    pub share: f64,
}

/// The keys of `kind` with pending or running jobs (or a weight set), and their shares.
pub async fn shares<C: ConnectionTrait>(conn: &C, kind: &str) -> Result<Vec<Share>> {
    let rows = storage::flow::shares(conn, kind).await?;
    let total: i64 = rows.iter().filter(|r| r.2 > 0).map(|r| r.1).sum();
    Ok(rows
        .into_iter()
        .map(|(key, weight, backlog, running)| Share {
            share: if backlog > 0 && total > 0 { weight as f64 / total as f64 } else { 0.0 },
            key,
            weight: u32::try_from(weight).unwrap_or(u32::MAX),
            backlog: backlog.max(0).unsigned_abs(),
            running: running.max(0).unsigned_abs(),
        })
        .collect())
}
