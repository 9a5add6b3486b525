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
    /// The same counts as OpenTelemetry instruments, when a meter asked for them.
    #[cfg(feature = "otel")]
    pub(crate) otel: Option<crate::otel::Counters>,
}

/// Claims whose completion has not been seen yet, by job id; past this many the oldest are forgotten (their
/// durations go unmeasured rather than the map growing without end).
const OPEN_CLAIMS: usize = 100_000;

impl FleetCounters {
    pub(crate) fn new() -> Arc<FleetCounters> {
        Arc::new(FleetCounters::bare())
    }

    /// Counters that also count on OpenTelemetry's instruments.
    #[cfg(feature = "otel")]
    pub(crate) fn with_otel(otel: crate::otel::Counters) -> Arc<FleetCounters> {
        Arc::new(FleetCounters { otel: Some(otel), ..FleetCounters::bare() })
    }

    fn bare() -> FleetCounters {
        FleetCounters {
            enqueued: Family::default(),
            completed: Family::default(),
            failed: Family::default(),
            retried: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            #[cfg(feature = "otel")]
            otel: None,
        }
    }

    /// Follows the feed from its current end for as long as the server lives.
    pub(crate) fn follow(self: &Arc<Self>, db: DatabaseConnection, poll: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("no async runtime: the job counters of /metrics stay at zero");
            return;
        };
        let counters = Arc::clone(self);
        runtime.spawn(async move {
            let start = Following::start(db, poll).await;
            counters.count_from(start).await;
        });
    }

    /// Counts each event after `start` for as long as the task lives.
    pub(crate) async fn count_from(self: Arc<Self>, start: Following) {
        let Following { watch: _watch, mut tail } = start;
        let mut claims: HashMap<String, chrono::DateTime<chrono::Utc>> = HashMap::new();
        loop {
            for event in tail.next_page().await {
                self.count(&event, &mut claims);
            }
        }
    }

    fn count(&self, e: &FeedEvent, claims: &mut HashMap<String, chrono::DateTime<chrono::Utc>>) {
        let labels = || KindQueue { kind: e.kind.clone(), queue: e.queue.clone() };
        #[cfg(feature = "otel")]
        if let Some(otel) = &self.otel {
            otel.count(e, claims.get(&e.job_id).copied());
        }
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

/// Where a follower of the feed starts: its current end, and a watch of other processes' commits, held for as long
/// as it follows (commits wake the event streams, the counters and waiting claims at once).
pub(crate) struct Following {
    watch: Option<outbox::Watch>,
    tail: Tail,
}

impl Following {
    pub(crate) async fn start(db: DatabaseConnection, poll: Duration) -> Following {
        let watch = match ops::watch(&db).await {
            Ok(watch) => Some(watch),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch for other processes' commits; they are seen at the next poll");
                None
            }
        };
        Following { watch, tail: Tail::from_head(db, poll).await }
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

    let gauges = Gauges::read(db).await?;
    let jobs = Family::<KindStatus, Gauge>::default();
    for (kind, status, n) in &gauges.jobs {
        jobs.get_or_create(&KindStatus { kind: kind.clone(), status: status.clone() }).set(*n);
    }
    registry.register("jobs", "Jobs in the database by kind and status", jobs);
    let queues = Family::<QueueState, Gauge>::default();
    for (queue, state, n) in &gauges.queues {
        queues.get_or_create(&QueueState { queue: queue.clone(), state: state.clone() }).set(*n);
    }
    registry.register("queue_jobs", "Jobs of each queue by state (available: pending and due)", queues);
    let age = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    age.set(gauges.oldest_age_seconds);
    registry.register("oldest_pending_age_seconds", "How long the oldest due pending job has waited", age);
    let workers = Gauge::<i64>::default();
    workers.set(gauges.workers);
    registry.register("workers", "Live workers (in-process and remote) in the registry", workers);

    flow_metrics(db, &mut registry).await?;

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .map_err(|e| outbox::Error::Internal(format!("encoding metrics: {e}")))?;
    Ok(text)
}

/// The gauges read from the database at a scrape (or an OpenTelemetry collection): jobs by kind and status, by
/// queue and state, the oldest due pending job's age, the live workers.
#[derive(Debug, Clone)]
pub(crate) struct Gauges {
    pub(crate) jobs: Vec<(String, String, i64)>,
    pub(crate) queues: Vec<(String, String, i64)>,
    pub(crate) oldest_age_seconds: f64,
    pub(crate) workers: i64,
}

impl Gauges {
    pub(crate) async fn read(db: &DatabaseConnection) -> outbox::Result<Gauges> {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let jobs = ops::counts(db).await?.into_iter().map(|c| (c.kind, c.status.to_string(), n(c.count))).collect();
        let mut queues = Vec::new();
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
            for (state, count) in states {
                queues.push((q.queue.clone(), state.to_owned(), n(count)));
            }
            oldest = match (oldest, q.oldest_available) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(Gauges {
            jobs,
            queues,
            oldest_age_seconds: oldest.map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0),
            workers: i64::try_from(ops::workers(db).await?.len()).unwrap_or(i64::MAX),
        })
    }
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
