//! PostgreSQL's side of flow control in the worker's claim: the claim of a controlled kind (a rate, fair share,
//! a paused key) inside the transaction that holds the kind's advisory lock, whose choice [`crate::flow::plan`]
//! makes. The plain claims pass over paused queues and kinds in their own statements (`claim.rs`).

use std::collections::HashMap;

use sea_orm::sqlx::postgres::PgRow;
use sea_orm::sqlx::{self, Postgres, Row, Transaction};

use super::PgStoreConfig;
use crate::flow::{Bucket, Candidate, FlowKind, FlowState, Pauses, Plan};
use crate::storage::postgres::ts;

/// The pauses and holds in force at `$1`: scope, name, key, end (ms).
pub(super) const PAUSES: &str = concat!(
    "SELECT scope, name, key, (EXTRACT(EPOCH FROM ends_at) * 1000)::int8 FROM outbox_pauses \
     WHERE ends_at IS NULL OR ends_at > ",
    ts!("$1")
);

/// What a controlled kind's claim reads of kind `$1` in one round trip, as JSON text: its buckets (locked until the
/// claim commits, so a `flow::take` from outside the workers waits for the claim's write), its fair-share rows, the keys with ready jobs when `$2` (a walk of `outbox_jobs_flow_keys`, one
/// index probe per key), and its running jobs when `$3` (through the claims, as `claim::RUNNING` counts them).
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

/// Ready jobs of kind `$1` at `$2` in the queues `$4`, up to `$6[i]` of each key `$5[i]`, in claim order (`$3`
/// bounds the whole).
pub(super) const KEY_CANDIDATES: &str = concat!(
    "SELECT ",
    candidate!("p."),
    " FROM unnest($5::text[], $6::int8[]) AS k(key, n) CROSS JOIN LATERAL (SELECT * FROM outbox_jobs \
     WHERE open AND status = 'pending' AND kind = $1 AND flow_key = k.key AND queue = ANY($4) AND run_at <= ",
    ts!("$2"),
    " ORDER BY priority DESC, run_at, id LIMIT k.n) p ORDER BY p.priority DESC, p.run_at, p.id LIMIT $3"
);

/// The pauses and holds in force, from the rows of [`PAUSES`].
pub(super) fn pauses_of(rows: &[PgRow]) -> Pauses {
    let mut p = Pauses::default();
    for row in rows {
        let (Ok(scope), Ok(name), Ok(key), Ok(ends_at)) = (
            row.try_get::<String, _>(0),
            row.try_get::<String, _>(1),
            row.try_get::<String, _>(2),
            row.try_get::<Option<i64>, _>(3),
        ) else {
            continue;
        };
        p.add(&scope, name, key, ends_at);
    }
    p
}

/// Chooses up to `room` ready jobs of `flow` in `queues` at `now` inside `tx` (which holds the kind's lock): their
/// ids in claim order, and the plan to write back.
pub(super) async fn choose(
    tx: &mut Transaction<'_, Postgres>,
    flow: &FlowKind,
    queues: &[String],
    pauses: &Pauses,
    room: usize,
    now: i64,
) -> sqlx::Result<(Vec<String>, Plan)> {
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
    if room == 0 {
        return Ok((Vec::new(), Plan::default()));
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
    if flow.keyed() {
        let keys: Vec<String> =
            keys.as_array().into_iter().flatten().filter_map(|k| k.as_str().map(str::to_owned)).collect();
        let (quotas, at) = crate::flow::quotas(flow, &state, &keys, room, now);
        quota_wake = at;
        let mut exhausted = quotas.len() == keys.len();
        if !quotas.is_empty() {
            let (asked, counts): (Vec<String>, Vec<i64>) =
                quotas.into_iter().map(|(k, n)| (k, i64::try_from(n).unwrap_or(i64::MAX))).unzip();
            let q = sqlx::query(KEY_CANDIDATES).bind(&flow.kind).bind(now).bind(room_i).bind(queues);
            rows = q.bind(&asked).bind(&counts).fetch_all(&mut **tx).await?;
            let mut got: HashMap<String, i64> = HashMap::new();
            for r in &rows {
                *got.entry(r.try_get::<Option<String>, _>(1)?.unwrap_or_default()).or_default() += 1;
            }
            exhausted &= asked.iter().zip(&counts).all(|(k, n)| got.get(k).copied().unwrap_or(0) < *n);
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
    Ok((plan.take.iter().map(|i| found[*i].0.clone()).collect(), plan))
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

/// Whether `flow` needs the chosen claim (a rate, fair share or a paused key) rather than the plain claim of its
/// kind under its limit.
pub(super) fn chosen(flow: &FlowKind, pauses: &Pauses) -> bool {
    flow.rate.is_some() || flow.keyed() || pauses.keys.contains_key(&flow.kind)
}

/// The queues a controlled kind's claim reads: `queues` less the paused ones.
pub(super) fn open_queues(queues: &[String], pauses: &Pauses) -> Vec<String> {
    queues.iter().filter(|q| !pauses.queues.contains(q)).cloned().collect()
}
