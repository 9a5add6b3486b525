//! Spans recorded by OpenTelemetry's in-memory exporter, in this process or in a worker process that prints them.

use opentelemetry::trace::{SpanId, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde::{Deserialize, Serialize};
use tracing_subscriber::layer::SubscriberExt;

/// A job whose handler fails its first attempt when asked: its second run is a retry.
#[derive(outbox::Job, Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[job(kind = "test.trace_probe", max_attempts = 3)]
pub struct TraceProbe {
    /// Distinguishes jobs.
    pub n: u64,
    /// Fail the first attempt.
    pub fail_first: bool,
}

/// An OpenTelemetry tracer exporting to memory, and the `tracing` subscriber that feeds it.
pub struct Recorder {
    /// What the spans ended so far went to.
    pub exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
}

impl Recorder {
    /// A recorder and the subscriber to install (`tracing::subscriber::set_default` or `set_global_default`).
    pub fn new() -> (Recorder, impl tracing::Subscriber + Send + Sync) {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-tests"));
        let subscriber = tracing_subscriber::registry().with(layer);
        (Recorder { exporter, provider }, subscriber)
    }

    /// The spans ended so far.
    pub fn spans(&self) -> Vec<SpanRecord> {
        let _ = self.provider.force_flush();
        self.exporter.get_finished_spans().expect("finished spans").iter().map(SpanRecord::of).collect()
    }
}

/// What a test checks of one span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanRecord {
    /// Its name.
    pub name: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits; `None` for a root span.
    pub parent: Option<String>,
    /// The spans it links to: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// Its `job.id` attribute.
    pub job_id: Option<String>,
    /// Its `job.run` attribute.
    pub run: Option<i64>,
    /// The description of its error status, when it ended in error.
    pub error: Option<String>,
}

impl SpanRecord {
    fn of(span: &opentelemetry_sdk::trace::SpanData) -> SpanRecord {
        let attribute = |key: &str| span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.clone());
        SpanRecord {
            name: span.name.to_string(),
            trace_id: span.span_context.trace_id().to_string(),
            span_id: span.span_context.span_id().to_string(),
            parent: (span.parent_span_id != SpanId::INVALID).then(|| span.parent_span_id.to_string()),
            links: span
                .links
                .links
                .iter()
                .map(|l| (l.span_context.trace_id().to_string(), l.span_context.span_id().to_string()))
                .collect(),
            job_id: attribute("job.id").map(|v| v.as_str().into_owned()),
            run: attribute("job.run").and_then(|v| match v {
                opentelemetry::Value::I64(n) => Some(n),
                _ => None,
            }),
            error: match &span.status {
                opentelemetry::trace::Status::Error { description } => Some(description.to_string()),
                _ => None,
            },
        }
    }
}
