//! The baselines: the same SQL outbox issues, run directly through rusqlite on one connection.
//!
//! The job INSERT, the claim UPDATE ... RETURNING and the fenced completion UPDATE are copied from
//! `outbox/src/storage/enqueue.rs`, `storage/sqlite/enqueue.rs` and `storage/sqlite/store/` (every statement
//! is listed in `storage/sqlite/statements.sql`); keep them in step when those change.
//! Job rows carry the same values outbox writes: a ULID id (`new_job_id`), the payload's JSON text, the kind's schema
//! hash and, for unique kinds, the sha256 idempotency key of kind and payload.

use std::path::Path;
use std::time::Instant;

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, TransactionBehavior, params, params_from_iter};
use sha2::{Digest, Sha256};

use crate::BoxError;
use crate::engine::SyncMode;
use crate::stats::Measure;

/// The domain row written next to each job in the enqueue cases.
pub(crate) const INSERT_ORDER: &str = "INSERT INTO orders (id, customer, total) VALUES (?, ?, ?)";

/// `INSERT_COLUMNS` of outbox's `storage/enqueue.rs`.
const INSERT_COLUMNS: &str = "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, \
     max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at) VALUES ";
/// A row of outbox's `insert_values` (`storage/enqueue.rs`).
const INSERT_ROW: &str = "(?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?, ?, ?, ?)";

/// The single-job INSERT of outbox's `insert_job`: `ON CONFLICT DO NOTHING` only for a keyed kind.
pub(crate) fn insert_job_sql(kind: &KindInfo) -> String {
    insert_jobs_sql(kind, 1)
}

/// The multi-row INSERT of outbox's `insert_jobs` for `rows` rows of `kind`.
fn insert_jobs_sql(kind: &KindInfo, rows: usize) -> String {
    let mut sql = String::from(INSERT_COLUMNS);
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(INSERT_ROW);
    }
    if kind.unique {
        sql.push_str(" ON CONFLICT DO NOTHING");
    }
    sql
}

/// The worker's claim of one kind from every queue (`claim_of` in `storage/sqlite/store/claim.rs`).
const CLAIM_SQL: &str = "UPDATE outbox_jobs SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, \
     locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, \
     event_flip = 1 - event_flip \
     WHERE rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 \
     AND kind = json_extract(?4, '$[0]') AND ?6 IS NULL AND run_at <= ?2 \
     ORDER BY priority DESC, run_at, id LIMIT ?5 + 0) \
     RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs";

/// The worker's promotion of due scheduled jobs, in the claim's transaction (`PROMOTE`).
const PROMOTE_SQL: &str = "UPDATE outbox_jobs SET scheduled = 0 WHERE rowid IN (SELECT rowid FROM outbox_jobs \
     WHERE status = 'pending' AND scheduled = 1 AND run_at <= ?1 ORDER BY run_at LIMIT ?2)";

/// Scheduled jobs let in per claim, as the worker does.
const PROMOTE_PER_CLAIM: i64 = 1_000;

/// A fenced completion (`write_rows`, `Outcome::Completed`) whose event goes in a batch row, as the worker's
/// batched completions do.
const COMPLETE_SQL: &str = "UPDATE outbox_jobs SET status = 'completed', output = ?4, completed_at = ?5, \
     lease_expires_at = NULL, updated_at = ?5, event_flip = 1 - event_flip \
     WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND attempts = ?3";

/// The worker's feed row for a claim or the completions of a batch (`insert_batch_event`).
const BATCH_EVENT_SQL: &str = "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
     VALUES ('', ?1, ?2, ?3, ?4, 0, ?5, ?6)";

/// The worker's default lease.
const LEASE_MS: i64 = 300_000;

/// What a job row needs from its kind.
#[derive(Debug, Clone)]
pub(crate) struct KindInfo {
    /// The kind name.
    pub(crate) name: &'static str,
    /// The payload's single integer field (`{"<field>":<n>}`).
    pub(crate) field: &'static str,
    /// sha256 of the kind's canonical JSON Schema, as outbox computes it.
    pub(crate) schema_hash: String,
    /// Whether jobs carry the payload-hash idempotency key.
    pub(crate) unique: bool,
}

/// One job row with the values outbox's enqueue writes (default queue, priority 0, 3 attempts, due now).
#[derive(Debug, Clone)]
pub(crate) struct JobRow {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) queue: String,
    pub(crate) payload: String,
    pub(crate) priority: i32,
    pub(crate) max_attempts: i32,
    pub(crate) run_at: i64,
    pub(crate) key: Option<String>,
    pub(crate) schema_hash: String,
    pub(crate) created_at: i64,
}

impl JobRow {
    /// The row of the job whose payload field is `n`.
    pub(crate) fn new(kind: &KindInfo, n: u64, now: i64) -> JobRow {
        let payload = format!("{{\"{}\":{n}}}", kind.field);
        // outbox's `Kind::derive_key`: sha256 of kind, a NUL and the canonical payload.
        let key = kind.unique.then(|| {
            let mut hasher = Sha256::new();
            hasher.update(kind.name.as_bytes());
            hasher.update([0]);
            hasher.update(payload.as_bytes());
            hex_lower(&hasher.finalize())
        });
        JobRow {
            id: outbox::new_job_id(),
            kind: kind.name.to_owned(),
            queue: "default".to_owned(),
            payload,
            priority: 0,
            max_attempts: 3,
            run_at: now,
            key,
            schema_hash: kind.schema_hash.clone(),
            created_at: now,
        }
    }

    /// The eleven bound values, in `INSERT_ROW` order.
    fn values(self) -> [SqlValue; 11] {
        [
            self.id.into(),
            self.kind.into(),
            self.queue.into(),
            self.payload.into(),
            self.priority.into(),
            self.max_attempts.into(),
            self.run_at.into(),
            self.key.map_or(SqlValue::Null, SqlValue::Text),
            self.schema_hash.into(),
            self.created_at.into(),
            self.created_at.into(),
        ]
    }
}

/// `bytes` in lowercase hex, written by table into one allocation as outbox's `kind::hex_lower` writes a
/// derived key.
fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The domain row of order `i`: id, customer, total.
pub(crate) fn order_row(i: u64) -> (i64, String, i64) {
    let id = i64::try_from(i).unwrap_or(i64::MAX);
    (id + 1, format!("customer-{i}"), id % 997 * 100)
}

/// Milliseconds since the Unix epoch, the unit of outbox's timestamps.
pub(crate) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn open(path: &Path, sync: SyncMode) -> Result<Connection, BoxError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", sync.name())?;
    conn.set_prepared_statement_cache_capacity(32);
    let journal: String = conn.query_row("PRAGMA journal_mode", [], |row| row.get(0))?;
    let level: i64 = conn.query_row("PRAGMA synchronous", [], |row| row.get(0))?;
    let want = if sync.is_full() { 2 } else { 1 };
    if !journal.eq_ignore_ascii_case("wal") || level != want {
        return Err(format!("baseline connection: journal_mode {journal}, synchronous {level}").into());
    }
    Ok(conn)
}

fn count(conn: &Connection, sql: &str) -> Result<u64, BoxError> {
    let n: i64 = conn.query_row(sql, [], |row| row.get(0))?;
    Ok(u64::try_from(n)?)
}

fn expect_count(conn: &Connection, sql: &str, want: u64, what: &str) -> Result<(), BoxError> {
    let got = count(conn, sql)?;
    if got != want {
        return Err(format!("baseline {what}: expected {want} rows, found {got}").into());
    }
    Ok(())
}

/// Case `enqueue`: per job `BEGIN IMMEDIATE; INSERT order; INSERT job; COMMIT`.
pub(crate) fn enqueue(path: &Path, sync: SyncMode, kind: &KindInfo, n: u64) -> Result<Measure, BoxError> {
    let mut conn = open(path, sync)?;
    let insert_job = insert_job_sql(kind);
    let start = Instant::now();
    for i in 0..n {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (id, customer, total) = order_row(i);
        tx.prepare_cached(INSERT_ORDER)?.execute(params![id, customer, total])?;
        let row = JobRow::new(kind, i, now_ms());
        let written = tx.prepare_cached(&insert_job)?.execute(params_from_iter(row.values()))?;
        if written != 1 {
            return Err(format!("baseline enqueue: job {i} was not written").into());
        }
        tx.commit()?;
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&conn, "SELECT COUNT(*) FROM outbox_jobs", n, "enqueue")?;
    expect_count(&conn, "SELECT COUNT(*) FROM orders", n, "enqueue")?;
    Ok(Measure { jobs: n, secs })
}

/// Case `enqueue_batch`: per `per_txn` jobs one transaction holding the multi-row INSERT, its row count checked.
pub(crate) fn enqueue_batch(
    path: &Path,
    sync: SyncMode,
    kind: &KindInfo,
    n: u64,
    per_txn: u64,
) -> Result<Measure, BoxError> {
    let mut conn = open(path, sync)?;
    let start = Instant::now();
    let mut next = 0;
    while next < n {
        let size = per_txn.min(n - next);
        let now = now_ms();
        let mut values = Vec::with_capacity(usize::try_from(size)? * 11);
        for i in next..next + size {
            values.extend(JobRow::new(kind, i, now).values());
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let written = {
            let mut stmt = tx.prepare_cached(&insert_jobs_sql(kind, usize::try_from(size)?))?;
            stmt.execute(params_from_iter(values))?
        };
        if u64::try_from(written)? != size {
            return Err(format!("baseline enqueue_batch: {written} of {size} jobs written").into());
        }
        tx.commit()?;
        next += size;
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&conn, "SELECT COUNT(*) FROM outbox_jobs", n, "enqueue_batch")?;
    Ok(Measure { jobs: n, secs })
}

/// A claimed row, decoded like the worker decodes it (by both backends' baselines).
pub(crate) struct Claimed {
    pub(crate) id: String,
    pub(crate) attempt: i32,
    pub(crate) _kind: String,
    pub(crate) _queue: String,
    pub(crate) _payload: String,
    pub(crate) _max_attempts: i32,
    pub(crate) _schema_hash: String,
    pub(crate) _run: i32,
}

/// Case `process`: claim `batch` jobs in one autocommit UPDATE ... RETURNING, complete them with the fenced
/// UPDATE in one `BEGIN IMMEDIATE` transaction with the claim's and the completions' feed rows, until nothing
/// is left. `n` jobs of `kind` must be pending.
pub(crate) fn process(path: &Path, sync: SyncMode, kind: &KindInfo, n: u64, batch: u64) -> Result<Measure, BoxError> {
    let mut conn = open(path, sync)?;
    let worker_id = format!("bench-host:{}:0a1b2c3d", std::process::id());
    let kinds_json = format!("[\"{}\"]", kind.name);
    let limit = i64::try_from(batch)?;
    let start = Instant::now();
    loop {
        let now = now_ms();
        conn.prepare_cached(PROMOTE_SQL)?.execute(params![now, PROMOTE_PER_CLAIM])?;
        let claimed = {
            let mut stmt = conn.prepare_cached(CLAIM_SQL)?;
            let rows =
                stmt.query_map(params![worker_id, now, now + LEASE_MS, kinds_json, limit, None::<String>], |row| {
                    Ok(Claimed {
                        id: row.get(0)?,
                        _kind: row.get(1)?,
                        _queue: row.get(2)?,
                        _payload: row.get(3)?,
                        attempt: row.get(4)?,
                        _max_attempts: row.get(5)?,
                        _schema_hash: row.get(6)?,
                        _run: row.get(7)?,
                    })
                })?;
            rows.collect::<rusqlite::Result<Vec<Claimed>>>()?
        };
        if claimed.is_empty() {
            break;
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        // The claim's feed row and the completions' one, in the completing transaction: the same rows the
        // worker writes, with no commit more.
        // The jobs share one kind and queue, so the rows name them and list `[id, attempt]`.
        let jobs = serde_json::to_string(&claimed.iter().map(|j| (&j.id, j.attempt)).collect::<Vec<_>>())?;
        let (kind, queue) = (&claimed[0]._kind, &claimed[0]._queue);
        tx.prepare_cached(BATCH_EVENT_SQL)?.execute(params![kind, queue, now, "claimed", worker_id, jobs])?;
        tx.prepare_cached(BATCH_EVENT_SQL)?.execute(params![kind, queue, now, "completed", worker_id, jobs])?;
        for job in &claimed {
            let done = tx.prepare_cached(COMPLETE_SQL)?.execute(params![
                job.id,
                worker_id,
                job.attempt,
                None::<String>,
                now
            ])?;
            if done != 1 {
                return Err(format!("baseline process: job {} was not completed", job.id).into());
            }
        }
        tx.commit()?;
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&conn, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'", n, "process")?;
    Ok(Measure { jobs: n, secs })
}

/// Case `claim_sequenced`: the worker's claim of `batch` jobs of `kinds`, each in a transaction rolled back
/// so the backlog stays as it was; returns the median seconds of one claim over `reps`.
pub(crate) fn claim_cost(
    path: &Path,
    sync: SyncMode,
    kinds: &[&str],
    batch: u64,
    reps: usize,
) -> Result<f64, BoxError> {
    let mut conn = open(path, sync)?;
    if kinds.len() != 1 {
        return Err("claim cost: the worker's claim of one kind is timed".into());
    }
    let kinds_json = serde_json::to_string(kinds)?;
    let limit = i64::try_from(batch)?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let now = now_ms();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let start = Instant::now();
        tx.prepare_cached(PROMOTE_SQL)?.execute(params![now, PROMOTE_PER_CLAIM])?;
        let claimed = {
            let mut stmt = tx.prepare_cached(CLAIM_SQL)?;
            let rows = stmt
                .query_map(params!["bench-claim", now, now + LEASE_MS, kinds_json, limit, None::<String>], |row| {
                    row.get::<_, String>(0)
                })?;
            rows.collect::<rusqlite::Result<Vec<String>>>()?
        };
        times.push(start.elapsed().as_secs_f64());
        tx.rollback()?;
        if claimed.len() as u64 != batch {
            return Err(format!("claim cost: claimed {} of {batch}", claimed.len()).into());
        }
    }
    Ok(crate::stats::median(&times))
}
