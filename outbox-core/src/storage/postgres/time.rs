//! Schedules, named leases, retention and the reconcilers' reports on PostgreSQL.

use sea_orm::{ConnectionTrait, Value};

use super::{ms, stmt, ts, ts_of, write_error};
use crate::error::{Error, Result};
use crate::record::{ReconciliationRecord, ScheduleRecord};
use crate::storage::{PruneRules, ScheduleRow, limit_value, rows};

pub(super) async fn register_schedule<C: ConnectionTrait + ?Sized>(
    conn: &C,
    row: &ScheduleRow,
    now: i64,
) -> Result<Option<i64>> {
    let ctx = || format!("registering schedule `{}`", row.name);
    let sql = concat!(
        "INSERT INTO outbox_schedules (name, kind, spec, time_zone, missed, updated_at) VALUES ($1, $2, $3, $4, $5, ",
        ts!("$6"),
        ") ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, spec = excluded.spec, \
         time_zone = excluded.time_zone, missed = excluded.missed, updated_at = excluded.updated_at RETURNING ",
        ms!("last_tick")
    );
    let last = conn.query_one_raw(stmt(sql, row.values(now))).await.map_err(|e| write_error(ctx(), e))?;
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
    // A concurrent claim of the same tick waits for this row's lock, then sees the moved tick and does nothing.
    let sql = concat!(
        "INSERT INTO outbox_schedules (name, kind, spec, time_zone, missed, updated_at, last_tick) \
         VALUES ($1, $2, $3, $4, $5, ",
        ts!("$6"),
        ", ",
        ts!("$7"),
        ") ON CONFLICT (name) DO UPDATE SET last_tick = excluded.last_tick, last_job_id = NULL, \
         updated_at = excluded.updated_at \
         WHERE outbox_schedules.last_tick IS NULL OR outbox_schedules.last_tick < excluded.last_tick"
    );
    let res = conn
        .execute_raw(stmt(sql, values))
        .await
        .map_err(|e| write_error(format!("taking tick {tick} of schedule `{}`", row.name), e))?;
    Ok(res.rows_affected() == 1)
}

pub(super) async fn set_tick_job<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, job_id: &str) -> Result<()> {
    conn.execute_raw(stmt(
        "UPDATE outbox_schedules SET last_job_id = $1 WHERE name = $2",
        vec![job_id.into(), name.into()],
    ))
    .await
    .map_err(|e| write_error(format!("recording the job of schedule `{name}`"), e))?;
    Ok(())
}

pub(super) async fn schedules<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ScheduleRecord>> {
    let sql = concat!(
        "SELECT name, kind, spec, time_zone, missed, ",
        ms!("last_tick"),
        ", last_job_id, ",
        ms!("updated_at"),
        " FROM outbox_schedules ORDER BY name"
    );
    let rows = conn.query_all_raw(stmt(sql, vec![])).await.map_err(Error::db("reading the schedules"))?;
    rows::schedules(&rows)
}

pub(super) async fn take_lock<C: ConnectionTrait + ?Sized>(
    conn: &C,
    name: &str,
    holder: &str,
    now: i64,
    until: i64,
) -> Result<bool> {
    let sql = concat!(
        "INSERT INTO outbox_locks (name, holder, expires_at) VALUES ($1, $2, ",
        ts!("$3"),
        ") ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at \
         WHERE outbox_locks.holder = excluded.holder OR outbox_locks.expires_at < ",
        ts!("$4")
    );
    let res = conn
        .execute_raw(stmt(sql, vec![name.into(), holder.into(), until.into(), now.into()]))
        .await
        .map_err(|e| write_error(format!("taking lease `{name}` for `{holder}`"), e))?;
    Ok(res.rows_affected() == 1)
}

pub(super) async fn release_lock<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, holder: &str) -> Result<()> {
    conn.execute_raw(stmt(
        "DELETE FROM outbox_locks WHERE name = $1 AND holder = $2",
        vec![name.into(), holder.into()],
    ))
    .await
    .map_err(|e| write_error(format!("giving up lease `{name}` of `{holder}`"), e))?;
    Ok(())
}

pub(super) async fn prune<C: ConnectionTrait + ?Sized>(conn: &C, rules: &PruneRules, batch: u64) -> Result<u64> {
    let (condition, mut values) = rules.condition(|n| format!("${n}"), ts_of);
    values.push(limit_value(batch));
    let sql = format!(
        "DELETE FROM outbox_jobs WHERE id IN (SELECT j.id FROM outbox_jobs j WHERE {condition} LIMIT ${})",
        values.len()
    );
    let res = conn.execute_raw(stmt(sql, values)).await.map_err(|e| write_error("pruning finished jobs".into(), e))?;
    Ok(res.rows_affected())
}

pub(super) async fn prune_feed<C: ConnectionTrait + ?Sized>(conn: &C, before: i64, batch: u64) -> Result<u64> {
    let sql = concat!(
        "DELETE FROM outbox_job_events WHERE id IN (SELECT id FROM outbox_job_events WHERE job_id = '' AND at < ",
        ts!("$1"),
        " ORDER BY id LIMIT $2)"
    );
    let res = conn
        .execute_raw(stmt(sql, vec![before.into(), limit_value(batch)]))
        .await
        .map_err(|e| write_error("pruning old feed rows".into(), e))?;
    Ok(res.rows_affected())
}

pub(super) async fn record_reconciliation<C: ConnectionTrait + ?Sized>(
    conn: &C,
    rec: &ReconciliationRecord,
) -> Result<()> {
    let sql = concat!(
        "INSERT INTO outbox_reconciliations (reconciler, at, worker, report) VALUES ($1, ",
        ts!("$2"),
        ", $3, $4::jsonb) ON CONFLICT (reconciler) DO UPDATE SET at = excluded.at, worker = excluded.worker, \
         report = excluded.report"
    );
    let values: Vec<Value> = vec![
        rec.reconciler.clone().into(),
        rec.at.timestamp_millis().into(),
        rec.worker.clone().into(),
        rec.report.to_string().into(),
    ];
    conn.execute_raw(stmt(sql, values))
        .await
        .map_err(|e| write_error(format!("recording the report of reconciler `{}`", rec.reconciler), e))?;
    Ok(())
}

pub(super) async fn reconciliations<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ReconciliationRecord>> {
    let sql = concat!(
        "SELECT reconciler, ",
        ms!("at"),
        ", worker, report::text FROM outbox_reconciliations ORDER BY reconciler"
    );
    let rows = conn.query_all_raw(stmt(sql, vec![])).await.map_err(Error::db("reading the reconcilers' reports"))?;
    rows::reconciliations(&rows)
}
