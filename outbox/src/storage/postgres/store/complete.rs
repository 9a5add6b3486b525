//! Outcomes: finished attempts written as they arrive, everything queued so far in one statement, each fenced
//! by its claim; retried across dropped connections until written or left to the lease.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use sea_orm::sqlx::postgres::PgPool;
use sea_orm::sqlx::{self, Row};
use tokio::sync::mpsc;

use super::{Claims, FINISH_BATCH, FINISH_GIVE_UP, Msg, Unwritten, claim_counts, unwritten_ids};
use crate::backoff::Backoff;
use crate::storage::archive::archive_columns;
use crate::storage::postgres::ts;
use crate::storage::{Finished, Outcome, transient};
use crate::wake;

/// Writes a batch of finished attempts in one statement, each fenced by (id, claimed, owner, run). The
/// batched forms record the completions as one feed row and list those they keep in one row of the log of
/// finished jobs; the triggers record the rest, and every outcome of the single form (a remote worker's, or one
/// of a batch the database refused).
///
/// The rows are found by `id = ANY($1)`, one lookup per id in the primary key, and each row's outcome is read
/// from `$2`, an object keyed by job id ([`outcome!`]), so the statement joins nothing. Joined to the outcomes
/// as an `unnest` of arrays, past about 230 jobs the planner hashed them against a scan of the whole table (it
/// prices each lookup as a read from disk and cannot see how few rows the fence keeps): draining 20,000 jobs,
/// completions of about 280 took 40 ms each (143 µs a job, against 30 µs in completions of 60), and a worker of
/// concurrency 300 drained a third as fast as one of 100 (`outbox-bench --case process --concurrency 300`,
/// statement times from `pg_stat_statements`). Written this way, the planner
/// prices the lookups for their number and keeps to them on any table larger than a few batches.
macro_rules! finish_sql {
    (batched) => {
        concat!(
            "WITH u AS (UPDATE outbox_jobs j SET ",
            finish_sql!(@set),
            ", event_flip = (j.event_flip <> (",
            outcome!(status),
            " = 'completed')) WHERE ",
            finish_sql!(@fence),
            finish_sql!(@recorded " WHERE status = 'completed'")
        )
    };
    // Every outcome a completion without output, kept in the table: the row's new values are the same for all,
    // and `$2` maps each id to its run alone, the one thing each row reads from it (the fence).
    (plain) => {
        concat!(
            "WITH u AS (UPDATE outbox_jobs j SET status = 'completed', output = NULL, completed_at = ",
            ts!("$3"),
            ", scheduled = false, lease_expires_at = NULL, updated_at = ",
            ts!("$3"),
            ", event_flip = NOT j.event_flip WHERE ",
            finish_sql!(@fence "($2::jsonb ->> j.id)::int4"),
            finish_sql!(@recorded "")
        )
    };
    (discarding) => {
        concat!(
            "WITH d AS (DELETE FROM outbox_jobs j WHERE ",
            finish_sql!(@fence),
            " AND ",
            finish_sql!(@discarded),
            " RETURNING j.*, ",
            outcome!(output),
            " AS done_output, ",
            outcome!(archive),
            "::bool AS archived), \
             a AS (INSERT INTO outbox_jobs_done (",
            archive_columns!(),
            ") SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, \
             schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, \
             last_error, done_output::jsonb, attempts, runs, locked_by, locked_at, claimed_at, 'completed', ",
            ts!("$3"),
            ", NULL, ",
            ts!("$3"),
            " FROM d WHERE archived), \
             k AS (UPDATE outbox_jobs j SET ",
            finish_sql!(@set),
            ", event_flip = (j.event_flip <> (",
            outcome!(status),
            " = 'completed')) WHERE ",
            finish_sql!(@fence),
            " AND NOT (",
            finish_sql!(@discarded),
            ") RETURNING j.id, j.kind, j.queue, j.status, j.attempts), \
             u AS (SELECT * FROM k UNION ALL \
             SELECT id, kind, queue, 'completed'::text COLLATE \"C\", attempts FROM d), \
             m AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
             SELECT id, kind, queue, ",
            ts!("$3"),
            ", 'completed', attempts, $4, '[]' FROM d WHERE NOT archived), \
             e AS (",
            feed_row!("$3", "completed", "$4", " WHERE status = 'completed'"),
            "), ",
            finish_sql!(@log "k"),
            ", ",
            finish_sql!(@claims),
            " SELECT id FROM u"
        )
    };
    (single) => {
        concat!(
            "WITH u AS (UPDATE outbox_jobs j SET ",
            finish_sql!(@set),
            " WHERE ",
            finish_sql!(@fence),
            " RETURNING j.id), ",
            finish_sql!(@claims),
            " SELECT id FROM u"
        )
    };
    // The rest of a batched statement that updates every row it writes (`u`): those rows returned, their
    // completions (`$feed` picks them out, or is empty when all are) in one feed row and one row of the log, and
    // the claims they were the last outcomes of deleted.
    (@recorded $feed:literal) => {
        concat!(
            " RETURNING j.id, j.kind, j.queue, j.status, j.attempts), e AS (",
            feed_row!("$3", "completed", "$4", $feed),
            "), ",
            finish_sql!(@log "u"),
            ", ",
            finish_sql!(@claims),
            " SELECT id FROM u"
        )
    };
    // The completions kept in the jobs table (the rows `$rows` returned), in one row of the log of finished jobs
    // (`outbox_finished` in `schema.sql`); none when there are none. The other outcomes that finish a job (a failed last attempt)
    // leave `event_flip` as it was, and the log's trigger lists them.
    (@log $rows:literal) => {
        concat!(
            "f AS (INSERT INTO outbox_finished (at, jobs) SELECT ",
            ts!("$3"),
            ", array_agg(id) FROM ",
            $rows,
            " WHERE status = 'completed' HAVING count(*) > 0)"
        )
    };
    // The worker's claims whose last outcomes these are (`$5`, see `ClaimCounts`): their rows go with them.
    (@claims) => {
        "x AS (DELETE FROM outbox_claims c WHERE c.id = ANY($5::int8[]))"
    };
    (@set) => {
        concat!(
            "status = ",
            outcome!(status),
            ", attempts = j.attempts - ",
            outcome!(give_back),
            "::int4, output = CASE WHEN ",
            outcome!(status),
            " = 'completed' THEN ",
            outcome!(output),
            "::jsonb ELSE j.output END, completed_at = CASE WHEN ",
            outcome!(status),
            " = 'completed' THEN ",
            ts!("$3"),
            " ELSE j.completed_at END, last_error = COALESCE(",
            outcome!(error),
            ", j.last_error), run_at = COALESCE(TIMESTAMPTZ 'epoch' + ",
            outcome!(run_at),
            "::int8 * INTERVAL '1 millisecond', j.run_at), scheduled = COALESCE(",
            outcome!(run_at),
            "::int8 > ($3)::int8, false), lease_expires_at = NULL, updated_at = ",
            ts!("$3")
        )
    };
    (@discarded) => {
        concat!(outcome!(discard), "::bool AND ", outcome!(status), " = 'completed' AND j.sequence_key IS NULL")
    };
    // `j.status || ''`: the claim's test in a form the planner cannot match to a partial index on the status
    // (see `EXTEND` in `mod.rs`), so each row is found by its id.
    (@fence) => {
        finish_sql!(@fence concat!(outcome!(run), "::int4"))
    };
    // The fence with the claim's run (see `Finished::run`) read from `$2` as `$run` says.
    (@fence $run:expr) => {
        concat!("j.id = ANY($1::text[]) AND (j.status || '') = 'claimed' AND j.locked_by = $4 AND j.runs = ", $run)
    };
}

/// One field of the row's outcome, as text: `$2` maps each job id to `[run, status, output, error, run_at,
/// give_back, discard, archive]` ([`outcomes`]). An object's key is found by binary search. It is bound as `jsonb`, so
/// the server parses it once; bound as text, each of its casts parsed it again (a tenth of the drain's rate).
macro_rules! outcome {
    (run) => { outcome!(@at "0") };
    (status) => { outcome!(@at "1") };
    (output) => { outcome!(@at "2") };
    (error) => { outcome!(@at "3") };
    (run_at) => { outcome!(@at "4") };
    (give_back) => { outcome!(@at "5") };
    (discard) => { outcome!(@at "6") };
    (archive) => { outcome!(@at "7") };
    (@at $i:literal) => { concat!("(($2::jsonb -> j.id) ->> ", $i, ")") };
}

pub(super) const FINISH: &str = finish_sql!(batched);
/// [`FINISH`] for a batch of completions without output, all kept in the table, as most handlers' are: each row
/// reads one value of `$2` rather than one per column. Writing 500 such completions took 4.4 ms, of which the
/// outcomes' lookups were about 1 ms (`auto_explain`, `outbox-bench --case process --concurrency 500`).
pub(super) const FINISH_PLAIN: &str = finish_sql!(plain);
/// [`FINISH`] for a batch with completions of kinds that keep nothing or keep in time partitions: those jobs are
/// deleted (leaving their events: the `outbox_jobs_purged` trigger of `schema.sql`) unless they have a sequence key, and recorded in the same feed
/// row; the archived ones are written, completed, into the archive (`outbox_jobs_done` in `schema.sql`). Each job kept nowhere also
/// gets a row of its own that lists no job (`jobs` empty, so the feed shows nothing of it): a job enqueued with
/// others has no row of its own otherwise (`outbox_jobs_enqueued` in `schema.sql`), and this one tells a waiter the job completed
/// rather than never existed (`events::outlived`). Retention removes it with the job's other events.
pub(super) const FINISH_DISCARDING: &str = finish_sql!(discarding);
pub(super) const FINISH_ONE: &str = finish_sql!(single);

/// Of several outcomes of one job in `batch`, the one of its latest run: the others are of claims rescued
/// since, which the fence refuses, and `$2` holds one outcome per job. The batch's outcomes that stand, in order.
pub(super) fn latest_runs(batch: &[Finished]) -> Vec<&Finished> {
    let mut latest: HashMap<&str, i32> = HashMap::with_capacity(batch.len());
    for f in batch {
        let run = latest.entry(f.id.as_str()).or_insert(f.run);
        *run = (*run).max(f.run);
    }
    let mut kept: Vec<&Finished> = Vec::with_capacity(latest.len());
    for f in batch {
        if latest.get(f.id.as_str()) == Some(&f.run) {
            latest.remove(f.id.as_str());
            kept.push(f);
        }
    }
    kept
}

/// The ids of one finish statement and their outcomes keyed by id, as [`outcome!`] reads them (or, for
/// [`FINISH_PLAIN`], their runs); the statement that writes them, batched or alone. Of a job's several outcomes,
/// that of its latest run alone ([`latest_runs`]).
pub(super) fn outcomes(batch: &[Finished], batched: bool) -> (Vec<String>, serde_json::Value, &'static str) {
    let batch = latest_runs(batch);
    let ids: Vec<String> = batch.iter().map(|f| f.id.clone()).collect();
    let plain = |f: &&Finished| matches!(f.outcome, Outcome::Completed { output: None }) && !f.discards();
    if batched && batch.iter().all(plain) {
        let map = batch.iter().map(|f| (f.id.clone(), serde_json::Value::from(f.run))).collect();
        return (ids, serde_json::Value::Object(map), FINISH_PLAIN);
    }
    // The time a released job runs again; plain completions have none.
    let now = crate::storage::now_ms();
    let mut map = serde_json::Map::with_capacity(batch.len());
    let mut discarding = false;
    for f in batch {
        let o = f.outcome.columns(now);
        let discard = f.discards();
        discarding |= discard;
        // PostgreSQL text cannot hold NUL; an error message is for people, so it is replaced.
        let error = o.error.map(|e| e.replace('\0', "\u{fffd}"));
        map.insert(
            f.id.clone(),
            serde_json::json!([f.run, o.status, o.output, error, o.run_at, o.give_back, discard, f.archives()]),
        );
    }
    // An outcome that deletes its job takes the discarding form even alone (a remote worker's, or one of a
    // batch the database refused, written job by job): the single form would keep the job in the table.
    let sql = match (batched, discarding) {
        (_, true) => FINISH_DISCARDING,
        (true, false) => FINISH,
        (false, false) => FINISH_ONE,
    };
    (ids, serde_json::Value::Object(map), sql)
}

/// Writes one batch, and deletes the claims `done` (ids of `outbox_claims`) with it; returns the outcomes the
/// fence let through, as (job id, run).
pub(in crate::storage::postgres) async fn write_batch(
    pool: &PgPool,
    owner: &str,
    batch: &[Finished],
    batched: bool,
    done: &[i64],
) -> std::result::Result<Applied, sqlx::Error> {
    let (ids, outcomes, sql) = outcomes(batch, batched);
    let query = sqlx::query(sql).bind(&ids).bind(outcomes).bind(crate::storage::now_ms()).bind(owner).bind(done);
    let rows = query.fetch_all(pool).await?;
    let written = rows.iter().map(|r| r.try_get::<String, _>(0)).collect::<Result<HashSet<String>, _>>()?;
    Ok(latest_runs(batch).into_iter().filter(|f| written.contains(&f.id)).map(|f| (f.id.clone(), f.run)).collect())
}

/// The outcomes a statement wrote, as (job id, run).
pub(in crate::storage::postgres) type Applied = HashSet<(String, i32)>;

/// Whether `f` is among the outcomes written.
pub(in crate::storage::postgres) fn applied(written: &Applied, f: &Finished) -> bool {
    written.contains(&(f.id.clone(), f.run))
}

/// Writes finished attempts as they arrive, everything queued so far in one statement; the claims of `claims`
/// whose last outcomes it writes are deleted with them.
pub(super) async fn write_finished(
    pool: PgPool,
    owner: String,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    unwritten: Unwritten,
    claims: Claims,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next.take().or_else(|| rx.try_recv().ok()) {
            match msg {
                Msg::Finish(f) => batch.push(f),
                Msg::Flush(reply) => flushes.push(reply),
            }
            if batch.len() >= FINISH_BATCH {
                break;
            }
        }
        if !batch.is_empty() {
            batch.sort_by(|a, b| a.id.cmp(&b.id));
            let ids: Vec<String> = batch.iter().map(|f| f.id.clone()).collect();
            write_with_retries(&pool, &owner, &claims, batch).await;
            {
                let mut set = unwritten_ids(&unwritten);
                for id in &ids {
                    set.remove(id);
                }
            }
            // Their slots are free: the worker may claim again.
            wake::wake();
        }
        for reply in flushes {
            let _ = reply.send(());
        }
    }
    pool.close().await;
}

async fn write_with_retries(pool: &PgPool, owner: &str, claims: &Claims, batch: Vec<Finished>) {
    let started = tokio::time::Instant::now();
    let mut retry = Backoff::new(Duration::from_millis(10), Duration::from_secs(5));
    let done = claim_counts(claims).emptied_by(&batch);
    loop {
        match write_batch(pool, owner, &batch, true, &done).await {
            Ok(written) => {
                claim_counts(claims).written(batch.iter().map(|f| (f.id.as_str(), f.run)));
                for f in &batch {
                    crate::storage::log_finished(f, applied(&written, f), owner);
                }
                crate::wake::outcome_written();
                return;
            }
            Err(e) if transient::sqlx(&e) && started.elapsed() < FINISH_GIVE_UP => {
                tracing::warn!(error = %e, jobs = batch.len(), "writing finished jobs failed; retrying");
                retry.sleep().await;
            }
            Err(e) if transient::sqlx(&e) => {
                tracing::error!(
                    error = %e, jobs = batch.len(),
                    "giving up writing finished jobs; their leases will expire and they will run again"
                );
                return;
            }
            Err(e) => {
                // A row the database refuses (an output it cannot store) must not sink the rest of the batch.
                tracing::warn!(error = %e, jobs = batch.len(), "a batch of finished jobs was refused; writing them one by one");
                for f in batch {
                    write_alone(pool, owner, claims, f).await;
                }
                return;
            }
        }
    }
}

async fn write_alone(pool: &PgPool, owner: &str, claims: &Claims, f: Finished) {
    let mut retry = Backoff::new(Duration::from_millis(10), Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let mut item = f;
    let done = claim_counts(claims).emptied_by(std::slice::from_ref(&item));
    loop {
        match write_batch(pool, owner, std::slice::from_ref(&item), false, &done).await {
            Ok(written) => {
                claim_counts(claims).written([(item.id.as_str(), item.run)]);
                crate::storage::log_finished(&item, applied(&written, &item), owner);
                crate::wake::outcome_written();
                return;
            }
            Err(e) if transient::sqlx(&e) && started.elapsed() < FINISH_GIVE_UP => retry.sleep().await,
            Err(e) if matches!(item.outcome, Outcome::Completed { .. }) && !transient::sqlx(&e) => {
                item = item.refused(&e).unwrap_or(item);
            }
            Err(e) => {
                tracing::error!(
                    job_id = %item.id, kind = %item.kind, error = %e,
                    "giving up writing a finished job; its lease will expire and it will run again"
                );
                return;
            }
        }
    }
}
