//! PostgreSQL: the event feed, the worker registry, and remote workers' claims and outcomes (the in-process
//! worker's statements, on the caller's pool).

use sea_orm::{ConnectionTrait, DatabaseConnection, Value};

use super::worker::{self, PgStoreConfig};
use super::{ms, stmt, ts};
use crate::error::{Error, Result};
use crate::record::{FeedEvent, WorkerRecord};
use crate::storage::{ClaimedJob, Finished, Outcome, WorkerRow, WorkerStoreOpts, rows};

/// A feed position on this backend: `<transaction id>-<event id>`, or `<transaction id>-<event id>.<n>` for
/// the events of a batch row.
fn position(after: &str) -> Result<(String, i64, Option<usize>)> {
    let (row, n) = crate::storage::split_position(after)?;
    let parsed = row
        .split_once('-')
        .and_then(|(tx, id)| Some((tx.parse::<u64>().ok()?, id.parse::<i64>().ok().filter(|n| *n >= 0)?)));
    let (tx, id) = parsed.ok_or_else(|| {
        Error::Invalid(format!(
            "invalid event id `{after}`: this database's event ids have the form `<transaction>-<number>` \
             or `<transaction>-<number>.<number>` (take one from an event)"
        ))
    })?;
    Ok((tx.to_string(), id, n))
}

pub(super) async fn feed<C: ConnectionTrait + ?Sized>(conn: &C, after: &str, limit: u64) -> Result<Vec<FeedEvent>> {
    let (tx, id, n) = position(after)?;
    // From the row read last, which may have events left: one row more than the events wanted.
    let rows_wanted = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    let sql = concat!(
        "SELECT txid::text || '-' || id::text, job_id, kind, queue, event, attempt, worker, error, ",
        ms!("at"),
        ", jobs::text FROM outbox_job_events WHERE (txid, id) >= ($1::text::xid8, $2::int8) \
         AND txid < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY txid, id LIMIT $3"
    );
    let row = format!("{tx}-{id}");
    let rows = conn
        .query_all_raw(stmt(sql, vec![tx.into(), id.into(), rows_wanted.into()]))
        .await
        .map_err(Error::db("reading the event feed"))?;
    rows::feed(&rows, (&row, n), limit)
}

/// Every event after `<oldest running transaction>-0` commits from now on; everything before it is final.
pub(super) async fn head<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<String> {
    let ctx = || Error::db("reading the end of the event feed");
    let row = conn
        .query_one_raw(stmt("SELECT pg_snapshot_xmin(pg_current_snapshot())::text || '-0'", Vec::new()))
        .await
        .map_err(ctx())?;
    row.map(|r| r.try_get_by_index::<String>(0))
        .transpose()
        .map_err(ctx())?
        .ok_or_else(|| Error::Internal("reading the end of the event feed returned no row".into()))
}

pub(super) async fn upsert_worker<C: ConnectionTrait + ?Sized>(conn: &C, w: &WorkerRow) -> Result<()> {
    let ctx = || Error::db(format!("recording worker `{}` in the registry", w.id));
    let values: Vec<Value> = vec![
        w.id.clone().into(),
        w.host.clone().into(),
        w.pid.into(),
        w.queues.clone().into(),
        w.kinds.clone().into(),
        w.concurrency.into(),
        w.running.into(),
        w.remote.into(),
        w.now.into(),
        w.expires_at.into(),
    ];
    let sql = concat!(
        "INSERT INTO outbox_workers (id, host, pid, queues, kinds, concurrency, running, remote, started_at, \
         last_seen_at, expires_at) VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7, $8, ",
        ts!("$9"),
        ", ",
        ts!("$9"),
        ", ",
        ts!("$10"),
        ") ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queues = excluded.queues, \
         kinds = excluded.kinds, concurrency = excluded.concurrency, running = excluded.running, \
         remote = excluded.remote, last_seen_at = excluded.last_seen_at, expires_at = excluded.expires_at"
    );
    conn.execute_raw(stmt(sql, values)).await.map_err(ctx())?;
    conn.execute_raw(stmt(concat!("DELETE FROM outbox_workers WHERE expires_at < ", ts!("$1")), vec![w.now.into()]))
        .await
        .map_err(ctx())?;
    Ok(())
}

pub(super) async fn remove_worker<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<()> {
    conn.execute_raw(stmt("DELETE FROM outbox_workers WHERE id = $1", vec![id.into()]))
        .await
        .map_err(Error::db(format!("removing worker `{id}` from the registry")))?;
    Ok(())
}

pub(super) async fn workers<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<WorkerRecord>> {
    let sql = concat!(
        "SELECT id, host, pid, queues::text, kinds::text, concurrency, running, remote, ",
        ms!("started_at"),
        ", ",
        ms!("last_seen_at"),
        ", ",
        ms!("expires_at"),
        " FROM outbox_workers WHERE expires_at > ",
        ts!("$1"),
        " ORDER BY started_at, id"
    );
    let rows = conn.query_all_raw(stmt(sql, vec![now.into()])).await.map_err(Error::db("listing workers"))?;
    rows::workers(&rows)
}

pub(super) async fn remote_claim(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    schema: String,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    let pool = db.get_postgres_connection_pool();
    let c = PgStoreConfig {
        kinds: opts.unlimited_kinds(),
        limited: opts.limits,
        worker_id: opts.worker_id,
        queues: opts.queues,
        schema,
        batched_events: super::batched_events(db).await?,
    };
    let rows = worker::claim_rows(pool, &c, limit, now, lease_until).await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for row in &rows {
        match worker::claimed_job(row) {
            Ok(job) => jobs.push(job),
            Err((u, attempt)) => {
                u.log(&c.worker_id);
                let error = u.error();
                let failed = Finished {
                    id: u.id,
                    kind: u.kind,
                    queue: String::new(),
                    attempt,
                    outcome: Outcome::Failed { error },
                };
                remote_finish(db, &c.worker_id, failed).await?;
            }
        }
    }
    Ok(jobs)
}

pub(super) async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
    let pool = db.get_postgres_connection_pool();
    let batch = std::slice::from_ref(&finished);
    let applied =
        worker::retrying("writing a remote worker's outcome", || worker::write_batch(pool, owner, batch, false))
            .await?
            .contains(&finished.id);
    crate::storage::log_finished(&finished, applied, owner);
    Ok(applied)
}

pub(super) async fn remote_extend(
    db: &DatabaseConnection,
    owner: &str,
    id: &str,
    attempt: i32,
    until: i64,
) -> Result<bool> {
    let sql = concat!(
        "UPDATE outbox_jobs SET lease_expires_at = GREATEST(COALESCE(lease_expires_at, TIMESTAMPTZ 'epoch'), ",
        ts!("$1"),
        ") WHERE id = $2 AND status = 'claimed' AND locked_by = $3 AND attempts = $4"
    );
    let res = db
        .execute_raw(stmt(sql, vec![until.into(), id.into(), owner.into(), attempt.into()]))
        .await
        .map_err(Error::db(format!("renewing the lease of job `{id}`")))?;
    Ok(res.rows_affected() == 1)
}
