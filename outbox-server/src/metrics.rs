//! `GET /metrics`: Prometheus (OpenMetrics) text through `prometheus-client`.
//!
//! Gauges (jobs by status, kind and queue; the oldest pending job's age; live workers) are read from the
//! database at each scrape, so every process sharing it is counted. Counters (jobs enqueued, completed,
//! failed, retried) and the handler duration histogram come from the event feed, which a task of this
//! server follows from its start: they count the whole fleet's jobs, in-process and remote workers alike,
//! since this server started (Prometheus' `rate()` and `increase()` handle its restarts).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use outbox::{FeedEvent, JobEventKind, ops};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sea_orm::DatabaseConnection;

use crate::feed::Tail;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindQueue {
    kind: String,
    queue: String,
}

/// What a pause or hold covers: `scope` (`queue` or `kind`), `name`, `key` (empty: all of it).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Paused {
    scope: String,
    name: String,
    key: String,
}

/// A rate's bucket: the rate's `name` and the `key` (empty: the name's own).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Bucket {
    name: String,
    key: String,
}

/// One key of a fair kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FairKey {
    kind: String,
    key: String,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindStatus {
    kind: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueState {
    queue: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 4.7 hours (2^24 ms).
    Histogram::new(exponential_buckets(0.001, 2.0, 25))
}

/// The counters the feed drives, shared by the following task and every scrape.
pub(crate) struct FleetCounters {
    enqueued: Family<KindQueue, Counter>,
    completed: Family<KindQueue, Counter>,
    failed: Family<KindQueue, Counter>,
    retried: Family<KindQueue, Counter>,
    durations: Family<KindLabel, Histogram, fn() -> Histogram>,
}

/// Claims whose completion has not been seen yet, by job id; past this many the oldest are forgotten (their
/// durations go unmeasured rather than the map growing without end).
const OPEN_CLAIMS: usize = 100_000;

impl FleetCounters {
    pub(crate) fn new() -> Arc<FleetCounters> {
        Arc::new(FleetCounters {
            enqueued: Family::default(),
            completed: Family::default(),
            failed: Family::default(),
            retried: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
        })
    }

    /// Follows the feed from its current end for as long as the server lives.
    pub(crate) fn follow(self: &Arc<Self>, db: DatabaseConnection, poll: Duration) {
        let counters = Arc::clone(self);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("no async runtime: the job counters of /metrics stay at zero");
            return;
        };
        runtime.spawn(async move {
            // Held for the server's life: commits of other processes wake the event streams, the counters and
            // waiting claims at once.
            let _watch = match ops::watch(&db).await {
                Ok(watch) => Some(watch),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch for other processes' commits; they are seen at the next poll");
                    None
                }
            };
            let mut tail = Tail::from_head(db, poll).await;
            let mut claims: HashMap<String, chrono::DateTime<chrono::Utc>> = HashMap::new();
            loop {
                for event in tail.next_page().await {
                    counters.count(&event, &mut claims);
                }
            }
        });
    }

    fn count(&self, e: &FeedEvent, claims: &mut HashMap<String, chrono::DateTime<chrono::Utc>>) {
        let labels = || KindQueue { kind: e.kind.clone(), queue: e.queue.clone() };
        match e.event {
            JobEventKind::Enqueued => {
                self.enqueued.get_or_create(&labels()).inc();
            }
            JobEventKind::Claimed => {
                if claims.len() >= OPEN_CLAIMS {
                    claims.clear();
                }
                claims.insert(e.job_id.clone(), e.at);
            }
            JobEventKind::Completed => {
                self.completed.get_or_create(&labels()).inc();
                if let Some(claimed) = claims.remove(&e.job_id) {
                    let secs = (e.at - claimed).num_milliseconds().max(0) as f64 / 1000.0;
                    self.durations.get_or_create(&KindLabel { kind: e.kind.clone() }).observe(secs);
                }
            }
            JobEventKind::Failed | JobEventKind::RescuedFailed => {
                self.failed.get_or_create(&labels()).inc();
                claims.remove(&e.job_id);
            }
            JobEventKind::Retried | JobEventKind::Rescued => {
                self.retried.get_or_create(&labels()).inc();
                claims.remove(&e.job_id);
            }
            _ => {
                claims.remove(&e.job_id);
            }
        }
    }
}

/// The scrape: the feed's counters plus gauges read now.
pub(crate) async fn render(db: &DatabaseConnection, counters: &FleetCounters) -> outbox::Result<String> {
    let mut registry = Registry::with_prefix("outbox");
    registry.register("jobs_enqueued", "Jobs enqueued since this server started", counters.enqueued.clone());
    registry.register("jobs_completed", "Jobs completed since this server started", counters.completed.clone());
    registry.register("jobs_failed", "Jobs failed for good since this server started", counters.failed.clone());
    registry.register(
        "jobs_retried",
        "Attempts that failed (or lost their lease) and will run again, since this server started",
        counters.retried.clone(),
    );
    registry.register(
        "job_duration_seconds",
        "Time from claim to completion of completed jobs, since this server started",
        counters.durations.clone(),
    );

    let jobs = Family::<KindStatus, Gauge>::default();
    for c in ops::counts(db).await? {
        jobs.get_or_create(&KindStatus { kind: c.kind, status: c.status.to_string() })
            .set(i64::try_from(c.count).unwrap_or(i64::MAX));
    }
    registry.register("jobs", "Jobs in the database by kind and status", jobs);

    let queues = Family::<QueueState, Gauge>::default();
    let now = chrono::Utc::now();
    let mut oldest: Option<chrono::DateTime<chrono::Utc>> = None;
    for q in ops::queues(db).await? {
        let states = [
            ("available", q.available),
            ("scheduled", q.scheduled),
            ("waiting", q.waiting),
            ("claimed", q.claimed),
            ("stuck", q.stuck),
            ("completed", q.completed),
            ("failed", q.failed),
            ("cancelled", q.cancelled),
        ];
        for (state, n) in states {
            queues
                .get_or_create(&QueueState { queue: q.queue.clone(), state: state.to_owned() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        oldest = match (oldest, q.oldest_available) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    registry.register("queue_jobs", "Jobs of each queue by state (available: pending and due)", queues);
    let age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    age.set(oldest.map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0));
    registry.register("oldest_pending_age_seconds", "How long the oldest due pending job has waited", age);
    let workers = Gauge::<i64>::default();
    workers.set(i64::try_from(ops::workers(db).await?.len()).unwrap_or(i64::MAX));
    registry.register("workers", "Live workers (in-process and remote) in the registry", workers);

    flow_metrics(db, &mut registry).await?;

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .map_err(|e| outbox::Error::Internal(format!("encoding metrics: {e}")))?;
    Ok(text)
}

/// Flow control's gauges: what is paused or held (and for how long still), each rate's bucket, each fair kind's
/// keys.
async fn flow_metrics(db: &DatabaseConnection, registry: &mut Registry) -> outbox::Result<()> {
    use outbox::flow::{self, Target};
    let paused = Family::<Paused, Gauge>::default();
    let held = Family::<Paused, FloatGauge>::default();
    let now = chrono::Utc::now();
    for p in flow::paused(db).await? {
        let labels = match p.target {
            Target::Queue { name } => Paused { scope: "queue".into(), name, key: String::new() },
            Target::Kind { name, key } => Paused { scope: "kind".into(), name, key: key.unwrap_or_default() },
            _ => continue,
        };
        match p.until {
            Some(until) => {
                held.get_or_create(&labels).set((until - now).num_milliseconds().max(0) as f64 / 1000.0);
            }
            None => {
                paused.get_or_create(&labels).set(1);
            }
        }
    }
    registry.register("paused", "Work paused until resumed (1), by scope, name and key", paused);
    registry.register("held_seconds", "Seconds left of each hold (a handler rate limited upstream)", held);
    let available = Family::<Bucket, FloatGauge>::default();
    let burst = Family::<Bucket, Gauge>::default();
    for r in flow::rates(db).await? {
        let labels = Bucket { name: r.name, key: r.key.unwrap_or_default() };
        available.get_or_create(&labels).set(r.available);
        burst.get_or_create(&labels).set(i64::try_from(r.burst).unwrap_or(i64::MAX));
    }
    registry.register("rate_available", "Units of each rate that may be claimed now", available);
    registry.register("rate_burst", "The size of each rate's bucket", burst);
    let backlog = Family::<FairKey, Gauge>::default();
    let share = Family::<FairKey, FloatGauge>::default();
    for kind in ops::kinds(db).await?.into_iter().filter(|k| k.fair.is_some()) {
        for s in flow::shares(db, &kind.name).await? {
            let labels = FairKey { kind: kind.name.clone(), key: s.key };
            backlog.get_or_create(&labels).set(i64::try_from(s.backlog).unwrap_or(i64::MAX));
            share.get_or_create(&labels).set(s.share);
        }
    }
    registry.register("fair_backlog", "Jobs waiting to run per key of each fair kind", backlog);
    registry.register(
        "fair_share",
        "The share of claims each key of a fair kind gets while the others have work",
        share,
    );
    Ok(())
}
