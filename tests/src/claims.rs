//! The worker's claims as it reports them (a `debug` event per claim, saying why it ran and what it took),
//! so a test can check what made a worker claim instead of sleeping and hoping.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One claim: why it ran (`start`, `wake` (this process's own wake-up: an enqueue, a written outcome), `heard` (one a
/// watch delivered: a commit heard from the database, the worker's own registry refresh on SQLite included), `poll`,
/// `freed`, `drain` or `full batch`) and how many jobs it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// What called for the claim.
    pub reason: String,
    /// Jobs it took.
    pub claimed: u64,
}

/// Records every claim reported on this thread while its guard lives; clones share the record.
#[derive(Debug, Clone, Default)]
pub struct ClaimLog(Arc<Mutex<Vec<Claim>>>);

impl ClaimLog {
    /// Starts recording the claims reported on this thread (a worker started on a `current_thread` runtime
    /// reports on the test's thread) until the guard is dropped.
    pub fn record(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    /// The claims so far, oldest first.
    pub fn claims(&self) -> Vec<Claim> {
        self.0.lock().expect("claim log").clone()
    }
}

#[derive(Default)]
struct Fields {
    message: bool,
    reason: Option<String>,
    claimed: Option<u64>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "reason" {
            self.reason = Some(value.to_owned());
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "claimed" {
            self.claimed = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}") == "claimed";
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ClaimLog {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with("outbox::worker") {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let (true, Some(reason), Some(claimed)) = (fields.message, fields.reason, fields.claimed) {
            self.0.lock().expect("claim log").push(Claim { reason, claimed });
        }
    }
}
