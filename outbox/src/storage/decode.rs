//! Row decoding shared by the backends. Each backend's statements return the same columns in the same
//! shapes (timestamps as integer milliseconds since the Unix epoch, JSON as text), so one decoder serves
//! both.

use sea_orm::{DbErr, QueryResult};

use crate::error::{Error, Result};
use crate::job::SequenceFailure;
use crate::record::{JobRecord, JobStatus, KindRecord, ReconciliationRecord, ScheduleRecord, WorkerRecord};
use crate::stats::{DuplicateKey, FailureGroup, KindDurations, QueueCounts, StatusCount};
use crate::time::from_ms;

/// A stored JSON document as a value. Text that is not JSON (written behind the framework's back) is kept
/// visible as a JSON string of itself rather than making the whole row unreadable.
pub(super) fn json(text: String) -> serde_json::Value {
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
            subject: row.try_get_by_index(25)?,
            trace: row.try_get_by_index(26)?,
            id,
        })
    })();
    r.map_err(get_err)
}

/// Column `i` of `row`, a count: negative values (never written) read as 0.
pub(super) fn count(row: &QueryResult, i: usize) -> std::result::Result<u64, DbErr> {
    row.try_get_by_index::<i64>(i).map(|v| v.max(0).unsigned_abs())
}

/// Why a row could not be decoded: the driver could not read a column, or what it holds is not what belongs.
enum Bad {
    Db(DbErr),
    Row(Error),
}

impl From<DbErr> for Bad {
    fn from(e: DbErr) -> Self {
        Bad::Db(e)
    }
}

/// Each of `rows` through `f`; a column the driver cannot read fails with `what` was being read.
fn each<T>(
    rows: &[QueryResult],
    what: &str,
    f: impl Fn(&QueryResult) -> std::result::Result<T, Bad>,
) -> Result<Vec<T>> {
    let bad = |e| match e {
        Bad::Db(e) => Error::db(what.to_owned())(e),
        Bad::Row(e) => e,
    };
    rows.iter().map(|row| f(row).map_err(bad)).collect()
}

pub(super) fn status_counts(rows: &[QueryResult]) -> Result<Vec<StatusCount>> {
    each(rows, "reading job counts", |row| {
        let status: String = row.try_get_by_index(1)?;
        Ok(StatusCount {
            kind: row.try_get_by_index(0)?,
            status: status.parse().map_err(|reason| Bad::Row(Error::CorruptRow { id: "?".into(), reason }))?,
            count: count(row, 2)?,
            oldest: from_ms(row.try_get_by_index(3)?),
        })
    })
}

pub(super) fn durations(rows: &[QueryResult]) -> Result<Vec<KindDurations>> {
    each(rows, "reading job durations", |row| {
        Ok(KindDurations {
            kind: row.try_get_by_index(0)?,
            completed: count(row, 1)?,
            avg_run_ms: row.try_get_by_index::<Option<f64>>(2)?.unwrap_or(0.0),
            max_run_ms: row.try_get_by_index::<Option<i64>>(3)?.unwrap_or(0),
            avg_wait_ms: row.try_get_by_index::<Option<f64>>(4)?.unwrap_or(0.0),
        })
    })
}

/// Activity rows: bucket start (ms), completed, failed.
pub(super) fn activity(rows: &[QueryResult]) -> Result<Vec<(i64, u64, u64)>> {
    each(rows, "reading recent activity", |row| Ok((row.try_get_by_index(0)?, count(row, 1)?, count(row, 2)?)))
}

/// Failure group rows: kind, last error, count, latest change (ms), newest id.
pub(super) fn failure_groups(rows: &[QueryResult]) -> Result<Vec<FailureGroup>> {
    each(rows, "reading failure groups", |row| {
        Ok(FailureGroup {
            kind: row.try_get_by_index(0)?,
            error: row.try_get_by_index(1)?,
            count: count(row, 2)?,
            latest_at: from_ms(row.try_get_by_index(3)?),
            latest_id: row.try_get_by_index(4)?,
        })
    })
}

pub(super) fn duplicates(rows: &[QueryResult]) -> Result<Vec<DuplicateKey>> {
    each(rows, "reading duplicate keys", |row| {
        Ok(DuplicateKey {
            kind: row.try_get_by_index(0)?,
            key: row.try_get_by_index(1)?,
            jobs: count(row, 2)?,
            active: count(row, 3)?,
            completed: count(row, 4)?,
        })
    })
}

pub(super) fn kinds(rows: &[QueryResult]) -> Result<Vec<KindRecord>> {
    each(rows, "reading the kinds table", |row| {
        let name: String = row.try_get_by_index(0)?;
        let corrupt = |what: &str, e: serde_json::Error| {
            Bad::Row(Error::CorruptRow {
                id: format!("kind {name}"),
                reason: format!("its {what} is not valid JSON: {e}"),
            })
        };
        let schema: String = row.try_get_by_index(1)?;
        let keys: String = row.try_get_by_index(7)?;
        Ok(KindRecord {
            schema: serde_json::from_str(&schema).map_err(|e| corrupt("schema", e))?,
            schema_hash: row.try_get_by_index(2)?,
            queue: row.try_get_by_index(3)?,
            priority: row.try_get_by_index(4)?,
            max_attempts: row.try_get_by_index(5)?,
            unique: row.try_get_by_index(6)?,
            key_fields: serde_json::from_str(&keys).map_err(|e| corrupt("key field list", e))?,
            recorded_by: row.try_get_by_index(8)?,
            first_seen_at: from_ms(row.try_get_by_index(9)?),
            updated_at: from_ms(row.try_get_by_index(10)?),
            sequence: row.try_get_by_index(11)?,
            on_sequence_failure: match row.try_get_by_index::<String>(12)?.as_str() {
                "continue" => SequenceFailure::Continue,
                _ => SequenceFailure::Hold,
            },
            concurrency: row.try_get_by_index::<Option<i64>>(13)?.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            rate: row.try_get_by_index(14)?,
            rate_key: row.try_get_by_index(15)?,
            fair: row.try_get_by_index(16)?,
            cost: row.try_get_by_index(17)?,
            subject: row.try_get_by_index(18)?,
            name,
        })
    })
}

pub(super) fn queues(rows: &[QueryResult]) -> Result<Vec<QueueCounts>> {
    each(rows, "counting jobs by queue", |row| {
        let n = |i| row.try_get_by_index::<Option<i64>>(i).map(|v| v.unwrap_or(0).max(0).unsigned_abs());
        Ok(QueueCounts {
            queue: row.try_get_by_index(0)?,
            available: n(1)?,
            scheduled: n(2)?,
            claimed: n(3)?,
            stuck: n(4)?,
            completed: n(5)?,
            failed: n(6)?,
            cancelled: n(7)?,
            oldest_available: row.try_get_by_index::<Option<i64>>(8)?.map(from_ms),
            waiting: n(9)?,
        })
    })
}

/// Worker rows: id, host, pid, queues (JSON text), kinds (JSON text), concurrency, running, remote, started,
/// last seen, expires (ms).
pub(super) fn workers(rows: &[QueryResult]) -> Result<Vec<WorkerRecord>> {
    each(rows, "reading the worker registry", |row| {
        let id: String = row.try_get_by_index(0)?;
        let list = |text: String| {
            serde_json::from_str::<Vec<String>>(&text).map_err(|e| {
                let reason = format!("a name list is not a JSON array of strings: {e}");
                Bad::Row(Error::CorruptRow { id: format!("worker {id}"), reason })
            })
        };
        let queues: Option<String> = row.try_get_by_index(3)?;
        Ok(WorkerRecord {
            host: row.try_get_by_index(1)?,
            pid: row.try_get_by_index(2)?,
            queues: queues.map(list).transpose()?,
            kinds: list(row.try_get_by_index(4)?)?,
            concurrency: row.try_get_by_index(5)?,
            running: row.try_get_by_index(6)?,
            remote: row.try_get_by_index(7)?,
            started_at: from_ms(row.try_get_by_index(8)?),
            last_seen_at: from_ms(row.try_get_by_index(9)?),
            expires_at: from_ms(row.try_get_by_index(10)?),
            id,
        })
    })
}

/// Rows of `name, kind, spec, time_zone, missed, last_tick, last_job_id, updated_at`.
pub(crate) fn schedules(rows: &[QueryResult]) -> Result<Vec<ScheduleRecord>> {
    each(rows, "reading the schedules", |row| {
        Ok(ScheduleRecord {
            name: row.try_get_by_index(0)?,
            kind: row.try_get_by_index(1)?,
            spec: row.try_get_by_index(2)?,
            time_zone: row.try_get_by_index(3)?,
            missed: row.try_get_by_index(4)?,
            last_tick: row.try_get_by_index::<Option<i64>>(5)?.map(from_ms),
            last_job_id: row.try_get_by_index(6)?,
            next_tick: None,
            updated_at: from_ms(row.try_get_by_index(7)?),
        })
    })
}

/// Rows of `reconciler, at, worker, report`.
pub(crate) fn reconciliations(rows: &[QueryResult]) -> Result<Vec<ReconciliationRecord>> {
    each(rows, "reading the reconcilers' reports", |row| {
        Ok(ReconciliationRecord {
            reconciler: row.try_get_by_index(0)?,
            at: from_ms(row.try_get_by_index(1)?),
            worker: row.try_get_by_index(2)?,
            report: json_at(row, 3)?.unwrap_or_default(),
        })
    })
}

pub(super) fn pauses(rows: &[QueryResult]) -> Result<Vec<super::flow::PauseRow>> {
    each(rows, "reading the pauses", |row| {
        Ok((
            row.try_get_by_index(0)?,
            row.try_get_by_index(1)?,
            row.try_get_by_index(2)?,
            row.try_get_by_index(3)?,
            row.try_get_by_index(4)?,
            row.try_get_by_index(5)?,
        ))
    })
}

pub(super) fn rates(rows: &[QueryResult]) -> Result<Vec<super::flow::RateRow>> {
    each(rows, "reading the rates", |row| {
        Ok((
            row.try_get_by_index(0)?,
            row.try_get_by_index(1)?,
            row.try_get_by_index(2)?,
            row.try_get_by_index(3)?,
            row.try_get_by_index(4)?,
            row.try_get_by_index(5)?,
            row.try_get_by_index(6)?,
        ))
    })
}

pub(super) fn shares(rows: &[QueryResult]) -> Result<Vec<(String, i64, i64, i64)>> {
    each(rows, "reading a fair share", |row| {
        Ok((row.try_get_by_index(0)?, row.try_get_by_index(1)?, row.try_get_by_index(2)?, row.try_get_by_index(3)?))
    })
}
