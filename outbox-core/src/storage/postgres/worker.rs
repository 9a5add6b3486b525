//! The worker's own PostgreSQL connections: `SKIP LOCKED` claims, batched fenced completions, lease renewals,
//! rescues, and the `LISTEN` connection that wakes the worker when jobs are enqueued.
//!
//! The worker opens its own small pool (from the caller's connection options, named `outbox-worker <id>` in
//! `pg_stat_activity`) so handlers and the application cannot starve the claim path, plus one connection
//! for `LISTEN` (`outbox-listener <id>`). A connection the server drops (restart, failover, `pg_terminate_backend`) costs one failed
//! statement: every call is retried on a fresh connection, completions until they are written or their
//! lease would have run out anyway.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sea_orm::sqlx::postgres::{PgPool, PgPoolOptions};
use sea_orm::sqlx::{self, Row};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};

use super::listener::listen;
use super::ts;
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::storage::transient;
use crate::storage::worker_store::{StoreFuture, WorkerStore, limited_share};
use crate::storage::{ClaimedJob, Finished, Outcome, Rescued, Unreadable};
use crate::wake;

/// What the worker claims and who it is.
#[derive(Debug, Clone)]
pub(crate) struct PgStoreConfig {
    pub(crate) worker_id: String,
    /// Kinds this worker has handlers for and no fleet-wide limit.
    pub(crate) kinds: Vec<String>,
    /// Kinds with a fleet-wide limit on running jobs, and the limit.
    pub(crate) limited: Vec<(String, u32)>,
    /// Queues it serves; `None` for all.
    pub(crate) queues: Option<Vec<String>>,
    /// The schema holding the outbox tables; notifications from other schemas are ignored.
    pub(crate) schema: String,
    /// Whether the schema has migration 7: claims and completions are then recorded one feed row per
    /// statement by the statements themselves, else one row per job by the transition trigger.
    pub(crate) batched_events: bool,
}

/// The feed row of a worker statement's `$event` at `$at` by `$worker` (placeholders), listing the jobs of the
/// updated rows `u` that pass `$filter`; none when no job does.
macro_rules! feed_row {
    ($at:literal, $event:literal, $worker:literal, $filter:literal) => {
        concat!(
            "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
             SELECT '', '', '', ",
            ts!($at),
            ", '",
            $event,
            "', 0, ",
            $worker,
            ", json_agg(json_build_array(id, kind, queue, attempts)) FROM u",
            $filter,
            " HAVING count(*) > 0"
        )
    };
}

/// The claim of due jobs, as `$batched` (`true`: one feed row for the batch, written here; `false`: the
/// transition trigger records each job, on a schema from before migration 7).
macro_rules! claim_sql {
    ($queue_filter:literal, true) => {
        concat!(
            "WITH c AS MATERIALIZED (",
            claim_sql!(@pick $queue_filter),
            "), u AS (UPDATE outbox_jobs j SET ",
            claim_sql!(@set),
            ", event_flip = NOT j.event_flip FROM c WHERE j.id = c.id RETURNING j.id, j.kind, j.queue, \
             j.payload::text AS payload, j.attempts, j.max_attempts, j.schema_hash, j.runs, \
             j.sequence_key IS NOT NULL AS sequenced), \
             e AS (",
            feed_row!("$2", "claimed", "$1", ""),
            ") SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequenced FROM u"
        )
    };
    ($queue_filter:literal, false) => {
        concat!(
            "WITH c AS MATERIALIZED (",
            claim_sql!(@pick $queue_filter),
            ") UPDATE outbox_jobs j SET ",
            claim_sql!(@set),
            " FROM c WHERE j.id = c.id RETURNING j.id, j.kind, j.queue, j.payload::text, j.attempts, \
             j.max_attempts, j.schema_hash, j.runs, j.sequence_key IS NOT NULL"
        )
    };
    (@pick $queue_filter:literal) => {
        concat!(
            "SELECT id FROM outbox_jobs WHERE status = 'pending' AND NOT waiting AND run_at <= ",
            ts!("$2"),
            " AND kind = ANY($4)",
            $queue_filter,
            " ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED"
        )
    };
    (@set) => {
        concat!(
            "status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = $1, locked_at = ",
            ts!("$2"),
            ", claimed_at = ",
            ts!("$2"),
            ", lease_expires_at = ",
            ts!("$3"),
            ", updated_at = ",
            ts!("$2")
        )
    };
}

const CLAIM_ANY_QUEUE: [&str; 2] = [claim_sql!("", false), claim_sql!("", true)];
const CLAIM_QUEUES: [&str; 2] = [claim_sql!(" AND queue = ANY($6)", false), claim_sql!(" AND queue = ANY($6)", true)];

/// Writes a batch of finished attempts in one statement, each fenced by (id, claimed, owner, attempt). The
/// batched form records the completions as one feed row (see migration 7); the transition trigger records
/// the rest.
macro_rules! finish_sql {
    (true) => {
        concat!(
            "WITH u AS (UPDATE outbox_jobs j SET ",
            finish_sql!(@set),
            ", event_flip = (j.event_flip <> (f.status = 'completed')) ",
            finish_sql!(@from),
            " RETURNING j.id, j.kind, j.queue, j.status, j.attempts), \
             e AS (",
            feed_row!("$8", "completed", "$9", " WHERE status = 'completed'"),
            ") SELECT id FROM u"
        )
    };
    (false) => {
        concat!("UPDATE outbox_jobs j SET ", finish_sql!(@set), " ", finish_sql!(@from), " RETURNING j.id")
    };
    (@set) => {
        concat!(
            "status = f.status, attempts = j.attempts - f.give_back, \
             output = CASE WHEN f.status = 'completed' THEN f.output::jsonb ELSE j.output END, \
             completed_at = CASE WHEN f.status = 'completed' THEN ",
            ts!("$8"),
            " ELSE j.completed_at END, last_error = COALESCE(f.error, j.last_error), run_at = COALESCE(",
            ts!("f.run_at"),
            ", j.run_at), lease_expires_at = NULL, updated_at = ",
            ts!("$8")
        )
    };
    (@from) => {
        "FROM unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int4[]) \
         AS f(id, attempt, status, output, error, run_at, give_back) \
         WHERE j.id = f.id AND j.status = 'claimed' AND j.locked_by = $9 AND j.attempts = f.attempt"
    };
}

const FINISH: [&str; 2] = [finish_sql!(false), finish_sql!(true)];

/// Never shortens a lease a handler extended further than the heartbeat does.
const EXTEND: &str = concat!(
    "UPDATE outbox_jobs SET lease_expires_at = GREATEST(COALESCE(lease_expires_at, TIMESTAMPTZ 'epoch'), ",
    ts!("$1"),
    ") WHERE status = 'claimed' AND locked_by = $2 AND id = ANY($3)"
);

/// Rescuers on several machines skip each other's rows instead of queueing behind them.
const RESCUE: &str = concat!(
    "WITH r AS (SELECT id FROM outbox_jobs WHERE status = 'claimed' AND lease_expires_at < ",
    ts!("$1"),
    " FOR UPDATE SKIP LOCKED) \
     UPDATE outbox_jobs j SET \
     status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END, \
     last_error = 'lease expired while claimed by ' || COALESCE(j.locked_by, 'an unknown worker') \
     || CASE WHEN j.attempts >= j.max_attempts THEN '; no attempts left' ELSE '' END, \
     lease_expires_at = NULL, run_at = ",
    ts!("$1"),
    ", updated_at = ",
    ts!("$1"),
    " FROM r WHERE j.id = r.id RETURNING j.id, j.kind, j.queue, j.attempts, j.status, j.locked_by"
);

/// The sequences with a waiting job whose lock is free (taken for the transaction), as an array: the first
/// half of the sweep.
/// Only a sequence none of whose jobs is running or free to run is a candidate: a sequence moving on its own
/// is never locked here, so the sweep does not contend with the release of its next job.
const SWEEP_LOCK: &str = "SELECT array_agg(k) FROM (SELECT DISTINCT w.sequence_key AS k FROM outbox_jobs w \
     WHERE w.status = 'pending' AND w.waiting AND NOT EXISTS (SELECT 1 FROM outbox_jobs c \
     WHERE c.sequence_key = w.sequence_key AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting))) \
     ORDER BY 1) s \
     WHERE pg_try_advisory_xact_lock(hashtextextended($1 || ' outbox sequence ' || k, 0))";

/// The second half, in the same transaction and so with a snapshot taken under those locks: lets go the first
/// job of each sequence when it waits with nothing ahead of it holding it and no job of the sequence running
/// or free to run (a job retried after its sequence went on waits for the later one that runs). The release triggers skip a
/// sequence an enqueuing transaction holds, and a transaction that enqueued under an older snapshot
/// (`REPEATABLE READ`) may have seen a job ahead that has finished since; the sweep catches both.
const SWEEP: &str = concat!(
    "UPDATE outbox_jobs w SET waiting = false FROM unnest($1::text[]) AS s(k) \
     WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = s.k AND ",
    crate::storage::blocking!("h"),
    " ORDER BY h.sequence_no LIMIT 1) AND w.status = 'pending' AND w.waiting \
     AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = s.k \
     AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting)))"
);

/// The worker's own connections: claims, the completion writer, renewals and rescues.
const POOL: u32 = 4;
/// Attempts at one claim, renewal or rescue: a dropped connection fails one statement; after a server restart
/// every pooled connection may be dead, so there are more attempts than connections.
const CALL_TRIES: u32 = POOL + 2;
/// How long finished attempts are retried before they are left to the lease.
const FINISH_GIVE_UP: Duration = Duration::from_secs(300);
/// Finished attempts written per statement at most.
const FINISH_BATCH: usize = 1_000;

enum Msg {
    Finish(Finished),
    Flush(oneshot::Sender<()>),
}

/// Handle to the worker's PostgreSQL connections. Clones share them.
#[derive(Clone)]
pub(crate) struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    config: PgStoreConfig,
    /// The worker's background runtime, which runs every statement of the store: a handler that stalls the
    /// worker's own runtime cannot hold a claim's transaction (and its advisory locks) open.
    bg: Handle,
    tx: mpsc::UnboundedSender<Msg>,
    /// Finished attempts not yet written. Their leases are renewed until they are, and past one batch they
    /// keep their slots.
    unwritten: Unwritten,
    listener: tokio::task::JoinHandle<()>,
}

/// Ids of finished attempts waiting for the completion writer.
type Unwritten = Arc<std::sync::Mutex<HashSet<String>>>;

fn unwritten_ids(unwritten: &Unwritten) -> std::sync::MutexGuard<'_, HashSet<String>> {
    // The set holds plain ids; a panic elsewhere while it was locked leaves nothing half-done in it.
    unwritten.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// `role worker`, as PostgreSQL keeps it (the first 63 bytes).
pub(super) fn application_name(role: &str, worker_id: &str) -> String {
    let mut name = format!("{role} {worker_id}");
    while name.len() > 63 {
        name.pop();
    }
    name
}

impl PgStore {
    /// Opens the worker's pool on the options of `caller` and starts the completion writer and the listener,
    /// all on the runtime of `bg`.
    pub(crate) fn open(caller: &PgPool, config: PgStoreConfig, bg: &Handle) -> PgStore {
        let _entered = bg.enter();
        let name = |role: &str| application_name(role, &config.worker_id);
        let options = caller.connect_options().as_ref().clone();
        let listen_options = options.clone().application_name(&name("outbox-listener"));
        // Planned for their values on every run: after five runs PostgreSQL would otherwise switch the claim
        // and the batch completion to generic plans that scan the whole table (measured: 30 times slower).
        let options =
            options.application_name(&name("outbox-worker")).options([("plan_cache_mode", "force_custom_plan")]);
        // No ping before each statement (it cost 13 % of throughput): a connection a server restart or
        // `pg_terminate_backend` left dead fails one statement, is dropped, and the call is retried.
        let pool = PgPoolOptions::new()
            .max_connections(POOL)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(30))
            .test_before_acquire(false)
            .connect_lazy_with(options);
        let listen_pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .connect_lazy_with(listen_options);
        let (tx, rx) = mpsc::unbounded_channel();
        let unwritten = Unwritten::default();
        tokio::spawn(write_finished(
            pool.clone(),
            config.worker_id.clone(),
            config.batched_events,
            rx,
            Arc::clone(&unwritten),
        ));
        let listener = tokio::spawn(listen(listen_pool, config.schema.clone(), config.worker_id.clone()));
        PgStore { inner: Arc::new(Inner { pool, config, tx, unwritten, listener, bg: bg.clone() }) }
    }

    /// Runs `call` on the background runtime.
    async fn on_bg<T, Fut>(&self, call: impl FnOnce(Arc<Inner>) -> Fut) -> Result<T>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        self.inner.bg.spawn(call(Arc::clone(&self.inner))).await.map_err(|e| {
            if e.is_cancelled() {
                Error::WorkerStopped
            } else {
                Error::Internal(format!("a worker store call failed: {e}"))
            }
        })?
    }
}

/// Claims, renewals and rescues run on the background runtime; finished attempts queue for the writer there.
impl WorkerStore for PgStore {
    /// Claims up to `limit` due jobs (see [`claim_rows`]).
    fn claim(&self, limit: usize, now: i64, lease_until: i64) -> StoreFuture<'_, Vec<ClaimedJob>> {
        Box::pin(async move {
            let rows = self
                .on_bg(
                    move |inner| async move { claim_rows(&inner.pool, &inner.config, limit, now, lease_until).await },
                )
                .await?;
            Ok(claimed_jobs(self, rows))
        })
    }

    /// Queues a finished attempt; it is written with whatever else finished meanwhile, in one statement.
    fn finish(&self, finished: Finished) -> Result<()> {
        unwritten_ids(&self.inner.unwritten).insert(finished.id.clone());
        self.inner.tx.send(Msg::Finish(finished)).map_err(|_| Error::WorkerStopped)
    }

    /// Finished attempts the writer has not written yet; their jobs are still claimed.
    fn unwritten(&self) -> Vec<String> {
        unwritten_ids(&self.inner.unwritten).iter().cloned().collect()
    }

    fn unwritten_count(&self) -> usize {
        unwritten_ids(&self.inner.unwritten).len()
    }

    fn extend(&self, ids: Vec<String>, until: i64) -> StoreFuture<'_, u64> {
        Box::pin(self.on_bg(move |inner| async move {
            let (pool, worker) = (&inner.pool, &inner.config.worker_id);
            retrying("renewing leases", || async {
                let res = sqlx::query(EXTEND).bind(until).bind(worker).bind(&ids).execute(pool).await?;
                Ok(res.rows_affected())
            })
            .await
        }))
    }

    fn rescue(&self, now: i64) -> StoreFuture<'_, Vec<Rescued>> {
        Box::pin(self.on_bg(move |inner| async move { rescue(&inner, now).await }))
    }

    /// Stops the listener and closes the worker's pool (`outbox-worker <id>`), on the background runtime where
    /// their connections live.
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let closed = self
                .on_bg(|inner| async move {
                    inner.listener.abort();
                    inner.pool.close().await;
                    Ok(())
                })
                .await;
            if let Err(e) = closed {
                tracing::debug!(worker = %self.inner.config.worker_id, error = %e, "closing the worker's connections failed");
            }
        })
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let (reply, rx) = oneshot::channel();
            self.inner.tx.send(Msg::Flush(reply)).map_err(|_| Error::WorkerStopped)?;
            rx.await.map_err(|_| Error::WorkerStopped)
        })
    }
}

/// Lets go sequences that moved on, then rescues expired claims.
async fn rescue(inner: &Inner, now: i64) -> Result<Vec<Rescued>> {
    let pool = &inner.pool;
    let schema = &inner.config.schema;
    let released = retrying("letting waiting sequences go", || async {
        let mut tx = pool.begin().await?;
        let keys: Option<Vec<String>> = sqlx::query_scalar(SWEEP_LOCK).bind(schema).fetch_one(&mut *tx).await?;
        let released = match keys {
            Some(keys) => {
                let n = sqlx::query(SWEEP).bind(&keys).execute(&mut *tx).await?.rows_affected();
                if n > 0 {
                    sqlx::query("SELECT pg_notify('outbox_jobs', $1)").bind(schema).execute(&mut *tx).await?;
                }
                n
            }
            None => 0,
        };
        tx.commit().await?;
        Ok(released)
    })
    .await?;
    if released > 0 {
        tracing::info!(jobs = released, "let go jobs waiting behind sequences that had moved on");
        wake::wake();
    }
    retrying("rescuing expired claims", || async {
        let rows = sqlx::query(RESCUE).bind(now).fetch_all(pool).await?;
        rows.iter()
            .map(|row| {
                Ok(Rescued {
                    id: row.try_get(0)?,
                    kind: row.try_get(1)?,
                    queue: row.try_get(2)?,
                    attempt: row.try_get(3)?,
                    status: row.try_get(4)?,
                    previous_owner: row.try_get(5)?,
                })
            })
            .collect()
    })
    .await
}

/// Claims up to `limit` due jobs for the worker `c` describes: first those of kinds with a fleet-wide limit,
/// each up to what its limit leaves, then the others. The in-process worker and remote claims share it.
pub(super) async fn claim_rows(
    pool: &PgPool,
    c: &PgStoreConfig,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<sqlx::postgres::PgRow>> {
    let mut rows = Vec::new();
    for (kind, cap) in &c.limited {
        let left = limit - rows.len();
        if left == 0 {
            return Ok(rows);
        }
        let share = limited_share(left, !c.kinds.is_empty());
        match claim_limited(pool, c, kind, *cap, share, now, lease_until).await {
            Ok(claimed) => rows.extend(claimed),
            Err(e) => return keep_claimed(rows, e),
        }
    }
    let left = limit - rows.len();
    if left > 0 && !c.kinds.is_empty() {
        let kinds = &c.kinds;
        let claimed =
            retrying("claiming jobs", || async { claim_query(c, kinds, left, now, lease_until).fetch_all(pool).await })
                .await;
        match claimed {
            Ok(claimed) => rows.extend(claimed),
            Err(e) => return keep_claimed(rows, e),
        }
    }
    Ok(rows)
}

/// Claims jobs of one limited kind in a transaction that holds the kind's advisory lock while it counts the
/// running jobs and claims what the limit leaves: claimers on every machine take turns.
async fn claim_limited(
    pool: &PgPool,
    c: &PgStoreConfig,
    kind: &str,
    cap: u32,
    left: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<sqlx::postgres::PgRow>> {
    let kinds = [kind.to_owned()];
    retrying("claiming jobs of a limited kind", || async {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ' outbox limit ' || $1, 0))")
            .bind(kind)
            .execute(&mut *tx)
            .await?;
        let running: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox_jobs WHERE status = 'claimed' AND kind = $1")
                .bind(kind)
                .fetch_one(&mut *tx)
                .await?;
        let room = usize::try_from(i64::from(cap) - running).unwrap_or(0).min(left);
        if room == 0 {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let rows = claim_query(c, &kinds, room, now, lease_until).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    })
    .await
}

/// Jobs already claimed (and committed) by an earlier step of a claim are run even when a later step fails:
/// dropping them would leave them claimed until their leases ran out, each with an attempt used.
fn keep_claimed<T>(claimed: Vec<T>, e: Error) -> Result<Vec<T>> {
    if claimed.is_empty() {
        return Err(e);
    }
    tracing::warn!(error = %e, jobs = claimed.len(), "claiming failed after some jobs were claimed; running those");
    Ok(claimed)
}

/// The claim of up to `limit` due jobs of `kinds`.
fn claim_query<'q>(
    c: &'q PgStoreConfig,
    kinds: &'q [String],
    limit: usize,
    now: i64,
    lease_until: i64,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let sql = if c.queues.is_some() { CLAIM_QUEUES } else { CLAIM_ANY_QUEUE }[usize::from(c.batched_events)];
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut q = sqlx::query(sql).bind(&c.worker_id).bind(now).bind(lease_until).bind(kinds).bind(limit);
    if let Some(queues) = &c.queues {
        q = q.bind(queues);
    }
    q
}

/// The claimed rows; one that cannot be read is failed by itself through the fenced writer (the column
/// types make that all but impossible here, but one bad row must never stop a claim).
fn claimed_jobs(store: &PgStore, rows: Vec<sqlx::postgres::PgRow>) -> Vec<ClaimedJob> {
    let mut jobs = Vec::with_capacity(rows.len());
    for row in &rows {
        match claimed_job(row) {
            Ok(job) => jobs.push(job),
            Err((u, attempt)) => {
                // An id that cannot be read (possible only on a database whose encoding does not check text)
                // fences nothing: that job keeps its claim until the lease runs out, and the rescuer fails it
                // once its attempts are spent.
                u.log(&store.inner.config.worker_id);
                let error = u.error();
                let (id, kind) = (u.id, u.kind);
                let finished = Finished {
                    id,
                    kind,
                    queue: row.try_get(2).unwrap_or_default(),
                    attempt,
                    outcome: Outcome::Failed { error },
                };
                if let Err(e) = store.finish(finished) {
                    tracing::warn!(error = %e, "cannot fail an unreadable job; its lease will run out");
                }
            }
        }
    }
    jobs
}

pub(super) fn claimed_job(row: &sqlx::postgres::PgRow) -> std::result::Result<ClaimedJob, (Unreadable, i32)> {
    let at = |column: &'static str| {
        move |e: sqlx::Error| {
            let unreadable = Unreadable {
                id: row.try_get(0).unwrap_or_else(|_| "?".to_owned()),
                kind: row.try_get(1).unwrap_or_else(|_| "?".to_owned()),
                column,
                found: format!("a value that cannot be decoded ({e})"),
            };
            (unreadable, row.try_get(4).unwrap_or(0))
        }
    };
    Ok(ClaimedJob {
        id: row.try_get(0).map_err(at("id"))?,
        kind: row.try_get(1).map_err(at("kind"))?,
        queue: row.try_get(2).map_err(at("queue"))?,
        payload: row.try_get(3).map_err(at("payload"))?,
        attempt: row.try_get(4).map_err(at("attempts"))?,
        max_attempts: row.try_get(5).map_err(at("max_attempts"))?,
        schema_hash: row.try_get(6).map_err(at("schema_hash"))?,
        run: row.try_get(7).map_err(at("runs"))?,
        sequenced: row.try_get(8).map_err(at("sequence_key"))?,
    })
}

pub(super) async fn retrying<T, F, Fut>(what: &str, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if tries < CALL_TRIES && transient::sqlx(&e) => {
                tracing::debug!(error = %e, tries, "{what} failed on a dropped connection; retrying");
                tokio::time::sleep(Duration::from_millis(20 * u64::from(tries - 1))).await;
            }
            Err(e) => return Err(Error::db(what)(e)),
        }
    }
}

/// The arrays of one finish statement.
#[derive(Default)]
struct Columns {
    ids: Vec<String>,
    attempts: Vec<i32>,
    statuses: Vec<&'static str>,
    outputs: Vec<Option<String>>,
    errors: Vec<Option<String>>,
    run_ats: Vec<Option<i64>>,
    give_backs: Vec<i32>,
}

impl Columns {
    fn of(batch: &[Finished]) -> Columns {
        let now = crate::storage::now_ms();
        let mut c = Columns::default();
        for f in batch {
            let o = f.outcome.columns(now);
            c.ids.push(f.id.clone());
            c.attempts.push(f.attempt);
            c.statuses.push(o.status);
            c.outputs.push(o.output.map(str::to_owned));
            // PostgreSQL text cannot hold NUL; an error message is for people, so it is replaced.
            c.errors.push(o.error.map(|e| e.replace('\0', "\u{fffd}")));
            c.run_ats.push(o.run_at);
            c.give_backs.push(o.give_back);
        }
        c
    }
}

/// Writes one batch; returns the ids the fence let through.
pub(super) async fn write_batch(
    pool: &PgPool,
    owner: &str,
    batch: &[Finished],
    batched_events: bool,
) -> std::result::Result<HashSet<String>, sqlx::Error> {
    let c = Columns::of(batch);
    let rows = sqlx::query(FINISH[usize::from(batched_events)])
        .bind(&c.ids)
        .bind(&c.attempts)
        .bind(&c.statuses)
        .bind(&c.outputs)
        .bind(&c.errors)
        .bind(&c.run_ats)
        .bind(&c.give_backs)
        .bind(crate::storage::now_ms())
        .bind(owner)
        .fetch_all(pool)
        .await?;
    rows.iter().map(|r| r.try_get::<String, _>(0)).collect()
}

/// Writes finished attempts as they arrive, everything queued so far in one statement.
async fn write_finished(
    pool: PgPool,
    owner: String,
    batched: bool,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    unwritten: Unwritten,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next.take().or_else(|| rx.try_recv().ok()) {
            match msg {
                Msg::Finish(f) => batch.push(f),
                Msg::Flush(reply) => flushes.push(reply),
            }
            if batch.len() >= FINISH_BATCH {
                break;
            }
        }
        if !batch.is_empty() {
            batch.sort_by(|a, b| a.id.cmp(&b.id));
            let ids: Vec<String> = batch.iter().map(|f| f.id.clone()).collect();
            write_with_retries(&pool, &owner, batched, batch).await;
            {
                let mut set = unwritten_ids(&unwritten);
                for id in &ids {
                    set.remove(id);
                }
            }
            // Their slots are free: the worker may claim again.
            wake::wake();
        }
        for reply in flushes {
            let _ = reply.send(());
        }
    }
    pool.close().await;
}

async fn write_with_retries(pool: &PgPool, owner: &str, batched: bool, batch: Vec<Finished>) {
    let started = tokio::time::Instant::now();
    let mut retry = Backoff::new(Duration::from_millis(10), Duration::from_secs(5));
    loop {
        match write_batch(pool, owner, &batch, batched).await {
            Ok(applied) => {
                for f in &batch {
                    crate::storage::log_finished(f, applied.contains(&f.id), owner);
                }
                crate::wake::outcome_written();
                return;
            }
            Err(e) if transient::sqlx(&e) && started.elapsed() < FINISH_GIVE_UP => {
                tracing::warn!(error = %e, jobs = batch.len(), "writing finished jobs failed; retrying");
                retry.sleep().await;
            }
            Err(e) if transient::sqlx(&e) => {
                tracing::error!(
                    error = %e, jobs = batch.len(),
                    "giving up writing finished jobs; their leases will expire and they will run again"
                );
                return;
            }
            Err(e) => {
                // A row the database refuses (an output it cannot store) must not sink the rest of the batch.
                tracing::warn!(error = %e, jobs = batch.len(), "a batch of finished jobs was refused; writing them one by one");
                for f in batch {
                    write_alone(pool, owner, f).await;
                }
                return;
            }
        }
    }
}

async fn write_alone(pool: &PgPool, owner: &str, f: Finished) {
    let mut retry = Backoff::new(Duration::from_millis(10), Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let mut item = f;
    loop {
        match write_batch(pool, owner, std::slice::from_ref(&item), false).await {
            Ok(applied) => {
                crate::storage::log_finished(&item, applied.contains(&item.id), owner);
                crate::wake::outcome_written();
                return;
            }
            Err(e) if transient::sqlx(&e) && started.elapsed() < FINISH_GIVE_UP => retry.sleep().await,
            Err(e) if matches!(item.outcome, Outcome::Completed { .. }) && !transient::sqlx(&e) => {
                // The handler succeeded but its output cannot be stored: the job fails for good with the
                // reason instead of running again.
                item.outcome =
                    Outcome::Failed { error: format!("the job's output could not be stored: {e}").replace('\0', "") };
            }
            Err(e) => {
                tracing::error!(
                    job_id = %item.id, kind = %item.kind, error = %e,
                    "giving up writing a finished job; its lease will expire and it will run again"
                );
                return;
            }
        }
    }
}
