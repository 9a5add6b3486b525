//! Rescues on PostgreSQL: claims whose lease ran out go back to pending (or failed, with no attempts left),
//! found through the claims table; jobs stranded behind sequences that moved on are let go first (the sweep).

use sea_orm::sqlx::postgres::PgPool;
use sea_orm::sqlx::{self, Row};

use super::super::ts;
use super::super::wake::SWEEP;
use super::{Inner, retrying};
use crate::error::{Error, Result};
use crate::storage::Rescued;
use crate::wake;

/// The rescue of expired claims, found through `outbox_claims` (see `schema.sql`): of the claims whose lease ran
/// out, the jobs still claimed whose own lease ran out too are put back to pending (or failed, with no attempts
/// left); then each such claim is deleted, or moved on to the earliest lease among its jobs still claimed (renewed
/// since, claimed again, or held by another transaction and so skipped here). Rescuers on several machines skip
/// each other's claims and jobs instead of queueing behind them. The statement's reads of `outbox_jobs` see the
/// rows as they were before it, so the jobs it puts back are left out by id.
pub(in crate::storage::postgres) const RESCUE: &str = concat!(
    "WITH x AS (SELECT id, jobs FROM outbox_claims WHERE lease_expires_at < ",
    ts!("$1"),
    " FOR UPDATE SKIP LOCKED), \
     r AS (SELECT id FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM x)) \
     AND (status || '') = 'claimed' AND lease_expires_at < ",
    ts!("$1"),
    " FOR UPDATE SKIP LOCKED), \
     u AS (UPDATE outbox_jobs j SET \
     status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END, \
     last_error = 'lease expired while claimed by ' || COALESCE(j.locked_by, 'an unknown worker') \
     || CASE WHEN j.attempts >= j.max_attempts THEN '; no attempts left' ELSE '' END, \
     lease_expires_at = NULL, run_at = ",
    ts!("$1"),
    ", updated_at = ",
    ts!("$1"),
    " WHERE j.id = ANY(ARRAY(SELECT id FROM r)) RETURNING j.id, j.kind, j.queue, j.attempts, j.status, j.locked_by), \
     k AS (SELECT x.id, (SELECT min(COALESCE(j.lease_expires_at, TIMESTAMPTZ 'epoch')) FROM outbox_jobs j \
     WHERE j.id = ANY(x.jobs) AND (j.status || '') = 'claimed' AND j.id <> ALL(ARRAY(SELECT id FROM r))) AS next \
     FROM x), \
     d AS (DELETE FROM outbox_claims c USING k WHERE c.id = k.id AND k.next IS NULL), \
     m AS (UPDATE outbox_claims c SET lease_expires_at = k.next FROM k WHERE c.id = k.id AND k.next IS NOT NULL) \
     SELECT id, kind, queue, attempts, status, locked_by FROM u"
);

/// The sequences with a waiting job whose lock is free (taken for the transaction), as an array: the first
/// half of the sweep.
/// Only a sequence none of whose jobs is running or free to run is a candidate: a sequence moving on its own
/// is never locked here, so the sweep does not contend with the release of its next job.
///
/// Every job it reads holds its sequence (`blocks`): a waiting job is a pending one of a sequence, as is a running
/// or free one. Saying so lets it read the index of such jobs alone. Without it, no index served `waiting`, and
/// every rescue read the whole table: 4 ms over 20,000 unsequenced pending jobs, before a worker's first claim.
pub(in crate::storage::postgres) const SWEEP_LOCK: &str = "SELECT array_agg(k) FROM (SELECT DISTINCT w.sequence_key AS k FROM outbox_jobs w \
     WHERE w.blocks AND w.status = 'pending' AND w.waiting AND NOT EXISTS (SELECT 1 FROM outbox_jobs c \
     WHERE c.sequence_key = w.sequence_key AND c.blocks \
     AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting))) \
     ORDER BY 1) s \
     WHERE pg_try_advisory_xact_lock(hashtextextended($1 || ' outbox sequence ' || k, 0))";

/// Lets go sequences that moved on, then rescues expired claims.
pub(super) async fn rescue(inner: &Inner, now: i64) -> Result<Vec<Rescued>> {
    rescue_on(&inner.pool, &inner.config.schema, now).await
}

/// Lets go jobs stranded behind sequences that moved on, and puts claims whose lease ran out before `now`
/// back to pending (or failed, with no attempts left); the rescued claims.
pub(in crate::storage::postgres) async fn rescue_on(pool: &PgPool, schema: &str, now: i64) -> Result<Vec<Rescued>> {
    // Both on one connection: one returned to the pool is free again only after a task the pool spawns has run,
    // so the rescue, run on the pool right after the sweep, opened a second connection of its own.
    let (released, rows) = retrying("letting waiting sequences go and rescuing expired claims", || async {
        let mut conn = pool.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let keys: Option<Vec<String>> = sqlx::query_scalar(SWEEP_LOCK).bind(schema).fetch_one(&mut *tx).await?;
        let released = match keys {
            Some(keys) => {
                let n = sqlx::query(SWEEP).bind(&keys).execute(&mut *tx).await?.rows_affected();
                if n > 0 {
                    sqlx::query(super::super::wake::NOTIFY).bind(schema).execute(&mut *tx).await?;
                }
                n
            }
            None => 0,
        };
        tx.commit().await?;
        let rows = sqlx::query(RESCUE).bind(now).fetch_all(&mut *conn).await?;
        Ok((released, rows))
    })
    .await?;
    if released > 0 {
        tracing::info!(jobs = released, "let go jobs waiting behind sequences that had moved on");
        wake::wake();
    }
    rows.iter()
        .map(|row| {
            Ok(Rescued {
                id: row.try_get(0)?,
                kind: row.try_get(1)?,
                queue: row.try_get(2)?,
                attempt: row.try_get(3)?,
                status: row.try_get(4)?,
                previous_owner: row.try_get(5)?,
            })
        })
        .collect::<std::result::Result<_, sqlx::Error>>()
        .map_err(Error::db("reading rescued claims"))
}
