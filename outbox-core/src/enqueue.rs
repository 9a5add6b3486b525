//! Transactional enqueue: a job row written through the caller's connection or transaction, deduplicated by
//! idempotency key.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, SqliteTransactionMode, TransactionOptions,
    TransactionTrait,
};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::job::Job;
use crate::kind::{Kind, max_payload_bytes};
use crate::storage::{self, NewJob, dispatch, now_ms};
use crate::wake;

/// Per-enqueue overrides of a kind's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnqueueOpts {
    /// Queue name (default: the kind's).
    pub queue: Option<String>,
    /// Priority, higher first (default: the kind's).
    pub priority: Option<i32>,
    /// Earliest run time (default: now). Takes precedence over `delay`.
    pub run_at: Option<DateTime<Utc>>,
    /// Run no earlier than this long from now.
    pub delay: Option<Duration>,
    /// Attempts before failing for good (default: the kind's).
    pub max_attempts: Option<i32>,
    /// Explicit idempotency key (default: the kind's key fields, or a hash of the payload).
    pub idempotency_key: Option<String>,
}

impl EnqueueOpts {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }
    /// Sets the priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }
    /// Sets the earliest run time.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }
    /// Delays the first run.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }
    /// Sets the attempt limit.
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = Some(n);
        self
    }
    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

/// What an enqueue did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// A new job was written.
    New(String),
    /// An active job with the same kind and key exists; nothing was written.
    Existing(String),
}

impl Enqueued {
    /// The id of the job carrying the intent.
    pub fn id(&self) -> &str {
        match self {
            Enqueued::New(id) | Enqueued::Existing(id) => id,
        }
    }
    /// Whether this call wrote the job.
    pub fn is_new(&self) -> bool {
        matches!(self, Enqueued::New(_))
    }
}

/// Validates and prepares one row. The key falls back to the kind's derivation.
fn prepare(kind: &Kind, payload: &Value, opts: &EnqueueOpts, now: i64) -> Result<NewJob> {
    let text = serde_json::to_string(payload).map_err(|source| Error::Serde { kind: kind.name().into(), source })?;
    let limit = max_payload_bytes();
    if text.len() > limit {
        return Err(Error::PayloadTooLarge { kind: kind.name().into(), size: text.len(), limit });
    }
    kind.validate(payload)?;
    let bad = |reason: String| Error::InvalidOpts { kind: kind.name().into(), reason };
    let max_attempts = opts.max_attempts.unwrap_or(kind.max_attempts());
    if max_attempts < 1 {
        return Err(bad(format!("max_attempts is {max_attempts}, it must be at least 1")));
    }
    let queue = opts.queue.clone().unwrap_or_else(|| kind.queue().to_owned());
    if queue.is_empty() {
        return Err(bad("the queue name is empty".into()));
    }
    if matches!(&opts.idempotency_key, Some(k) if k.is_empty()) {
        return Err(bad("the idempotency key is empty".into()));
    }
    let run_at = match (opts.run_at, opts.delay) {
        (Some(at), _) => at.timestamp_millis(),
        (None, Some(d)) => now.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        (None, None) => now,
    };
    Ok(NewJob {
        id: uuid::Uuid::now_v7().to_string(),
        kind: kind.name().to_owned(),
        queue,
        payload: text,
        priority: opts.priority.unwrap_or(kind.priority()),
        max_attempts,
        run_at,
        key: opts.idempotency_key.clone().or_else(|| kind.derive_key(payload)),
        schema_hash: kind.schema_hash().to_owned(),
        created_at: now,
    })
}

fn to_value<J: Job>(job: &J) -> Result<Value> {
    serde_json::to_value(job).map_err(|source| Error::Serde { kind: J::KIND.into(), source })
}

/// Enqueues a typed job through `conn`: a connection, or a transaction so the job commits or rolls back with
/// the caller's own writes.
pub async fn enqueue<C: ConnectionTrait, J: Job>(conn: &C, job: &J, opts: EnqueueOpts) -> Result<Enqueued> {
    let kind = Kind::of::<J>()?;
    enqueue_raw(conn, &kind, to_value(job)?, opts).await
}

/// Enqueues a payload given as JSON for a kind known by schema, validated exactly like a typed one.
pub async fn enqueue_raw<C: ConnectionTrait>(
    conn: &C,
    kind: &Kind,
    payload: Value,
    opts: EnqueueOpts,
) -> Result<Enqueued> {
    storage::backend(conn)?;
    let job = prepare(kind, &payload, &opts, now_ms())?;
    // A conflicting active job can finish between the failed insert and the lookup; then insert again.
    for _ in 0..3 {
        if dispatch!(conn, insert_job(conn, &job))? {
            tracing::debug!(job_id = %job.id, kind = %job.kind, queue = %job.queue, attempt = 0, "job enqueued");
            wake::wake();
            return Ok(Enqueued::New(job.id));
        }
        let Some(key) = &job.key else { break };
        if let Some(id) = dispatch!(conn, find_active(conn, &job.kind, key))? {
            tracing::debug!(job_id = %id, kind = %job.kind, "duplicate enqueue collapsed onto the active job");
            return Ok(Enqueued::Existing(id));
        }
    }
    Err(Error::Internal(format!("enqueue of kind `{}` kept conflicting without a visible active job", job.kind)))
}

/// Enqueues many typed jobs with as few statements as possible (one per 2,000 jobs), in order. Duplicates
/// within the batch collapse onto the first.
pub async fn enqueue_batch<C: ConnectionTrait, J: Job>(
    conn: &C,
    jobs: &[J],
    opts: EnqueueOpts,
) -> Result<Vec<Enqueued>> {
    let kind = Kind::of::<J>()?;
    let payloads = jobs.iter().map(to_value).collect::<Result<Vec<_>>>()?;
    enqueue_batch_raw(conn, &kind, payloads, opts).await
}

/// [`enqueue_batch`] for JSON payloads of a kind known by schema.
pub async fn enqueue_batch_raw<C: ConnectionTrait>(
    conn: &C,
    kind: &Kind,
    payloads: Vec<Value>,
    opts: EnqueueOpts,
) -> Result<Vec<Enqueued>> {
    storage::backend(conn)?;
    let now = now_ms();
    let mut rows = Vec::with_capacity(payloads.len());
    // For each input: Ok(index into rows) for a row to write, Err(index) for a duplicate of an earlier input.
    let mut slots: Vec<std::result::Result<usize, usize>> = Vec::with_capacity(payloads.len());
    let mut first_by_key: HashMap<String, usize> = HashMap::new();
    for payload in &payloads {
        let job = prepare(kind, payload, &opts, now)?;
        if let Some(key) = &job.key {
            if let Some(&row) = first_by_key.get(key) {
                slots.push(Err(row));
                continue;
            }
            first_by_key.insert(key.clone(), rows.len());
        }
        slots.push(Ok(rows.len()));
        rows.push(job);
    }
    let written: std::collections::HashSet<String> = dispatch!(conn, insert_jobs(conn, &rows))?.into_iter().collect();
    let mut resolved: Vec<Enqueued> = Vec::with_capacity(rows.len());
    for job in &rows {
        if written.contains(&job.id) {
            resolved.push(Enqueued::New(job.id.clone()));
            continue;
        }
        let key = job.key.as_deref().unwrap_or_default();
        match dispatch!(conn, find_active(conn, &job.kind, key))? {
            Some(id) => resolved.push(Enqueued::Existing(id)),
            None => {
                // The twin finished in between: enqueue this one on its own.
                let payload = serde_json::from_str(&job.payload)
                    .map_err(|source| Error::Serde { kind: kind.name().into(), source })?;
                resolved.push(Box::pin(enqueue_raw(conn, kind, payload, opts.clone())).await?);
            }
        }
    }
    if !written.is_empty() {
        tracing::debug!(kind = %kind.name(), jobs = written.len(), "job batch enqueued");
        wake::wake();
    }
    Ok(slots
        .into_iter()
        .map(|slot| match slot {
            Ok(i) => resolved[i].clone(),
            Err(i) => Enqueued::Existing(resolved[i].id().to_owned()),
        })
        .collect())
}

/// Tries at `BEGIN IMMEDIATE` while another writer holds the database past its busy timeout.
const BEGIN_TRIES: u32 = 5;

fn is_busy(err: &DbErr) -> bool {
    let text = err.to_string();
    text.contains("database is locked") || text.contains("SQLITE_BUSY") || text.contains("(code: 5)")
}

/// Runs `f` in a write transaction (`BEGIN IMMEDIATE` on SQLite, retried while the database is busy), commits
/// when it returns `Ok`, rolls back otherwise, and wakes this process's workers after a commit.
///
/// ```
/// # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), outbox_core::Error> {
/// let id = outbox_core::transaction(db, |txn| {
///     Box::pin(async move {
///         // write domain rows and enqueue jobs on `txn` here
///         let _ = txn;
///         Ok::<_, outbox_core::Error>(42)
///     })
/// })
/// .await?;
/// # let _ = id; Ok(()) }
/// ```
pub async fn transaction<T, E, F>(db: &DatabaseConnection, mut f: F) -> std::result::Result<T, E>
where
    F: for<'c> FnMut(&'c DatabaseTransaction) -> Pin<Box<dyn Future<Output = std::result::Result<T, E>> + Send + 'c>>,
    E: From<Error>,
{
    let opts = TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..TransactionOptions::default()
    };
    let mut delay = Duration::from_millis(10);
    let mut tries = 0;
    let txn = loop {
        tries += 1;
        match db.begin_with_options(opts).await {
            Ok(txn) => break txn,
            Err(e) if is_busy(&e) && tries < BEGIN_TRIES => {
                tracing::debug!(error = %e, tries, "database busy at begin; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) => return Err(Error::db("beginning a transaction")(e).into()),
        }
    };
    let value = match f(&txn).await {
        Ok(value) => value,
        Err(e) => {
            if let Err(rb) = txn.rollback().await {
                tracing::warn!(error = %rb, "rolling back a failed transaction");
            }
            return Err(e);
        }
    };
    txn.commit().await.map_err(|e| E::from(Error::db("committing a transaction")(e)))?;
    wake::wake();
    Ok(value)
}
