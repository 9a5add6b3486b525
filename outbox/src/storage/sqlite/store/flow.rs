//! SQLite's side of flow control in the worker's claim: pauses read once per claim, and the claim of a controlled
//! kind (a concurrency limit, a rate, fair share), whose choice [`crate::flow::plan`] makes.

use rusqlite::{Connection, params};

use crate::error::{Error, Result};
use crate::flow::{Bucket, Candidate, FlowKind, FlowState, Plan};

/// The pauses and holds in force at `?1`: scope, name, key, end.
pub(super) const PAUSES: &str =
    "SELECT scope, name, key, ends_at FROM outbox_pauses WHERE ends_at IS NULL OR ends_at > ?1";

/// The buckets of the rate `?1`.
pub(super) const BUCKETS: &str = "SELECT key, level, at FROM outbox_rates WHERE name = ?1";

/// The fair-share rows of the kind `?1`.
pub(super) const FAIR: &str = "SELECT key, weight, pass FROM outbox_fair WHERE name = ?1";

/// A bucket written back: name, key, the rate's amount, window and burst, level, at.
pub(super) const SAVE_BUCKET: &str = "INSERT INTO outbox_rates (name, key, amount, window_ms, burst, level, at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (name, key) DO UPDATE SET level = excluded.level, at = excluded.at";

/// A pass (or the kind's clock, under the empty key) written back.
pub(super) const SAVE_PASS: &str = "INSERT INTO outbox_fair (name, key, weight, pass) VALUES (?1, ?2, 1, ?3) \
     ON CONFLICT (name, key) DO UPDATE SET pass = excluded.pass";

/// The keys of kind `?1` that have ready jobs, one index probe each (a walk of `outbox_jobs_flow_keys`).
pub(super) const READY_KEYS: &str = "WITH RECURSIVE k(key) AS (SELECT (SELECT flow_key FROM outbox_jobs \
     WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND flow_key IS NOT NULL AND kind = ?1 \
     ORDER BY flow_key LIMIT 1) UNION ALL SELECT (SELECT j.flow_key FROM outbox_jobs j WHERE j.status = 'pending' \
     AND j.waiting = 0 AND j.scheduled = 0 AND j.flow_key IS NOT NULL AND j.kind = ?1 AND j.flow_key > k.key \
     ORDER BY j.flow_key LIMIT 1) FROM k WHERE k.key IS NOT NULL) SELECT key FROM k WHERE key IS NOT NULL";

/// Whether a second key of the kind `?1` has pending jobs (two index probes).
pub(super) const SECOND_KEY: &str = "SELECT EXISTS (SELECT 1 FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 \
     AND scheduled = 0 AND flow_key IS NOT NULL AND kind = ?1 AND flow_key > (SELECT min(flow_key) FROM outbox_jobs \
     WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND flow_key IS NOT NULL AND kind = ?1))";

/// Whether the pending jobs of the fair kind `kind` have one key (or none): see [`FlowKind::chosen`].
pub(super) fn lone_key(conn: &Connection, kind: &str) -> Result<bool> {
    let second: bool = conn
        .prepare_cached(SECOND_KEY)
        .and_then(|mut s| s.query_row(params![kind], |r| r.get(0)))
        .map_err(Error::db(format!("counting the keys of kind `{kind}`")))?;
    Ok(!second)
}

/// The queue conditions of a candidate: the worker's queues `?4` (NULL: all) less the paused ones `?5`.
macro_rules! candidates {
    ($key:expr) => {
        concat!(
            "SELECT rowid, flow_key, IFNULL(cost, 1), priority, run_at, id FROM outbox_jobs \
             WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = ?1",
            $key,
            " AND run_at <= ?2 AND (?4 IS NULL OR queue IN (SELECT value FROM json_each(?4))) \
             AND queue NOT IN (SELECT value FROM json_each(?5)) ORDER BY priority DESC, run_at, id LIMIT ?3 + 0"
        )
    };
}

/// Up to `?3` ready jobs of kind `?1` at `?2`, in claim order.
pub(super) const CANDIDATES: &str = candidates!("");
/// Up to `?3` ready jobs of kind `?1` and key `?6`.
pub(super) const KEY_CANDIDATES: &str = candidates!(" AND flow_key = ?6");
/// Up to `?3` ready jobs of kind `?1` without a key (enqueued before the kind had one).
pub(super) const KEYLESS_CANDIDATES: &str = candidates!(" AND flow_key IS NULL");

/// The pauses and holds in force, as a claim applies them, with the paused queues as the JSON array SQLite's
/// statements bind.
#[derive(Debug, Default)]
pub(super) struct Pauses {
    pub(super) of: crate::flow::Pauses,
    pub(super) queues_json: String,
}

impl std::ops::Deref for Pauses {
    type Target = crate::flow::Pauses;

    fn deref(&self) -> &crate::flow::Pauses {
        &self.of
    }
}

impl Pauses {
    pub(super) fn read(conn: &Connection, now: i64) -> Result<Pauses> {
        let ctx = || Error::db("reading the pauses");
        let mut stmt = conn.prepare_cached(PAUSES).map_err(ctx())?;
        let mut rows = stmt.query(params![now]).map_err(ctx())?;
        let mut of = crate::flow::Pauses::default();
        while let Some(row) = rows.next().map_err(ctx())? {
            let scope: String = row.get(0).map_err(ctx())?;
            of.add(&scope, row.get(1).map_err(ctx())?, row.get(2).map_err(ctx())?, row.get(3).map_err(ctx())?);
        }
        let queues_json = serde_json::to_string(&of.queues).unwrap_or_else(|_| "[]".into());
        Ok(Pauses { of, queues_json })
    }
}

/// A controlled kind's claim: the rows to take (rowids, in claim order), and the plan to write back.
pub(super) struct Chosen {
    pub(super) rowids: Vec<i64>,
    pub(super) plan: Plan,
}

/// Chooses up to `room` ready jobs of `flow` at `now`: reads its state and candidates and asks the plan.
pub(super) fn choose(
    conn: &Connection,
    flow: &FlowKind,
    queues_json: Option<&str>,
    pauses: &Pauses,
    room: usize,
    now: i64,
) -> Result<Chosen> {
    let ctx = || Error::db(format!("reading the flow state of kind `{}`", flow.kind));
    let mut state =
        FlowState { paused_keys: pauses.keys.get(&flow.kind).cloned().unwrap_or_default(), ..FlowState::default() };
    if flow.rate.is_some() {
        let mut stmt = conn.prepare_cached(BUCKETS).map_err(ctx())?;
        let rows = stmt
            .query_map(params![flow.kind], |r| Ok((r.get::<_, String>(0)?, Bucket { level: r.get(1)?, at: r.get(2)? })))
            .map_err(ctx())?;
        for row in rows {
            let (key, bucket) = row.map_err(ctx())?;
            state.buckets.insert(key, bucket);
        }
    }
    if flow.fair {
        let mut stmt = conn.prepare_cached(FAIR).map_err(ctx())?;
        let rows = stmt
            .query_map(params![flow.kind], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, f64>(2)?)))
            .map_err(ctx())?;
        for row in rows {
            let (key, weight, pass) = row.map_err(ctx())?;
            if key.is_empty() {
                state.clock = pass;
            } else {
                state.fair.insert(key, (u32::try_from(weight).unwrap_or(1), pass));
            }
        }
    }
    let room_i = i64::try_from(room).unwrap_or(i64::MAX);
    let mut quota_wake = None;
    let mut found: Vec<(i64, Candidate, i32, i64, String)> = Vec::new();
    type Found = Vec<(i64, Candidate, i32, i64, String)>;
    let read = |found: &mut Found, sql: &str, limit: i64, key: Option<&str>| -> Result<()> {
        let mut stmt = conn.prepare_cached(sql).map_err(ctx())?;
        let mut rows = match key {
            Some(k) => stmt.query(params![flow.kind, now, limit, queues_json, pauses.queues_json, k]),
            None => stmt.query(params![flow.kind, now, limit, queues_json, pauses.queues_json]),
        }
        .map_err(ctx())?;
        while let Some(r) = rows.next().map_err(ctx())? {
            // A row whose columns cannot be read is left to the claim, which fails it by itself.
            let cost = r.get::<_, i64>(2).ok().and_then(|c| u64::try_from(c).ok()).unwrap_or(1);
            found.push((
                r.get(0).map_err(ctx())?,
                Candidate { key: r.get(1).ok().flatten(), cost },
                r.get(3).unwrap_or(0),
                r.get(4).unwrap_or(0),
                r.get(5).unwrap_or_default(),
            ));
        }
        Ok(())
    };
    if flow.keyed() {
        let keys: Vec<String> = {
            let mut stmt = conn.prepare_cached(READY_KEYS).map_err(ctx())?;
            let rows = stmt.query_map(params![flow.kind], |r| r.get::<_, String>(0)).map_err(ctx())?;
            rows.collect::<rusqlite::Result<_>>().map_err(ctx())?
        };
        let (quotas, at) = crate::flow::quotas(flow, &state, &keys, room, now);
        quota_wake = at;
        let mut exhausted = quotas.len() == keys.len();
        for (key, quota) in quotas {
            let before = found.len();
            read(&mut found, KEY_CANDIDATES, i64::try_from(quota).unwrap_or(i64::MAX), Some(&key))?;
            exhausted &= found.len() - before < quota;
        }
        // Jobs without a key (enqueued before the kind had one) have no index of their own: reading them means
        // reading the kind's whole backlog. They are read once every key's ready jobs fit in the claim.
        if exhausted {
            read(&mut found, KEYLESS_CANDIDATES, room_i, None)?;
        }
        found.sort_by(|a, b| b.2.cmp(&a.2).then(a.3.cmp(&b.3)).then_with(|| a.4.cmp(&b.4)));
    } else {
        read(&mut found, CANDIDATES, room_i, None)?;
    }
    let candidates: Vec<Candidate> = found.iter().map(|f| f.1.clone()).collect();
    let mut plan = crate::flow::plan(flow, &state, &candidates, room, now);
    plan.wake_too(quota_wake);
    Ok(Chosen { rowids: plan.take.iter().map(|i| found[*i].0).collect(), plan })
}

/// Writes back what a claim of `flow` drew from its buckets and moved of its shares.
pub(super) fn save(conn: &Connection, flow: &FlowKind, plan: &Plan) -> Result<()> {
    let ctx = || Error::db(format!("writing the flow state of kind `{}`", flow.kind));
    if let Some(rate) = &flow.rate {
        let (amount, window, burst) = (rate.amount(), rate.window().as_millis(), rate.burst());
        let mut stmt = conn.prepare_cached(SAVE_BUCKET).map_err(ctx())?;
        for (key, b) in &plan.buckets {
            let window = i64::try_from(window).unwrap_or(i64::MAX);
            let (amount, burst) = (i64::try_from(amount).unwrap_or(i64::MAX), i64::try_from(burst).unwrap_or(i64::MAX));
            stmt.execute(params![flow.kind, key, amount, window, burst, b.level, b.at]).map_err(ctx())?;
        }
    }
    if flow.fair && !plan.take.is_empty() {
        let mut stmt = conn.prepare_cached(SAVE_PASS).map_err(ctx())?;
        for (key, pass) in plan.passes.iter().filter(|(k, _)| !k.is_empty()) {
            stmt.execute(params![flow.kind, key, pass]).map_err(ctx())?;
        }
        stmt.execute(params![flow.kind, "", plan.clock]).map_err(ctx())?;
    }
    Ok(())
}
