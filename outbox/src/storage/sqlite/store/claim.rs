//! The claim: due jobs of the worker's kinds and queues, fleet-wide limits first, in one statement each.

use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

use super::flow::{Pauses, choose, save};
use super::{StoreConfig, insert_batch_event};
use crate::error::{Error, Result};
use crate::storage::worker_store::limited_share;
use crate::storage::{ClaimedJob, Unreadable};

/// Scheduled jobs that have come due join the ready indexes, the earliest first, a bounded number per claim,
/// in the claim's write transaction (so the claim sees them).
pub(super) const PROMOTE: &str = "UPDATE outbox_jobs SET scheduled = 0 WHERE rowid IN (SELECT rowid FROM outbox_jobs \
     WHERE status = 'pending' AND scheduled = 1 AND run_at <= ?1 ORDER BY run_at LIMIT ?2)";

/// Scheduled jobs let in by one claim at most; the rest follow with the next claims.
const PROMOTE_PER_CLAIM: i64 = 1_000;

/// How many jobs of the limited kinds `?1` (a JSON array) run now.
pub(super) const RUNNING: &str =
    "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed' AND kind IN (SELECT value FROM json_each(?1))";

/// A claimed row that cannot be read, failed by its rowid with the error `?1` at `?2`.
pub(super) const FAIL_UNREADABLE: &str = "UPDATE outbox_jobs SET status = 'failed', last_error = ?1, lease_expires_at = NULL, \
     updated_at = ?2 WHERE rowid = ?3";

/// Claims up to `limit` due jobs: first those of controlled kinds (a fleet-wide limit, a rate, fair share), each
/// up to what its controls leave (what they read and the claim share the write transaction, so no other claimer
/// can slip in between; a limit's count reads claimed rows through the lease index, at most the fleet's
/// concurrency of them), then the others. Paused queues and kinds are passed over. `wake` is set to when a job
/// left behind for a rate or a hold may be taken.
pub(in crate::storage::sqlite) fn claim(
    conn: &Connection,
    config: &StoreConfig,
    limit: usize,
    now: i64,
    lease_until: i64,
    unreadable: &mut Vec<Unreadable>,
    wake: &mut Option<i64>,
) -> Result<Vec<ClaimedJob>> {
    conn.prepare_cached(PROMOTE)
        .and_then(|mut s| s.execute(params![now, PROMOTE_PER_CLAIM]))
        .map_err(Error::db("letting in scheduled jobs that are due"))?;
    let pauses = Pauses::read(conn, now)?;
    let mut wake_at = pauses.wake_at;
    let mut claimed = Vec::new();
    for (kinds_json, flow) in &config.flows {
        let left = limit - claimed.len();
        if left == 0 {
            break;
        }
        if pauses.kinds.contains(&flow.kind) {
            continue;
        }
        let mut room = limited_share(left, config.kinds_json != "[]");
        if let Some(cap) = flow.concurrency {
            let running: i64 = conn
                .prepare_cached(RUNNING)
                .and_then(|mut s| s.query_row(params![kinds_json], |row| row.get(0)))
                .map_err(Error::db("counting running jobs of a limited kind"))?;
            room = room.min(usize::try_from(i64::from(cap) - running).unwrap_or(0));
        }
        if room == 0 {
            continue;
        }
        let lone =
            flow.may_be_lone() && !pauses.keys.contains_key(&flow.kind) && super::flow::lone_key(conn, &flow.kind)?;
        if !flow.chosen(&pauses, lone) {
            let kinds = Kinds { json: kinds_json, one: true, pick: Pick::Ready, paused_queues: &pauses };
            claimed.extend(claim_of(conn, config, kinds, room, now, lease_until, unreadable)?);
            continue;
        }
        let chosen = choose(conn, flow, config.queues_json.as_deref(), &pauses, room, now)?;
        if let Some(at) = chosen.plan.wake_at {
            wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
        }
        if !chosen.rowids.is_empty() {
            let rowids = serde_json::to_string(&chosen.rowids)
                .map_err(|e| Error::Internal(format!("encoding the jobs to claim: {e}")))?;
            let kinds = Kinds { json: &rowids, one: true, pick: Pick::Rows, paused_queues: &pauses };
            claimed.extend(claim_of(conn, config, kinds, chosen.rowids.len(), now, lease_until, unreadable)?);
            save(conn, flow, &chosen.plan)?;
        }
    }
    *wake = wake_at;
    let left = limit - claimed.len();
    if left > 0 && config.kinds_json != "[]" {
        let paused: Vec<&String> = pauses.kinds.iter().collect();
        let kinds: Vec<String> = if paused.is_empty() {
            Vec::new()
        } else {
            let all: Vec<String> = serde_json::from_str(&config.kinds_json).unwrap_or_default();
            all.into_iter().filter(|k| !paused.contains(&k)).collect()
        };
        let json = if paused.is_empty() {
            config.kinds_json.clone()
        } else {
            serde_json::to_string(&kinds).map_err(|e| Error::Internal(format!("encoding kind names: {e}")))?
        };
        if json != "[]" {
            let one = if paused.is_empty() { config.one_kind } else { kinds.len() == 1 };
            let kinds = Kinds { json: &json, one, pick: Pick::Ready, paused_queues: &pauses };
            claimed.extend(claim_of(conn, config, kinds, left, now, lease_until, unreadable)?);
        }
    }
    Ok(claimed)
}

/// What a claim takes: ready jobs of some kinds, or rows already chosen.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pick {
    /// Due jobs of the kinds, from the ready indexes.
    Ready,
    /// The rows whose rowids the JSON array lists, if still pending (a controlled kind's choice).
    Rows,
}

/// The kinds a claim takes: their JSON array (or the rowids' for [`Pick::Rows`]), whether it names exactly one,
/// and the paused queues it passes over.
#[derive(Clone, Copy)]
struct Kinds<'a> {
    json: &'a str,
    one: bool,
    pick: Pick,
    paused_queues: &'a Pauses,
}

/// Claims up to `limit` due jobs of `kinds` that nothing in their sequence holds back. A claimed row
/// that cannot be read is failed by itself in the same transaction (by rowid: even its id may be unreadable)
/// and the rest are returned.
fn claim_of(
    conn: &Connection,
    config: &StoreConfig,
    kinds: Kinds<'_>,
    limit: usize,
    now: i64,
    lease_until: i64,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<ClaimedJob>> {
    let (kinds_json, one_kind) = (kinds.json, kinds.one && config.queues_json.is_none());
    let except = !kinds.paused_queues.queues.is_empty() && kinds.pick == Pick::Ready;
    let sql = match kinds.pick {
        Pick::Rows => CLAIM_ROWS.to_owned(),
        Pick::Ready if except => claim_statement_except(one_kind, config.queues_json.is_some()),
        Pick::Ready => claim_statement(one_kind, config.queues_json.is_some()),
    };
    let ctx = || Error::db("claiming jobs");
    let mut claimed = Vec::new();
    let mut listed_before = 0;
    // Rows that could not be read take no slot: claim again past them, so a head of the queue made of
    // them never looks like an empty queue.
    loop {
        let want = i64::try_from(limit - claimed.len()).unwrap_or(i64::MAX);
        let mut bad = Vec::new();
        {
            let mut stmt = conn.prepare_cached(&sql).map_err(ctx())?;
            let mut rows = if except {
                let paused = kinds.paused_queues.queues_json.as_str();
                stmt.query(params![config.worker_id, now, lease_until, kinds_json, want, config.queues_json, paused])
            } else {
                stmt.query(params![config.worker_id, now, lease_until, kinds_json, want, config.queues_json])
            }
            .map_err(ctx())?;
            while let Some(row) = rows.next().map_err(ctx())? {
                match claimed_row(row) {
                    Ok(job) => claimed.push(job),
                    Err(u) => bad.push((
                        row.get::<_, i64>(9).map_err(ctx())?,
                        u,
                        shown(row, 2),
                        row.get::<_, i64>(4).ok().and_then(|n| i32::try_from(n).ok()).unwrap_or(0),
                    )),
                }
            }
        }
        // The claim's feed row lists every row it took, the unreadable ones as well as they can be named.
        {
            let mut listed: Vec<(&str, &str, &str, i32)> = claimed[listed_before..]
                .iter()
                .map(|j| (j.id.as_str(), j.kind.as_str(), j.queue.as_str(), j.attempt))
                .collect();
            listed.extend(
                bad.iter().map(|(_, u, queue, attempt)| (u.id.as_str(), u.kind.as_str(), queue.as_str(), *attempt)),
            );
            insert_batch_event(conn, "claimed", &config.worker_id, now, &listed)?;
        }
        listed_before = claimed.len();
        if bad.is_empty() {
            return Ok(claimed);
        }
        for (rowid, u, _, _) in bad {
            conn.prepare_cached(FAIL_UNREADABLE)
                .and_then(|mut s| s.execute(params![u.error(), now, rowid]))
                .map_err(Error::db(format!("failing unreadable job `{}`", u.id)))?;
            unreadable.push(u);
        }
        if claimed.len() == limit {
            return Ok(claimed);
        }
    }
}

/// The claim of the pending rows whose rowids `?4` lists (a controlled kind's choice), at most `?5`, for the worker
/// `?1` at `?2`, leased until `?3`; `?6` is the worker's queues, which the choice applied.
pub(in crate::storage::sqlite) const CLAIM_ROWS: &str = "UPDATE outbox_jobs SET status = 'claimed', \
     attempts = attempts + 1, runs = runs + 1, locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, \
     updated_at = ?2, event_flip = 1 - event_flip WHERE rowid IN (SELECT rowid FROM outbox_jobs \
     WHERE rowid IN (SELECT value FROM json_each(?4)) AND status = 'pending' AND (?6 IS NULL OR TRUE) LIMIT ?5 + 0) \
     RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequence_key IS NOT NULL, rowid, \
     trace, has_children";

/// [`claim_statement`] passing over the jobs of the paused queues `?7` (a JSON array).
pub(in crate::storage::sqlite) fn claim_statement_except(one_kind: bool, by_queue: bool) -> String {
    claim_statement(one_kind, by_queue)
        .replace(" AND run_at <= ?2", " AND queue NOT IN (SELECT value FROM json_each(?7)) AND run_at <= ?2")
}

/// The claim of up to `?5` due jobs of the kinds `?4` (a JSON array) for the worker `?1` at `?2`, leased until
/// `?3`: of one kind from every queue, or of several kinds merged, from every queue or from those of `?6`.
pub(in crate::storage::sqlite) fn claim_statement(one_kind: bool, by_queue: bool) -> String {
    // Each kind (and queue) is read from its own range of a ready index, so the claim reads nothing of the
    // kinds it does not serve, and the ranges' heads are merged; one kind from every queue (a limited kind's
    // claim, and most workers') is its range alone, with no merge to run.
    let (queues, queue_filter) =
        if by_queue { (" CROSS JOIN json_each(?6) AS q", " AND queue = q.value") } else { ("", " AND ?6 IS NULL") };
    let pick = if one_kind {
        "SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 \
         AND kind = json_extract(?4, '$[0]') AND ?6 IS NULL AND run_at <= ?2 \
         ORDER BY priority DESC, run_at, id LIMIT ?5 + 0"
            .to_owned()
    } else {
        format!(
            "SELECT j.rowid FROM json_each(?4) AS k{queues} CROSS JOIN outbox_jobs AS j \
             WHERE j.rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 \
             AND scheduled = 0 AND kind = k.value{queue_filter} AND run_at <= ?2 \
             ORDER BY priority DESC, run_at, id LIMIT ?5 + 0) ORDER BY j.priority DESC, j.run_at, j.id LIMIT ?5 + 0"
        )
    };
    // Rows are picked by rowid, which the ready index holds: by id, each picked row cost one more descent of
    // the id index, the deeper the bigger the backlog. `LIMIT ?5 + 0`, not `LIMIT ?5`: SQLite folds a bare
    // bound LIMIT into the plan and prepares the statement again whenever the value changes, which a claim's
    // room does nearly every time.
    format!(
        "UPDATE outbox_jobs SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, \
         locked_at = ?2, \
         claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, event_flip = 1 - event_flip \
         WHERE rowid IN ({pick}) \
         RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, \
         sequence_key IS NOT NULL, rowid, trace, has_children"
    )
}

/// One row of the claim, each column checked for the type that belongs there.
fn claimed_row(row: &rusqlite::Row<'_>) -> std::result::Result<ClaimedJob, Unreadable> {
    let at = |column: &'static str| move |found| Unreadable { id: shown(row, 0), kind: shown(row, 1), column, found };
    Ok(ClaimedJob {
        id: text(row, 0).map_err(at("id"))?,
        kind: text(row, 1).map_err(at("kind"))?,
        queue: text(row, 2).map_err(at("queue"))?,
        payload: text(row, 3).map_err(at("payload"))?,
        attempt: int(row, 4).map_err(at("attempts"))?,
        max_attempts: int(row, 5).map_err(at("max_attempts"))?,
        schema_hash: text(row, 6).map_err(at("schema_hash"))?,
        run: int(row, 7).map_err(at("runs"))?,
        sequenced: int(row, 8).map_err(at("sequence_key"))? != 0,
        has_children: int(row, 11).map_err(at("has_children"))? != 0,
        // Metadata: a value nothing could have meant as a context is passed over, not the job failed for it.
        trace: maybe_text(row, 10).unwrap_or_else(|found| {
            tracing::warn!(job_id = %shown(row, 0), found = %found, "a job's trace context is unreadable; ignored");
            None
        }),
    })
}

fn maybe_text(row: &rusqlite::Row<'_>, i: usize) -> std::result::Result<Option<String>, String> {
    match row.get_ref(i) {
        Ok(ValueRef::Null) => Ok(None),
        _ => text(row, i).map(Some),
    }
}

fn text(row: &rusqlite::Row<'_>, i: usize) -> std::result::Result<String, String> {
    match row.get_ref(i) {
        Ok(ValueRef::Text(bytes)) => {
            std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| "text that is not UTF-8".to_owned())
        }
        Ok(other) => Err(found(other)),
        Err(e) => Err(e.to_string()),
    }
}

fn int(row: &rusqlite::Row<'_>, i: usize) -> std::result::Result<i32, String> {
    match row.get_ref(i) {
        Ok(ValueRef::Integer(n)) => i32::try_from(n).map_err(|_| format!("{n}, out of range")),
        Ok(other) => Err(found(other)),
        Err(e) => Err(e.to_string()),
    }
}

/// What a value is, for an error: never its content, which may be anything.
fn found(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(n) => format!("the INTEGER {n}"),
        ValueRef::Real(x) => format!("the REAL {x}"),
        ValueRef::Text(t) => format!("TEXT of {} bytes", t.len()),
        ValueRef::Blob(b) => format!("a BLOB of {} bytes", b.len()),
    }
}

/// A column as well as it can be shown, for naming an unreadable job.
fn shown(row: &rusqlite::Row<'_>, i: usize) -> String {
    match row.get_ref(i) {
        Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
        Ok(ValueRef::Integer(n)) => n.to_string(),
        Ok(ValueRef::Blob(b)) => format!("x'{}'", b.iter().map(|b| format!("{b:02X}")).collect::<String>()),
        _ => "?".into(),
    }
}
