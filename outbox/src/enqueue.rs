//! Transactional enqueue: a job row written through the caller's connection or transaction, deduplicated by
//! idempotency key.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;
use serde_json::Value;
use tracing::Instrument;

use crate::error::{Error, Result, pointer_token};
use crate::job::Violation;
use crate::job::{Job, SequenceFailure};
use crate::kind::{DEFAULT_MAX_PAYLOAD_BYTES, Kind, MAX_KEY_BYTES, MAX_NAME_BYTES};
use crate::storage::enqueue::NewJob;
use crate::storage::{self, Dialect, now_ms};
use crate::time::{MAX_RUN_AT_MS, MIN_RUN_AT_MS, duration_ms};
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
    /// Explicit sequence key (default: the kind's sequence template applied to the payload). Jobs sharing a
    /// sequence key, of any kind, run one at a time in the order they were enqueued.
    pub sequence: Option<String>,
    /// The largest serialized payload this enqueue accepts (default [`DEFAULT_MAX_PAYLOAD_BYTES`], 256 KiB).
    /// Set where the jobs are produced (a service that accepts bigger documents), not for the whole process.
    pub max_payload_bytes: Option<usize>,
    /// What the job counts against its kind's rate limit (default: the kind's cost, or 1): an LLM call's token
    /// estimate, say, under a rate of tokens a minute.
    pub cost: Option<u32>,
    /// The domain row the job is about (`order:42`; default: the kind's subject template applied to the payload):
    /// stored with the job and indexed, so the jobs of one order can be listed, cancelled and retried together.
    /// At most [`crate::MAX_SUBJECT_BYTES`] bytes.
    pub subject: Option<String>,
    /// The W3C trace context to store with the job (a `traceparent`, optionally followed by a space and the
    /// `tracestate`), in place of the current span's: for a producer that received it from elsewhere.
    pub trace: Option<String>,
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
    /// Sets what the job counts against its kind's rate limit, whatever its kind says.
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = Some(cost);
        self
    }

    /// Says which domain row the job is about (`order:42`), whatever its kind's template says.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }
    /// Stores this W3C trace context with the job instead of the current span's.
    pub fn trace(mut self, traceparent: impl Into<String>) -> Self {
        self.trace = Some(traceparent.into());
        self
    }

    /// Puts the job in the sequence `key` (`agent:42`), whatever its kind's template says.
    pub fn sequence(mut self, key: impl Into<String>) -> Self {
        self.sequence = Some(key.into());
        self
    }
    /// Sets the largest serialized payload accepted.
    pub fn max_payload_bytes(mut self, limit: usize) -> Self {
        self.max_payload_bytes = Some(limit);
        self
    }
}

/// Refuses an explicit key or sequence the database could not index or store.
fn check_key(what: &str, key: &str, bad: &impl Fn(String) -> Error) -> Result<()> {
    if key.is_empty() {
        return Err(bad(format!("the {what} is empty")));
    }
    if key.contains('\0') {
        return Err(bad(format!("the {what} {key:?} contains the NUL character")));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(bad(format!(
            "the {what} is {} bytes, over the limit of {MAX_KEY_BYTES}; pass a hash of it instead",
            key.len()
        )));
    }
    Ok(())
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

/// Nesting levels a payload may have: the worker reads payloads back with serde_json, which refuses deeper
/// documents, so a deeper one could be stored but never run.
pub(crate) const MAX_PAYLOAD_DEPTH: usize = 127;

/// The first place `payload` nests deeper than [`MAX_PAYLOAD_DEPTH`], as a violation. Iterative, so a
/// hostile depth cannot overflow the stack here; paths are only spelled out once a payload is too deep, so
/// the common case allocates one small stack.
fn too_deep(payload: &Value) -> Option<Violation> {
    let mut stack: Vec<(&Value, usize)> = vec![(payload, 0)];
    let mut deepest = 0;
    while let Some((value, depth)) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, depth + 1))),
            _ => continue,
        }
        deepest = deepest.max(depth + 1);
        if deepest > MAX_PAYLOAD_DEPTH {
            break;
        }
    }
    if deepest <= MAX_PAYLOAD_DEPTH {
        return None;
    }
    let mut stack: Vec<(&Value, usize, String)> = vec![(payload, 0, String::new())];
    while let Some((value, depth, path)) = stack.pop() {
        let children: Vec<(&Value, String)> = match value {
            Value::Array(items) => items.iter().enumerate().map(|(i, v)| (v, format!("{path}/{i}"))).collect(),
            Value::Object(map) => map.iter().map(|(k, v)| (v, format!("{path}/{}", pointer_token(k)))).collect(),
            _ => continue,
        };
        if depth + 1 > MAX_PAYLOAD_DEPTH {
            return Some(Violation {
                path,
                message: format!("the payload nests deeper than {MAX_PAYLOAD_DEPTH} arrays and objects"),
            });
        }
        stack.extend(children.into_iter().map(|(v, p)| (v, depth + 1, p)));
    }
    None
}

/// Validates and prepares one row, refusing before any SQL whatever the database would refuse: a caller's
/// transaction never sees a failed statement of ours (a failed statement aborts a server-side transaction).
pub(crate) fn prepare(
    backend: Dialect,
    kind: &Kind,
    payload: &Value,
    opts: &EnqueueOpts,
    (now, trace): (i64, &Option<String>),
) -> Result<NewJob> {
    if let Some(violation) = too_deep(payload) {
        return Err(Error::InvalidPayload { kind: kind.name().into(), violations: vec![violation] });
    }
    let text = serde_json::to_string(payload).map_err(|source| Error::Serde { kind: kind.name().into(), source })?;
    let limit = opts.max_payload_bytes.unwrap_or(DEFAULT_MAX_PAYLOAD_BYTES);
    if text.len() > limit {
        return Err(Error::PayloadTooLarge { kind: kind.name().into(), size: text.len(), limit });
    }
    kind.validate(payload)?;
    let unstorable = storage::unstorable(backend, payload, &text);
    if !unstorable.is_empty() {
        return Err(Error::InvalidPayload { kind: kind.name().into(), violations: unstorable });
    }
    let bad = |reason: String| Error::InvalidOpts { kind: kind.name().into(), reason };
    let max_attempts = opts.max_attempts.unwrap_or(kind.max_attempts());
    if max_attempts < 1 {
        return Err(bad(format!("max_attempts is {max_attempts}, it must be at least 1")));
    }
    let queue = opts.queue.clone().unwrap_or_else(|| kind.queue().to_owned());
    if queue.is_empty() {
        return Err(bad("the queue name is empty".into()));
    }
    if queue.contains('\0') {
        return Err(bad(format!("the queue name {queue:?} contains the NUL character")));
    }
    if queue.len() > MAX_NAME_BYTES {
        return Err(bad(format!("the queue name is {} bytes, over the limit of {MAX_NAME_BYTES}", queue.len())));
    }
    if let Some(key) = &opts.idempotency_key {
        check_key("idempotency key", key, &bad)?;
    }
    let sequence_key = match &opts.sequence {
        Some(key) => {
            check_key("sequence key", key, &bad)?;
            Some(key.clone())
        }
        None => kind.sequence_key(payload)?,
    };
    let subject = match &opts.subject {
        Some(subject) => {
            crate::kind::subject::check(subject).map_err(bad)?;
            Some(subject.clone())
        }
        None => kind.subject_of(payload)?,
    };
    if let Some(text) = &opts.trace {
        crate::trace::check(text).map_err(bad)?;
    }
    let (flow_key, cost) = kind.flow_of(payload)?;
    if let Some(key) = &flow_key {
        check_key("flow key", key, &bad)?;
    }
    let run_at = match (opts.run_at, opts.delay) {
        (Some(at), _) => at.timestamp_millis(),
        (None, Some(d)) => now.saturating_add(duration_ms(d)),
        (None, None) => now,
    };
    if !(MIN_RUN_AT_MS..=MAX_RUN_AT_MS).contains(&run_at) {
        let at = DateTime::from_timestamp_millis(run_at)
            .map_or_else(|| format!("{run_at} ms after the epoch"), |t| t.to_rfc3339());
        return Err(bad(format!("the run time {at} is out of range: it must fall in the years 1 to 9999")));
    }
    Ok(NewJob {
        id: crate::id::new_job_id(),
        kind: kind.name().to_owned(),
        queue,
        payload: text,
        priority: opts.priority.unwrap_or(kind.priority()),
        max_attempts,
        run_at,
        scheduled: run_at > now,
        key: opts.idempotency_key.clone().or_else(|| kind.derive_key(payload)),
        schema_hash: kind.schema_hash().to_owned(),
        created_at: now,
        sequence_key,
        hold: kind.on_sequence_failure() == SequenceFailure::Hold,
        flow_key,
        cost: opts.cost.or(cost),
        subject,
        trace: trace.clone(),
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
    let span = crate::trace::enqueue_span(kind.name(), 1);
    let trace = crate::trace::context_of(&span, opts.trace.as_deref());
    let job = prepare(Dialect::of(conn)?, kind, &payload, &opts, (now_ms(), &trace))?;
    let enqueued = insert_or_collapse(conn, job).instrument(span).await?;
    if matches!(enqueued, Enqueued::New(_)) {
        wake::wake();
    }
    Ok(enqueued)
}

/// Writes `job`, or collapses it onto the active job holding its key when nothing of its sequence was
/// enqueued after that one; otherwise that one lets go of the key and `job` goes to the sequence's tail.
async fn insert_or_collapse<C: ConnectionTrait>(conn: &C, job: NewJob) -> Result<Enqueued> {
    // A conflicting active job can finish between the failed insert and the lookup; then insert again.
    for _ in 0..3 {
        if storage::enqueue::insert_job(conn, &job).await? {
            tracing::debug!(job_id = %job.id, kind = %job.kind, queue = %job.queue, attempt = 0, "job enqueued");
            return Ok(Enqueued::New(job.id));
        }
        let Some(key) = &job.key else { break };
        match storage::enqueue::find_twin(conn, &job.kind, key, job.sequence_key.as_deref()).await? {
            Some(twin) if !twin.behind => {
                tracing::debug!(job_id = %twin.id, kind = %job.kind, "duplicate enqueue collapsed onto the active job");
                return Ok(Enqueued::Existing(twin.id));
            }
            Some(twin) => {
                tracing::debug!(job_id = %twin.id, kind = %job.kind, "later jobs of its sequence were enqueued after \
                    the active job holding the key; the duplicate goes to the tail");
                storage::enqueue::supersede(conn, &twin.id).await?;
            }
            // The twin finished in between.
            None => {}
        }
    }
    Err(Error::Internal(format!("enqueue of kind `{}` kept conflicting without a visible active job", job.kind)))
}

/// Enqueues many typed jobs with as few statements as possible (one per 2,000 jobs), in order. Duplicates
/// within the batch collapse onto the first. Jobs with both a key and a sequence are written one statement
/// each, as [`enqueue`] writes them: whether a duplicate collapses depends on what of its sequence came
/// before it.
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
    let span = crate::trace::enqueue_span(kind.name(), payloads.len());
    let trace = crate::trace::context_of(&span, opts.trace.as_deref());
    batch(conn, kind, payloads, opts, trace).instrument(span).await
}

async fn batch<C: ConnectionTrait>(
    conn: &C,
    kind: &Kind,
    payloads: Vec<Value>,
    opts: EnqueueOpts,
    trace: Option<String>,
) -> Result<Vec<Enqueued>> {
    let backend = Dialect::of(conn)?;
    let now = now_ms();
    let mut rows = Vec::with_capacity(payloads.len());
    let mut slots: Vec<Slot> = Vec::with_capacity(payloads.len());
    let mut first_by_key: HashMap<String, usize> = HashMap::new();
    // Keyed jobs of a sequence go one at a time, in order, after the others: whether a duplicate collapses
    // depends on what of its sequence was enqueued before it, this batch's earlier jobs included.
    let mut in_order: Vec<NewJob> = Vec::new();
    for payload in &payloads {
        let job = prepare(backend, kind, payload, &opts, (now, &trace))?;
        if job.key.is_some() && job.sequence_key.is_some() {
            slots.push(Slot::Alone(in_order.len()));
            in_order.push(job);
            continue;
        }
        if let Some(key) = &job.key {
            if let Some(&row) = first_by_key.get(key) {
                slots.push(Slot::Duplicate(row));
                continue;
            }
            first_by_key.insert(key.clone(), rows.len());
        }
        slots.push(Slot::Row(rows.len()));
        rows.push(job);
    }
    let inserted = storage::enqueue::insert_jobs(conn, &rows).await?;
    // Nearly always every row went in (its ids are new, so `inserted` holds each at most once): then no set of
    // them is needed to tell which.
    let all_in = inserted.len() == rows.len();
    let written: std::collections::HashSet<String> =
        if all_in { std::collections::HashSet::new() } else { inserted.into_iter().collect() };
    let mut resolved: Vec<Enqueued> = Vec::with_capacity(rows.len());
    for job in &rows {
        if all_in || written.contains(&job.id) {
            resolved.push(Enqueued::New(job.id.clone()));
            continue;
        }
        let key = job.key.as_deref().unwrap_or_default();
        match storage::enqueue::find_twin(conn, &job.kind, key, None).await? {
            Some(twin) => resolved.push(Enqueued::Existing(twin.id)),
            None => {
                // The twin finished in between: enqueue this one on its own.
                resolved.push(insert_or_collapse(conn, job.clone()).await?);
            }
        }
    }
    // In order within each sequence, sequences in key order: two batches over the same sequences take
    // their locks in the same order (see `storage::enqueue::insert_jobs`).
    let mut order: Vec<usize> = (0..in_order.len()).collect();
    order.sort_by(|&a, &b| in_order[a].sequence_key.cmp(&in_order[b].sequence_key));
    let mut alone: Vec<Option<Enqueued>> = vec![None; in_order.len()];
    for i in order {
        alone[i] = Some(insert_or_collapse(conn, in_order[i].clone()).await?);
    }
    let alone: Vec<Enqueued> = alone.into_iter().flatten().collect();
    let new_rows = if all_in { rows.len() } else { written.len() };
    let any_new = new_rows > 0 || alone.iter().any(|e| matches!(e, Enqueued::New(_)));
    if any_new {
        tracing::debug!(kind = %kind.name(), jobs = new_rows, "job batch enqueued");
        wake::wake();
    }
    Ok(slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Row(i) => resolved[i].clone(),
            Slot::Duplicate(i) => Enqueued::Existing(resolved[i].id().to_owned()),
            Slot::Alone(i) => alone[i].clone(),
        })
        .collect())
}

/// Where the result of one input of a batch comes from.
enum Slot {
    /// Row `i` of the batch's INSERT.
    Row(usize),
    /// A duplicate of row `i`, collapsed onto it.
    Duplicate(usize),
    /// The `i`-th job written alone, in order (a keyed job of a sequence).
    Alone(usize),
}
