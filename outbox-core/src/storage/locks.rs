//! Named leases of fleet-wide chores (retention runs in one process at a time).

use sea_orm::ConnectionTrait;

use super::{Backend, execute_write};
use crate::error::Result;

/// Takes (or renews) the named lease for `holder` until `until` unless another holder's is unexpired.
pub(crate) async fn take<C: ConnectionTrait + ?Sized>(
    conn: &C,
    name: &str,
    holder: &str,
    now: i64,
    until: i64,
) -> Result<bool> {
    let b = Backend::of(conn)?;
    let sql = format!(
        "INSERT INTO outbox_locks (name, holder, expires_at) VALUES ($1, $2, {}) ON CONFLICT (name) DO UPDATE \
         SET holder = excluded.holder, expires_at = excluded.expires_at \
         WHERE outbox_locks.holder = excluded.holder OR outbox_locks.expires_at < {}",
        b.ts("$3"),
        b.ts("$4")
    );
    let values = vec![name.into(), holder.into(), until.into(), now.into()];
    let res = execute_write(conn, b.stmt(sql, values), || format!("taking lease `{name}` for `{holder}`")).await?;
    Ok(res.rows_affected() == 1)
}

/// Gives the named lease up if `holder` has it.
pub(crate) async fn release<C: ConnectionTrait + ?Sized>(conn: &C, name: &str, holder: &str) -> Result<()> {
    let b = Backend::of(conn)?;
    let sql = "DELETE FROM outbox_locks WHERE name = $1 AND holder = $2";
    execute_write(conn, b.stmt(sql, vec![name.into(), holder.into()]), || {
        format!("giving up lease `{name}` of `{holder}`")
    })
    .await?;
    Ok(())
}
