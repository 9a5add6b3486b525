//! Shared pieces of the integration tests: job kinds, fresh databases on each backend, the conformance
//! macro that runs a test on all of them, and the worker binary the crash and race tests run as child
//! processes.

mod child;
mod claims;
mod cluster;
mod database;
pub mod http;
mod mariadb;
pub mod otel;
mod secrets;
mod served;
mod tmpfs;

use std::time::Duration;

use outbox::Job;
use schemars::JsonSchema;
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde::{Deserialize, Serialize};

pub use child::{ChildProcess, GroupGuard};
pub use claims::{Claim, ClaimLog};
pub use cluster::PgCluster;
pub use database::{
    Backend, TestDb, TestSchema, assert_every_claim_rescuable, connect_to, exec, fresh, fresh_db, pg_server, run,
    scalar, sqlite_url, try_exec, unrescuable,
};
pub use mariadb::{MYSQL_VAR, TestMariaDb, database_exists, mariadb_server};
pub use rustix::process::Signal;
pub use secrets::{Captured, ChildRun, job_rows, leaks, run_child};
pub use served::{Served, SseEvent, SseReader, http_client};
pub use tmpfs::Tmpfs;

/// A job that carries a number; tests attach whatever handler they need.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "probe", max_attempts = 3)]
pub struct Probe {
    /// Distinguishes jobs (and so their default payload-hash keys).
    #[schemars(range(min = 1))]
    pub n: u64,
}

/// The job of the test workers' every-second schedule: the tick it was enqueued for.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "ticked", unique = false)]
pub struct Ticked {
    /// The tick, in milliseconds since the Unix epoch.
    pub tick_ms: i64,
}

/// A job keyed by one field.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "keyed", queue = "mail")]
#[serde(rename_all = "camelCase")]
pub struct Keyed {
    /// The idempotency key.
    #[job(key)]
    pub user_id: i64,
    /// Not part of the key.
    pub note: String,
}

/// A job run by child worker processes: sleeps, records its run, or hangs.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "race", unique = false, max_attempts = 5)]
pub struct Race {
    /// Sequence number.
    pub n: u64,
    /// Handler sleep in milliseconds.
    pub sleep_ms: u64,
}

/// One step of an ordered sequence, run by child worker processes: jobs sharing `key` run one at a time in
/// the order they were enqueued.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "step", unique = false, max_attempts = 25, sequence = "key:{key}")]
pub struct Step {
    /// The sequence.
    pub key: u32,
    /// Its place in the sequence, as the test enqueued it.
    pub seq: u32,
    /// Handler sleep in milliseconds.
    pub sleep_ms: u64,
}

/// A step of the workflow tests' fleets: its workflow and step number (the diamond's a, b, c, d are 0 to 3; a batch's
/// members are 0 and its callback 9). Its handler reads every parent's output and completes with what it read.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "node", unique = false, max_attempts = 25)]
pub struct Node {
    /// The workflow it belongs to, as the test numbers them.
    pub wf: u32,
    /// Its step.
    pub step: u32,
    /// Handler sleep in milliseconds.
    pub sleep_ms: u64,
}

/// What a [`Node`] completes with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeOutput {
    /// Its workflow.
    pub wf: u32,
    /// Its step.
    pub step: u32,
    /// The step numbers of the parents whose outputs it read, in order.
    pub read: Vec<u32>,
    /// How many parents had completed, failed, been cancelled, or had not finished.
    pub summary: [usize; 4],
}

/// A sequenced job whose failures let its sequence go on (`on_sequence_failure = "continue"`).
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "onward", unique = false, max_attempts = 1, sequence = "onward:{key}", on_sequence_failure = "continue")]
pub struct Onward {
    /// The sequence.
    pub key: u32,
    /// Distinguishes jobs.
    pub n: u32,
}

/// A job of a kind of which at most two run at once across every worker process.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "limited", unique = false, concurrency = 2)]
pub struct Limited {
    /// Distinguishes jobs.
    pub n: u64,
    /// Handler sleep in milliseconds.
    pub sleep_ms: u64,
}

/// A job of queue `bulk` that takes a while.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "paced", queue = "bulk", unique = false)]
pub struct Paced {
    /// Distinguishes jobs.
    pub n: u64,
    /// Handler sleep in milliseconds.
    pub sleep_ms: u64,
}

/// A job of a kind shared out fairly between tenants.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "fair_work", unique = false, fair = "{tenant}")]
pub struct FairWork {
    /// The tenant.
    pub tenant: u64,
    /// Distinguishes jobs.
    pub n: u64,
}

/// A job of a kind limited to 20 a second across every worker process, with a burst of 10.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "metered", unique = false, rate = "20/s burst 10")]
pub struct Metered {
    /// Distinguishes jobs.
    pub n: u64,
}

/// A job of a kind limited to 20 a second for each tenant apart, with a burst of 10.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "metered_per_tenant", unique = false, rate = "20/s burst 10", rate_key = "{tenant}")]
pub struct MeteredPerTenant {
    /// The tenant, 0 or 1.
    pub tenant: u64,
}

/// A job costing 1 to 100 units of a rate of 1,000 units a second, with a burst of 200.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "weighted", unique = false, rate = "1000/s burst 200", cost = "{cost}")]
pub struct Weighted {
    /// Its cost.
    pub cost: u64,
}

/// Nanoseconds on the machine's monotonic clock, comparable across processes.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Polls `check` every 20 ms until it holds or `timeout` passes; returns whether it held.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until job `id` reaches `status`; returns whether it did within `timeout`.
pub async fn wait_status(db: &DatabaseConnection, id: &str, status: outbox::JobStatus, timeout: Duration) -> bool {
    eventually(timeout, || async move { outbox::ops::get(db, id).await.expect("get job").status == status }).await
}

/// Waits until `counter` reaches `n`; returns whether it did within `timeout`.
pub async fn wait_count(counter: &std::sync::atomic::AtomicUsize, n: usize, timeout: Duration) -> bool {
    eventually(timeout, || async move { counter.load(std::sync::atomic::Ordering::SeqCst) == n }).await
}

/// A job with a rule its schema cannot express: `hi` must not be below `lo`.
#[derive(Job, Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[job(kind = "span", validate = Self::check)]
pub struct Span {
    /// Start.
    pub lo: i64,
    /// End, at least `lo`.
    pub hi: i64,
}

impl Span {
    fn check(&self) -> Result<(), Vec<outbox::Violation>> {
        if self.hi < self.lo {
            return Err(vec![outbox::Violation {
                path: "/hi".into(),
                message: format!("{} is below lo ({})", self.hi, self.lo),
            }]);
        }
        Ok(())
    }
}

/// Waits until the integer `sql` returns equals `n`; returns whether it did within `timeout`.
pub async fn wait_scalar(db: &impl ConnectionTrait, sql: &str, n: i64, timeout: Duration) -> bool {
    eventually(timeout, || async move { scalar(db, sql).await == n }).await
}

/// Polls the count `sql` until it is at least `n` or `timeout` passes; returns whether it got there.
pub async fn wait_scalar_at_least(db: &impl ConnectionTrait, sql: &str, n: i64, timeout: Duration) -> bool {
    eventually(timeout, || async move { scalar(db, sql).await >= n }).await
}

/// The S3/SQS-compatible server (a `moto_server`) that AWS tests run against, from
/// `OUTBOX_TEST_AWS_ENDPOINT`. Unset, the test is skipped with a visible message; under `CI`, a missing
/// server is a failure.
pub fn aws_endpoint(test: &str) -> Option<String> {
    required_server(
        "OUTBOX_TEST_AWS_ENDPOINT",
        "a moto server",
        "start `moto_server -p 5000` and set it to http://127.0.0.1:5000",
        test,
    )
}

/// The value of `var`, which names a server (`what`) a test needs. Unset, `test` is skipped with a visible
/// message saying how to set it (`hint`); under `CI`, a missing server is a failure.
fn required_server(var: &str, what: &str, hint: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!("{var} must point at {what} in CI"),
        _ => {
            unavailable(test, &format!("{var} is unset ({hint})"));
            None
        }
    }
}

/// Says that `test` cannot run here and why: a visible `SKIPPED` line, or under `CI` (which installs
/// everything the tests need) a failure.
pub fn unavailable(test: &str, why: &str) {
    assert!(std::env::var_os("CI").is_none(), "{test} cannot run in CI: {why}");
    // The test harness captures what a passing test prints, and a skip must be seen: write past the capture
    // to the process's stderr where the platform offers `/dev/stderr`.
    use std::io::Write;
    let line = format!("SKIPPED {test}: {why}");
    match std::fs::OpenOptions::new().append(true).open("/dev/stderr") {
        Ok(mut stderr) => {
            let _ = writeln!(stderr, "{line}");
        }
        Err(_) => eprintln!("{line}"),
    }
}

/// The first line of an `#[ignore]`d test that is half of `parent`, which runs it in a child process with
/// `var` set: run any other way (`cargo test -- --include-ignored`), it fails saying so instead of passing
/// without having tested anything.
#[track_caller]
pub fn child_half(var: &str, parent: &str) {
    assert!(
        std::env::var_os(var).is_some(),
        "this test is half of {parent}, which runs it in a child process with {var} set; run {parent} instead"
    );
}

/// Milliseconds since the Unix epoch, as the jobs table stores times.
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}
