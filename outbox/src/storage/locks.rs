//! Named leases of fleet-wide chores (retention runs in one process at a time).

use sea_orm::ConnectionTrait;

use super::{Dialect, execute_write};
use crate::error::{Error, Result};

/// Takes (or renews) the named lease for `holder` until `until` unless another holder's is unexpired.
pub(crate) async fn take<C: ConnectionTrait + ?Sized>(
    conn: &C,
    name: &str,
    holder: &str,
    now: i64,
    until: i64,
) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let ctx = || format!("taking lease `{name}` for `{holder}`");
    // Compare and set, then insert where there was nothing to compare: the update's count is exact on every
    // engine (an upsert's `WHERE` has no MySQL form, and its count there takes in a row found and left).
    let sql = format!(
        "UPDATE outbox_locks SET holder = $2, expires_at = {} WHERE name = $1 AND (holder = $2 OR expires_at < {})",
        b.ts("$3"),
        b.ts("$4")
    );
    let values = vec![name.into(), holder.into(), until.into(), now.into()];
    if execute_write(conn, b.stmt(sql, values), ctx).await?.rows_affected() == 1 {
        return Ok(true);
    }
    let sql = format!("INSERT INTO outbox_locks (name, holder, expires_at) VALUES ($1, $2, {})", b.ts("$3"));
    super::insert_if_absent(conn, sql, vec![name.into(), holder.into(), until.into()], ctx()).await
}

/// Whether a holder other than `holder` has the named lease unexpired at `now`: a read, so a process that
/// does not hold it finds that out without taking the write lock (on SQLite a write transaction of every idle
/// worker each interval, queueing behind the workers' claims).
pub(crate) async fn held_by_other<C: ConnectionTrait + ?Sized>(
    conn: &C,
    name: &str,
    holder: &str,
    now: i64,
) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let sql =
        format!("SELECT COUNT(*) FROM outbox_locks WHERE name = $1 AND holder <> $2 AND expires_at >= {}", b.ts("$3"));
    let row = conn
        .query_one_raw(b.stmt(sql, vec![name.into(), holder.into(), now.into()]))
        .await
        .map_err(Error::db(format!("reading lease `{name}`")))?;
    let held = row.map(|r| r.try_get_by_index::<i64>(0)).transpose().map_err(Error::db("reading a lease count"))?;
    Ok(held.unwrap_or_default() > 0)
}

/// Gives the named lease up if `holder` has it.
pub(crate) async fn release<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, holder: &str) -> Result<()> {
    let b = Dialect::of(conn)?;
    let sql = "DELETE FROM outbox_locks WHERE name = $1 AND holder = $2";
    execute_write(conn, b.stmt(sql, vec![name.into(), holder.into()]), || {
        format!("giving up lease `{name}` of `{holder}`")
    })
    .await?;
    Ok(())
}
