//! Traces across the outbox: the span of an enqueue, the span a handler runs in, and the W3C trace context a job
//! carries from one to the other.
//!
//! Every enqueue runs in an `outbox.enqueue` span and every handler in an `outbox.job` span, whatever the build.
//! With the `otel` feature, enqueue stores the enqueue span's trace context with the job (a `traceparent`, then a
//! space and the `tracestate` when there is one) when its caller is in a trace, and the handler's span continues it:
//! its child on the job's first claim (`run` 1), a new trace linked to it on every later one (a retry, a rescue, a
//! snooze, a claim given back unrun), so a job retried for an hour does not stretch the trace of the request that
//! enqueued it. Without the feature nothing of
//! OpenTelemetry is compiled and no context is stored, unless an enqueue names one ([`crate::EnqueueOpts::trace`]).
//!
//! Both are INFO spans of the target `outbox::trace`. A filter that drops them still lets an enqueue store its
//! caller's context, but a worker whose filter drops `outbox.job` runs the handler outside the trace.

use tracing::Span;
use tracing::field::Empty;

/// The longest stored trace context: a `traceparent` (55 bytes) and a `tracestate` of at most 32 entries.
const MAX_TRACE_BYTES: usize = 1_024;

/// The span an enqueue of `jobs` jobs of `kind` runs in.
pub(crate) fn enqueue_span(kind: &str, jobs: usize) -> Span {
    tracing::info_span!("outbox.enqueue", otel.name = %format!("enqueue {kind}"), otel.kind = "producer",
        job.kind = %kind, jobs)
}

/// The trace context to store with a job enqueued in `span`: `explicit` when the caller named one, else the
/// span's own when the caller is in a trace (with the `otel` feature and an OpenTelemetry layer installed). An
/// enqueue outside any trace stores nothing: its span alone would be a trace of one span, and the context costs
/// the row 55 bytes.
pub(crate) fn context_of(span: &Span, explicit: Option<&str>) -> Option<String> {
    if let Some(text) = explicit {
        return Some(text.to_owned());
    }
    #[cfg(feature = "otel")]
    {
        otel::header(span)
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        None
    }
}

/// The span a handler runs `job` in (`outbox.job`), continuing the trace the job carries.
pub(crate) fn job_span(id: &str, kind: &str, queue: &str, attempt: i32, run: i32, trace: Option<&str>) -> Span {
    let span = tracing::info_span!("outbox.job", otel.name = %format!("process {kind}"), otel.kind = "consumer",
        job.id = %id, job.kind = %kind, job.queue = %queue, job.attempt = attempt, job.run = run,
        otel.status_code = Empty, otel.status_description = Empty);
    #[cfg(feature = "otel")]
    otel::continue_trace(&span, run, trace);
    #[cfg(not(feature = "otel"))]
    let _ = trace;
    span
}

/// Marks `span` failed with `error`.
pub(crate) fn failed(span: &Span, error: &str) {
    span.record("otel.status_code", "error");
    span.record("otel.status_description", error);
}

/// What is wrong with `text` as a stored trace context (`traceparent`, then optionally a space and the
/// `tracestate`), if anything. Only version `00` is read; a later version's extra fields are refused.
pub(crate) fn check(text: &str) -> Result<(), String> {
    if text.len() > MAX_TRACE_BYTES {
        return Err(format!("the trace context is {} bytes, over the limit of {MAX_TRACE_BYTES}", text.len()));
    }
    let parent = text.split_once(' ').map_or(text, |(parent, _)| parent);
    if parse_parent(parent).is_none() {
        return Err(format!(
            "the trace context {parent:?} is not a W3C traceparent (`00-<32 hex digits>-<16 hex digits>-<2 hex \
             digits>`, lowercase, ids not all zero)"
        ));
    }
    if text.chars().any(|c| c.is_control()) {
        return Err("the trace context contains a control character".into());
    }
    Ok(())
}

/// A `traceparent`'s trace id, span id and flags.
fn parse_parent(text: &str) -> Option<(&str, &str, u8)> {
    let mut parts = text.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    if parts.next().is_some() || version != "00" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    if zero(trace) || zero(span) {
        return None;
    }
    Some((trace, span, u8::from_str_radix(flags, 16).ok()?))
}

/// The span a server runs a request in that arrived with these trace headers, and the context to store with what
/// it enqueues in place of the span's own: with the `otel` feature and an OpenTelemetry layer installed, the span
/// is the headers' child and carries the trace itself (`None`); otherwise the headers' context is stored as it came.
pub fn request_span(name: &str, traceparent: Option<&str>, tracestate: Option<&str>) -> (Span, Option<String>) {
    let stored = from_headers(traceparent, tracestate);
    let span = tracing::info_span!("outbox.request", otel.name = %name, otel.kind = "server");
    #[cfg(feature = "otel")]
    if let Some(sc) = stored.as_deref().and_then(otel::span_context) {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        if span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc)).is_ok() {
            return (span, None);
        }
    }
    (span, stored)
}

/// The stored context as its two headers: `traceparent`, and `tracestate` when there is one.
pub fn headers(stored: &str) -> (&str, Option<&str>) {
    match stored.split_once(' ') {
        Some((parent, state)) => (parent, Some(state)),
        None => (stored, None),
    }
}

/// The context to store from the two headers, when `traceparent` is valid (an invalid one is ignored, as W3C
/// Trace Context asks of a receiver).
pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<String> {
    let parent = traceparent?.trim();
    parse_parent(parent)?;
    let state = tracestate.map(str::trim).filter(|s| !s.is_empty());
    if let Some(state) = state {
        let text = format!("{parent} {state}");
        if check(&text).is_ok() {
            return Some(text);
        }
    }
    // A `tracestate` that cannot be kept is dropped alone, as W3C Trace Context asks.
    Some(parent.to_owned())
}

#[cfg(feature = "otel")]
mod otel {
    use std::str::FromStr;

    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    /// The span's trace context as stored, when its caller is in a trace (the current span has a valid context);
    /// the caller's own when the enqueue span is filtered out (`outbox::trace` below INFO).
    pub(super) fn header(span: &Span) -> Option<String> {
        let caller = Span::current().context();
        if !caller.span().span_context().is_valid() {
            return None;
        }
        let cx = if span.is_disabled() { caller } else { span.context() };
        let sc = cx.span().span_context().clone();
        if !sc.is_valid() {
            return None;
        }
        let parent = format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8());
        let state = sc.trace_state().header();
        Some(if state.is_empty() { parent } else { format!("{parent} {state}") })
    }

    /// The span context a stored trace context names.
    pub(super) fn span_context(stored: &str) -> Option<SpanContext> {
        let (parent, state) = super::headers(stored);
        let (trace, span, flags) = super::parse_parent(parent)?;
        let state = state.and_then(|s| TraceState::from_str(s).ok()).unwrap_or_default();
        Some(SpanContext::new(
            TraceId::from_hex(trace).ok()?,
            SpanId::from_hex(span).ok()?,
            TraceFlags::new(flags),
            true,
            state,
        ))
    }

    /// Makes `span` the child of the stored context on the job's first run, a new trace linked to it after.
    pub(super) fn continue_trace(span: &Span, run: i32, trace: Option<&str>) {
        let Some(sc) = trace.and_then(span_context) else { return };
        if run <= 1 {
            // Without an OpenTelemetry layer there is nothing to continue.
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc));
        } else {
            span.add_link(sc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn trace_contexts_are_checked() {
        assert_eq!(check(PARENT), Ok(()));
        assert_eq!(check(&format!("{PARENT} congo=t61rcWkgMzE")), Ok(()));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
        assert!(check(&format!("{PARENT} {}", "a".repeat(1_100))).expect_err("long").contains("over the limit"));
        assert!(check(&format!("{PARENT} a=\u{7}")).expect_err("control").contains("control character"));
    }

    #[test]
    fn headers_round_trip_and_invalid_ones_are_ignored() {
        let stored = from_headers(Some(PARENT), Some(" congo=t61rcWkgMzE ")).expect("valid");
        assert_eq!(headers(&stored), (PARENT, Some("congo=t61rcWkgMzE")));
        assert_eq!(from_headers(Some(PARENT), Some("")).as_deref(), Some(PARENT));
        assert_eq!(from_headers(Some("00-zz"), Some("a=b")), None);
        assert_eq!(from_headers(None, Some("a=b")), None);
        // A tracestate that cannot be kept is dropped; the traceparent is not.
        assert_eq!(from_headers(Some(PARENT), Some(&"a=b,".repeat(400))).as_deref(), Some(PARENT));
        assert_eq!(from_headers(Some(PARENT), Some("a=\u{7}")).as_deref(), Some(PARENT));
    }
}
