//! The figures of `GET /metrics` through an OpenTelemetry meter, for an application that exports metrics with
//! OpenTelemetry rather than have Prometheus scrape it (feature `otel`).
//!
//! The counters and the duration histogram come from the event feed, counted by the same code as `/metrics`
//! (`metrics.rs`): every process's jobs, since [`otel_metrics`] was called. The gauges (jobs by kind and status,
//! by queue and state, the oldest due pending job's age, the live workers) are read from the database by the same
//! query as a scrape, every `refresh`, and observed at each collection. Names follow OpenTelemetry's conventions
//! (`outbox.jobs.completed`, attributes `kind` and `queue`); flow control's gauges are on `/metrics` alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use outbox::{FeedEvent, JobEventKind};
use sea_orm::DatabaseConnection;

use crate::metrics::{FleetCounters, Following, Gauges};

/// The feed's counts as OpenTelemetry instruments.
pub(crate) struct Counters {
    enqueued: Counter<u64>,
    completed: Counter<u64>,
    failed: Counter<u64>,
    retried: Counter<u64>,
    duration: Histogram<f64>,
}

impl Counters {
    fn new(meter: &Meter) -> Counters {
        let counter = |name: &'static str, what: &'static str| meter.u64_counter(name).with_description(what).build();
        Counters {
            enqueued: counter("outbox.jobs.enqueued", "Jobs enqueued"),
            completed: counter("outbox.jobs.completed", "Jobs completed"),
            failed: counter("outbox.jobs.failed", "Jobs failed for good"),
            retried: counter("outbox.jobs.retried", "Attempts that failed (or lost their lease) and will run again"),
            // The buckets of `/metrics`' histogram: 1 ms to about 4.7 hours, doubling.
            duration: meter
                .f64_histogram("outbox.job.duration")
                .with_unit("s")
                .with_boundaries((0..25).map(|i| 0.001 * f64::from(1_u32 << i)).collect())
                .with_description("Time from claim to completion of completed jobs")
                .build(),
        }
    }

    /// Counts `e`; `claimed` is when the job's claim was seen, for a completion's duration.
    pub(crate) fn count(&self, e: &FeedEvent, claimed: Option<chrono::DateTime<chrono::Utc>>) {
        let labels = [KeyValue::new("kind", e.kind.clone()), KeyValue::new("queue", e.queue.clone())];
        match e.event {
            JobEventKind::Enqueued => self.enqueued.add(1, &labels),
            JobEventKind::Completed => {
                self.completed.add(1, &labels);
                if let Some(claimed) = claimed {
                    let secs = (e.at - claimed).num_milliseconds().max(0) as f64 / 1000.0;
                    self.duration.record(secs, &[KeyValue::new("kind", e.kind.clone())]);
                }
            }
            JobEventKind::Failed | JobEventKind::RescuedFailed => self.failed.add(1, &labels),
            JobEventKind::Retried | JobEventKind::Rescued => self.retried.add(1, &labels),
            _ => {}
        }
    }
}

/// The tasks that feed a meter; they stop when this is dropped, and the gauges then observe nothing.
#[must_use = "the metrics stop when this is dropped"]
pub struct OtelMetrics {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    snapshot: Arc<Mutex<Option<Gauges>>>,
}

impl Drop for OtelMetrics {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Publishes the figures of `GET /metrics` on `meter`: counters and the duration histogram from the event feed
/// (every event after this call returns, polled every `refresh` and woken by commits), gauges read before it
/// returns and every `refresh` after. Keep what it returns for as long as the metrics should flow.
pub async fn otel_metrics(db: DatabaseConnection, meter: &Meter, refresh: Duration) -> OtelMetrics {
    let start = Following::start(db.clone(), refresh).await;
    let counters = FleetCounters::with_otel(Counters::new(meter));
    // No reading yet (or none any more) observes nothing, rather than zeros an alert would take for the fleet's.
    let first = Gauges::read(&db).await.inspect_err(|e| tracing::warn!(error = %e, "reading the gauges")).ok();
    let snapshot: Arc<Mutex<Option<Gauges>>> = Arc::new(Mutex::new(first));
    // Each collection observes the latest reading; none before the first or after the handle is dropped.
    let read = {
        let snapshot = Arc::clone(&snapshot);
        move || snapshot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    };
    let jobs = read.clone();
    meter
        .i64_observable_gauge("outbox.jobs")
        .with_description("Jobs in the database by kind and status")
        .with_callback(move |o| {
            for (kind, status, n) in jobs().map(|g| g.jobs).unwrap_or_default() {
                o.observe(n, &[KeyValue::new("kind", kind), KeyValue::new("status", status)]);
            }
        })
        .build();
    let queues = read.clone();
    meter
        .i64_observable_gauge("outbox.queue.jobs")
        .with_description("Jobs of each queue by state (available: pending and due)")
        .with_callback(move |o| {
            for (queue, state, n) in queues().map(|g| g.queues).unwrap_or_default() {
                o.observe(n, &[KeyValue::new("queue", queue), KeyValue::new("state", state)]);
            }
        })
        .build();
    let age = read.clone();
    meter
        .f64_observable_gauge("outbox.oldest_pending_age")
        .with_unit("s")
        .with_description("How long the oldest due pending job has waited")
        .with_callback(move |o| {
            if let Some(g) = age() {
                o.observe(g.oldest_age_seconds, &[]);
            }
        })
        .build();
    meter
        .i64_observable_gauge("outbox.workers")
        .with_description("Live workers (in-process and remote) in the registry")
        .with_callback(move |o| {
            if let Some(g) = read() {
                o.observe(g.workers, &[]);
            }
        })
        .build();
    let refresher = {
        let (db, snapshot) = (db.clone(), Arc::clone(&snapshot));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(refresh).await;
                match Gauges::read(&db).await {
                    Ok(gauges) => *snapshot.lock().unwrap_or_else(|e| e.into_inner()) = Some(gauges),
                    Err(e) => tracing::warn!(error = %e, "reading the gauges for OpenTelemetry"),
                }
            }
        })
    };
    OtelMetrics { tasks: vec![tokio::spawn(counters.count_from(start)), refresher], snapshot }
}
