//! PostgreSQL's side of flow control in the worker's claim: the claim of a controlled kind (a rate, fair share,
//! a paused key) inside the transaction that holds the kind's advisory lock, whose choice [`crate::flow::plan`]
//! makes. The plain claims pass over paused queues and kinds in their own statements (`claim.rs`).

use std::collections::{HashMap, HashSet};

use sea_orm::sqlx::postgres::{PgPool, PgRow};
use sea_orm::sqlx::{self, Postgres, Row, Transaction};

use super::claim::{CURSOR_SPAN_MS, Cursor, LIMIT_LOCK, RUNNING, claim_query};
use super::{PgStoreConfig, retrying};
use crate::error::Result;
use crate::flow::{Bucket, Candidate, FlowKind, FlowState, Pauses, Plan};
use crate::storage::postgres::ts;

/// The pauses and holds in force at `$1` (scope, name, key, end in ms); then the kinds of `$2` that have a ready
/// job at `$1` in the queues `$3` (scope `''`, name the kind), so a claim opens no transaction for a controlled
/// kind with nothing to claim (without that, each idle controlled kind cost every worker a transaction that took
/// the kind's lock on every claim: eight workers drained 20,000 jobs of a plain kind in 162 s beside four idle
/// controlled kinds, 16 s without them); then for each fair kind of `$4` whether a second key has open jobs
/// (scope `'keys'`, end 1 or 0: two index probes, from the end of the kind's range, where its newest jobs are,
/// as [`super::claim::QUEUES`] walks), so a lone key's jobs are claimed as a plain kind's are.
pub(super) const PAUSES: &str = concat!(
    "SELECT scope, name, key, (EXTRACT(EPOCH FROM ends_at) * 1000)::int8 FROM outbox_pauses \
     WHERE ends_at IS NULL OR ends_at > ",
    ts!("$1"),
    " UNION ALL SELECT '', k, '', NULL FROM unnest($2::text[]) AS k WHERE EXISTS (SELECT 1 FROM outbox_jobs \
     WHERE queue = ANY($3) AND kind = k AND open AND status = 'pending' AND run_at <= ",
    ts!("$1"),
    ") UNION ALL SELECT 'keys', k, '', ((SELECT flow_key FROM outbox_jobs WHERE open AND flow_key IS NOT NULL \
     AND kind = k AND flow_key < (SELECT flow_key FROM outbox_jobs WHERE open AND flow_key IS NOT NULL AND kind = k \
     ORDER BY flow_key DESC LIMIT 1) ORDER BY flow_key DESC LIMIT 1) IS NOT NULL)::int::int8 \
     FROM unnest($4::text[]) AS k"
);

/// What a controlled kind's claim reads of kind `$1` in one round trip, as JSON text: its buckets (locked until the
/// claim commits, so a `flow::take` from outside the workers waits for the claim's write), its fair-share rows, the
/// keys with open jobs when `$2` (a walk of `outbox_jobs_flow_keys`, one index probe per key), and its running jobs when `$3` (through the claims, as `claim::RUNNING` counts them).
pub(super) const STATE: &str = "SELECT \
     (SELECT COALESCE(json_agg(json_build_array(b.key, b.level, b.at)), '[]') FROM \
       (SELECT key, level, at FROM outbox_rates WHERE name = $1 FOR UPDATE) b)::text, \
     (SELECT COALESCE(json_agg(json_build_array(f.key, f.weight, f.pass)), '[]') FROM outbox_fair f \
       WHERE f.name = $1)::text, \
     (WITH RECURSIVE k(key) AS ((SELECT flow_key FROM outbox_jobs WHERE $2 AND open AND flow_key IS NOT NULL \
       AND kind = $1 ORDER BY flow_key LIMIT 1) UNION ALL SELECT (SELECT j.flow_key FROM outbox_jobs j \
       WHERE j.open AND j.flow_key IS NOT NULL AND j.kind = $1 AND j.flow_key > k.key ORDER BY j.flow_key LIMIT 1) \
       FROM k WHERE k.key IS NOT NULL) SELECT COALESCE(json_agg(key), '[]') FROM k WHERE key IS NOT NULL)::text, \
     CASE WHEN $3 THEN (SELECT count(*) FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) \
       FROM outbox_claims)) AND (status || '') = 'claimed' AND kind = $1) ELSE 0 END";

/// The columns of a candidate.
macro_rules! candidate {
    ($alias:literal) => {
        concat!(
            $alias,
            "id, ",
            $alias,
            "flow_key, COALESCE(",
            $alias,
            "cost, 1)::int8, ",
            $alias,
            "priority, \
             (EXTRACT(EPOCH FROM ",
            $alias,
            "run_at) * 1000)::int8"
        )
    };
}

/// Up to `$3` ready jobs of kind `$1` at `$2` in the queues `$4`, in claim order; without a key when `$5`.
pub(super) const CANDIDATES: &str = concat!(
    "SELECT ",
    candidate!(""),
    " FROM outbox_jobs WHERE open AND status = 'pending' AND kind = $1 AND queue = ANY($4) AND run_at <= ",
    ts!("$2"),
    " AND ($5 = false OR flow_key IS NULL) ORDER BY priority DESC, run_at, id LIMIT $3"
);

/// The columns of a key's candidates in [`KEY_CANDIDATES`].
macro_rules! key_candidate {
    () => {
        "id, flow_key, COALESCE(cost, 1)::int8 AS cost, priority, (EXTRACT(EPOCH FROM run_at) * 1000)::int8 AS run_ms \
         FROM outbox_jobs WHERE open AND status = 'pending' AND kind = $1 AND flow_key = k.key AND queue = ANY($4) \
         AND run_at <= "
    };
}

/// Ready jobs of kind `$1` at `$2` in the queues `$4`, in claim order (`$3` bounds the whole): up to `$6[i]` of
/// each key `$5[i]` from the head of its range, and up to `$8[i]` of each key `$7[i]` after its cursor (within
/// priority `$9[i]`, after run time `$10[i]` and id `$11[i]`; see [`FlowMemory`]).
pub(super) const KEY_CANDIDATES: &str = concat!(
    "SELECT id, flow_key, cost, priority, run_ms FROM (SELECT p.* FROM unnest($5::text[], $6::int8[]) AS k(key, n) \
     CROSS JOIN LATERAL (SELECT ",
    key_candidate!(),
    ts!("$2"),
    " ORDER BY priority DESC, run_at, id LIMIT k.n) p UNION ALL SELECT p.* FROM unnest($7::text[], $8::int8[], \
     $9::int4[], $10::int8[], $11::text[]) AS k(key, n, pr, ra, after) CROSS JOIN LATERAL (SELECT ",
    key_candidate!(),
    ts!("$2"),
    " AND priority = k.pr AND (run_at, id) > (",
    ts!("k.ra"),
    ", k.after) ORDER BY priority DESC, run_at, id LIMIT k.n) p) c ORDER BY priority DESC, run_ms, id LIMIT $3"
);

/// What a claim reads before its controlled kinds' claims ([`PAUSES`]).
#[derive(Debug, Default)]
pub(super) struct Before {
    pub(super) pauses: Pauses,
    /// The controlled kinds with a ready job.
    pub(super) ready: HashSet<String>,
    /// The fair kinds whose open jobs have one key (or none).
    pub(super) lone: HashSet<String>,
}

/// What the rows of [`PAUSES`] say.
pub(super) fn before_of(rows: &[PgRow]) -> Before {
    let mut b = Before::default();
    for row in rows {
        let (Ok(scope), Ok(name), Ok(key), Ok(ends_at)) = (
            row.try_get::<String, _>(0),
            row.try_get::<String, _>(1),
            row.try_get::<String, _>(2),
            row.try_get::<Option<i64>, _>(3),
        ) else {
            continue;
        };
        match scope.as_str() {
            "" => {
                b.ready.insert(name);
            }
            "keys" => {
                if ends_at == Some(0) {
                    b.lone.insert(name);
                }
            }
            _ => b.pauses.add(&scope, name, key, ends_at),
        }
    }
    b
}

/// What [`choose`] chose.
pub(super) struct Chosen {
    /// The jobs to claim, in claim order.
    pub(super) ids: Vec<String>,
    /// What to write back.
    pub(super) plan: Plan,
    /// The keys' cursors once the claim commits: where each key read ended, or none to read its head next.
    pub(super) cursors: Vec<(String, Option<Cursor>)>,
}

/// Chooses up to `room` ready jobs of `flow` in `queues` at `now` inside `tx` (which holds the kind's lock),
/// reading each key of a keyed kind on from its cursor in `cursors` when it has one.
pub(super) async fn choose(
    tx: &mut Transaction<'_, Postgres>,
    flow: &FlowKind,
    queues: &[String],
    pauses: &Pauses,
    cursors: HashMap<String, Cursor>,
    room: usize,
    now: i64,
) -> sqlx::Result<Chosen> {
    let mut state =
        FlowState { paused_keys: pauses.keys.get(&flow.kind).cloned().unwrap_or_default(), ..FlowState::default() };
    let read = sqlx::query(STATE).bind(&flow.kind).bind(flow.keyed()).bind(flow.concurrency.is_some());
    let row = read.fetch_one(&mut **tx).await?;
    let json = |i: usize| -> sqlx::Result<serde_json::Value> {
        let text: String = row.try_get(i)?;
        serde_json::from_str(&text).map_err(|e| sqlx::Error::Decode(Box::new(e)))
    };
    let (buckets, fair, keys, running): (_, _, _, i64) = (json(0)?, json(1)?, json(2)?, row.try_get(3)?);
    let mut room = room;
    if let Some(cap) = flow.concurrency {
        room = room.min(usize::try_from(i64::from(cap) - running).unwrap_or(0));
    }
    let none = || Chosen { ids: Vec::new(), plan: Plan::default(), cursors: Vec::new() };
    if room == 0 {
        return Ok(none());
    }
    for b in buckets.as_array().into_iter().flatten() {
        if let (Some(key), Some(level), Some(at)) = (b[0].as_str(), b[1].as_f64(), b[2].as_i64()) {
            state.buckets.insert(key.to_owned(), Bucket { level, at });
        }
    }
    for f in fair.as_array().into_iter().flatten() {
        if let (Some(key), Some(weight), Some(pass)) = (f[0].as_str(), f[1].as_u64(), f[2].as_f64()) {
            if key.is_empty() {
                state.clock = pass;
            } else {
                state.fair.insert(key.to_owned(), (u32::try_from(weight).unwrap_or(1), pass));
            }
        }
    }
    let room_i = i64::try_from(room).unwrap_or(i64::MAX);
    let mut rows = Vec::new();
    let mut quota_wake = None;
    // The keys read from their cursor (and when the head was read last), and those whose cursor came up short.
    let mut after: HashMap<String, i64> = HashMap::new();
    let mut spent: Vec<String> = Vec::new();
    if flow.keyed() {
        let keys: Vec<String> =
            keys.as_array().into_iter().flatten().filter_map(|k| k.as_str().map(str::to_owned)).collect();
        let (quotas, at) = crate::flow::quotas(flow, &state, &keys, room, now);
        quota_wake = at;
        let mut exhausted = quotas.len() == keys.len();
        if !quotas.is_empty() {
            let (mut head, mut head_n) = (Vec::new(), Vec::new());
            let (mut on, mut on_n, mut on_pr, mut on_ra, mut on_id) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for (key, n) in &quotas {
                let n = i64::try_from(*n).unwrap_or(i64::MAX);
                if let Some(c) = cursors.get(key) {
                    after.insert(key.clone(), c.since);
                    on.push(key.clone());
                    on_n.push(n);
                    on_pr.push(c.priority);
                    on_ra.push(c.run_at);
                    on_id.push(c.id.clone());
                } else {
                    head.push(key.clone());
                    head_n.push(n);
                }
            }
            let q = sqlx::query(KEY_CANDIDATES).bind(&flow.kind).bind(now).bind(room_i).bind(queues);
            let q = q.bind(&head).bind(&head_n).bind(&on).bind(&on_n).bind(&on_pr).bind(&on_ra).bind(&on_id);
            rows = q.fetch_all(&mut **tx).await?;
            let mut got: HashMap<String, i64> = HashMap::new();
            for r in &rows {
                *got.entry(r.try_get::<Option<String>, _>(1)?.unwrap_or_default()).or_default() += 1;
            }
            // A key whose cursor found nothing has its head read at once (a job that sorts before the cursor:
            // a higher priority, an earlier run time); one whose cursor found fewer than asked lets them start,
            // and its head is read by the next claim. Either way its cursor is spent.
            let (mut again, mut again_n) = (Vec::new(), Vec::new());
            for (k, n) in on.iter().zip(&on_n) {
                match got.get(k).copied().unwrap_or(0) {
                    0 => {
                        again.push(k.clone());
                        again_n.push(*n);
                    }
                    g if g < *n => spent.push(k.clone()),
                    _ => {}
                }
            }
            if !again.is_empty() {
                let (none, none_n, none_pr): (Vec<String>, Vec<i64>, Vec<i32>) = Default::default();
                let q = sqlx::query(KEY_CANDIDATES).bind(&flow.kind).bind(now).bind(room_i).bind(queues);
                let q = q.bind(&again).bind(&again_n).bind(&none).bind(&none_n).bind(&none_pr);
                let more = q.bind(&none_n).bind(&none).fetch_all(&mut **tx).await?;
                for r in &more {
                    *got.entry(r.try_get::<Option<String>, _>(1)?.unwrap_or_default()).or_default() += 1;
                }
                rows.extend(more);
                for k in &again {
                    after.remove(k);
                }
                spent.extend(again);
            }
            // Every key came up short: its ready jobs all fit in the claim (a short cursor's key may have jobs
            // before its cursor, read by the next claim; the jobs without a key are read now all the same).
            exhausted &=
                quotas.iter().all(|(k, n)| got.get(k).copied().unwrap_or(0) < i64::try_from(*n).unwrap_or(i64::MAX));
        }
        // Jobs without a key (enqueued before the kind had one) have no index of their own: reading them means
        // reading the kind's whole backlog. They are read once every key's ready jobs fit in the claim.
        if exhausted {
            let q = sqlx::query(CANDIDATES).bind(&flow.kind).bind(now).bind(room_i).bind(queues).bind(true);
            rows.extend(q.fetch_all(&mut **tx).await?);
        }
    } else {
        let q = sqlx::query(CANDIDATES).bind(&flow.kind).bind(now).bind(room_i).bind(queues).bind(false);
        rows = q.fetch_all(&mut **tx).await?;
    }
    let mut found: Vec<(String, Candidate, i32, i64)> = Vec::with_capacity(rows.len());
    for r in &rows {
        let cost = r.try_get::<i64, _>(2).ok().and_then(|c| u64::try_from(c).ok()).unwrap_or(1);
        found.push((
            r.try_get(0)?,
            Candidate { key: r.try_get(1).ok().flatten(), cost },
            r.try_get(3).unwrap_or(0),
            r.try_get(4).unwrap_or(0),
        ));
    }
    found.sort_by(|a, b| b.2.cmp(&a.2).then(a.3.cmp(&b.3)).then_with(|| a.0.cmp(&b.0)));
    let candidates: Vec<Candidate> = found.iter().map(|f| f.1.clone()).collect();
    let mut plan = crate::flow::plan(flow, &state, &candidates, room, now);
    plan.wake_too(quota_wake);
    // Each key's cursor moves to the last job the claim takes of it (in claim order, so the last one seen). A key
    // whose cursor came up short reads its head next time; so does one read from its head that took nothing.
    let mut cursors: HashMap<String, Option<Cursor>> = spent.into_iter().map(|k| (k, None)).collect();
    for &i in &plan.take {
        let (id, c, priority, run_at) = &found[i];
        let Some(key) = &c.key else { continue };
        if cursors.get(key).is_some_and(Option::is_none) && after.contains_key(key) {
            continue;
        }
        let since = after.get(key).copied().unwrap_or(now);
        let next = Cursor { priority: *priority, run_at: *run_at, id: id.clone(), since };
        cursors.insert(key.clone(), Some(next));
    }
    let ids = plan.take.iter().map(|i| found[*i].0.clone()).collect();
    Ok(Chosen { ids, plan, cursors: cursors.into_iter().collect() })
}

/// Claims the chosen jobs `ids` for the worker `c` and writes back what the claim drew from `flow`'s buckets and
/// moved of its shares, in one statement ([`super::claim::CLAIM_IDS_SAVING`]).
#[allow(clippy::too_many_arguments)]
pub(super) async fn claim_and_save(
    tx: &mut Transaction<'_, Postgres>,
    c: &PgStoreConfig,
    flow: &FlowKind,
    plan: &Plan,
    ids: &[String],
    now: i64,
    lease_until: i64,
) -> sqlx::Result<Vec<PgRow>> {
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let (amount, window, burst) = flow.rate.map_or((1, 1, 1), |r| {
        (as_i64(r.amount()), i64::try_from(r.window().as_millis()).unwrap_or(i64::MAX), as_i64(r.burst()))
    });
    let buckets = if flow.rate.is_some() { plan.buckets.as_slice() } else { &[] };
    let keys: Vec<&str> = buckets.iter().map(|(k, _)| k.as_str()).collect();
    let levels: Vec<f64> = buckets.iter().map(|(_, b)| b.level).collect();
    let ats: Vec<i64> = buckets.iter().map(|(_, b)| b.at).collect();
    let mut fair_keys: Vec<&str> = Vec::new();
    let mut passes: Vec<f64> = Vec::new();
    if flow.fair && !plan.take.is_empty() {
        for (k, p) in plan.passes.iter().filter(|(k, _)| !k.is_empty()) {
            fair_keys.push(k);
            passes.push(*p);
        }
        fair_keys.push("");
        passes.push(plan.clock);
    }
    sqlx::query(sqlx::AssertSqlSafe(super::claim::CLAIM_IDS_SAVING.as_str()))
        .bind(&c.worker_id)
        .bind(now)
        .bind(lease_until)
        .bind(ids)
        .bind(&flow.kind)
        .bind(amount)
        .bind(window)
        .bind(burst)
        .bind(&keys)
        .bind(&levels)
        .bind(&ats)
        .bind(&fair_keys)
        .bind(&passes)
        .fetch_all(&mut **tx)
        .await
}

/// The queues a controlled kind's claim reads: `queues` less the paused ones.
pub(super) fn open_queues(queues: &[String], pauses: &Pauses) -> Vec<String> {
    queues.iter().filter(|q| !pauses.queues.contains(q)).cloned().collect()
}

/// What a worker remembers of its claims of controlled kinds.
#[derive(Debug, Default)]
pub(in crate::storage::postgres) struct FlowMemory {
    /// The controlled kinds whose last claim by this worker took jobs. Before a claim opens the transaction of
    /// any other controlled kind (and takes its lock) it asks whether the kind has a ready job
    /// ([`super::flow::PAUSES`]); a kind that took jobs last time is claimed without asking, as a probe of the
    /// ready index visits the kind's running jobs (6.6 ms of each claim's 11 while one worker drained 20,000
    /// jobs at concurrency 100).
    pub(super) busy: std::collections::HashSet<String>,
    /// Where the last claim of each key of a keyed kind ended, by kind and key: the next claim reads the key's
    /// jobs on from there, as [`Cursor`] does for a kind, past the jobs claimed before them at the head of the
    /// key's range of `outbox_jobs_flow_keys` (which a claimed job stays in until it ends).
    pub(super) cursors: std::collections::HashMap<String, std::collections::HashMap<String, Cursor>>,
}

/// A worker's [`FlowMemory`].
pub(in crate::storage::postgres) type FlowMemoryCell = std::sync::Mutex<FlowMemory>;

/// Claims jobs of one controlled kind in a transaction that holds the kind's advisory lock while it counts the
/// running jobs, reads the kind's rate and shares and claims what they leave: claimers on every machine take
/// turns. Also when a job left behind may be taken.
#[allow(clippy::too_many_arguments)]
pub(super) async fn claim_limited(
    pool: &PgPool,
    c: &PgStoreConfig,
    queues: &[String],
    flow: &crate::flow::FlowKind,
    pauses: &Pauses,
    lone: bool,
    memory: Option<&FlowMemoryCell>,
    left: usize,
    now: i64,
    lease_until: i64,
) -> Result<(Vec<sqlx::postgres::PgRow>, Option<i64>)> {
    let kind = flow.kind.as_str();
    let kinds = [kind.to_owned()];
    let open = super::flow::open_queues(queues, pauses);
    if open.is_empty() {
        return Ok((Vec::new(), None));
    }
    if !flow.chosen(pauses, lone) {
        let Some(cap) = flow.concurrency else {
            let rows = retrying("claiming jobs", || async {
                claim_query(c, &kinds, queues, left, now, lease_until, None).fetch_all(pool).await
            })
            .await?;
            return Ok((rows, None));
        };
        return retrying("claiming jobs of a limited kind", || async {
            let mut tx = pool.begin().await?;
            sqlx::query(LIMIT_LOCK).bind(kind).execute(&mut *tx).await?;
            let running: i64 = sqlx::query_scalar(RUNNING).bind(kind).fetch_one(&mut *tx).await?;
            let room = usize::try_from(i64::from(cap) - running).unwrap_or(0).min(left);
            let rows = if room == 0 {
                Vec::new()
            } else {
                claim_query(c, &kinds, queues, room, now, lease_until, None).fetch_all(&mut *tx).await?
            };
            tx.commit().await?;
            Ok((rows, None))
        })
        .await;
    }
    // The transaction begins with the kind's lock, in one round trip (the lock `LIMIT_LOCK` takes, the name written
    // into the statement: a simple query takes no parameters). Its statements are planned once per connection, as
    // the claimer's are: on the background pool they were planned for their values each time, 2 ms a statement at
    // 100,000 pending jobs, three times the work of the claim itself (`EXPLAIN ANALYZE`).
    let begin = format!(
        "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; \
         SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ' outbox limit ' || '{}', 0))",
        kind.replace('\'', "''")
    );
    retrying("claiming jobs of a controlled kind", || async {
        let mut tx = pool.begin_with(sqlx::AssertSqlSafe(begin.clone())).await?;
        // The clock read once the kind's lock is held: a claimer that waited for it must not draw from the bucket
        // at a time before the claimer it waited for.
        let now = now.max(crate::storage::now_ms());
        let cursors = memory.map(|cell| {
            let memory = cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let fresh = |c: &&Cursor| (0..CURSOR_SPAN_MS).contains(&now.saturating_sub(c.since));
            let of_kind = memory.cursors.get(kind).into_iter().flatten();
            of_kind.filter(|(_, c)| fresh(c)).map(|(k, c)| (k.clone(), c.clone())).collect()
        });
        let chosen = super::flow::choose(&mut tx, flow, &open, pauses, cursors.unwrap_or_default(), left, now).await?;
        let (ids, plan) = (&chosen.ids, &chosen.plan);
        let mut rows = Vec::new();
        if !ids.is_empty() {
            rows = super::flow::claim_and_save(&mut tx, c, flow, plan, ids, now, lease_until).await?;
        }
        tx.commit().await?;
        if let Some(cell) = memory {
            let mut memory = cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let of_kind = memory.cursors.entry(kind.to_owned()).or_default();
            for (key, cursor) in &chosen.cursors {
                match cursor {
                    Some(cursor) => of_kind.insert(key.clone(), cursor.clone()),
                    None => of_kind.remove(key),
                };
            }
            // Cursors past their span are read from the head anyway: keys that stopped getting jobs leave none.
            of_kind.retain(|_, c| now.saturating_sub(c.since) < CURSOR_SPAN_MS);
        }
        let plan = chosen.plan;
        Ok((rows, plan.wake_at))
    })
    .await
}
