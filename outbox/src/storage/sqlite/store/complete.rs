//! Outcomes: each finished attempt written fenced by its claim, a batch of them in one statement.

use rusqlite::{Connection, OptionalExtension, params};

use super::insert_batch_event;
use crate::error::{Error, Result};
use crate::storage::archive::archive_columns;
use crate::storage::{Finished, Outcome};

/// The fence of every write after the claim: this job, still claimed, by this owner, in this run (see
/// [`Finished::run`]).
macro_rules! fence {
    () => {
        "WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND runs = ?3"
    };
}

/// Writes each outcome fenced by (id, claimed, owner, run); returns which rows it applied to.
///
/// A batch of distinct jobs is one statement over a JSON array, with one feed row for its completions: one
/// statement per job costs several times more (each execution builds the status check's and the partial
/// indexes' value lists again). A batch that names a job twice (never the worker's own) is written row by row,
/// so the second write meets the fence the first one moved; so is a single outcome, which the transition
/// trigger records.
pub(in crate::storage::sqlite) fn write_finished(
    tx: &Connection,
    owner: &str,
    batch: &[Finished],
    now: i64,
) -> Result<Vec<bool>> {
    if batch.len() > 1 {
        let mut ids: Vec<&str> = batch.iter().map(|f| f.id.as_str()).collect();
        ids.sort_unstable();
        if ids.windows(2).all(|w| w[0] != w[1]) {
            return write_batch(tx, owner, batch, now);
        }
    }
    write_rows(tx, owner, batch, now)
}

/// One finished attempt as [`FINISH_BATCH`], [`ARCHIVE_BATCH`] and [`DISCARD_BATCH`] read it: id, run, new
/// status, attempts given back, output, error, next run, and whether the completion deletes the job.
#[derive(serde::Serialize)]
struct BatchRow<'a> {
    i: &'a str,
    a: i32,
    s: &'static str,
    g: i32,
    o: Option<&'a str>,
    e: Option<&'a str>,
    r: Option<i64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    d: bool,
    /// Whether the deleted job goes into the archive (written only when it does).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    k: bool,
}

/// The outcomes of a batch, each with the same columns and fence as in [`write_rows`].
pub(super) const FINISH_BATCH: &str = "UPDATE outbox_jobs SET status = f.value ->> 's', attempts = attempts - (f.value ->> 'g'), \
     output = CASE WHEN f.value ->> 's' = 'completed' THEN f.value ->> 'o' ELSE output END, \
     completed_at = CASE WHEN f.value ->> 's' = 'completed' THEN ?3 ELSE completed_at END, \
     last_error = COALESCE(f.value ->> 'e', last_error), run_at = COALESCE(f.value ->> 'r', run_at), \
     scheduled = COALESCE(f.value ->> 'r' > ?3, 0), \
     lease_expires_at = NULL, updated_at = ?3, \
     event_flip = CASE WHEN f.value ->> 's' = 'completed' THEN 1 - event_flip ELSE event_flip END \
     FROM jsonb_each(?1) AS f \
     WHERE outbox_jobs.id = f.value ->> 'i' AND outbox_jobs.status = 'claimed' AND outbox_jobs.locked_by = ?2 \
     AND outbox_jobs.runs = f.value ->> 'a' \
     RETURNING outbox_jobs.id, outbox_jobs.kind, outbox_jobs.queue, outbox_jobs.status, outbox_jobs.attempts";

/// A batch of completions without output, every job kept: [`FINISH_BATCH`]'s columns for them, each job read from
/// `?1`, an object of runs by id, its run (the fence) the only value the statement looks up. [`FINISH_BATCH`] reads
/// ten values out of each job's object (`json` functions were a tenth of the worker connection's time in `process`).
pub(super) const FINISH_PLAIN: &str = "UPDATE outbox_jobs SET status = 'completed', output = NULL, completed_at = ?3, \
     scheduled = 0, lease_expires_at = NULL, updated_at = ?3, event_flip = 1 - event_flip \
     FROM jsonb_each(?1) AS f \
     WHERE outbox_jobs.id = f.key AND outbox_jobs.status = 'claimed' AND outbox_jobs.locked_by = ?2 \
     AND outbox_jobs.runs = f.value \
     RETURNING outbox_jobs.id, outbox_jobs.kind, outbox_jobs.queue, outbox_jobs.status, outbox_jobs.attempts";

/// The completions of a batch whose kind keeps nothing (`d`), each fenced as in [`FINISH_BATCH`]: deleted
/// instead of updated, unless the job has a sequence key (then [`FINISH_BATCH`] completes it as usual). The
/// deletion leaves the job's events (the `outbox_jobs_purged` trigger of `schema.sql`); the batch's feed row records the completion. It returns
/// the columns [`FINISH_BATCH`] does.
pub(super) const DISCARD_BATCH: &str = "DELETE FROM outbox_jobs WHERE (id, runs) IN \
     (SELECT f.value ->> 'i', f.value ->> 'a' FROM jsonb_each(?1) AS f WHERE f.value ->> 'd') \
     AND status = 'claimed' AND locked_by = ?2 AND sequence_key IS NULL \
     RETURNING id, kind, queue, 'completed', attempts";

/// The archive's row of a job completing at `$now` with output `$output`, read from its row in `outbox_jobs`.
macro_rules! archived {
    ($output:literal, $now:literal) => {
        concat!(
            "INSERT INTO outbox_jobs_done (",
            archive_columns!(),
            ") SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, \
             schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, \
             last_error, ",
            $output,
            ", attempts, runs, locked_by, locked_at, claimed_at, 'completed', ",
            $now,
            ", NULL, ",
            $now,
            " "
        )
    };
}

/// The completions of a batch whose kind keeps them in time partitions (`k`), written into the archive before
/// [`DISCARD_BATCH`] deletes them, each fenced as in [`FINISH_BATCH`]; never a job with a sequence key.
pub(super) const ARCHIVE_BATCH: &str = concat!(
    archived!("f.o", "?3"),
    // `jsonb_each` has columns named like the job's (`id`): its values are read in a subquery of their own.
    "FROM (SELECT value ->> 'i' AS i, value ->> 'a' AS a, value ->> 'o' AS o FROM jsonb_each(?1) WHERE value ->> 'k') \
     AS f JOIN outbox_jobs ON outbox_jobs.id = f.i WHERE outbox_jobs.status = 'claimed' \
     AND outbox_jobs.locked_by = ?2 AND outbox_jobs.runs = f.a AND outbox_jobs.sequence_key IS NULL"
);

/// [`ARCHIVE_BATCH`] for one job, fenced by `?1` to `?3`: `?4` is its output, `?5` the time.
pub(super) const ARCHIVE_ONE: &str =
    concat!(archived!("?4", "?5"), "FROM outbox_jobs ", fence!(), " AND sequence_key IS NULL");

/// One outcome of the job `?1`, fenced by its claim (`?2`, `?3`): a completion with the output `?4` at `?5`.
pub(super) const COMPLETE_ONE: &str = concat!(
    "UPDATE outbox_jobs SET status = 'completed', output = ?4, completed_at = ?5, lease_expires_at = NULL, \
     updated_at = ?5 ",
    fence!()
);

/// One outcome of the job `?1`, fenced by its claim (`?2`, `?3`): a retry at `?4` after the error `?5`, at `?6`.
pub(super) const RETRY_ONE: &str = concat!(
    "UPDATE outbox_jobs SET status = 'pending', run_at = ?4, scheduled = ?4 > ?6, last_error = ?5, \
     lease_expires_at = NULL, updated_at = ?6 ",
    fence!()
);

/// One outcome of the job `?1`, fenced by its claim (`?2`, `?3`): a failure for good with the error `?4` at `?5`.
pub(super) const FAIL_ONE: &str = concat!(
    "UPDATE outbox_jobs SET status = 'failed', last_error = ?4, lease_expires_at = NULL, updated_at = ?5 ",
    fence!()
);

/// One outcome of the job `?1`, fenced by its claim (`?2`, `?3`): a snooze until `?4` at `?5`, the attempt given back.
pub(super) const SNOOZE_ONE: &str = concat!(
    "UPDATE outbox_jobs SET status = 'pending', attempts = attempts - 1, run_at = ?4, scheduled = ?4 > ?5, \
     lease_expires_at = NULL, updated_at = ?5 ",
    fence!()
);

/// One outcome of the job `?1`, fenced by its claim (`?2`, `?3`): a release at `?4`, the attempt given back.
pub(super) const RELEASE_ONE: &str = concat!(
    "UPDATE outbox_jobs SET status = 'pending', attempts = attempts - 1, run_at = ?4, lease_expires_at = NULL, \
     updated_at = ?4 ",
    fence!()
);

/// A completed job of a kind that keeps nothing (or keeps it in the archive), deleted, fenced by its claim.
pub(super) const DISCARD_ONE: &str =
    concat!("DELETE FROM outbox_jobs ", fence!(), " AND sequence_key IS NULL RETURNING kind, queue");

fn write_batch(tx: &Connection, owner: &str, batch: &[Finished], now: i64) -> Result<Vec<bool>> {
    let encoded = |e: serde_json::Error| Error::Internal(format!("encoding finished jobs: {e}"));
    let plain = batch.iter().all(|f| matches!(f.outcome, Outcome::Completed { output: None }) && !f.discards());
    // The outcomes as the statement reads them, and whether any are deleted or archived.
    let (json, discards, archives) = if plain {
        let runs: serde_json::Map<String, serde_json::Value> =
            batch.iter().map(|f| (f.id.clone(), f.run.into())).collect();
        (serde_json::to_string(&runs).map_err(encoded)?, false, false)
    } else {
        let rows: Vec<BatchRow<'_>> = batch
            .iter()
            .map(|f| {
                let c = f.outcome.columns(now);
                let (d, k) = (f.discards(), f.archives());
                BatchRow { i: &f.id, a: f.run, s: c.status, g: c.give_back, o: c.output, e: c.error, r: c.run_at, d, k }
            })
            .collect();
        let (d, k) = (rows.iter().any(|r| r.d), rows.iter().any(|r| r.k));
        (serde_json::to_string(&rows).map_err(encoded)?, d, k)
    };
    let ctx = || Error::db("writing finished jobs");
    let mut written = std::collections::HashSet::with_capacity(batch.len());
    let mut completed: Vec<(String, String, String, i32)> = Vec::with_capacity(batch.len());
    let mut apply = |sql: &str, values: &[&dyn rusqlite::ToSql]| -> Result<()> {
        let mut stmt = tx.prepare_cached(sql).map_err(ctx())?;
        let mut rows = stmt.query(values).map_err(ctx())?;
        while let Some(row) = rows.next().map_err(ctx())? {
            let id: String = row.get(0).map_err(ctx())?;
            if row.get_ref(3).map_err(ctx())?.as_str().ok() == Some("completed") {
                completed.push((
                    id.clone(),
                    row.get(1).map_err(ctx())?,
                    row.get(2).map_err(ctx())?,
                    row.get(4).map_err(ctx())?,
                ));
            }
            written.insert(id);
        }
        Ok(())
    };
    if archives {
        tx.prepare_cached(ARCHIVE_BATCH)
            .and_then(|mut s| s.execute(params![json, owner, now]))
            .map_err(Error::db("archiving completed jobs"))?;
    }
    if discards {
        apply(DISCARD_BATCH, params![json, owner])?;
    }
    apply(if plain { FINISH_PLAIN } else { FINISH_BATCH }, params![json, owner, now])?;
    insert_batch_event(tx, "completed", owner, now, &completed)?;
    Ok(batch.iter().map(|f| written.contains(&f.id)).collect())
}

/// Writes each outcome by itself.
fn write_rows(tx: &Connection, owner: &str, batch: &[Finished], now: i64) -> Result<Vec<bool>> {
    let ctx = || Error::db("writing finished jobs");
    let mut applied = Vec::with_capacity(batch.len());
    {
        for f in batch {
            if f.discards() && discard_one(tx, owner, f, now)? {
                applied.push(true);
                continue;
            }
            let n = match &f.outcome {
                Outcome::Completed { output } => tx
                    .prepare_cached(COMPLETE_ONE)
                    .and_then(|mut s| s.execute(params![f.id, owner, f.run, output, now])),
                Outcome::Retry { run_at, error } => tx
                    .prepare_cached(RETRY_ONE)
                    .and_then(|mut s| s.execute(params![f.id, owner, f.run, run_at, error, now])),
                Outcome::Failed { error } => {
                    tx.prepare_cached(FAIL_ONE).and_then(|mut s| s.execute(params![f.id, owner, f.run, error, now]))
                }
                Outcome::Snoozed { run_at } => {
                    tx.prepare_cached(SNOOZE_ONE).and_then(|mut s| s.execute(params![f.id, owner, f.run, run_at, now]))
                }
                Outcome::Released => {
                    tx.prepare_cached(RELEASE_ONE).and_then(|mut s| s.execute(params![f.id, owner, f.run, now]))
                }
            }
            .map_err(ctx())?;
            applied.push(n == 1);
        }
    }
    Ok(applied)
}

/// Deletes a completed job whose kind keeps nothing (or moves it into the archive), fenced by its claim, and records the completion in a feed
/// row (no trigger records a deletion); whether it did. A job with a sequence key is left to be completed as
/// usual.
fn discard_one(tx: &Connection, owner: &str, f: &Finished, now: i64) -> Result<bool> {
    let ctx = || Error::db(format!("deleting completed job `{}` of kind `{}`", f.id, f.kind));
    if let (true, Outcome::Completed { output }) = (f.archives(), &f.outcome) {
        tx.prepare_cached(ARCHIVE_ONE)
            .and_then(|mut s| s.execute(params![f.id, owner, f.run, output, now]))
            .map_err(Error::db(format!("archiving completed job `{}` of kind `{}`", f.id, f.kind)))?;
    }
    let deleted: Option<(String, String)> = tx
        .prepare_cached(DISCARD_ONE)
        .and_then(|mut s| s.query_row(params![f.id, owner, f.run], |r| Ok((r.get(0)?, r.get(1)?))).optional())
        .map_err(ctx())?;
    let Some((kind, queue)) = deleted else { return Ok(false) };
    insert_batch_event(tx, "completed", owner, now, &[(f.id.as_str(), kind.as_str(), queue.as_str(), f.attempt)])?;
    Ok(true)
}
