//! A worker process that records its spans with OpenTelemetry's in-memory exporter, for the trace tests.
//!
//! `outbox-otel-worker DATABASE JOBS`: runs `test.trace_probe` jobs until JOBS of them completed, shuts down, and
//! prints every span it ended as one JSON line each ([`outbox_tests::otel::SpanRecord`]).

use std::time::{Duration, Instant};

use outbox::{JobContext, JobError, RetryPolicy, Worker};
use outbox_tests::otel::{Recorder, TraceProbe};
use sea_orm::{ConnectionTrait, Statement};

const USAGE: &str = "usage: outbox-otel-worker DATABASE JOBS";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, jobs] = args.as_slice() else { return Err(USAGE.into()) };
    let jobs: i64 = jobs.parse()?;
    let (recorder, subscriber) = Recorder::new();
    tracing::subscriber::set_global_default(subscriber)?;
    let db = outbox::connect(url).await?;
    let quick = RetryPolicy { base: Duration::from_millis(50), max: Duration::from_millis(50), jitter: 0.0 };
    let worker = Worker::builder(&db)
        .poll_interval(Duration::from_millis(50))
        .register_with(quick, |job: TraceProbe, ctx: JobContext| async move {
            if job.fail_first && ctx.attempt() == 1 {
                return Err(JobError::retry("the first attempt fails"));
            }
            Ok::<_, JobError>(())
        })
        .build()
        .await?
        .start();
    let done = Statement::from_string(
        db.get_database_backend(),
        "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed' AND kind = 'test.trace_probe'",
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let row = db.query_one_raw(done.clone()).await?.ok_or("no count")?;
        if row.try_get_by_index::<i64>(0)? >= jobs {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{jobs} jobs did not complete within 60 s").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await?;
    for span in recorder.spans() {
        println!("{}", serde_json::to_string(&span)?);
    }
    Ok(())
}
