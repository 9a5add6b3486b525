//! Shared pieces of the outbox-aws tests: the moto endpoint (or a visible skip), clients, a quick worker,
//! unique resource names and job rows.

#![allow(dead_code, unreachable_pub, unused_imports)]

use std::time::Duration;

use outbox::{EnqueueOpts, JobRecord, JobStatus, RetryPolicy, Worker, WorkerBuilder};
use outbox_aws::{Aws, AwsOpts, SyncAws};
use outbox_tests::TestDb;
use sea_orm::DatabaseConnection;

pub use outbox_tests::aws_endpoint as endpoint;

/// Options for the test server with static test credentials.
pub fn opts(endpoint: &str) -> AwsOpts {
    AwsOpts::new().endpoint_url(endpoint).region("us-east-1").static_credentials(
        "AKIDTESTOUTBOX",
        "testing-secret",
        None,
    )
}

/// Clients for the test server.
pub async fn aws(endpoint: &str) -> Aws {
    Aws::connect(opts(endpoint)).await.expect("connect to the test server")
}

/// A bucket or queue name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:016x}", fastrand::u64(..))
}

/// A worker that polls often and retries fast, with the `sync_aws` handler.
pub fn worker(db: &DatabaseConnection, aws: &Aws) -> WorkerBuilder {
    let builder = Worker::builder(db).poll_interval(Duration::from_millis(20)).retry_policy(RetryPolicy {
        base: Duration::from_millis(10),
        max: Duration::from_millis(100),
        jitter: 0.0,
    });
    outbox_aws::register_handlers(builder, aws)
}

/// Runs every due job to its end.
pub async fn drain(db: &DatabaseConnection, aws: &Aws) {
    worker(db, aws).build().await.expect("worker").drain().await.expect("drain");
}

/// Enqueues `job` and returns its id.
pub async fn enqueue(db: &DatabaseConnection, job: &SyncAws) -> String {
    outbox::enqueue(db, job, EnqueueOpts::new()).await.expect("enqueue").id().to_owned()
}

/// Enqueues `job`, drains, and returns the finished row.
pub async fn sync(db: &DatabaseConnection, aws: &Aws, job: &SyncAws) -> JobRecord {
    let id = enqueue(db, job).await;
    drain(db, aws).await;
    outbox::ops::get(db, &id).await.expect("get job")
}

/// The finished row of a job that must have completed, with its output.
pub fn completed(job: &JobRecord) -> serde_json::Value {
    assert_eq!(job.status, JobStatus::Completed, "job {} ended {:?}: {:?}", job.id, job.status, job.last_error);
    job.output.clone().expect("job output")
}
