//! SQLite's enqueue: a sequenced job takes the next place in its sequence, and waits when a job of the sequence
//! holds it back, in its own INSERT (one writer at a time, so places are taken in commit order); a batch of
//! jobs without sequences binds what its rows share once.

use sea_orm::Value;

use crate::storage::Dialect;
use crate::storage::enqueue::{BOUND, Extra, INSERT_COLUMNS, NewJob, after_column, cells, insert_values};

/// The sequence's columns of a `VALUES` row: its place, and whether it waits.
const SEQUENCE: Extra<'static> = Extra { columns: ", sequence_no, waiting", row: sequence_row };

fn sequence_row(job: &NewJob, sql: &mut String, values: &mut Vec<Value>) {
    match &job.sequence_key {
        Some(key) => {
            values.extend([Value::from(key.as_str()), Value::from(key.as_str())]);
            sql.push_str(
                ", (SELECT COALESCE(MAX(sequence_no), 0) + 1 FROM outbox_jobs WHERE sequence_key = ?), \
                 EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = ? AND (b.status IN ('pending', \
                 'claimed') OR (b.status IN ('failed', 'cancelled') AND b.sequence_hold = 1)))",
            );
        }
        None => sql.push_str(", NULL, 0"),
    }
}

/// The INSERT of `jobs`: a batch without sequenced jobs shares its common values ([`insert_shared`]); a
/// sequenced job goes alone ([`alone`]).
pub(super) fn insert(jobs: &[&NewJob]) -> (String, Vec<Value>) {
    if jobs.len() > 1 && jobs.iter().all(|j| j.sequence_key.is_none()) {
        insert_shared(jobs)
    } else {
        insert_values(Dialect::Sqlite, jobs, Some(&SEQUENCE))
    }
}

/// A statement's subqueries may read the table before any of its rows is written: a sequenced job, whose place
/// is read so, takes it in a statement of its own.
pub(super) fn alone(job: &NewJob) -> bool {
    job.sequence_key.is_some()
}

/// The job `j` holds `key` while active and not superseded, as the unique index of keys reads.
pub(super) fn holds_key(j: &str, key: &str) -> String {
    format!("{j}.idempotency_key = {key} AND {j}.status IN ('pending', 'claimed') AND NOT {j}.superseded")
}

/// SQLite's INSERT of a batch without sequenced jobs. The values every row shares (kind, queue, schema hash,
/// options and times: all of a batch's but its ids, payloads and keys) are bound once, in a one-row `s`
/// joined to the `VALUES` list of the rest: sqlx binds each value on the connection's own thread, and
/// binding the 16,000 values of 1,000 jobs one by one was most of what a batch cost there (3,000 now, for
/// jobs with keys). The order the rows go in does not matter here: sequenced jobs, whose places do, go one
/// statement each ([`insert`]).
pub(super) fn insert_shared(jobs: &[&NewJob]) -> (String, Vec<Value>) {
    use std::fmt::Write;
    let Some((first, rest)) = jobs.split_first() else { return insert_values(Dialect::Sqlite, jobs, None) };
    let first = cells(first);
    let mut same = [true; BOUND];
    for job in rest {
        for (same, (cell, first)) in same.iter_mut().zip(cells(job).iter().zip(&first)) {
            *same &= cell == first;
        }
    }
    // Ids differ, so each row binds one value at least; the guard keeps the list well formed regardless.
    same[0] = false;
    let scheduled = jobs.iter().all(|j| j.scheduled == jobs[0].scheduled).then_some(jobs[0].scheduled);
    let own = same.iter().filter(|s| !**s).count() + usize::from(scheduled.is_none());
    let mut values = Vec::with_capacity(BOUND + jobs.len() * own);
    let mut sql = String::with_capacity(INSERT_COLUMNS.len() + 512 + jobs.len() * (own * 3 + 2));
    sql.push_str("WITH s AS (SELECT 0 AS none");
    for (i, cell) in first.iter().enumerate() {
        if same[i] {
            values.push(cell.value());
            let _ = write!(sql, ", ? AS c{i}");
        }
    }
    sql.push_str(") ");
    sql.push_str(INSERT_COLUMNS);
    sql.push_str(", sequence_no, waiting) SELECT ");
    let mut column = 0;
    for (i, same) in same.iter().enumerate() {
        if *same {
            let _ = write!(sql, "s.c{i}");
        } else {
            column += 1;
            let _ = write!(sql, "v.column{column}");
        }
        sql.push_str(after_column(i));
    }
    match scheduled {
        Some(true) => sql.push_str("TRUE"),
        Some(false) => sql.push_str("FALSE"),
        None => {
            column += 1;
            let _ = write!(sql, "v.column{column}");
        }
    }
    sql.push_str(", NULL, 0 FROM s, (VALUES ");
    for (row, job) in jobs.iter().enumerate() {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        let mut marks = 0;
        for (i, cell) in cells(job).into_iter().enumerate() {
            if !same[i] {
                values.push(cell.value());
                sql.push_str(if marks == 0 { "?" } else { ", ?" });
                marks += 1;
            }
        }
        if scheduled.is_none() {
            values.push(Value::from(job.scheduled));
            sql.push_str(", ?");
        }
        sql.push(')');
    }
    // `WHERE` tells SQLite's parser that an `ON CONFLICT` after it is the upsert's, not a join's.
    sql.push_str(") AS v WHERE TRUE");
    (sql, values)
}
