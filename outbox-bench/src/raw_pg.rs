//! The PostgreSQL baselines: the statements outbox-core's PostgreSQL storage issues, run through bare sqlx on
//! one connection, each prepared once (sqlx caches statements per connection).
//!
//! The claim and the completion are planned once per connection (`plan_cache_mode = force_generic_plan`), as
//! the worker's claimer and completion writer plan them: both find their rows by id whatever the values, and
//! planning them afresh was a sixth of their time. Other statements are planned for their values every time
//! (`force_custom_plan`). A baseline is the best the same statements can do.
//!
//! The job INSERTs (a row's, and a batch's from `json_to_recordset`) are copied from
//! `outbox-core/src/storage/enqueue.rs`, the claim and the batched fenced completion from the PostgreSQL worker
//! store; keep them in step when those change. Rows carry the values
//! [`JobRow`] gives the SQLite baselines, times as integer milliseconds converted at the statement's edge, as
//! outbox-core binds them.

use std::sync::Arc;
use std::time::Instant;

use sea_orm::sqlx::postgres::{PgArguments, PgConnection};
use sea_orm::sqlx::query::Query;
use sea_orm::sqlx::{self, AssertSqlSafe, Connection, Postgres, Row};

use crate::raw::{Claimed, JobRow, KindInfo, now_ms, order_row};
use crate::{BoxError, Measure};

/// The domain row written next to each job in the enqueue cases.
pub(crate) const INSERT_ORDER: &str = "INSERT INTO orders (id, customer, total) VALUES ($1, $2, $3)";

/// What the `process` baseline does, for the report.
pub(crate) const PROCESS: &str = "sqlx-postgres: claim WITH ... FOR UPDATE SKIP LOCKED LIMIT 100 UPDATE ... RETURNING, then one fenced UPDATE \
     of the 100 (autocommit each)";

/// `INSERT_COLUMNS` of outbox-core's `storage/mod.rs`.
const INSERT_COLUMNS: &str = "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, \
     max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at) VALUES ";

/// `ts_of` of outbox-core's `storage/postgres/mod.rs`: a `timestamptz` from integer milliseconds.
fn ts(param: &str) -> String {
    format!("(TIMESTAMPTZ 'epoch' + ({param})::int8 * INTERVAL '1 millisecond')")
}

/// `push_row` of outbox-core's `storage/postgres/mod.rs`: eleven values from `$first`.
fn push_row(sql: &mut String, first: usize) {
    let p = |i: usize| format!("${}", first + i);
    sql.push_str(&format!(
        "({}, {}, {}, {}::jsonb, 'pending', {}, 0, {}, {}, {}, {}, {}, {})",
        p(0),
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
        ts(&p(6)),
        p(7),
        p(8),
        ts(&p(9)),
        ts(&p(10)),
    ));
}

/// The single-job INSERT of outbox-core's `insert_job`: `ON CONFLICT DO NOTHING` only for a keyed kind.
pub(crate) fn insert_job_sql(kind: &KindInfo) -> String {
    insert_jobs_sql(kind, 1)
}

/// The multi-row INSERT of outbox-core's `insert_jobs` for `rows` rows of `kind`.
fn insert_jobs_sql(kind: &KindInfo, rows: usize) -> String {
    let mut sql = String::from(INSERT_COLUMNS);
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        push_row(&mut sql, i * 11 + 1);
    }
    if kind.unique {
        sql.push_str(" ON CONFLICT DO NOTHING");
    }
    sql
}

/// The batch INSERT of outbox-core's `insert_recordset`: the rows as one JSON array, in order.
fn insert_recordset_sql(kind: &KindInfo) -> String {
    let mut sql = format!(
        "{}SELECT r.i, r.k, r.q, r.p, 'pending', r.r, 0, r.m, {}, r.y, r.h, {}, {} \
         FROM ROWS FROM (json_to_recordset($1::json) AS (i text, k text, q text, p jsonb, r int4, m int4, t int8, \
         y text, h text, c int8)) WITH ORDINALITY AS r(i, k, q, p, r, m, t, y, h, c, n) ORDER BY r.n",
        INSERT_COLUMNS.trim_end_matches("VALUES "),
        ts("r.t"),
        ts("r.c"),
        ts("r.c"),
    );
    if kind.unique {
        sql.push_str(" ON CONFLICT DO NOTHING");
    }
    sql
}

/// One row of [`insert_recordset_sql`]'s array.
fn push_json_row(rows: &mut String, row: &JobRow) {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    if rows.len() > 1 {
        rows.push(',');
    }
    rows.push_str(&format!(
        "{{\"i\":{},\"k\":{},\"q\":{},\"p\":{},\"r\":{},\"m\":{},\"t\":{},\"y\":{},\"h\":{},\"c\":{}}}",
        text(&row.id),
        text(&row.kind),
        text(&row.queue),
        row.payload,
        row.priority,
        row.max_attempts,
        row.run_at,
        row.key.as_deref().map_or_else(|| "null".to_owned(), text),
        text(&row.schema_hash),
        row.created_at,
    ));
}

/// The worker's claim of one kind from one queue (`CLAIM_ONE`): due pending jobs, locked past other claimers, in claim
/// order, with their claim's row (its lease) and their `claimed` feed row written by the same statement.
fn claim_sql() -> String {
    format!(
        "WITH c AS MATERIALIZED (SELECT ctid FROM outbox_jobs WHERE open AND status = 'pending' \
         AND queue = ($6::text[])[1] AND kind = ($4::text[])[1] AND run_at <= {now} \
         ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED), \
         u AS (UPDATE outbox_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, \
         locked_by = $1, locked_at = {now}, claimed_at = {now}, lease_expires_at = {lease}, updated_at = {now}, \
         event_flip = NOT j.event_flip WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) \
         RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts, j.schema_hash, \
         j.runs), \
         l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT $1, {lease}, array_agg(id) FROM u \
         HAVING count(*) > 0 RETURNING id), \
         e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
         SELECT '', min(kind), min(queue), {now}, 'claimed', 0, $1, \
         json_agg(json_build_array(id, attempts)) FROM u HAVING count(*) > 0) \
         SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, (SELECT id FROM l) FROM u",
        now = ts("$2"),
        lease = ts("$3"),
    )
}

/// The worker's promotion of due scheduled jobs, issued before every claim (`PROMOTE`).
fn promote_sql() -> String {
    format!(
        "UPDATE outbox_jobs SET scheduled = false WHERE id = ANY(ARRAY(SELECT id FROM outbox_jobs \
         WHERE due_at <= {now} ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)) \
         AND status = 'pending' AND scheduled",
        now = ts("$1"),
    )
}

/// Scheduled jobs let in per claim, and how often (ms) a busy worker lets them in, as the worker does.
const PROMOTE_PER_CLAIM: i64 = 1_000;
const PROMOTE_EVERY_MS: i64 = 100;

/// The worker's batched fenced write of completions without output (`FINISH_PLAIN`), each job by id and the
/// attempt it was claimed at (`$2`, `{id: attempt}`), with one feed row for the completions, one row of the log of
/// finished jobs, and the deletion of the claims whose last jobs these are; the baseline only completes, a claim
/// at a time.
fn finish_sql() -> String {
    format!(
        "WITH u AS (UPDATE outbox_jobs j SET status = 'completed', output = NULL, completed_at = {now}, \
         scheduled = false, lease_expires_at = NULL, updated_at = {now}, event_flip = NOT j.event_flip \
         WHERE j.id = ANY($1::text[]) AND (j.status || '') = 'claimed' AND j.locked_by = $4 \
         AND j.attempts = ($2::jsonb ->> j.id)::int4 \
         RETURNING j.id, j.kind, j.queue, j.status, j.attempts), \
         e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
         SELECT '', min(kind), min(queue), {now}, 'completed', 0, $4, \
         json_agg(json_build_array(id, attempts)) FROM u HAVING count(*) > 0), \
         f AS (INSERT INTO outbox_finished (at, jobs) SELECT {now}, array_agg(id) FROM u \
         WHERE status = 'completed' HAVING count(*) > 0), \
         x AS (DELETE FROM outbox_claims c WHERE c.id = ANY($5::int8[])) \
         SELECT id FROM u",
        now = ts("$3"),
    )
}

/// The queue the baselines' jobs are in, and their claims read.
const QUEUE: &str = "default";

/// The worker's default lease.
const LEASE_MS: i64 = 300_000;

fn query(sql: &Arc<str>) -> Query<'static, Postgres, PgArguments> {
    sqlx::query(AssertSqlSafe(Arc::clone(sql)))
}

/// Binds a job row's eleven values in `push_row` order.
fn bind_row<'q>(q: Query<'q, Postgres, PgArguments>, row: JobRow) -> Query<'q, Postgres, PgArguments> {
    q.bind(row.id)
        .bind(row.kind)
        .bind(row.queue)
        .bind(row.payload)
        .bind(row.priority)
        .bind(row.max_attempts)
        .bind(row.run_at)
        .bind(row.key)
        .bind(row.schema_hash)
        .bind(row.created_at)
        .bind(row.created_at)
}

/// One connection, planning every statement for its values.
async fn connect(url: &str) -> Result<PgConnection, BoxError> {
    connect_planning(url, "force_custom_plan").await
}

/// One connection that plans each statement once, as the worker's claimer and completion writer do.
async fn connect_generic(url: &str) -> Result<PgConnection, BoxError> {
    connect_planning(url, "force_generic_plan").await
}

async fn connect_planning(url: &str, mode: &'static str) -> Result<PgConnection, BoxError> {
    let mut conn = PgConnection::connect(url).await?;
    let set = format!("SET plan_cache_mode = {mode}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(set)).execute(&mut conn).await?;
    Ok(conn)
}

async fn count(conn: &mut PgConnection, sql: &'static str) -> Result<u64, BoxError> {
    let n: i64 = sqlx::query(sql).fetch_one(&mut *conn).await?.try_get(0)?;
    Ok(u64::try_from(n)?)
}

async fn expect_count(conn: &mut PgConnection, sql: &'static str, want: u64, what: &str) -> Result<(), BoxError> {
    let got = count(conn, sql).await?;
    if got != want {
        return Err(format!("baseline {what}: expected {want} rows, found {got}").into());
    }
    Ok(())
}

/// Case `enqueue`: per job `BEGIN; INSERT order; INSERT job; COMMIT`.
pub(crate) async fn enqueue(url: &str, kind: &KindInfo, n: u64) -> Result<Measure, BoxError> {
    let mut conn = connect(url).await?;
    let insert_job: Arc<str> = insert_job_sql(kind).into();
    let start = Instant::now();
    for i in 0..n {
        let mut tx = conn.begin().await?;
        let (id, customer, total) = order_row(i);
        sqlx::query(INSERT_ORDER).bind(id).bind(customer).bind(total).execute(&mut *tx).await?;
        let written = bind_row(query(&insert_job), JobRow::new(kind, i, now_ms())).execute(&mut *tx).await?;
        if written.rows_affected() != 1 {
            return Err(format!("baseline enqueue: job {i} was not written").into());
        }
        tx.commit().await?;
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&mut conn, "SELECT COUNT(*) FROM outbox_jobs", n, "enqueue").await?;
    expect_count(&mut conn, "SELECT COUNT(*) FROM orders", n, "enqueue").await?;
    conn.close().await?;
    Ok(Measure { jobs: n, secs })
}

/// Case `enqueue_batch`: per `per_txn` jobs one transaction holding the batch INSERT, its row count checked.
pub(crate) async fn enqueue_batch(url: &str, kind: &KindInfo, n: u64, per_txn: u64) -> Result<Measure, BoxError> {
    let mut conn = connect(url).await?;
    let sql: Arc<str> = insert_recordset_sql(kind).into();
    let start = Instant::now();
    let mut next = 0;
    while next < n {
        let size = per_txn.min(n - next);
        let now = now_ms();
        let mut rows = String::from("[");
        for i in next..next + size {
            push_json_row(&mut rows, &JobRow::new(kind, i, now));
        }
        rows.push(']');
        let mut tx = conn.begin().await?;
        let written = query(&sql).bind(rows).execute(&mut *tx).await?.rows_affected();
        if written != size {
            return Err(format!("baseline enqueue_batch: {written} of {size} jobs written").into());
        }
        tx.commit().await?;
        next += size;
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&mut conn, "SELECT COUNT(*) FROM outbox_jobs", n, "enqueue_batch").await?;
    conn.close().await?;
    Ok(Measure { jobs: n, secs })
}

/// Case `process`: claim `batch` jobs in one autocommit statement, complete them (sorted by id, as the
/// worker writes them) in one fenced UPDATE, until nothing is left. `n` jobs of `kind` must be pending.
pub(crate) async fn process(url: &str, kind: &KindInfo, n: u64, batch: u64) -> Result<Measure, BoxError> {
    let mut conn = connect_generic(url).await?;
    let worker_id = format!("bench-host:{}:0a1b2c3d", std::process::id());
    let kinds = vec![kind.name.to_owned()];
    let queues = vec![QUEUE.to_owned()];
    let limit = i64::try_from(batch)?;
    let (claim, finish): (Arc<str>, Arc<str>) = (claim_sql().into(), finish_sql().into());
    let promote: Arc<str> = promote_sql().into();
    let mut promoted_at = i64::MIN;
    let start = Instant::now();
    loop {
        let now = now_ms();
        if now.saturating_sub(promoted_at) >= PROMOTE_EVERY_MS {
            query(&promote).bind(now).bind(PROMOTE_PER_CLAIM).execute(&mut conn).await?;
            promoted_at = now;
        }
        let rows = query(&claim)
            .bind(&worker_id)
            .bind(now)
            .bind(now + LEASE_MS)
            .bind(&kinds)
            .bind(limit)
            .bind(&queues)
            .fetch_all(&mut conn)
            .await?;
        let claimed = rows
            .iter()
            .map(|row| {
                Ok(Claimed {
                    id: row.try_get(0)?,
                    _kind: row.try_get(1)?,
                    _queue: row.try_get(2)?,
                    _payload: row.try_get(3)?,
                    attempt: row.try_get(4)?,
                    _max_attempts: row.try_get(5)?,
                    _schema_hash: row.try_get(6)?,
                    _run: row.try_get(7)?,
                })
            })
            .collect::<Result<Vec<Claimed>, sqlx::Error>>()?;
        if claimed.is_empty() {
            break;
        }
        let claims: Vec<i64> = rows.first().map(|r| r.try_get(8)).transpose()?.into_iter().collect();
        let mut claimed = claimed;
        claimed.sort_by(|a, b| a.id.cmp(&b.id));
        let ids: Vec<String> = claimed.iter().map(|c| c.id.clone()).collect();
        let outcomes: serde_json::Map<String, serde_json::Value> =
            claimed.iter().map(|c| (c.id.clone(), serde_json::json!(c.attempt))).collect();
        let done = query(&finish)
            .bind(ids)
            .bind(serde_json::Value::Object(outcomes))
            .bind(now_ms())
            .bind(&worker_id)
            .bind(claims)
            .fetch_all(&mut conn)
            .await?;
        if done.len() != claimed.len() {
            return Err(format!("baseline process: {} of {} jobs completed", done.len(), claimed.len()).into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    expect_count(&mut conn, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'", n, "process").await?;
    conn.close().await?;
    Ok(Measure { jobs: n, secs })
}

/// Case `claim_sequenced`: the worker's claim of `batch` jobs of `kinds`, each in a transaction rolled back
/// so the backlog stays as it was; returns the median seconds of one claim over `reps`.
/// The claim is the worker's for one kind, planned once as the worker's claimer plans it, and includes letting in
/// the scheduled jobs that are due, as a worker's first claim does.
pub(crate) async fn claim_cost(url: &str, kinds: &[&str], batch: u64, reps: usize) -> Result<f64, BoxError> {
    if kinds.len() != 1 {
        return Err("claim cost: the worker's claim of one kind is timed".into());
    }
    let mut conn = connect_generic(url).await?;
    let kinds: Vec<String> = kinds.iter().map(|k| (*k).to_owned()).collect();
    let queues = vec![QUEUE.to_owned()];
    let limit = i64::try_from(batch)?;
    let claim: Arc<str> = claim_sql().into();
    let promote: Arc<str> = promote_sql().into();
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let now = now_ms();
        let mut tx = conn.begin().await?;
        let start = Instant::now();
        query(&promote).bind(now).bind(PROMOTE_PER_CLAIM).execute(&mut *tx).await?;
        let rows = query(&claim)
            .bind("bench-claim")
            .bind(now)
            .bind(now + LEASE_MS)
            .bind(&kinds)
            .bind(limit)
            .bind(&queues)
            .fetch_all(&mut *tx)
            .await?;
        times.push(start.elapsed().as_secs_f64());
        tx.rollback().await?;
        if rows.len() as u64 != batch {
            return Err(format!("claim cost: claimed {} of {batch}", rows.len()).into());
        }
    }
    Ok(crate::median(&times))
}

/// How a `latency_cross` floor's worker learns of a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// In the enqueuing process, told after each commit returns (outbox-core's in-process wake-up).
    InProcess,
    /// In another process, through `LISTEN` on a connection of its own; it claims on a second connection, as
    /// the worker does.
    Listen,
    /// As [`Wake::Listen`], claiming on the listening connection itself.
    ListenAndClaim,
}

impl Wake {
    fn arg(self) -> &'static str {
        match self {
            Wake::InProcess => "in-process",
            Wake::Listen => "listen",
            Wake::ListenAndClaim => "listen-and-claim",
        }
    }

    pub(crate) fn parse(arg: &str) -> Result<Wake, BoxError> {
        [Wake::InProcess, Wake::Listen, Wake::ListenAndClaim]
            .into_iter()
            .find(|w| w.arg() == arg)
            .ok_or_else(|| format!("unknown wake-up `{arg}`").into())
    }
}

/// The floor of `latency_cross` on PostgreSQL: the same enqueues (one autocommit INSERT each, [`gap`] apart,
/// the insert trigger notifying) and the worker's claim statement, with nothing else around them. Each job is
/// timed from its INSERT returning to the claim that took it returning, on the wall clock both processes
/// share.
///
/// [`gap`]: crate::latency::gap
pub(crate) async fn latency_floor(
    url: &str,
    kind: &KindInfo,
    n: u64,
    wake: Wake,
) -> Result<crate::latency::Latency, BoxError> {
    let told = Arc::new(tokio::sync::Notify::new());
    let worker = if wake == Wake::InProcess {
        let (url, name, told) = (url.to_owned(), kind.name.to_owned(), Arc::clone(&told));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move { floor_worker(&url, &name, n, wake, Some(told), ready_tx).await });
        ready_rx.await?;
        FloorWorker::Task(task)
    } else {
        let args = [crate::FLOOR_CHILD, url, kind.name, &n.to_string(), wake.arg()].map(std::ffi::OsString::from);
        FloorWorker::Process(Box::new(crate::latency::WorkerProcess::start(&args, "latency floor").await?))
    };
    let mut conn = connect(url).await?;
    let insert: Arc<str> = insert_job_sql(kind).into();
    let mut committed: Vec<(String, i64)> = Vec::with_capacity(usize::try_from(n)?);
    let mut next = tokio::time::Instant::now();
    for i in 0..n {
        let row = JobRow::new(kind, i, now_ms());
        let id = row.id.clone();
        bind_row(query(&insert), row).execute(&mut conn).await?;
        committed.push((id, crate::latency::epoch_us()));
        told.notify_one();
        next += crate::latency::gap(i);
        tokio::time::sleep_until(next).await;
    }
    conn.close().await?;
    let started: std::collections::HashMap<String, i64> = match worker {
        FloorWorker::Task(task) => task.await??,
        FloorWorker::Process(mut child) => {
            let report = child.report().await?;
            child.exit().await?;
            serde_json::from_str(&report)?
        }
    };
    let ms = committed
        .iter()
        .map(|(id, at)| match started.get(id) {
            Some(start) => Ok((start - at).max(0) as f64 / 1000.0),
            None => Err(format!("latency floor: job {id} was never claimed")),
        })
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(crate::latency::Latency::of(ms))
}

/// Where a floor's worker runs: a task of this process, or another process.
enum FloorWorker {
    Task(tokio::task::JoinHandle<Result<std::collections::HashMap<String, i64>, BoxError>>),
    Process(Box<crate::latency::WorkerProcess>),
}

/// The floor's worker: waits to be told (in-process) or for a notification, then claims until nothing is
/// left, noting when each job's claim returned; a one-second poll as the worker has. Says it is ready once
/// its first, empty claim has gone by; returns once all `n` jobs were claimed, or 10 s after the last one was.
pub(crate) async fn floor_worker(
    url: &str,
    kind: &str,
    n: u64,
    wake: Wake,
    told: Option<Arc<tokio::sync::Notify>>,
    ready: tokio::sync::oneshot::Sender<()>,
) -> Result<std::collections::HashMap<String, i64>, BoxError> {
    use sea_orm::sqlx::postgres::PgListener;
    let mut conn = connect_generic(url).await?;
    let mut listener = match wake {
        Wake::InProcess => None,
        Wake::Listen | Wake::ListenAndClaim => {
            let mut l = PgListener::connect(url).await?;
            l.listen("outbox_jobs").await?;
            sqlx::raw_sql("SET plan_cache_mode = force_generic_plan").execute(&mut l).await?;
            Some(l)
        }
    };
    let worker_id = format!("bench-floor:{}", std::process::id());
    let kinds = vec![kind.to_owned()];
    let queues = vec![QUEUE.to_owned()];
    let claim: Arc<str> = claim_sql().into();
    // Completions go out on a connection of their own, as the worker writes its outcomes, while it claims on.
    // Each message is one claim: its jobs with their attempts, and its row in `outbox_claims`.
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(Vec<(String, i32)>, Option<i64>)>();
    let finisher = {
        let (url, worker_id) = (url.to_owned(), worker_id.clone());
        tokio::spawn(async move {
            let mut conn = connect_generic(&url).await?;
            let finish: Arc<str> = finish_sql().into();
            while let Some((mut jobs, claim)) = done_rx.recv().await {
                let mut claims: Vec<i64> = claim.into_iter().collect();
                while let Ok((more, claim)) = done_rx.try_recv() {
                    jobs.extend(more);
                    claims.extend(claim);
                }
                jobs.sort();
                let outcomes: serde_json::Map<String, serde_json::Value> =
                    jobs.iter().map(|(id, attempt)| (id.clone(), serde_json::json!(attempt))).collect();
                let ids: Vec<String> = jobs.into_iter().map(|(id, _)| id).collect();
                let done = query(&finish)
                    .bind(&ids)
                    .bind(serde_json::Value::Object(outcomes))
                    .bind(now_ms())
                    .bind(&worker_id)
                    .bind(claims)
                    .fetch_all(&mut conn)
                    .await?;
                if done.len() != ids.len() {
                    return Err(format!("latency floor: {} of {} jobs completed", done.len(), ids.len()).into());
                }
            }
            Ok::<_, BoxError>(())
        })
    };
    let mut started = std::collections::HashMap::with_capacity(usize::try_from(n)?);
    let mut ready = Some(ready);
    let mut progress = Instant::now();
    while (started.len() as u64) < n && progress.elapsed() < std::time::Duration::from_secs(10) {
        loop {
            let now = now_ms();
            let q =
                query(&claim).bind(&worker_id).bind(now).bind(now + LEASE_MS).bind(&kinds).bind(100_i64).bind(&queues);
            let rows = match (wake, listener.as_mut()) {
                (Wake::ListenAndClaim, Some(l)) => q.fetch_all(l).await?,
                _ => q.fetch_all(&mut conn).await?,
            };
            let at = crate::latency::epoch_us();
            if rows.is_empty() {
                break;
            }
            progress = Instant::now();
            let claim: Option<i64> = rows.first().map(|r| r.try_get(8)).transpose()?.flatten();
            let mut done = Vec::with_capacity(rows.len());
            for row in rows {
                let id: String = row.try_get(0)?;
                done.push((id.clone(), row.try_get::<i32, _>(4)?));
                started.insert(id, at);
            }
            done_tx.send((done, claim))?;
        }
        if let Some(r) = ready.take() {
            let _ = r.send(());
        }
        let poll = std::time::Duration::from_secs(1);
        match (&told, listener.as_mut()) {
            (Some(t), _) => {
                let _ = tokio::time::timeout(poll, t.notified()).await;
            }
            (None, Some(l)) => {
                let _ = tokio::time::timeout(poll, l.recv()).await;
            }
            (None, None) => return Err("latency floor: a worker with no wake-up".into()),
        }
    }
    drop(done_tx);
    finisher.await??;
    Ok(started)
}
