//! Traces that cross the outbox: the job a request enqueued runs, in a worker of another process, as a child of the
//! enqueue's span in the request's trace; a retried run is a trace of its own linked to it; a caller's
//! `traceparent` on `POST /api/jobs` is continued the same way. Spans are recorded by OpenTelemetry's in-memory
//! exporter, in this process and in the worker's (which prints its own).

use std::process::{Command, Stdio};
use std::time::Duration;

use outbox::prelude::*;
use outbox::{Kind, ops};
use outbox_server::ServerOpts;
use outbox_tests::otel::{Recorder, SpanRecord, TraceProbe};
use outbox_tests::{ChildProcess, Served, TestDb, conformance, http_client};
use serde_json::json;
use tracing::Instrument;

/// The trace id and span id a stored trace context names.
fn ids(stored: &str) -> (String, String) {
    let parts: Vec<&str> = stored.split(' ').next().unwrap_or_default().split('-').collect();
    assert_eq!(parts.len(), 4, "a traceparent: {stored}");
    (parts[1].to_owned(), parts[2].to_owned())
}

async fn stored_trace(t: &TestDb, id: &str) -> Option<String> {
    ops::get(&t.db, id).await.expect("the job").trace
}

fn runs_of<'a>(spans: &'a [SpanRecord], job: &str) -> Vec<&'a SpanRecord> {
    let mut runs: Vec<&SpanRecord> = spans.iter().filter(|s| s.job_id.as_deref() == Some(job)).collect();
    runs.sort_by_key(|s| s.run);
    runs
}

conformance!(a_job_continues_the_trace_that_enqueued_it_in_another_process, mysql);
async fn a_job_continues_the_trace_that_enqueued_it_in_another_process(t: TestDb) {
    let (recorder, subscriber) = Recorder::new();
    let guard = tracing::subscriber::set_default(subscriber);
    // Two requests of an application, each enqueuing a job in its span; the second job's first attempt fails.
    let request = |path: &str| tracing::info_span!("request", otel.name = %path, otel.kind = "server");
    let first = outbox::enqueue(&t.db, &TraceProbe { n: 1, fail_first: false }, EnqueueOpts::new())
        .instrument(request("POST /orders/1"))
        .await
        .expect("enqueue");
    let retried = outbox::enqueue(&t.db, &TraceProbe { n: 2, fail_first: true }, EnqueueOpts::new())
        .instrument(request("POST /orders/2"))
        .await
        .expect("enqueue");
    // A caller of the HTTP API, handled by a server that records spans too (the router called in this task, under
    // this subscriber): the server's request span is the caller's child, and the job continues its enqueue span.
    ops::record_kind(&t.db, &Kind::of::<TraceProbe>().expect("kind"), "test").await.expect("record the kind");
    let caller = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let traced_server = {
        use tower::ServiceExt;
        let request = axum::http::Request::post("/api/jobs")
            .header("content-type", "application/json")
            .header("traceparent", format!("00-{}-{}-01", caller.0, caller.1))
            .body(axum::body::Body::from(r#"{"kind": "test.trace_probe", "payload": {"n": 5, "fail_first": false}}"#))
            .expect("request");
        let answer = outbox_server::router(t.db.clone(), ServerOpts::new()).oneshot(request).await.expect("answer");
        assert_eq!(answer.status(), 201);
        let body = http_body_util::BodyExt::collect(answer.into_body()).await.expect("body").to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).expect("json");
        body["id"].as_str().expect("id").to_owned()
    };
    drop(guard);
    // A caller of the HTTP API with a trace context of its own, and one whose header is malformed (ignored), to a
    // server without an OpenTelemetry layer: the context is stored as it came.
    let served = Served::start(&t.db, ServerOpts::new()).await;
    let post = async |n: u64, traceparent: &str| {
        let answer = http_client()
            .post(served.url("/api/jobs"))
            .header("traceparent", traceparent)
            .header("tracestate", "congo=t61rcWkgMzE")
            .json(&json!({"kind": "test.trace_probe", "payload": {"n": n, "fail_first": false}}))
            .send()
            .await
            .expect("POST /api/jobs");
        assert_eq!(answer.status(), 201);
        answer.json::<serde_json::Value>().await.expect("json")["id"].as_str().expect("id").to_owned()
    };
    let through_api = post(3, &format!("00-{}-{}-01", caller.0, caller.1)).await;
    let malformed = post(4, "00-not-a-trace-context").await;

    // In this process: each request span holds its enqueue span, whose context the job stores.
    let mine = recorder.spans();
    let mut enqueues = Vec::new();
    for (job, path) in [(first.id(), "POST /orders/1"), (retried.id(), "POST /orders/2")] {
        let stored = stored_trace(&t, job).await.expect("a stored trace context");
        let (trace, span) = ids(&stored);
        let enqueue = mine.iter().find(|s| s.span_id == span).expect("the stored span is one of this process's");
        assert_eq!((enqueue.name.as_str(), enqueue.trace_id.as_str()), ("enqueue test.trace_probe", trace.as_str()));
        let parent = mine.iter().find(|s| Some(&s.span_id) == enqueue.parent.as_ref()).expect("its parent");
        assert_eq!((parent.name.as_str(), parent.trace_id.as_str()), (path, trace.as_str()));
        enqueues.push((trace, span));
    }
    assert_eq!(
        stored_trace(&t, &through_api).await.as_deref(),
        Some(format!("00-{}-{}-01 congo=t61rcWkgMzE", caller.0, caller.1).as_str())
    );
    assert_eq!(stored_trace(&t, &malformed).await, None, "a malformed traceparent is ignored");
    let (server_trace, server_enqueue) = ids(&stored_trace(&t, &traced_server).await.expect("a stored context"));
    assert_eq!(server_trace, caller.0, "the server continued the caller's trace");
    let enqueue = mine.iter().find(|s| s.span_id == server_enqueue).expect("the server's enqueue span");
    let request = mine.iter().find(|s| Some(&s.span_id) == enqueue.parent.as_ref()).expect("its parent");
    assert_eq!((request.name.as_str(), request.parent.as_deref()), ("POST /api/jobs", Some(caller.1)));

    // The worker of another process runs the five jobs and prints its spans.
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-otel-worker"));
    command.args([&t.url, "5"]).stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = ChildProcess::spawn(&mut command).output_within(Duration::from_secs(90));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the worker failed: {stderr}");
    let theirs: Vec<SpanRecord> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("a span line: {e}: {line}")))
        .collect();

    // The first run of each job is the child of its enqueue span, in the request's trace.
    let [(first_trace, first_enqueue), (retried_trace, retried_enqueue)] = &enqueues[..] else { unreachable!() };
    let run = runs_of(&theirs, first.id());
    assert_eq!(run.len(), 1, "{run:?}");
    assert_eq!((run[0].name.as_str(), run[0].run), ("process test.trace_probe", Some(1)));
    assert_eq!((&run[0].trace_id, run[0].parent.as_ref()), (first_trace, Some(first_enqueue)));
    let runs = runs_of(&theirs, retried.id());
    assert_eq!(runs.len(), 2, "a failed run and its retry: {runs:?}");
    assert_eq!((&runs[0].trace_id, runs[0].parent.as_ref()), (retried_trace, Some(retried_enqueue)));
    // The retry is a trace of its own, linked to the enqueue: it does not stretch the request's trace.
    assert_ne!(&runs[1].trace_id, retried_trace);
    assert_eq!(runs[1].parent, None);
    assert_eq!(runs[1].links, vec![(retried_trace.clone(), retried_enqueue.clone())]);
    // Through the HTTP API, the caller's span is the parent; without a valid context the run is a root.
    let run = runs_of(&theirs, &through_api);
    assert_eq!((run[0].trace_id.as_str(), run[0].parent.as_deref()), (caller.0, Some(caller.1)));
    let run = runs_of(&theirs, &malformed);
    assert_eq!((run[0].parent.as_ref(), run[0].links.len()), (None, 0));
    let run = runs_of(&theirs, &traced_server);
    assert_eq!((run[0].trace_id.as_str(), run[0].parent.as_ref()), (caller.0, Some(&server_enqueue)));
    // A failed run says why on its span.
    assert_eq!(runs[0].error.as_deref(), Some("the first attempt fails"));
    assert_eq!(runs[1].error, None);
}

/// Built without its `otel` feature, outbox depends on nothing of OpenTelemetry; with it, on the API and the
/// `tracing` bridge alone (never the SDK, which is the application's choice).
#[test]
fn without_the_feature_nothing_of_opentelemetry_is_compiled() {
    let tree = |features: &[&str]| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let output = Command::new(cargo)
            .args(["tree", "--offline", "-p", "outbox", "-e", "normal", "--prefix", "none", "--manifest-path"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
            .args(features)
            .output()
            .expect("cargo tree");
        assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let without = tree(&[]);
    assert!(without.contains("sea-orm v"), "the tree is outbox's: {without}");
    assert!(!without.contains("opentelemetry"), "{without}");
    let with = tree(&["--features", "otel"]);
    assert!(with.contains("opentelemetry v0.33") && with.contains("tracing-opentelemetry v"), "{with}");
    assert!(!with.contains("opentelemetry_sdk"), "{with}");
}

/// The value of the sum or gauge `name` at the data point whose attributes include `with`, in the newest export.
fn exported(
    exporter: &opentelemetry_sdk::metrics::InMemoryMetricExporter,
    name: &str,
    with: (&str, &str),
) -> Option<i64> {
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    let has = |mut attributes: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
        Iterator::any(&mut attributes, |kv| kv.key.as_str() == with.0 && kv.value.as_str() == with.1)
    };
    let exports = exporter.get_finished_metrics().expect("metrics");
    let metric =
        exports.iter().rev().flat_map(|r| r.scope_metrics()).flat_map(|s| s.metrics()).find(|m| m.name() == name)?;
    match metric.data() {
        AggregatedMetrics::U64(MetricData::Sum(sum)) => {
            sum.data_points().find(|p| has(&mut p.attributes())).map(|p| i64::try_from(p.value()).unwrap_or(i64::MAX))
        }
        AggregatedMetrics::I64(MetricData::Gauge(gauge)) => {
            gauge.data_points().find(|p| has(&mut p.attributes())).map(|p| p.value())
        }
        _ => None,
    }
}

conformance!(the_metrics_reach_an_opentelemetry_meter, mysql);
/// `otel_metrics` publishes what `/metrics` shows through a meter: the feed's counters (jobs enqueued and
/// completed, by kind and queue) and the gauges read from the database (jobs by kind and status).
async fn the_metrics_reach_an_opentelemetry_meter(t: TestDb) {
    use opentelemetry::metrics::MeterProvider;
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder().with_reader(PeriodicReader::builder(exporter.clone()).build()).build();
    let metrics =
        outbox_server::otel_metrics(t.db.clone(), &provider.meter("outbox-tests"), Duration::from_millis(20)).await;
    for n in 1..=3 {
        outbox::enqueue(&t.db, &outbox_tests::Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let worker = Worker::builder(&t.db)
        .register(|_job: outbox_tests::Probe, _ctx: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build");
    worker.drain().await.expect("drain");
    let probe = ("kind", "probe");
    let counted = outbox_tests::eventually(Duration::from_secs(20), || async {
        provider.force_flush().expect("flush");
        exported(&exporter, "outbox.jobs.completed", probe) == Some(3)
            && exported(&exporter, "outbox.jobs", ("status", "completed")) == Some(3)
    })
    .await;
    assert!(
        counted,
        "completed: {:?}, gauge: {:?}",
        exported(&exporter, "outbox.jobs.completed", probe),
        exported(&exporter, "outbox.jobs", ("status", "completed"))
    );
    assert_eq!(exported(&exporter, "outbox.jobs.enqueued", probe), Some(3));
    drop(metrics);
    provider.shutdown().expect("shutdown");
}

conformance!(a_remote_worker_s_claim_carries_the_jobs_trace_context, mysql);
/// A remote worker's claim gives each job the trace context it was enqueued in, as the two W3C headers, to
/// continue the trace in another language; a job without one gives nulls.
async fn a_remote_worker_s_claim_carries_the_jobs_trace_context(t: TestDb) {
    let stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 congo=t61rcWkgMzE";
    let traced = outbox::enqueue(&t.db, &TraceProbe { n: 1, fail_first: false }, EnqueueOpts::new().trace(stored))
        .await
        .expect("enqueue");
    let plain =
        outbox::enqueue(&t.db, &TraceProbe { n: 2, fail_first: false }, EnqueueOpts::new()).await.expect("enqueue");
    let bad = outbox::enqueue(&t.db, &TraceProbe { n: 3, fail_first: false }, EnqueueOpts::new().trace("00-zz"));
    let err = bad.await.expect_err("a malformed context set by code is refused");
    assert!(err.to_string().contains("is not a W3C traceparent"), "{err}");
    ops::record_kind(&t.db, &Kind::of::<TraceProbe>().expect("kind"), "test").await.expect("record the kind");
    let served = Served::start(&t.db, ServerOpts::new()).await;
    let answer: serde_json::Value = http_client()
        .post(served.url("/api/work/claim"))
        .json(&json!({"worker": "elsewhere", "kinds": ["test.trace_probe"], "limit": 10}))
        .send()
        .await
        .expect("claim")
        .json()
        .await
        .expect("json");
    let jobs = answer["jobs"].as_array().expect("jobs");
    let of = |id: &str| jobs.iter().find(|j| j["id"] == id).unwrap_or_else(|| panic!("{id} in {answer}"));
    let traced = of(traced.id());
    assert_eq!(traced["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    assert_eq!((traced["tracestate"].as_str(), traced["run"].as_i64()), (Some("congo=t61rcWkgMzE"), Some(1)));
    let plain = of(plain.id());
    assert!(plain["traceparent"].is_null() && plain["tracestate"].is_null(), "{plain}");
}
