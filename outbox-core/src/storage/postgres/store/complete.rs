//! Outcomes: finished attempts written as they arrive, everything queued so far in one statement, each fenced
//! by its claim; retried across dropped connections until written or left to the lease.

use std::collections::HashSet;
use std::time::Duration;

use sea_orm::sqlx::postgres::PgPool;
use sea_orm::sqlx::{self, Row};
use tokio::sync::mpsc;

use super::{FINISH_BATCH, FINISH_GIVE_UP, Msg, Unwritten, unwritten_ids};
use crate::backoff::Backoff;
use crate::storage::postgres::ts;
use crate::storage::{Finished, Outcome, transient};
use crate::wake;

/// Writes a batch of finished attempts in one statement, each fenced by (id, claimed, owner, attempt). The
/// batched forms record the completions as one feed row; the transition trigger records the rest, and every
/// outcome of the single form (a remote worker's, or one of a batch the database refused).
macro_rules! finish_sql {
    (batched) => {
        concat!(
            "WITH u AS (UPDATE outbox_jobs j SET ",
            finish_sql!(@set),
            ", event_flip = (j.event_flip <> (f.status = 'completed')) ",
            finish_sql!(@from),
            " RETURNING j.id, j.kind, j.queue, j.status, j.attempts), \
             e AS (",
            feed_row!("$8", "completed", "$9", " WHERE status = 'completed'"),
            ") SELECT id FROM u"
        )
    };
    (discarding) => {
        concat!(
            "WITH d AS (DELETE FROM outbox_jobs j USING ",
            finish_sql!(@unnest_discard),
            " WHERE ",
            finish_sql!(@fence),
            " AND f.discard AND f.status = 'completed' AND j.sequence_key IS NULL \
             RETURNING j.id, j.kind, j.queue, 'completed'::text COLLATE \"C\" AS status, j.attempts), \
             k AS (UPDATE outbox_jobs j SET ",
            finish_sql!(@set),
            ", event_flip = (j.event_flip <> (f.status = 'completed')) FROM ",
            finish_sql!(@unnest_discard),
            " WHERE ",
            finish_sql!(@fence),
            " AND NOT (f.discard AND f.status = 'completed' AND j.sequence_key IS NULL) \
             RETURNING j.id, j.kind, j.queue, j.status, j.attempts), \
             u AS (SELECT * FROM k UNION ALL SELECT * FROM d), \
             m AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) \
             SELECT id, kind, queue, ",
            ts!("$8"),
            ", 'completed', attempts, $9, '[]' FROM d), \
             e AS (",
            feed_row!("$8", "completed", "$9", " WHERE status = 'completed'"),
            ") SELECT id FROM u"
        )
    };
    (single) => {
        concat!("UPDATE outbox_jobs j SET ", finish_sql!(@set), " ", finish_sql!(@from), " RETURNING j.id")
    };
    (@set) => {
        concat!(
            "status = f.status, attempts = j.attempts - f.give_back, \
             output = CASE WHEN f.status = 'completed' THEN f.output::jsonb ELSE j.output END, \
             completed_at = CASE WHEN f.status = 'completed' THEN ",
            ts!("$8"),
            " ELSE j.completed_at END, last_error = COALESCE(f.error, j.last_error), run_at = COALESCE(",
            ts!("f.run_at"),
            ", j.run_at), scheduled = COALESCE(f.run_at > ($8)::int8, false), lease_expires_at = NULL, \
             updated_at = ",
            ts!("$8")
        )
    };
    (@from) => {
        concat!(
            "FROM unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int4[]) \
             AS f(id, attempt, status, output, error, run_at, give_back) WHERE ",
            finish_sql!(@fence)
        )
    };
    (@unnest_discard) => {
        "unnest($1::text[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::int8[], $7::int4[], $10::bool[]) \
         AS f(id, attempt, status, output, error, run_at, give_back, discard)"
    };
    // `j.status || ''`: the claim's test in a form the planner cannot match to the partial lease index (see
    // `EXTEND` in `mod.rs`), so each row is found by its id.
    (@fence) => {
        "j.id = f.id AND (j.status || '') = 'claimed' AND j.locked_by = $9 AND j.attempts = f.attempt"
    };
}

const FINISH: &str = finish_sql!(batched);
/// [`FINISH`] for a batch with completions of kinds that keep nothing: those jobs are deleted (leaving their
/// events, see `keep.sql`) unless they have a sequence key, and recorded in the same feed row. Each also gets
/// a row of its own that lists no job (`jobs` empty, so the feed shows nothing of it): a job enqueued with
/// others has no row of its own otherwise (`fewer_writes.sql`), and this one tells a waiter the job completed
/// rather than never existed (`events::outlived`). Retention removes it with the job's other events.
const FINISH_DISCARDING: &str = finish_sql!(discarding);
const FINISH_ONE: &str = finish_sql!(single);

/// The arrays of one finish statement.
#[derive(Default)]
struct Columns {
    ids: Vec<String>,
    attempts: Vec<i32>,
    statuses: Vec<&'static str>,
    outputs: Vec<Option<String>>,
    errors: Vec<Option<String>>,
    run_ats: Vec<Option<i64>>,
    give_backs: Vec<i32>,
    discards: Vec<bool>,
}

impl Columns {
    fn of(batch: &[Finished]) -> Columns {
        let now = crate::storage::now_ms();
        let mut c = Columns::default();
        for f in batch {
            let o = f.outcome.columns(now);
            c.ids.push(f.id.clone());
            c.attempts.push(f.attempt);
            c.statuses.push(o.status);
            c.outputs.push(o.output.map(str::to_owned));
            // PostgreSQL text cannot hold NUL; an error message is for people, so it is replaced.
            c.errors.push(o.error.map(|e| e.replace('\0', "\u{fffd}")));
            c.run_ats.push(o.run_at);
            c.give_backs.push(o.give_back);
            c.discards.push(f.discards());
        }
        c
    }
}

/// Writes one batch; returns the ids the fence let through.
pub(in crate::storage::postgres) async fn write_batch(
    pool: &PgPool,
    owner: &str,
    batch: &[Finished],
    batched: bool,
) -> std::result::Result<HashSet<String>, sqlx::Error> {
    let c = Columns::of(batch);
    let discarding = batched && c.discards.contains(&true);
    let sql = match (batched, discarding) {
        (true, true) => FINISH_DISCARDING,
        (true, false) => FINISH,
        (false, _) => FINISH_ONE,
    };
    let query = sqlx::query(sql)
        .bind(&c.ids)
        .bind(&c.attempts)
        .bind(&c.statuses)
        .bind(&c.outputs)
        .bind(&c.errors)
        .bind(&c.run_ats)
        .bind(&c.give_backs)
        .bind(crate::storage::now_ms())
        .bind(owner);
    let query = if discarding { query.bind(&c.discards) } else { query };
    let rows = query.fetch_all(pool).await?;
    rows.iter().map(|r| r.try_get::<String, _>(0)).collect()
}

/// Writes finished attempts as they arrive, everything queued so far in one statement.
pub(super) async fn write_finished(
    pool: PgPool,
    owner: String,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    unwritten: Unwritten,
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
            write_with_retries(&pool, &owner, batch).await;
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

async fn write_with_retries(pool: &PgPool, owner: &str, batch: Vec<Finished>) {
    let started = tokio::time::Instant::now();
    let mut retry = Backoff::new(Duration::from_millis(10), Duration::from_secs(5));
    loop {
        match write_batch(pool, owner, &batch, true).await {
            Ok(applied) => {
                for f in &batch {
                    crate::storage::log_finished(f, applied.contains(&f.id), owner);
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
                    write_alone(pool, owner, f).await;
                }
                return;
            }
        }
    }
}

async fn write_alone(pool: &PgPool, owner: &str, f: Finished) {
    let mut retry = Backoff::new(Duration::from_millis(10), Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let mut item = f;
    loop {
        match write_batch(pool, owner, std::slice::from_ref(&item), false).await {
            Ok(applied) => {
                crate::storage::log_finished(&item, applied.contains(&item.id), owner);
                crate::wake::outcome_written();
                return;
            }
            Err(e) if transient::sqlx(&e) && started.elapsed() < FINISH_GIVE_UP => retry.sleep().await,
            Err(e) if matches!(item.outcome, Outcome::Completed { .. }) && !transient::sqlx(&e) => {
                // The handler succeeded but its output cannot be stored: the job fails for good with the
                // reason instead of running again.
                item.outcome =
                    Outcome::Failed { error: format!("the job's output could not be stored: {e}").replace('\0', "") };
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
