//! Periodic schedules: each schedule's definition and the tick it last enqueued, moved by compare-and-set so
//! that one process of the fleet enqueues each tick.

use sea_orm::{ConnectionTrait, Value};

use super::{Dialect, decode, execute_write, query_write};
use crate::error::{Error, Result};
use crate::record::ScheduleRecord;

/// A schedule's definition as stored: what `outbox schedules` needs to show it and compute its next tick.
#[derive(Debug, Clone)]
pub(crate) struct ScheduleRow {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) spec: String,
    pub(crate) time_zone: String,
    pub(crate) missed: String,
}

impl ScheduleRow {
    /// `name, kind, spec, time_zone, missed` and `now`, as `$1` to `$6`.
    fn values(&self, now: i64) -> Vec<Value> {
        vec![
            self.name.clone().into(),
            self.kind.clone().into(),
            self.spec.clone().into(),
            self.time_zone.clone().into(),
            self.missed.clone().into(),
            now.into(),
        ]
    }
}

/// Records a schedule's definition (its last tick stays) and returns its last tick.
pub(crate) async fn register<C: ConnectionTrait + ?Sized>(
    conn: &C,
    row: &ScheduleRow,
    now: i64,
) -> Result<Option<i64>> {
    let b = Dialect::of(conn)?;
    let ctx = || format!("registering schedule `{}`", row.name);
    let sql = format!(
        "INSERT INTO outbox_schedules (name, kind, spec, time_zone, missed, updated_at) \
         VALUES ($1, $2, $3, $4, $5, {}){}",
        b.ts("$6"),
        b.upsert("name", &["kind", "spec", "time_zone", "missed", "updated_at"]),
    );
    execute_write(conn, b.stmt(sql, row.values(now)), ctx).await?;
    // Read after the write, in its transaction (MySQL has no `RETURNING` on an upsert).
    let sql = format!("SELECT {} FROM outbox_schedules WHERE name = $1", b.ms("last_tick"));
    let rows = query_write(conn, b.stmt(sql, vec![row.name.clone().into()]), ctx).await?;
    let last = rows.first().map(|r| r.try_get_by_index::<Option<i64>>(0)).transpose();
    last.map(Option::flatten).map_err(Error::db(ctx()))
}

/// Moves a schedule's last tick to `tick` if it is earlier: true for the one caller that moved it, who then
/// enqueues the tick's job in the same transaction and names it with [`set_tick_job`]. On PostgreSQL and MySQL a
/// concurrent claim of the same tick waits for this row's lock, then sees the moved tick and does nothing; a
/// concurrent first claim of a new schedule finds the row the other inserted, and does nothing either.
pub(crate) async fn claim_tick<C: ConnectionTrait + ?Sized>(
    conn: &C,
    row: &ScheduleRow,
    tick: i64,
    now: i64,
) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let ctx = || format!("taking tick {tick} of schedule `{}`", row.name);
    // Compare and set, then insert where there was nothing to compare, as `locks::take` does.
    let sql = format!(
        "UPDATE outbox_schedules SET last_tick = {}, last_job_id = NULL, updated_at = {} \
         WHERE name = $1 AND (last_tick IS NULL OR last_tick < {})",
        b.ts("$2"),
        b.ts("$3"),
        b.ts("$2")
    );
    let values = vec![row.name.clone().into(), tick.into(), now.into()];
    if execute_write(conn, b.stmt(sql, values), ctx).await?.rows_affected() == 1 {
        return Ok(true);
    }
    let sql = format!(
        "INSERT INTO outbox_schedules (name, kind, spec, time_zone, missed, updated_at, last_tick) \
         VALUES ($1, $2, $3, $4, $5, {}, {})",
        b.ts("$6"),
        b.ts("$7")
    );
    let mut values = row.values(now);
    values.push(tick.into());
    super::insert_if_absent(conn, sql, values, ctx()).await
}

/// Names the job a schedule's last tick enqueued.
pub(crate) async fn set_tick_job<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, job_id: &str) -> Result<()> {
    let b = Dialect::of(conn)?;
    let sql = "UPDATE outbox_schedules SET last_job_id = $1 WHERE name = $2";
    execute_write(conn, b.stmt(sql, vec![job_id.into(), name.into()]), || {
        format!("recording the job of schedule `{name}`")
    })
    .await?;
    Ok(())
}

/// Every schedule any worker registered, by name.
pub(crate) async fn list<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ScheduleRecord>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT name, kind, spec, time_zone, missed, {}, last_job_id, {} FROM outbox_schedules ORDER BY name",
        b.ms("last_tick"),
        b.ms("updated_at")
    );
    let rows = conn.query_all_raw(b.stmt(sql, vec![])).await.map_err(Error::db("reading the schedules"))?;
    decode::schedules(&rows)
}
