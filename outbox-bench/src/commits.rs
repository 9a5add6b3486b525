//! When a worker's store committed each job's completion, for `latency_workflow`: the in-process worker's writer
//! (either engine's) logs `job completed` (target `outbox::storage::worker_store`, level DEBUG) right after its
//! transaction commits, and [`layer`] keeps the wall-clock time of each, by job id. Installed only for runs that
//! include that case; a per-layer filter keeps every other event of the outbox off it.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::latency::epoch_us;

/// The module whose events say what the store's writer committed.
const TARGET: &str = "outbox::storage::worker_store";

/// Whether commits are recorded: only between [`start`] and [`stop`], so other cases of a run pay one check per
/// completed job.
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Each job's completion commit (µs since the epoch), since the last [`start`].
fn committed() -> &'static Mutex<HashMap<String, i64>> {
    static COMMITTED: OnceLock<Mutex<HashMap<String, i64>>> = OnceLock::new();
    COMMITTED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The layer that records completion commits.
pub(crate) fn layer<S: Subscriber + for<'a> LookupSpan<'a>>() -> impl Layer<S> {
    Commits.with_filter(filter_fn(|m| m.target() == TARGET && *m.level() == Level::DEBUG))
}

/// Installs [`layer`] as this process's subscriber (builds with `--features otel` install it beside their tracer).
#[cfg(not(feature = "otel"))]
pub(crate) fn install() -> Result<(), crate::BoxError> {
    use tracing_subscriber::layer::SubscriberExt;
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer()))?;
    Ok(())
}

/// Forgets every recorded commit and records those to come.
pub(crate) fn start() -> Result<(), crate::BoxError> {
    committed().lock().map_err(|_| "lock poisoned")?.clear();
    RECORDING.store(true, Ordering::SeqCst);
    Ok(())
}

/// Stops recording; what was recorded stays readable through [`of`].
pub(crate) fn stop() {
    RECORDING.store(false, Ordering::SeqCst);
}

/// When `job`'s completion was committed (µs since the epoch), if it was seen.
pub(crate) fn of(job: &str) -> Result<Option<i64>, crate::BoxError> {
    Ok(committed().lock().map_err(|_| "lock poisoned")?.get(job).copied())
}

struct Commits;

impl<S: Subscriber> Layer<S> for Commits {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !RECORDING.load(Ordering::Relaxed) {
            return;
        }
        let now = epoch_us();
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.message.as_deref() == Some("job completed")
            && let Some(id) = fields.job_id
            && let Ok(mut committed) = committed().lock()
        {
            committed.insert(id, now);
        }
    }
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    job_id: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "job_id" {
            self.job_id = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = Some(format!("{value:?}"));
        }
    }
}
