//! Events: how a job's transitions become its history and the event feed, and how both are read.
//!
//! Every transition is one row of `outbox_job_events`, written where it happens:
//! - an insert by any writer: `enqueued`, by the trigger `outbox_jobs_enqueued`: on SQLite one row per job
//!   (`schema.sql`); on PostgreSQL one per inserting statement, which lists the jobs of a statement of many
//!   as a worker's row does (`outbox_jobs_enqueued` in `postgres/schema.sql`);
//! - a worker's claim and completion statements: one row for all their jobs (`job_id` empty, the jobs in
//!   `jobs` as [`listing`] writes them), written by the statement itself (`insert_batch_event` in
//!   `sqlite/store/`, `feed_row!` in `postgres/store/`). One row per job and event cost the drain a tenth of
//!   its instructions on SQLite and a third of its throughput on PostgreSQL. These statements flip the job's
//!   `event_flip`, which tells the transition trigger to leave them alone;
//! - every other change of status or attempts, by any writer (retries, failures, rescues, snoozes, releases,
//!   cancels, operator retries, hand-written SQL): one row per job by the trigger `outbox_jobs_transition`,
//!   the same text on both backends. It names a change from `OLD` to `NEW`, in order: `claimed`,
//!   `completed` and `cancelled` by the new status; `retried_by_operator` from a finished status; `rescued`
//!   (`rescued_failed`) when a claim's lease expired; `failed`; `snoozed` or `released` when the attempt was
//!   given back (by whether it runs later); otherwise `retried`. It also notes the claim (and completion) the
//!   transition ended, so a job's history still shows every attempt's claim although the
//!   claim itself sits in a worker's row of many jobs.
//!
//! A job's history ([`history`]) reads its own rows and the job: the milestones of the current attempt are on
//! the job row. The feed ([`feed`]) reads every row in commit order and hands out one event per job of a
//! worker's row, each with the id `<row>.<n>`.

use sea_orm::{ConnectionTrait, QueryResult};

use super::engine::Engine;
use super::{Dialect, jobs, on_engine};
use crate::error::{Error, Result};
use crate::record::{FeedEvent, JobEvent, JobEventKind, JobRecord, JobStatus};
use crate::time::from_ms;

/// One row of a job's history as stored, with the claim (and completion) it ended, if the trigger noted them.
#[derive(Debug, Clone)]
pub(crate) struct StoredEvent {
    pub(crate) event: JobEvent,
    pub(crate) ended_claim: Option<chrono::DateTime<chrono::Utc>>,
    pub(crate) ended_completion: Option<chrono::DateTime<chrono::Utc>>,
}

/// The lifecycle of job `id`, oldest first.
pub(crate) async fn history<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Vec<JobEvent>> {
    let job = jobs::get(conn, id).await?.ok_or_else(|| Error::NotFound { id: id.to_owned() })?;
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT {}, event, attempt, worker, error, {}, {} FROM outbox_job_events WHERE job_id = $1 ORDER BY id",
        b.ms("at"),
        b.ms("claimed_at"),
        b.ms("completed_at")
    );
    let rows = conn
        .query_all_raw(b.stmt(sql, vec![id.into()]))
        .await
        .map_err(Error::db(format!("reading the history of job `{id}`")))?;
    Ok(assemble(&job, stored(&rows, id)?))
}

/// Whether job `id` has events of its own: for a job no longer in the table, that it was deleted as it
/// completed (its kind keeps nothing), as retention and `purge` delete a job's events with it. Such a job
/// always has one: PostgreSQL's completion that deletes it writes it a row of its own (`store/complete.rs`).
pub(crate) async fn outlived<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let sql = "SELECT 1 FROM outbox_job_events WHERE job_id = $1 LIMIT 1";
    let row = conn
        .query_one_raw(b.stmt(sql, vec![id.into()]))
        .await
        .map_err(Error::db(format!("reading the events of job `{id}`")))?;
    Ok(row.is_some())
}

/// History rows: at, event, attempt, worker, error, the claim and the completion it ended (ms).
fn stored(rows: &[QueryResult], id: &str) -> Result<Vec<StoredEvent>> {
    let ctx = || Error::db(format!("reading the history of job `{id}`"));
    rows.iter()
        .map(|row| {
            let event = JobEvent {
                at: from_ms(row.try_get_by_index(0).map_err(ctx())?),
                event: row.try_get_by_index::<String>(1).map_err(ctx())?.parse::<JobEventKind>().map_err(|reason| {
                    Error::CorruptRow { id: id.to_owned(), reason: format!("its history: {reason}") }
                })?,
                attempt: row.try_get_by_index(2).map_err(ctx())?,
                worker: row.try_get_by_index(3).map_err(ctx())?,
                error: row.try_get_by_index(4).map_err(ctx())?,
            };
            Ok(StoredEvent {
                event,
                ended_claim: row.try_get_by_index::<Option<i64>>(5).map_err(ctx())?.map(from_ms),
                ended_completion: row.try_get_by_index::<Option<i64>>(6).map_err(ctx())?.map(from_ms),
            })
        })
        .collect()
}

/// A job's history from its stored rows and the row itself. Workers record their claims and completions
/// in rows of many jobs, which this does not read: the claim an attempt ended is noted on the row that
/// ended it, and the current claim and completion are on the job. Where a claim or completion is also
/// stored by itself (written by another tool), it is shown once.
fn assemble(job: &JobRecord, stored: Vec<StoredEvent>) -> Vec<JobEvent> {
    use JobEventKind::{Claimed, Completed, Enqueued};
    let milestone = |event, at, attempt, worker: Option<String>| JobEvent { at, event, attempt, worker, error: None };
    let mut events = Vec::with_capacity(stored.len() * 2 + 3);
    if !stored.first().is_some_and(|e| e.event.event == Enqueued) {
        events.push(milestone(Enqueued, job.created_at, 0, None));
    }
    for s in stored {
        if let Some(at) = s.ended_claim {
            events.push(milestone(Claimed, at, s.event.attempt, s.event.worker.clone()));
        }
        if let Some(at) = s.ended_completion {
            events.push(milestone(Completed, at, s.event.attempt, s.event.worker.clone()));
        }
        events.push(s.event);
    }
    if let (Some(at), JobStatus::Claimed | JobStatus::Completed) = (job.claimed_at, job.status) {
        events.push(milestone(Claimed, at, job.attempts, job.locked_by.clone()));
    }
    if let Some(at) = job.completed_at.filter(|_| job.status == JobStatus::Completed) {
        events.push(milestone(Completed, at, job.attempts, job.locked_by.clone()));
    }
    // Within one stretch of claim and completion (up to the next retry, failure, snooze or operator
    // action) each attempt's claim and completion appear once: the first is the stored one.
    let mut seen: Vec<(JobEventKind, i32)> = Vec::new();
    events.retain(|e| match e.event {
        Claimed | Completed => {
            let first = !seen.contains(&(e.event, e.attempt));
            seen.push((e.event, e.attempt));
            first
        }
        Enqueued => true,
        _ => {
            seen.clear();
            true
        }
    });
    events
}

/// Up to `limit` events of the feed after the position `after` (an event id, or a head), in commit order;
/// only events that no transaction still running can come before.
pub(crate) async fn feed<C: ConnectionTrait + ?Sized>(conn: &C, after: &str, limit: u64) -> Result<Vec<FeedEvent>> {
    let (row, n) = split_position(after)?;
    // From the row read last, which may have events left: one row more than the events wanted.
    let rows_wanted = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    let d = Dialect::of(conn)?;
    let (sql, values, row) = on_engine!(d, E => E::feed_after(row, after, rows_wanted))?;
    if let Some(stamp) = on_engine!(d, E => E::FEED_STAMP) {
        conn.execute_raw(d.stmt(stamp, Vec::new())).await.map_err(Error::db("ordering the event feed's new rows"))?;
    }
    let rows = conn.query_all_raw(d.stmt(sql, values)).await.map_err(Error::db("reading the event feed"))?;
    decode_feed(&rows, (&row, n), limit)
}

/// The feed's current end: reading after it returns only events committed later.
pub(crate) async fn feed_head<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<String> {
    let ctx = || Error::db("reading the end of the event feed");
    let d = Dialect::of(conn)?;
    let sql = on_engine!(d, E => E::FEED_HEAD);
    let row = conn.query_one_raw(d.stmt(sql, Vec::new())).await.map_err(ctx())?;
    row.map(|r| r.try_get_by_index::<String>(0))
        .transpose()
        .map_err(ctx())?
        .ok_or_else(|| Error::Internal("reading the end of the event feed returned no row".into()))
}

pub(crate) fn invalid(after: &str, form: &str) -> Error {
    Error::Invalid(format!(
        "invalid event id `{after}`: this database's event ids are {form}, or such an id and a number joined by \
         a `.` (take one from an event)"
    ))
}

/// A feed position split into the row's position and, for an event of a batch row, its place in the batch:
/// `<row>.<n>`.
fn split_position(after: &str) -> Result<(&str, Option<usize>)> {
    match after.rsplit_once('.') {
        None => Ok((after, None)),
        Some((row, n)) => n.parse::<usize>().ok().map(|n| (row, Some(n))).ok_or_else(|| {
            Error::Invalid(format!(
                "invalid event id `{after}`: after the `.` comes the event's place in its batch, a whole number"
            ))
        }),
    }
}

/// One job of a worker's feed row: `[id, attempt]` of the row's kind and queue, or `[id, kind, queue, attempt]`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Listed {
    Short(String, i32),
    Full(String, String, String, i32),
}

/// Feed rows: position, job, kind, queue, event, attempt, worker, error, at (ms), and the jobs of a batch row.
/// A batch row gives one event per job, each with the id `<position>.<n>`. The rows start at the reader's
/// position `after`, the row it read last: that row is skipped, or for `<position>.<n>` the events of it up
/// to `n`. At most `limit` events.
fn decode_feed(rows: &[QueryResult], after: (&str, Option<usize>), limit: u64) -> Result<Vec<FeedEvent>> {
    let ctx = || Error::db("reading the event feed");
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut events = Vec::with_capacity(rows.len().min(limit));
    for row in rows {
        if events.len() >= limit {
            break;
        }
        let position: String = row.try_get_by_index(0).map_err(ctx())?;
        let job_id: String = row.try_get_by_index(1).map_err(ctx())?;
        let event = row.try_get_by_index::<String>(4).map_err(ctx())?.parse::<JobEventKind>().map_err(|reason| {
            // A worker's row of many jobs belongs to none: it is named by its place in the feed.
            let id = if job_id.is_empty() { format!("event {position}") } else { job_id.clone() };
            Error::CorruptRow { id, reason: format!("its history: {reason}") }
        })?;
        let worker: Option<String> = row.try_get_by_index(6).map_err(ctx())?;
        let at = from_ms(row.try_get_by_index(8).map_err(ctx())?);
        let jobs: Option<String> = row.try_get_by_index(9).map_err(ctx())?;
        // `None`: nothing of this row was read; `Some(None)`: all of it; `Some(Some(n))`: up to event `n`.
        let read_through = (position == after.0).then_some(after.1);
        let Some(jobs) = jobs else {
            // A reader never stops inside a row of one event: resuming "inside" it means after it.
            if read_through.is_none() {
                events.push(FeedEvent {
                    id: position,
                    job_id,
                    kind: row.try_get_by_index(2).map_err(ctx())?,
                    queue: row.try_get_by_index(3).map_err(ctx())?,
                    event,
                    attempt: row.try_get_by_index(5).map_err(ctx())?,
                    worker,
                    error: row.try_get_by_index(7).map_err(ctx())?,
                    at,
                });
            }
            continue;
        };
        let listed: Vec<Listed> = serde_json::from_str(&jobs).map_err(|e| Error::CorruptRow {
            id: format!("event {position}"),
            reason: format!("its job list is not a JSON array of [id, attempt] and [id, kind, queue, attempt]: {e}"),
        })?;
        let (row_kind, row_queue): (String, String) =
            (row.try_get_by_index(2).map_err(ctx())?, row.try_get_by_index(3).map_err(ctx())?);
        let first = match read_through {
            None => 0,
            Some(None) => continue,
            Some(Some(n)) => n + 1,
        };
        for (n, listed) in listed.into_iter().enumerate().skip(first) {
            if events.len() >= limit {
                break;
            }
            let (job_id, kind, queue, attempt) = match listed {
                Listed::Full(id, kind, queue, attempt) => (id, kind, queue, attempt),
                Listed::Short(id, attempt) => (id, row_kind.clone(), row_queue.clone(), attempt),
            };
            events.push(FeedEvent {
                id: format!("{position}.{n}"),
                job_id,
                kind,
                queue,
                event,
                attempt,
                worker: worker.clone(),
                error: None,
                at,
            });
        }
    }
    Ok(events)
}
