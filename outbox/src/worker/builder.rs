//! Configuring a worker: [`WorkerBuilder`]'s settings and their defaults, and [`WorkerBuilder::build`], which
//! checks them, records the registered kinds and opens the worker's own connections.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sea_orm::DatabaseConnection;

use super::background::Background;
use super::handler::{self, IntoOutput, JobContext, JobError};
use super::watchdog::Watchdog;
use super::{Registered, RetryPolicy, StartHook, Worker, WorkerConfig, presence};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::job::Job;
use crate::kind::Kind;
use crate::periodic::{self, Schedule};
use crate::retention::Retention;
use crate::storage::{self, WorkerStoreOpts};

/// Configures and builds a [`Worker`].
pub struct WorkerBuilder {
    db: DatabaseConnection,
    handlers: HashMap<String, Registered>,
    errors: Vec<Error>,
    queues: Option<Vec<String>>,
    retry: RetryPolicy,
    config: WorkerConfig,
    id: Option<String>,
    /// Fleet-wide limits set on the builder, overriding the kinds' own.
    limits: HashMap<String, u32>,
    /// Fleet-wide rates set on the builder, overriding the kinds' own.
    rates: HashMap<String, crate::flow::Rate>,
    /// Timeouts set on the builder, overriding the kinds' own.
    timeouts: HashMap<String, Duration>,
    schedules: Vec<Schedule>,
    retention: Retention,
    on_start: Vec<(String, StartHook)>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("kinds", &self.handlers.keys().collect::<Vec<_>>())
            .field("queues", &self.queues)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Starts configuring a worker on `db` (an embedded database must be a file: the worker opens its own
    /// connection to it).
    pub fn builder(db: &DatabaseConnection) -> WorkerBuilder {
        WorkerBuilder {
            db: db.clone(),
            handlers: HashMap::new(),
            errors: Vec::new(),
            queues: None,
            retry: RetryPolicy::default(),
            config: WorkerConfig {
                concurrency: 10,
                poll_interval: Duration::from_secs(1),
                lease: Duration::from_secs(300),
                rescue_interval: Duration::from_secs(30),
                shutdown_grace: Duration::from_secs(30),
                cancel_grace: Duration::from_secs(5),
                max_db_backoff: Duration::from_secs(30),
                presence_interval: Duration::from_secs(10),
                timeout: None,
            },
            id: None,
            limits: HashMap::new(),
            rates: HashMap::new(),
            timeouts: HashMap::new(),
            schedules: Vec::new(),
            retention: Retention::default(),
            on_start: Vec::new(),
        }
    }
}

impl WorkerBuilder {
    /// Registers the handler of job kind `J`. Registering a kind twice is reported by [`WorkerBuilder::build`].
    pub fn register<J, F, Fut, O>(self, handler: F) -> Self
    where
        J: Job,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, JobError>> + Send + 'static,
        O: IntoOutput,
    {
        let retry = self.retry;
        self.register_with::<J, F, Fut, O>(retry, handler)
    }

    /// Registers the handler of job kind `J` with its own retry policy.
    pub fn register_with<J, F, Fut, O>(mut self, retry: RetryPolicy, handler: F) -> Self
    where
        J: Job,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, JobError>> + Send + 'static,
        O: IntoOutput,
    {
        let kind = match Kind::of::<J>() {
            Ok(kind) => kind,
            Err(e) => {
                self.errors.push(e);
                return self;
            }
        };
        if self.handlers.contains_key(J::KIND) {
            self.errors.push(Error::DuplicateKind { kind: J::KIND.to_owned() });
            return self;
        }
        let handler = handler::erase::<J, F, Fut, O>(Arc::clone(&kind), handler);
        let timeout = J::OPTS.timeout;
        self.handlers.insert(J::KIND.to_owned(), Registered { handler, retry, timeout, kind });
        self
    }

    /// Jobs run at once (default 10). Claims are sized to the free slots, so this is also how many jobs one claim
    /// statement can carry; outcomes are written up to 1,000 per statement. For many short jobs a concurrency in
    /// the hundreds means fewer statements per job (figures in docs/internals/postgres-write-path.md, "Wide workers").
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n.max(1);
        self
    }

    /// Only claim jobs of these queues (default: every queue).
    pub fn queues<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// How often to look for due jobs when nothing wakes the worker (default 1 s).
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.config.poll_interval = d;
        self
    }

    /// How long a claim stays valid without renewal (default 5 min); renewed every third of it.
    pub fn lease(mut self, d: Duration) -> Self {
        self.config.lease = d.max(Duration::from_millis(30));
        self
    }

    /// How often to return expired claims to pending (default 30 s).
    pub fn rescue_interval(mut self, d: Duration) -> Self {
        self.config.rescue_interval = d;
        self
    }

    /// At shutdown, how long in-flight jobs may run before they are cancelled (default 30 s).
    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.config.shutdown_grace = d;
        self
    }

    /// After cancelling, how long handlers get to stop before they are dropped (default 5 s).
    pub fn cancel_grace(mut self, d: Duration) -> Self {
        self.config.cancel_grace = d;
        self
    }

    /// How often the worker refreshes its entry in the worker registry (default 10 s); it drops out of
    /// [`crate::ops::workers`] three intervals after its last refresh.
    pub fn presence_interval(mut self, d: Duration) -> Self {
        self.config.presence_interval = d.max(Duration::from_millis(100));
        self
    }

    /// The default retry policy of kinds registered after this call.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// At most `n` jobs of `kind` run at once across every worker and process sharing the database, in place
    /// of what the kind declares (`#[job(concurrency = 2)]`): for kinds defined elsewhere, such as the
    /// built-in `claude_extraction`. The database enforces it at claim time; every worker serving the kind
    /// should say the same.
    pub fn concurrency_limit(mut self, kind: impl Into<String>, n: u32) -> Self {
        let kind = kind.into();
        if n == 0 {
            self.errors.push(Error::Invalid(format!(
                "the concurrency limit of kind `{kind}` is 0: no job of it could ever run; leave it out for no limit"
            )));
        }
        self.limits.insert(kind, n);
        self
    }

    /// At most `rate` of `kind` (in cost units) is claimed across every worker and process sharing the database,
    /// in place of what the kind declares (`#[job(rate = "50/1m")]`): for kinds defined elsewhere, such as the
    /// built-in `claude_extraction`. The database enforces it at claim time; every worker serving the kind should
    /// say the same. Code outside jobs shares the budget through [`crate::flow::take`] under the kind's name.
    pub fn rate(mut self, kind: impl Into<String>, rate: crate::flow::Rate) -> Self {
        self.rates.insert(kind.into(), rate);
        self
    }

    /// How long a handler may run when its kind declares no timeout (default: no limit). Past it the handler
    /// is asked to stop through [`JobContext::cancelled`], dropped after the cancel grace if it has not, and
    /// the attempt counts as a retryable failure "timed out after …"; the job's claim is given back at once.
    ///
    /// A handler that blocks its thread (a synchronous sleep, a blocking call) cannot be dropped: the worker's
    /// background thread fails its attempt and gives the claim back at the same deadline, and discards what it
    /// returns later, but the thread stays busy until it does
    /// ([`WorkerHandle::shutdown`](crate::WorkerHandle::shutdown) does not wait for it).
    /// Run blocking work with `tokio::task::spawn_blocking` and check the context between steps.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.config.timeout = Some(d.max(Duration::from_millis(1)));
        self
    }

    /// How long handlers of `kind` may run, in place of what the kind declares (`#[job(timeout = "30s")]`):
    /// for kinds defined elsewhere, such as the built-in ones.
    pub fn kind_timeout(mut self, kind: impl Into<String>, d: Duration) -> Self {
        self.timeouts.insert(kind.into(), d.max(Duration::from_millis(1)));
        self
    }

    /// Enqueues a periodic job at each tick of `schedule` while the worker runs. Every process may register
    /// the same schedule: the database lets one enqueue each tick.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedules.push(schedule);
        self
    }

    /// How long finished jobs are kept (default: [`Retention::default`]; [`Retention::off`] to keep all).
    pub fn retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Runs `step` once when the worker starts, before its first claim (the filesystem reconciler, say);
    /// a step that fails is logged under `name` and the worker goes on.
    pub fn on_start<F, Fut>(mut self, name: impl Into<String>, step: F) -> Self
    where
        F: FnOnce(DatabaseConnection, String) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        self.on_start.push((name.into(), Box::new(move |db, id| Box::pin(step(db, id)))));
        self
    }

    /// Sets the worker's identity (default: host, process id and a random suffix). Must be unique.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Checks the configuration, records the registered kinds, and opens the worker's own connections (see
    /// docs/guides/postgres.md and docs/guides/sqlite.md for what each backend opens).
    pub async fn build(mut self) -> Result<Worker> {
        if let Some(e) = self.errors.drain(..).next() {
            return Err(e);
        }
        // Settings that are wrong whatever the database holds fail before the database is touched: a worker
        // started during an outage says so at once instead of retrying its start.
        self.retention.check()?;
        let mut kinds: Vec<String> = self.handlers.keys().cloned().collect();
        kinds.sort();
        all_handled("a concurrency limit", self.limits.keys(), &self.handlers, &kinds)?;
        all_handled("a rate", self.rates.keys(), &self.handlers, &kinds)?;
        all_handled("a timeout", self.timeouts.keys(), &self.handlers, &kinds)?;
        all_handled("retention keeping nothing", self.retention.kinds_keeping_nothing(), &self.handlers, &kinds)?;
        let sequenced = |kind: &&String| self.handlers.get(*kind).is_some_and(|r| r.kind.sequence().is_some());
        if let Some(kind) = self.retention.kinds_keeping_nothing().find(sequenced) {
            return Err(Error::Invalid(format!(
                "retention keeping nothing names kind `{kind}`, whose jobs all run in sequences: the latest \
                 completed job of each sequence is the reconcilers' evidence, so they are kept by age instead"
            )));
        }
        all_handled("retention in time partitions", self.retention.kinds_in_partitions(), &self.handlers, &kinds)?;
        if let Some(kind) = self.retention.kinds_in_partitions().find(sequenced) {
            return Err(Error::Invalid(format!(
                "retention in time partitions names kind `{kind}`, whose jobs all run in sequences: the latest \
                 completed job of each sequence is the reconcilers' evidence, so they are kept by age instead"
            )));
        }
        let flows: Vec<crate::flow::FlowKind> = kinds
            .iter()
            .filter_map(|k| {
                let kind = &self.handlers.get(k)?.kind;
                crate::flow::FlowKind::of(kind, self.limits.get(k).copied(), self.rates.get(k).copied())
            })
            .collect();
        let limited = flows.iter().filter(|f| f.concurrency.is_some()).map(|f| f.kind.clone()).collect();
        let rate_per_key = flows.iter().filter(|f| f.rate_per_key).map(|f| f.kind.clone()).collect();
        for (kind, registered) in &mut self.handlers {
            registered.timeout = self.timeouts.get(kind).copied().or(registered.timeout).or(self.config.timeout);
        }
        let mut schedules = Vec::with_capacity(self.schedules.len());
        for schedule in self.schedules {
            if schedules.iter().any(|s: &periodic::Ready| s.name() == schedule.name()) {
                return Err(Error::Invalid(format!("schedule `{}` is registered twice", schedule.name())));
            }
            schedules.push(periodic::Ready::of(schedule)?);
        }
        storage::Dialect::of(&self.db)?;
        let id = self.id.unwrap_or_else(default_worker_id);
        // Operators' tools (the `outbox` command) validate and show kinds defined in any application.
        let registered: Vec<&Kind> = self.handlers.values().map(|r| r.kind.as_ref()).collect();
        let (db, config) = (&self.db, &self.config);
        until_ok("checking its schema", &id, config, || storage::schema::refuse_legacy(db)).await?;
        until_ok("recording its kinds", &id, config, || {
            crate::kind::registry::record(db, &registered, &id, &self.rates)
        })
        .await?;
        for flow in &flows {
            if let Some(rate) = flow.rate {
                let name = flow.kind.as_str();
                until_ok("recording its rates", &id, config, || crate::flow::define_rate(db, name, rate)).await?;
            }
        }
        let queues = self.queues.clone();
        let opts = WorkerStoreOpts { worker_id: id.clone(), kinds, flows, queues: self.queues };
        let background = Background::start(db, &id)?;
        let bg = background.handle();
        let store =
            until_ok("opening its connection", &id, config, || storage::open_worker_store(db, opts.clone(), bg))
                .await?;
        let watchdog = Watchdog::start(&background, store.clone(), id.clone());
        Ok(Worker {
            background: Some(background),
            watchdog,
            store,
            db: self.db,
            queues,
            handlers: Arc::new(self.handlers),
            config: self.config,
            id,
            limited,
            rate_per_key,
            schedules: Arc::new(schedules),
            retention: self.retention,
            on_start: self.on_start,
        })
    }
}

/// Whether every kind a builder setting (`what`) names has a handler; an error naming the first that has not.
fn all_handled<'a>(
    what: &str,
    mut named: impl Iterator<Item = &'a String>,
    handlers: &HashMap<String, Registered>,
    kinds: &[String],
) -> Result<()> {
    match named.find(|k| !handlers.contains_key(*k)) {
        Some(kind) => Err(Error::Invalid(format!(
            "{what} names kind `{kind}`, which this worker has no handler for (it has: {})",
            kinds.join(", ")
        ))),
        None => Ok(()),
    }
}

/// Runs a start-up step that touches the database until it succeeds or fails for a reason that waiting
/// cannot fix, backing off as the worker loop does: a worker started while the disk is full or the server
/// is restarting comes up when the database does.
async fn until_ok<T, F, Fut>(step: &str, worker: &str, config: &WorkerConfig, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let first =
        config.poll_interval.clamp(Duration::from_millis(100), config.max_db_backoff.max(Duration::from_millis(100)));
    let mut retry = Backoff::new(first, config.max_db_backoff);
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_transient() => {
                tracing::warn!(worker, step, error = %e, retry_in = ?retry.peek(), "worker cannot start yet; retrying");
                retry.sleep().await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn default_worker_id() -> String {
    let host = presence::host();
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &suffix[suffix.len() - 8..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobStatus;

    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    struct Ping {
        n: u64,
    }

    impl Job for Ping {
        const KIND: &'static str = "ping";
    }

    /// A connection to an empty in-memory database: these checks must fail before any table is read.
    async fn unmigrated() -> DatabaseConnection {
        sea_orm::Database::connect("sqlite::memory:").await.expect("in-memory SQLite")
    }

    async fn ok(_: Ping, _: JobContext) -> std::result::Result<(), JobError> {
        Ok(())
    }

    #[tokio::test]
    async fn registering_a_kind_twice_is_an_error() {
        let err = Worker::builder(&unmigrated().await).register(ok).register(ok).build().await.err();
        assert!(matches!(err, Some(Error::DuplicateKind { ref kind }) if kind == "ping"), "{err:?}");
    }

    #[tokio::test]
    async fn a_limit_on_a_kind_without_a_handler_fails_before_the_database_is_read() {
        let err = Worker::builder(&unmigrated().await).register(ok).concurrency_limit("nope", 1).build().await.err();
        let err = err.map(|e| e.to_string());
        assert!(err.as_deref().is_some_and(|e| e.contains("names kind `nope`")), "{err:?}");
    }

    #[tokio::test]
    async fn retention_refuses_unfinished_statuses() {
        let err = Worker::builder(&unmigrated().await)
            .retention(Retention::new().max_age(JobStatus::Pending, Some(Duration::from_secs(1))))
            .build()
            .await
            .err()
            .map(|e| e.to_string());
        assert!(err.as_deref().is_some_and(|e| e.contains("`pending`")), "pending jobs are never pruned: {err:?}");
    }
}
