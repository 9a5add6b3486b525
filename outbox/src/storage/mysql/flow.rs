//! MariaDB's side of flow control in the worker's claim: pauses read once per claim, and the claim of a controlled
//! kind (a concurrency limit, a rate, fair share), whose choice [`crate::flow::plan`] makes. A claim of such a kind
//! takes turns on the kind's row of `outbox_limits` (an upsert held to commit) before it reads anything, so what it
//! reads and writes back (running jobs, buckets, passes) no other claim of the kind changes meanwhile; it reads the
//! kind's buckets `FOR UPDATE`, so a `flow::take` from outside the workers waits for its write.

use sea_orm::{ConnectionTrait, Value};

use super::{marks, stmt};
use crate::error::{Error, Result};
use crate::flow::{Bucket, Candidate, FlowKind, FlowState, Pauses, Plan};

/// The pauses and holds in force at `$1`: scope, name, key, end.
const PAUSES: &str = "SELECT scope, name, `key`, ends_at FROM outbox_pauses WHERE ends_at IS NULL OR ends_at > $1";

/// Takes the kind's turn: its row of `outbox_limits`, held to commit.
pub(super) const TURN: &str = "INSERT INTO outbox_limits (kind) VALUES ($1) ON DUPLICATE KEY UPDATE kind = kind";

/// The buckets of the rate `$1`, locked.
const BUCKETS: &str = "SELECT `key`, level, at FROM outbox_rates WHERE name = $1 FOR UPDATE";

/// The fair-share rows of the kind `$1`.
const FAIR: &str = "SELECT `key`, CAST(weight AS SIGNED), pass FROM outbox_fair WHERE name = $1";

/// A bucket written back: name, key, the rate's amount, window and burst, level, at.
const SAVE_BUCKET: &str = "INSERT INTO outbox_rates (name, `key`, amount, window_ms, burst, level, at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON DUPLICATE KEY UPDATE level = VALUES(level), at = VALUES(at)";

/// A pass (or the kind's clock, under the empty key) written back.
const SAVE_PASS: &str = "INSERT INTO outbox_fair (name, `key`, weight, pass) VALUES ($1, $2, 1, $3) \
     ON DUPLICATE KEY UPDATE pass = VALUES(pass)";

/// The keys of kind `$2` with ready jobs (pending or running: the index holds both), one probe of the index of
/// keyed ready jobs each: the first, and the next after `$1` (see [`super::store::walk`]).
const KEYS: (&str, &str) = (
    "SELECT flow_key FROM outbox_jobs WHERE ready_flow_kind = $2 AND $1 IS NULL ORDER BY flow_key LIMIT 1",
    "SELECT flow_key FROM outbox_jobs WHERE ready_flow_kind = $2 AND flow_key > $1 ORDER BY flow_key LIMIT 1",
);

/// What a candidate is read as: key, cost, priority, run_at, id.
const CANDIDATE: &str = "SELECT flow_key, CAST(COALESCE(cost, 1) AS SIGNED), priority, run_at, id FROM outbox_jobs";

/// The pauses and holds in force at `now`.
pub(super) async fn pauses<C: ConnectionTrait>(tx: &C, now: i64) -> Result<Pauses> {
    let ctx = || Error::db("reading the pauses");
    let mut of = Pauses::default();
    for row in tx.query_all_raw(stmt(PAUSES, vec![now.into()])).await.map_err(ctx())? {
        let scope: String = row.try_get_by_index(0).map_err(ctx())?;
        of.add(
            &scope,
            row.try_get_by_index(1).map_err(ctx())?,
            row.try_get_by_index(2).map_err(ctx())?,
            row.try_get_by_index(3).map_err(ctx())?,
        );
    }
    Ok(of)
}

/// Whether the ready jobs of the fair kind `kind` have one key (or none): see [`FlowKind::chosen`]. A key whose
/// jobs all run counts too: the kind then takes the chosen claim, which finds nothing of that key to take.
pub(super) async fn lone_key<C: ConnectionTrait>(tx: &C, kind: &str) -> Result<bool> {
    Ok(super::store::walk(tx, KEYS, vec![kind.into()], 2).await?.len() < 2)
}

/// Whether kind `kind` has a pending job due by `now` in one of `queues`: a probe of the ready index per queue,
/// without a lock.
pub(super) async fn any_ready<C: ConnectionTrait>(tx: &C, kind: &str, queues: &[String], now: i64) -> Result<bool> {
    let sql = "SELECT 1 FROM outbox_jobs WHERE ready_queue = $1 AND kind = $2 AND status = 'pending' \
         AND run_at <= $3 LIMIT 1";
    for queue in queues {
        let values = vec![queue.as_str().into(), kind.into(), now.into()];
        let row =
            tx.query_one_raw(stmt(sql, values)).await.map_err(Error::db(format!("looking for jobs of `{kind}`")))?;
        if row.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A controlled kind's claim: the jobs to take (ids, in claim order), and the plan to write back.
pub(super) struct Chosen {
    pub(super) ids: Vec<String>,
    pub(super) plan: Plan,
}

/// One candidate as read: what the plan reads, and the claim order (priority, run_at, id).
type Found = (Candidate, i64, i64, String);

/// Chooses up to `room` ready jobs of `flow` from `queues` at `now`: reads its state and candidates and asks the plan.
pub(super) async fn choose<C: ConnectionTrait>(
    tx: &C,
    flow: &FlowKind,
    queues: &[String],
    pauses: &Pauses,
    room: usize,
    now: i64,
) -> Result<Chosen> {
    let ctx = || Error::db(format!("reading the flow state of kind `{}`", flow.kind));
    let kind = flow.kind.as_str();
    let mut state =
        FlowState { paused_keys: pauses.keys.get(kind).cloned().unwrap_or_default(), ..FlowState::default() };
    if flow.rate.is_some() {
        for row in tx.query_all_raw(stmt(BUCKETS, vec![kind.into()])).await.map_err(ctx())? {
            let key: String = row.try_get_by_index(0).map_err(ctx())?;
            let bucket =
                Bucket { level: row.try_get_by_index(1).map_err(ctx())?, at: row.try_get_by_index(2).map_err(ctx())? };
            state.buckets.insert(key, bucket);
        }
    }
    if flow.fair {
        for row in tx.query_all_raw(stmt(FAIR, vec![kind.into()])).await.map_err(ctx())? {
            let key: String = row.try_get_by_index(0).map_err(ctx())?;
            let weight: i64 = row.try_get_by_index(1).map_err(ctx())?;
            let pass: f64 = row.try_get_by_index(2).map_err(ctx())?;
            if key.is_empty() {
                state.clock = pass;
            } else {
                state.fair.insert(key, (u32::try_from(weight).unwrap_or(1), pass));
            }
        }
    }
    let mut found: Vec<Found> = Vec::new();
    let mut quota_wake = None;
    if queues.is_empty() {
        return Ok(Chosen { ids: Vec::new(), plan: crate::flow::plan(flow, &state, &[], room, now) });
    }
    let in_queues = format!("queue IN ({})", marks(5, queues.len()));
    if flow.keyed() {
        let keys = super::store::walk(tx, KEYS, vec![kind.into()], usize::MAX).await?;
        let (quotas, at) = crate::flow::quotas(flow, &state, &keys, room, now);
        quota_wake = at;
        let mut exhausted = quotas.len() == keys.len();
        let of_key = format!(
            "{CANDIDATE} WHERE ready_flow_head = UNHEX(MD5(CONCAT($1, CHAR(0), $4))) AND kind = $1 AND flow_key = $4 \
             AND status = 'pending' AND run_at <= $2 AND {in_queues} ORDER BY priority DESC, run_at, id LIMIT $3"
        );
        for (key, quota) in quotas {
            let before = found.len();
            read(tx, &of_key, kind, now, quota, Some(&key), queues, &mut found).await?;
            exhausted &= found.len() - before < quota;
        }
        // Jobs without a key (enqueued before the kind had one) are read once every key's ready jobs fit.
        if exhausted {
            let keyless = format!(
                "{CANDIDATE} WHERE ready_queue IS NOT NULL AND kind = $1 AND flow_key IS NULL AND status = 'pending' \
                 AND run_at <= $2 AND {in_queues} AND $4 IS NULL ORDER BY priority DESC, run_at, id LIMIT $3"
            );
            read(tx, &keyless, kind, now, room, None, queues, &mut found).await?;
        }
    } else {
        let any = format!(
            "{CANDIDATE} WHERE ready_queue IS NOT NULL AND kind = $1 AND status = 'pending' AND run_at <= $2 \
             AND {in_queues} AND $4 IS NULL ORDER BY priority DESC, run_at, id LIMIT $3"
        );
        read(tx, &any, kind, now, room, None, queues, &mut found).await?;
    }
    found.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)).then_with(|| a.3.cmp(&b.3)));
    let candidates: Vec<Candidate> = found.iter().map(|f| f.0.clone()).collect();
    let mut plan = crate::flow::plan(flow, &state, &candidates, room, now);
    plan.wake_too(quota_wake);
    Ok(Chosen { ids: plan.take.iter().map(|i| found[*i].3.clone()).collect(), plan })
}

/// Reads the candidates `sql` selects (kind `$1`, now `$2`, at most `$3`, key `$4`, the queues from `$5`) into
/// `found`.
#[allow(clippy::too_many_arguments)]
async fn read<C: ConnectionTrait>(
    tx: &C,
    sql: &str,
    kind: &str,
    now: i64,
    limit: usize,
    key: Option<&str>,
    queues: &[String],
    found: &mut Vec<Found>,
) -> Result<()> {
    let ctx = || Error::db(format!("reading the ready jobs of kind `{kind}`"));
    let mut values: Vec<Value> = vec![kind.into(), now.into(), (limit as u64).into(), key.map(str::to_owned).into()];
    values.extend(queues.iter().map(|q| Value::from(q.as_str())));
    for row in tx.query_all_raw(stmt(sql, values)).await.map_err(ctx())? {
        // A cost that is NULL or cannot be read counts 1, as on the other engines.
        let cost = row.try_get_by_index::<i64>(1).ok().and_then(|c| u64::try_from(c).ok()).unwrap_or(1);
        found.push((
            Candidate { key: row.try_get_by_index(0).map_err(ctx())?, cost },
            row.try_get_by_index(2).map_err(ctx())?,
            row.try_get_by_index(3).map_err(ctx())?,
            row.try_get_by_index(4).map_err(ctx())?,
        ));
    }
    Ok(())
}

/// Writes back what a claim of `flow` drew from its buckets and moved of its shares.
pub(super) async fn save<C: ConnectionTrait>(tx: &C, flow: &FlowKind, plan: &Plan) -> Result<()> {
    let ctx = || Error::db(format!("writing the flow state of kind `{}`", flow.kind));
    let kind = flow.kind.as_str();
    if let Some(rate) = &flow.rate {
        let window = i64::try_from(rate.window().as_millis()).unwrap_or(i64::MAX);
        let (amount, burst) =
            (i64::try_from(rate.amount()).unwrap_or(i64::MAX), i64::try_from(rate.burst()).unwrap_or(i64::MAX));
        for (key, b) in &plan.buckets {
            let values: Vec<Value> = vec![
                kind.into(),
                key.as_str().into(),
                amount.into(),
                window.into(),
                burst.into(),
                b.level.into(),
                b.at.into(),
            ];
            tx.execute_raw(stmt(SAVE_BUCKET, values)).await.map_err(ctx())?;
        }
    }
    if flow.fair && !plan.take.is_empty() {
        for (key, pass) in plan.passes.iter().filter(|(k, _)| !k.is_empty()) {
            tx.execute_raw(stmt(SAVE_PASS, vec![kind.into(), key.as_str().into(), (*pass).into()]))
                .await
                .map_err(ctx())?;
        }
        tx.execute_raw(stmt(SAVE_PASS, vec![kind.into(), "".into(), plan.clock.into()])).await.map_err(ctx())?;
    }
    Ok(())
}
