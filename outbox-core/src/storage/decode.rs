//! Row decoding shared by the backends. Each backend's statements return the same columns in the same
//! shapes (timestamps as integer milliseconds since the Unix epoch, JSON as text), so one decoder serves
//! both.

use sea_orm::QueryResult;

use super::scans::ScanRow;
use crate::error::{Error, Result};
use crate::job::SequenceFailure;
use crate::record::{JobRecord, JobStatus, KindRecord, ReconciliationRecord, ScheduleRecord, WorkerRecord, from_ms};
use crate::stats::{DuplicateKey, FailureGroup, KindDurations, QueueCounts, StatusCount};

/// A stored JSON document as a value. Text that is not JSON (written behind the framework's back) is kept
/// visible as a JSON string of itself rather than making the whole row unreadable.
fn json(text: String) -> serde_json::Value {
    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
}

/// A JSON column, read whatever it holds: text that is not UTF-8 (which no write path of ours produces, and
/// which a strict table cannot refuse) is shown with its bad bytes replaced rather than hiding the job from
/// every listing.
fn json_at(row: &QueryResult, i: usize) -> std::result::Result<Option<serde_json::Value>, sea_orm::DbErr> {
    match row.try_get_by_index::<Option<String>>(i) {
        Ok(text) => Ok(text.map(json)),
        Err(e) => match row.try_get_by_index::<Option<Vec<u8>>>(i) {
            Ok(bytes) => Ok(bytes.map(|b| serde_json::Value::String(String::from_utf8_lossy(&b).into_owned()))),
            Err(_) => Err(e),
        },
    }
}

pub(super) fn record(row: &QueryResult) -> Result<JobRecord> {
    let get_err = Error::db("reading a job row");
    let r = (|| -> std::result::Result<JobRecord, sea_orm::DbErr> {
        let id: String = row.try_get_by_index(0)?;
        let status: String = row.try_get_by_index(4)?;
        let status =
            status.parse::<JobStatus>().map_err(|reason| sea_orm::DbErr::Custom(format!("job `{id}`: {reason}")))?;
        let opt_ms = |i: usize| row.try_get_by_index::<Option<i64>>(i).map(|v| v.map(from_ms));
        Ok(JobRecord {
            kind: row.try_get_by_index(1)?,
            queue: row.try_get_by_index(2)?,
            payload: json_at(row, 3)?.unwrap_or_default(),
            status,
            priority: row.try_get_by_index(5)?,
            attempts: row.try_get_by_index(6)?,
            max_attempts: row.try_get_by_index(7)?,
            run_at: from_ms(row.try_get_by_index(8)?),
            locked_by: row.try_get_by_index(9)?,
            locked_at: opt_ms(10)?,
            lease_expires_at: opt_ms(11)?,
            last_error: row.try_get_by_index(12)?,
            idempotency_key: row.try_get_by_index(13)?,
            schema_hash: row.try_get_by_index(14)?,
            output: json_at(row, 15)?,
            created_at: from_ms(row.try_get_by_index(16)?),
            claimed_at: opt_ms(17)?,
            completed_at: opt_ms(18)?,
            updated_at: from_ms(row.try_get_by_index(19)?),
            runs: row.try_get_by_index(20)?,
            sequence_key: row.try_get_by_index(21)?,
            sequence_no: row.try_get_by_index(22)?,
            waiting_for: row.try_get_by_index(23)?,
            holds_sequence: row.try_get_by_index(24)?,
            id,
        })
    })();
    r.map_err(get_err)
}

/// Column `i` of `row`, a count: negative values (never written) read as 0.
fn count(row: &QueryResult, i: usize) -> std::result::Result<u64, sea_orm::DbErr> {
    row.try_get_by_index::<i64>(i).map(|v| v.max(0).unsigned_abs())
}

pub(super) fn status_counts(rows: Vec<QueryResult>) -> Result<Vec<StatusCount>> {
    rows.iter()
        .map(|row| {
            let status: String = row.try_get_by_index(1).map_err(Error::db("reading job counts"))?;
            Ok(StatusCount {
                kind: row.try_get_by_index(0).map_err(Error::db("reading job counts"))?,
                status: status.parse().map_err(|reason| Error::CorruptRow { id: "?".into(), reason })?,
                count: count(row, 2).map_err(Error::db("reading job counts"))?,
                oldest: from_ms(row.try_get_by_index(3).map_err(Error::db("reading job counts"))?),
            })
        })
        .collect()
}

pub(super) fn durations(rows: &[QueryResult]) -> Result<Vec<KindDurations>> {
    let ctx = || Error::db("reading job durations");
    rows.iter()
        .map(|row| {
            Ok(KindDurations {
                kind: row.try_get_by_index(0).map_err(ctx())?,
                completed: count(row, 1).map_err(ctx())?,
                avg_run_ms: row.try_get_by_index::<Option<f64>>(2).map_err(ctx())?.unwrap_or(0.0),
                max_run_ms: row.try_get_by_index::<Option<i64>>(3).map_err(ctx())?.unwrap_or(0),
                avg_wait_ms: row.try_get_by_index::<Option<f64>>(4).map_err(ctx())?.unwrap_or(0.0),
            })
        })
        .collect()
}

/// Activity rows: bucket start (ms), completed, failed.
pub(super) fn activity(rows: &[QueryResult]) -> Result<Vec<(i64, u64, u64)>> {
    let ctx = || Error::db("reading recent activity");
    rows.iter()
        .map(|row| {
            Ok((row.try_get_by_index(0).map_err(ctx())?, count(row, 1).map_err(ctx())?, count(row, 2).map_err(ctx())?))
        })
        .collect()
}

/// Failure group rows: kind, last error, count, latest change (ms), newest id.
pub(super) fn failure_groups(rows: &[QueryResult]) -> Result<Vec<FailureGroup>> {
    let ctx = || Error::db("reading failure groups");
    rows.iter()
        .map(|row| {
            Ok(FailureGroup {
                kind: row.try_get_by_index(0).map_err(ctx())?,
                error: row.try_get_by_index(1).map_err(ctx())?,
                count: count(row, 2).map_err(ctx())?,
                latest_at: from_ms(row.try_get_by_index(3).map_err(ctx())?),
                latest_id: row.try_get_by_index(4).map_err(ctx())?,
            })
        })
        .collect()
}

pub(super) fn duplicates(rows: &[QueryResult]) -> Result<Vec<DuplicateKey>> {
    let ctx = || Error::db("reading duplicate keys");
    rows.iter()
        .map(|row| {
            Ok(DuplicateKey {
                kind: row.try_get_by_index(0).map_err(ctx())?,
                key: row.try_get_by_index(1).map_err(ctx())?,
                jobs: count(row, 2).map_err(ctx())?,
                active: count(row, 3).map_err(ctx())?,
                completed: count(row, 4).map_err(ctx())?,
            })
        })
        .collect()
}

pub(super) fn path_scan_page(rows: &[QueryResult]) -> Result<Vec<ScanRow>> {
    let ctx = || Error::db("reading a page of the path scan");
    rows.iter()
        .map(|row| {
            Ok(ScanRow {
                seq: row.try_get_by_index(0).map_err(ctx())?,
                path: row.try_get_by_index(1).map_err(ctx())?,
                job_id: row.try_get_by_index(2).map_err(ctx())?,
                kind: row.try_get_by_index(3).map_err(ctx())?,
                output: row.try_get_by_index::<Option<String>>(4).map_err(ctx())?.map(json),
                completed_at: row.try_get_by_index::<Option<i64>>(5).map_err(ctx())?,
                jobs: count(row, 6).map_err(ctx())?,
            })
        })
        .collect()
}

pub(super) fn kinds(rows: &[QueryResult]) -> Result<Vec<KindRecord>> {
    let ctx = || Error::db("reading the kinds table");
    rows.iter()
        .map(|row| {
            let name: String = row.try_get_by_index(0).map_err(ctx())?;
            let corrupt = |what: &str, e: serde_json::Error| Error::CorruptRow {
                id: format!("kind {name}"),
                reason: format!("its {what} is not valid JSON: {e}"),
            };
            let schema: String = row.try_get_by_index(1).map_err(ctx())?;
            let keys: String = row.try_get_by_index(7).map_err(ctx())?;
            Ok(KindRecord {
                schema: serde_json::from_str(&schema).map_err(|e| corrupt("schema", e))?,
                schema_hash: row.try_get_by_index(2).map_err(ctx())?,
                queue: row.try_get_by_index(3).map_err(ctx())?,
                priority: row.try_get_by_index(4).map_err(ctx())?,
                max_attempts: row.try_get_by_index(5).map_err(ctx())?,
                unique: row.try_get_by_index(6).map_err(ctx())?,
                key_fields: serde_json::from_str(&keys).map_err(|e| corrupt("key field list", e))?,
                recorded_by: row.try_get_by_index(8).map_err(ctx())?,
                first_seen_at: from_ms(row.try_get_by_index(9).map_err(ctx())?),
                updated_at: from_ms(row.try_get_by_index(10).map_err(ctx())?),
                sequence: row.try_get_by_index(11).map_err(ctx())?,
                on_sequence_failure: match row.try_get_by_index::<String>(12).map_err(ctx())?.as_str() {
                    "continue" => SequenceFailure::Continue,
                    _ => SequenceFailure::Hold,
                },
                concurrency: row
                    .try_get_by_index::<Option<i64>>(13)
                    .map_err(ctx())?
                    .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
                name,
            })
        })
        .collect()
}

pub(super) fn queues(rows: &[QueryResult]) -> Result<Vec<QueueCounts>> {
    let ctx = || Error::db("counting jobs by queue");
    rows.iter()
        .map(|row| {
            let n =
                |i| row.try_get_by_index::<Option<i64>>(i).map(|v| v.unwrap_or(0).max(0).unsigned_abs()).map_err(ctx());
            Ok(QueueCounts {
                queue: row.try_get_by_index(0).map_err(ctx())?,
                available: n(1)?,
                scheduled: n(2)?,
                claimed: n(3)?,
                stuck: n(4)?,
                completed: n(5)?,
                failed: n(6)?,
                cancelled: n(7)?,
                oldest_available: row.try_get_by_index::<Option<i64>>(8).map_err(ctx())?.map(from_ms),
                waiting: n(9)?,
            })
        })
        .collect()
}

/// Worker rows: id, host, pid, queues (JSON text), kinds (JSON text), concurrency, running, remote, started,
/// last seen, expires (ms).
pub(super) fn workers(rows: &[QueryResult]) -> Result<Vec<WorkerRecord>> {
    let ctx = || Error::db("reading the worker registry");
    rows.iter()
        .map(|row| {
            let id: String = row.try_get_by_index(0).map_err(ctx())?;
            let list = |text: String| {
                serde_json::from_str::<Vec<String>>(&text).map_err(|e| Error::CorruptRow {
                    id: format!("worker {id}"),
                    reason: format!("a name list is not a JSON array of strings: {e}"),
                })
            };
            let queues: Option<String> = row.try_get_by_index(3).map_err(ctx())?;
            Ok(WorkerRecord {
                host: row.try_get_by_index(1).map_err(ctx())?,
                pid: row.try_get_by_index(2).map_err(ctx())?,
                queues: queues.map(list).transpose()?,
                kinds: list(row.try_get_by_index(4).map_err(ctx())?)?,
                concurrency: row.try_get_by_index(5).map_err(ctx())?,
                running: row.try_get_by_index(6).map_err(ctx())?,
                remote: row.try_get_by_index(7).map_err(ctx())?,
                started_at: from_ms(row.try_get_by_index(8).map_err(ctx())?),
                last_seen_at: from_ms(row.try_get_by_index(9).map_err(ctx())?),
                expires_at: from_ms(row.try_get_by_index(10).map_err(ctx())?),
                id,
            })
        })
        .collect()
}

/// Rows of `name, kind, spec, time_zone, missed, last_tick, last_job_id, updated_at`.
pub(crate) fn schedules(rows: &[QueryResult]) -> Result<Vec<ScheduleRecord>> {
    let ctx = || Error::db("reading the schedules");
    rows.iter()
        .map(|row| {
            Ok(ScheduleRecord {
                name: row.try_get_by_index(0).map_err(ctx())?,
                kind: row.try_get_by_index(1).map_err(ctx())?,
                spec: row.try_get_by_index(2).map_err(ctx())?,
                time_zone: row.try_get_by_index(3).map_err(ctx())?,
                missed: row.try_get_by_index(4).map_err(ctx())?,
                last_tick: row.try_get_by_index::<Option<i64>>(5).map_err(ctx())?.map(from_ms),
                last_job_id: row.try_get_by_index(6).map_err(ctx())?,
                next_tick: None,
                updated_at: from_ms(row.try_get_by_index(7).map_err(ctx())?),
            })
        })
        .collect()
}

/// Rows of `reconciler, at, worker, report`.
pub(crate) fn reconciliations(rows: &[QueryResult]) -> Result<Vec<ReconciliationRecord>> {
    let ctx = || Error::db("reading the reconcilers' reports");
    rows.iter()
        .map(|row| {
            Ok(ReconciliationRecord {
                reconciler: row.try_get_by_index(0).map_err(ctx())?,
                at: from_ms(row.try_get_by_index(1).map_err(ctx())?),
                worker: row.try_get_by_index(2).map_err(ctx())?,
                report: json_at(row, 3).map_err(ctx())?.unwrap_or_default(),
            })
        })
        .collect()
}
