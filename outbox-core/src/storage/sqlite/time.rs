//! Schedules, named leases, retention and the reconcilers' reports on SQLite.

use sea_orm::ConnectionTrait;

use super::{execute_write, stmt};
use crate::error::{Error, Result};
use crate::record::{ReconciliationRecord, ScheduleRecord};
use crate::storage::{PruneRules, ScheduleRow, limit_value, rows};

pub(super) async fn register_schedule<C: ConnectionTrait + ?Sized>(
    conn: &C,
    row: &ScheduleRow,
    now: i64,
) -> Result<Option<i64>> {
    let ctx = || format!("registering schedule `{}`", row.name);
    execute_write(
        conn,
        stmt(
            "INSERT INTO outbox_schedules (name, kind, spec, time_zone, missed, updated_at) VALUES (?, ?, ?, ?, ?, ?) \
         ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, spec = excluded.spec, \
         time_zone = excluded.time_zone, missed = excluded.missed, updated_at = excluded.updated_at",
            row.values(now),
        ),
        &ctx,
    )
    .await?;
    let last = conn
        .query_one_raw(stmt("SELECT last_tick FROM outbox_schedules WHERE name = ?", vec![row.name.clone().into()]))
        .await
        .map_err(Error::db(ctx()))?;
    last.map(|r| r.try_get_by_index::<Option<i64>>(0)).transpose().map(Option::flatten).map_err(Error::db(ctx()))
}

pub(super) async fn claim_tick<C: ConnectionTrait + ?Sized>(
    conn: &C,
    row: &ScheduleRow,
    tick: i64,
    now: i64,
) -> Result<bool> {
    let mut values = row.values(now);
    values.push(tick.into());
    let res = execute_write(
        conn,
        stmt(
            "INSERT INTO outbox_schedules (name, kind, spec, time_zone, missed, updated_at, last_tick) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET last_tick = excluded.last_tick, \
             last_job_id = NULL, updated_at = excluded.updated_at \
             WHERE outbox_schedules.last_tick IS NULL OR outbox_schedules.last_tick < excluded.last_tick",
            values,
        ),
        || format!("taking tick {tick} of schedule `{}`", row.name),
    )
    .await?;
    Ok(res.rows_affected() == 1)
}

pub(super) async fn set_tick_job<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, job_id: &str) -> Result<()> {
    execute_write(
        conn,
        stmt("UPDATE outbox_schedules SET last_job_id = ? WHERE name = ?", vec![job_id.into(), name.into()]),
        || format!("recording the job of schedule `{name}`"),
    )
    .await?;
    Ok(())
}

pub(super) async fn schedules<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ScheduleRecord>> {
    let rows = conn
        .query_all_raw(stmt(
            "SELECT name, kind, spec, time_zone, missed, last_tick, last_job_id, updated_at FROM outbox_schedules \
             ORDER BY name",
            vec![],
        ))
        .await
        .map_err(Error::db("reading the schedules"))?;
    rows::schedules(&rows)
}

pub(super) async fn take_lock<C: ConnectionTrait + ?Sized>(
    conn: &C,
    name: &str,
    holder: &str,
    now: i64,
    until: i64,
) -> Result<bool> {
    let res = execute_write(
        conn,
        stmt(
            "INSERT INTO outbox_locks (name, holder, expires_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE \
             SET holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE outbox_locks.holder = excluded.holder OR outbox_locks.expires_at < ?",
            vec![name.into(), holder.into(), until.into(), now.into()],
        ),
        || format!("taking lease `{name}` for `{holder}`"),
    )
    .await?;
    Ok(res.rows_affected() == 1)
}

pub(super) async fn release_lock<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, holder: &str) -> Result<()> {
    execute_write(
        conn,
        stmt("DELETE FROM outbox_locks WHERE name = ? AND holder = ?", vec![name.into(), holder.into()]),
        || format!("giving up lease `{name}` of `{holder}`"),
    )
    .await?;
    Ok(())
}

pub(super) async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, batch: u64) -> Result<u64> {
    let (condition, mut values) = rules.condition(|_| "?".into(), |p| p.to_owned());
    values.push(limit_value(batch));
    let sql = format!("DELETE FROM outbox_jobs WHERE id IN (SELECT j.id FROM outbox_jobs j WHERE {condition} LIMIT ?)");
    let res = execute_write(conn, stmt(sql, values), || "pruning finished jobs".into()).await?;
    Ok(res.rows_affected())
}

pub(super) async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64> {
    let res = execute_write(
        conn,
        stmt(
            "DELETE FROM outbox_job_events WHERE id IN \
             (SELECT id FROM outbox_job_events WHERE job_id = '' AND at < ? ORDER BY id LIMIT ?)",
            vec![before.into(), limit_value(batch)],
        ),
        || "pruning old feed rows".into(),
    )
    .await?;
    Ok(res.rows_affected())
}

pub(super) async fn record_reconciliation<C: ConnectionTrait + ?Sized>(
    conn: &C,
    rec: &ReconciliationRecord,
) -> Result<()> {
    execute_write(
        conn,
        stmt(
            "INSERT INTO outbox_reconciliations (reconciler, at, worker, report) VALUES (?, ?, ?, ?) \
         ON CONFLICT (reconciler) DO UPDATE SET at = excluded.at, worker = excluded.worker, report = excluded.report",
            vec![
                rec.reconciler.clone().into(),
                rec.at.timestamp_millis().into(),
                rec.worker.clone().into(),
                rec.report.to_string().into(),
            ],
        ),
        || format!("recording the report of reconciler `{}`", rec.reconciler),
    )
    .await?;
    Ok(())
}

pub(super) async fn reconciliations<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ReconciliationRecord>> {
    let rows = conn
        .query_all_raw(stmt(
            "SELECT reconciler, at, worker, report FROM outbox_reconciliations ORDER BY reconciler",
            vec![],
        ))
        .await
        .map_err(Error::db("reading the reconcilers' reports"))?;
    rows::reconciliations(&rows)
}
