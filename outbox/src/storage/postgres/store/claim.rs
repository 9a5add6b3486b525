//! The claim: due jobs of the worker's kinds and queues, `FOR UPDATE SKIP LOCKED`, fleet-wide limits first
//! under each limited kind's advisory lock.

use sea_orm::sqlx::postgres::PgPool;
use sea_orm::sqlx::{self, Row};

use super::flow::FlowMemoryCell;
use super::{PgStore, PgStoreConfig, retrying};
use crate::error::{Error, Result};
use crate::storage::postgres::ts;
use crate::storage::worker_store::limited_share;
use crate::storage::{ClaimedJob, Finished, Keep, Outcome, Unreadable, WorkerStore};

/// The claim of due jobs, with one feed row for them all. Its ready jobs are read from the ready index, which is
/// led by the queue (`outbox_jobs_ready_queue` in `schema.sql`): `$6` lists the queues read, the worker's own or, for a worker of
/// every queue, those that hold ready jobs ([`QUEUES`]). The index also holds the jobs claimed and not yet
/// finished (its condition, `open`, is a generated column a claim leaves true, so that a claim updates its rows in
/// place: the generated columns of `schema.sql`); the claim passes over them by their status, and its cursor reads on past them.
macro_rules! claim_sql {
    // Kinds and queues: each (queue, kind) range read by itself, and the ranges merged.
    (queues $after:expr) => {
        claim_sql!(@claim claim_sql!(@pick $after))
    };
    // One kind from one queue (a limited kind's claim, and most workers'): its range of the ready index alone,
    // with no merge to plan or run (12 % of a claim's time, measured).
    // `$after` narrows either form: the cursor's form reads on from where the worker's last claim of the kind
    // ended (`$7` priority, `$8` run time, `$9` id; see [`Cursor`]).
    (one $after:expr) => {
        claim_sql!(@claim concat!(
            "SELECT ctid FROM outbox_jobs WHERE open AND status = 'pending' \
             AND queue = ($6::text[])[1] AND kind = ($4::text[])[1] AND ",
            not_paused!("($6::text[])[1]", "($4::text[])[1]"),
            " AND run_at <= ",
            ts!("$2"),
            $after,
            " ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED"
        ))
    };
    // The picked rows are updated where their lock found them (`ctid = ANY(...)`, a TID scan), and listed with
    // their lease in one row of `outbox_claims` (see `schema.sql`), whose id each returned row carries. Found
    // again by id, each cost a primary key lookup (about a sixth of a claim of 500 in the server, measured);
    // joined to the table (`FROM c WHERE j.id = c.id`), a claim of more than about 230 jobs was planned as a
    // hash join over a scan of all of it (see `finish_sql!` in `complete.rs`). A row changed by another
    // transaction after this statement's snapshot was taken is locked in its newest version, which the snapshot
    // does not see: the update passes over it, so it stays as it is, unclaimed, its lock gone with the commit,
    // for the next claim.
    (@claim $pick:expr) => {
        concat!(
            "WITH c AS MATERIALIZED (",
            $pick,
            "), u AS (UPDATE outbox_jobs j SET ",
            claim_sql!(@set),
            ", event_flip = NOT j.event_flip WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) \
             RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts, \
             j.schema_hash, j.runs, j.sequence_key IS NOT NULL AS sequenced, j.priority, \
             (EXTRACT(EPOCH FROM j.run_at) * 1000)::int8 AS run_at_ms, j.trace, j.has_children), \
             l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT $1, ",
            ts!("$3"),
            ", array_agg(id) FROM u HAVING count(*) > 0 RETURNING id), \
             e AS (",
            feed_row!("$2", "claimed", "$1", ""),
            ") SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequenced, priority, \
             run_at_ms, (SELECT id FROM l) AS claim, trace, has_children FROM u"
        )
    };
    // Each kind in each queue is read from its own range of the ready index, so the claim reads nothing of the
    // kinds it does not serve; a range's rows past what the merge keeps stay locked only until the claim
    // commits.
    (@pick $after:expr) => {
        concat!(
            "SELECT p.ctid FROM unnest($4::text[]) AS k(kind) CROSS JOIN unnest($6::text[]) AS q(queue) \
             CROSS JOIN LATERAL (SELECT ctid, id, priority, run_at FROM outbox_jobs \
             WHERE open AND status = 'pending' AND queue = q.queue AND kind = k.kind \
             AND run_at <= ",
            ts!("$2"),
            $after,
            " ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) p WHERE ",
            not_paused!("q.queue", "k.kind"),
            " ORDER BY p.priority DESC, p.run_at, p.id LIMIT $5"
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

/// That neither the queue `$queue` nor the whole kind `$kind` (SQL expressions of the claim's) is paused or held at
/// `$2`: one probe of `outbox_pauses` per queue and kind a claim reads, not per job.
macro_rules! not_paused {
    ($queue:literal, $kind:literal) => {
        concat!(
            "NOT EXISTS (SELECT FROM outbox_pauses x WHERE (x.scope = 'queue' AND x.name = ",
            $queue,
            " OR x.scope = 'kind' AND x.name = ",
            $kind,
            " AND x.key = '') AND (x.ends_at IS NULL OR x.ends_at > ",
            ts!("$2"),
            "))"
        )
    };
}

/// The claim of the pending jobs whose ids `$4` lists, a controlled kind's choice (`flow.rs`).
pub(super) const CLAIM_IDS: &str =
    claim_sql!(@claim "SELECT ctid FROM outbox_jobs WHERE id = ANY($4::text[]) AND status = 'pending' FOR UPDATE");

/// [`CLAIM_IDS`] writing back, in the same statement, the buckets (`$5` the rate's name, `$6`-`$8` its amount,
/// window and burst, `$9`-`$11` keys, levels and times) and fair passes (`$12` keys, `$13` passes) the claim moved.
pub(super) static CLAIM_IDS_SAVING: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    CLAIM_IDS.replacen(
        "), u AS (",
        "), sb AS (INSERT INTO outbox_rates (name, key, amount, window_ms, burst, level, at) \
         SELECT $5, k, $6, $7, $8, l, a FROM unnest($9::text[], $10::float8[], $11::int8[]) AS b(k, l, a) \
         ON CONFLICT (name, key) DO UPDATE SET level = excluded.level, at = excluded.at), \
         sf AS (INSERT INTO outbox_fair (name, key, weight, pass) SELECT $5, k, 1, p \
         FROM unnest($12::text[], $13::float8[]) AS f(k, p) ON CONFLICT (name, key) DO UPDATE SET pass = excluded.pass), \
         u AS (",
        1,
    )
});

/// The cursor's condition (see [`Cursor`]).
macro_rules! after {
    () => {
        concat!(" AND priority = $7 AND (run_at, id) > (", ts!("$8"), ", $9)")
    };
}

pub(super) const CLAIM_ONE: &str = claim_sql!(one "");
pub(super) const CLAIM_ONE_AFTER: &str = claim_sql!(one after!());
pub(super) const CLAIM_QUEUES: &str = claim_sql!(queues "");
pub(super) const CLAIM_QUEUES_AFTER: &str = claim_sql!(queues after!());

/// The queues a worker of every queue reads: those its kinds (`$1`) are registered to, and every queue that holds
/// ready jobs (or claimed ones not yet finished, which the ready index holds too: a claim there finds nothing),
/// found by a walk of the ready index that visits one entry per queue. It walks from the end of each
/// queue's range, where the jobs claimed last are, not from its head: a snapshot held open keeps an entry there for
/// every job claimed since, which a walk from the head would visit.
pub(super) const QUEUES: &str = "WITH RECURSIVE q(queue) AS ((SELECT queue FROM outbox_jobs \
     WHERE open ORDER BY queue DESC LIMIT 1) UNION ALL SELECT (SELECT j.queue FROM outbox_jobs j \
     WHERE j.open AND j.queue < q.queue ORDER BY j.queue DESC LIMIT 1) FROM q WHERE q.queue IS NOT NULL) \
     SELECT queue FROM q WHERE queue IS NOT NULL UNION SELECT queue FROM outbox_kinds WHERE name = ANY($1) ORDER BY 1";

/// How often a worker of every queue lists the queues that hold ready jobs (ms). A job enqueued into a queue none of
/// the worker's kinds is registered to and that held no ready job is claimed by the worker's next claim that finds
/// nothing else (which lists them again), or after the next listing, at most this long.
pub(in crate::storage::postgres) const QUEUES_EVERY_MS: i64 = 1_000;

/// The queues `c` reads: its own, or those [`QUEUES`] lists.
pub(in crate::storage::postgres) async fn queues_of(pool: &PgPool, c: &PgStoreConfig) -> Result<Vec<String>> {
    if let Some(queues) = &c.queues {
        return Ok(queues.clone());
    }
    let mut kinds = c.kinds.clone();
    kinds.extend(c.limited.iter().map(|f| f.kind.clone()));
    retrying("listing the queues that hold ready jobs", || async {
        sqlx::query_scalar(QUEUES).bind(&kinds).fetch_all(pool).await
    })
    .await
}

/// Where a worker's last claim of its one kind ended, in claim order. The ready index keeps an entry for every
/// job claimed until vacuum removes it, and while any snapshot older than those claims is open (a report, a
/// session idle in a transaction) it can neither remove them nor mark them dead for scans to skip: a claim
/// that starts at the head of the range visits every job claimed since in the heap, so draining a backlog
/// costs the square of its size (a drain of 100,000 under a held snapshot ran at 0.32 of its free rate). The
/// next claim reads on from here instead, within the same priority. The head is read again at least every
/// [`CURSOR_SPAN_MS`], by the claim after one that read from the cursor came up short, and at once when the
/// cursor finds nothing: a job that sorts before the cursor (a higher priority, an earlier run time) waits at
/// most a second, or until the worker's next claim after a short one (its next outcome, wake-up or poll).
#[derive(Debug, Clone)]
pub(in crate::storage::postgres) struct Cursor {
    pub(super) priority: i32,
    pub(super) run_at: i64,
    pub(super) id: String,
    /// When the head was last read (ms).
    pub(super) since: i64,
}

/// How long a worker reads on from its cursor before it reads the head of its kind's range (or of a key's, see
/// [`super::flow::FlowMemory`]) again (ms).
pub(super) const CURSOR_SPAN_MS: i64 = 1_000;

/// A worker's cursor, when it claims one kind from every queue.
pub(in crate::storage::postgres) type CursorCell = std::sync::Mutex<Option<Cursor>>;

/// Scheduled jobs that have come due join the ready index, the earliest first, a bounded number per claim.
/// Promoters on several machines skip each other's rows.
pub(super) const PROMOTE: &str = concat!(
    "UPDATE outbox_jobs SET scheduled = false WHERE id = ANY(ARRAY(SELECT id FROM outbox_jobs \
     WHERE due_at <= ",
    ts!("$1"),
    " ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)) AND status = 'pending' AND scheduled"
);

/// Scheduled jobs let in by one claim at most; the rest follow with the next claims.
pub(super) const PROMOTE_PER_CLAIM: i64 = 1_000;

/// A worker lets in scheduled jobs at most this often (ms): the statement is a round trip of its own, a
/// twentieth of a claim's cost on a busy worker when made before every claim (measured). A job due
/// meanwhile waits for the next, once the worker is busy; an idle worker's claims are further apart.
pub(in crate::storage::postgres) const PROMOTE_EVERY_MS: i64 = 100;

/// Lets in the scheduled jobs that are due at `now`, a bounded number of them.
pub(in crate::storage::postgres) async fn promote_due(pool: &PgPool, now: i64) -> Result<()> {
    retrying("letting in scheduled jobs that are due", || async {
        sqlx::query(PROMOTE).bind(now).bind(PROMOTE_PER_CLAIM).execute(pool).await
    })
    .await?;
    Ok(())
}

/// Claims up to `limit` due jobs for the worker `c` describes from `queues` (see [`queues_of`]): first those of
/// kinds with a fleet-wide limit, each up to what its limit leaves, then the others. The in-process worker and
/// remote claims share it; they let in the due scheduled jobs first ([`promote_due`]).
#[allow(clippy::too_many_arguments)]
pub(in crate::storage::postgres) async fn claim_rows(
    pool: &PgPool,
    c: &PgStoreConfig,
    queues: &[String],
    limit: usize,
    now: i64,
    lease_until: i64,
    cursor: Option<&CursorCell>,
    memory: Option<&FlowMemoryCell>,
    wake: &mut Option<i64>,
) -> Result<Vec<sqlx::postgres::PgRow>> {
    let mut rows = Vec::new();
    // Read once: the kinds probed are those skipped when they have no ready job.
    let busy = memory.map(|cell| cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner).busy.clone());
    let idle_now = |kind: &str| busy.as_ref().is_none_or(|busy| !busy.contains(kind));
    let before = if c.limited.is_empty() {
        super::flow::Before::default()
    } else {
        let kinds: Vec<&str> = c.limited.iter().map(|f| f.kind.as_str()).filter(|k| idle_now(k)).collect();
        let fair: Vec<&str> = c.limited.iter().filter(|f| f.may_be_lone()).map(|f| f.kind.as_str()).collect();
        let read = retrying("reading the pauses", || async {
            sqlx::query(super::flow::PAUSES).bind(now).bind(&kinds).bind(queues).bind(&fair).fetch_all(pool).await
        })
        .await?;
        super::flow::before_of(&read)
    };
    let (pauses, ready) = (&before.pauses, &before.ready);
    *wake = pauses.wake_at;
    for flow in &c.limited {
        let left = limit - rows.len();
        if left == 0 {
            return Ok(rows);
        }
        if pauses.kinds.contains(&flow.kind) || (idle_now(&flow.kind) && !ready.contains(&flow.kind)) {
            continue;
        }
        let share = limited_share(left, !c.kinds.is_empty());
        let lone = before.lone.contains(&flow.kind);
        match super::flow::claim_limited(pool, c, queues, flow, pauses, lone, memory, share, now, lease_until).await {
            Ok((claimed, at)) => {
                if let Some(cell) = memory {
                    let busy = &mut cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner).busy;
                    if claimed.is_empty() {
                        busy.remove(&flow.kind);
                    } else {
                        busy.insert(flow.kind.clone());
                    }
                }
                rows.extend(claimed);
                if let Some(at) = at {
                    *wake = Some(wake.map_or(at, |w| w.min(at)));
                }
            }
            Err(e) => return keep_claimed(rows, e),
        }
    }
    let left = limit - rows.len();
    if left > 0 && !c.kinds.is_empty() {
        let cursor = cursor.filter(|_| c.queues.is_none() && c.kinds.len() == 1);
        match claim_unlimited(pool, c, queues, left, now, lease_until, cursor).await {
            Ok(claimed) => rows.extend(claimed),
            Err(e) => return keep_claimed(rows, e),
        }
    }
    Ok(rows)
}

/// Claims up to `limit` due jobs of the worker's kinds without a limit: from the worker's `cursor` first when
/// it has one that is fresh, then from the head of the range for what that left.
async fn claim_unlimited(
    pool: &PgPool,
    c: &PgStoreConfig,
    queues: &[String],
    limit: usize,
    now: i64,
    lease_until: i64,
    cursor: Option<&CursorCell>,
) -> Result<Vec<sqlx::postgres::PgRow>> {
    let lock = |cell: &CursorCell| cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let from = cursor.and_then(lock).filter(|k| (0..CURSOR_SPAN_MS).contains(&now.saturating_sub(k.since)));
    let mut rows = Vec::new();
    if let Some(at) = &from {
        rows = retrying("claiming jobs", || async {
            claim_query(c, &c.kinds, queues, limit, now, lease_until, Some(at)).fetch_all(pool).await
        })
        .await?;
    }
    // A read from the cursor that found some jobs but fewer than asked lets them start now: the next claim reads
    // the head (the cursor is spent), instead of a second statement that every such claim waited for. On a
    // worker that claims as jobs arrive, that statement was a round trip between each job's wake-up and its start.
    let spent = from.is_some() && !rows.is_empty() && rows.len() < limit;
    let mut head = Vec::new();
    if rows.len() < limit && !spent {
        let left = limit - rows.len();
        let claimed = retrying("claiming jobs", || async {
            claim_query(c, &c.kinds, queues, left, now, lease_until, None).fetch_all(pool).await
        })
        .await;
        match claimed {
            Ok(claimed) => head = claimed,
            Err(e) => return keep_claimed(rows, e),
        }
    }
    if let Some(cell) = cursor
        && spent
    {
        *cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    } else if let Some(cell) = cursor {
        // On from the last job of the head's claim when it read the head (the cursor restarts there), else
        // from the last of the cursor's.
        let (read, since) =
            if head.is_empty() { (&rows, from.as_ref().map_or(now, |k| k.since)) } else { (&head, now) };
        if let Some(last) = last_in_claim_order(read) {
            *cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Cursor { since, ..last });
        }
    }
    rows.extend(head);
    Ok(rows)
}

/// The claimed row that sorts last in claim order (priority descending, then run time, then id).
fn last_in_claim_order(rows: &[sqlx::postgres::PgRow]) -> Option<Cursor> {
    rows.iter()
        .filter_map(|r| {
            Some(Cursor { priority: r.try_get(9).ok()?, run_at: r.try_get(10).ok()?, id: r.try_get(0).ok()?, since: 0 })
        })
        .max_by(|a, b| b.priority.cmp(&a.priority).then(a.run_at.cmp(&b.run_at)).then_with(|| a.id.cmp(&b.id)))
}

/// The lock of a kind's fleet-wide limit `$1`, held by the claim's transaction.
pub(super) const LIMIT_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ' outbox limit ' || $1, 0))";

/// The running jobs of a kind, found through the claims that list them (`outbox_claims`), each once.
pub(super) const RUNNING: &str = "SELECT count(*) FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) \
     FROM outbox_claims)) AND (status || '') = 'claimed' AND kind = $1";

/// Jobs already claimed (and committed) by an earlier step of a claim are run even when a later step fails:
/// dropping them would leave them claimed until their leases ran out, each with an attempt used.
pub(super) fn keep_claimed<T>(claimed: Vec<T>, e: Error) -> Result<Vec<T>> {
    if claimed.is_empty() {
        return Err(e);
    }
    tracing::warn!(error = %e, jobs = claimed.len(), "claiming failed after some jobs were claimed; running those");
    Ok(claimed)
}

/// The claim of up to `limit` due jobs of `kinds`.
pub(super) fn claim_query<'q>(
    c: &'q PgStoreConfig,
    kinds: &'q [String],
    queues: &'q [String],
    limit: usize,
    now: i64,
    lease_until: i64,
    after: Option<&'q Cursor>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let sql = match (kinds.len() == 1 && queues.len() == 1, after.is_some()) {
        (true, false) => CLAIM_ONE,
        (true, true) => CLAIM_ONE_AFTER,
        (false, false) => CLAIM_QUEUES,
        (false, true) => CLAIM_QUEUES_AFTER,
    };
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let q = sqlx::query(sql).bind(&c.worker_id).bind(now).bind(lease_until).bind(kinds).bind(limit).bind(queues);
    match after {
        Some(at) => q.bind(at.priority).bind(at.run_at).bind(&at.id),
        None => q,
    }
}

/// The claimed rows; one that cannot be read is failed by itself through the fenced writer (the column
/// types make that all but impossible here, but one bad row must never stop a claim).
pub(super) fn claimed_jobs(store: &PgStore, rows: Vec<sqlx::postgres::PgRow>) -> Vec<ClaimedJob> {
    let mut jobs = Vec::with_capacity(rows.len());
    for row in &rows {
        match claimed_job(row) {
            Ok(job) => jobs.push(job),
            Err((u, attempt, run)) => {
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
                    run,
                    outcome: Outcome::Failed { error },
                    keep: Keep::Row,
                    parent: false,
                };
                if let Err(e) = store.finish(finished) {
                    tracing::warn!(error = %e, "cannot fail an unreadable job; its lease will run out");
                }
            }
        }
    }
    jobs
}

pub(in crate::storage::postgres) fn claimed_job(
    row: &sqlx::postgres::PgRow,
) -> std::result::Result<ClaimedJob, (Unreadable, i32, i32)> {
    let at = |column: &'static str| {
        move |e: sqlx::Error| {
            let unreadable = Unreadable {
                id: row.try_get(0).unwrap_or_else(|_| "?".to_owned()),
                kind: row.try_get(1).unwrap_or_else(|_| "?".to_owned()),
                column,
                found: format!("a value that cannot be decoded ({e})"),
            };
            (unreadable, row.try_get(4).unwrap_or(0), row.try_get(7).unwrap_or(0))
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
        trace: row.try_get(12).map_err(at("trace"))?,
        has_children: row.try_get(13).map_err(at("has_children"))?,
    })
}
