//! Flow control's tables (`outbox_pauses`, `outbox_rates`, `outbox_fair`; `schema.sql`) as the API and the
//! operators read and write them. The worker's claims read and write them on the worker's own connections
//! (`store/flow.rs` of each engine).

use sea_orm::{ConnectionTrait, Value};

use super::{Dialect, decode, execute_write};
use crate::error::{Error, Result};

/// A pause or hold as stored: scope (`queue` or `kind`), name, key (empty: all of it), end (`None`: until
/// resumed), reason, since (ms).
pub(crate) type PauseRow = (String, String, String, Option<i64>, Option<String>, i64);

/// Pauses (`ends_at` `None`) or holds (until `ends_at`) the work of `scope` `name` (and `key`). A hold never
/// shortens a pause or a longer hold; a pause replaces a hold.
pub(crate) async fn pause<C: ConnectionTrait + ?Sized>(
    conn: &C,
    scope: &str,
    name: &str,
    key: &str,
    ends_at: Option<i64>,
    reason: Option<&str>,
    now: i64,
) -> Result<()> {
    set_pause(conn, (scope, name, key), ends_at, reason, now, || format!("pausing {scope} `{name}`")).await?;
    forget_ended(conn, now).await
}

/// Writes the pause or hold of `target` (scope, name, key) unless one in force lasts as long: compare and set,
/// then insert where there was nothing to compare (an upsert's `WHERE` has no MySQL form).
async fn set_pause<C: ConnectionTrait + ?Sized>(
    conn: &C,
    (scope, name, key): (&str, &str, &str),
    ends_at: Option<i64>,
    reason: Option<&str>,
    now: i64,
    ctx: impl Fn() -> String,
) -> Result<()> {
    let b = Dialect::of(conn)?;
    let k = b.quoted("key");
    let sql = format!(
        "UPDATE outbox_pauses SET ends_at = {}, reason = $5, paused_at = {} WHERE scope = $1 AND name = $2 \
         AND {k} = $3 AND ($4 IS NULL OR (ends_at IS NOT NULL AND ends_at < {}))",
        b.ts("$4"),
        b.ts("$6"),
        b.ts("$4"),
    );
    let values = || -> Vec<Value> {
        vec![scope.into(), name.into(), key.into(), ends_at.into(), reason.map(str::to_owned).into(), now.into()]
    };
    if execute_write(conn, b.stmt(sql.clone(), values()), &ctx).await?.rows_affected() == 1 {
        return Ok(());
    }
    let insert = format!(
        "INSERT INTO outbox_pauses (scope, name, {k}, ends_at, reason, paused_at) VALUES ($1, $2, $3, {}, $5, {})",
        b.ts("$4"),
        b.ts("$6"),
    );
    if !super::insert_if_absent(conn, insert, values(), ctx()).await? {
        // A row written meanwhile by another pause: compare with it too.
        execute_write(conn, b.stmt(sql, values()), &ctx).await?;
    }
    Ok(())
}

/// Holds the kind of the job `id` (its key too when `per_key` and it has one) until `ends_at`, as [`pause`] does.
pub(crate) async fn hold_for_job<C: ConnectionTrait + ?Sized>(
    conn: &C,
    id: &str,
    per_key: bool,
    ends_at: i64,
    reason: &str,
    now: i64,
) -> Result<()> {
    let b = Dialect::of(conn)?;
    let ctx = || format!("holding the kind of job `{id}`");
    let sql = "SELECT kind, flow_key FROM outbox_jobs WHERE id = $1";
    let row = conn.query_one_raw(b.stmt(sql, vec![id.into()])).await.map_err(Error::db(ctx()))?;
    let Some(row) = row else { return Ok(()) };
    let kind: String = row.try_get_by_index(0).map_err(Error::db(ctx()))?;
    let flow_key: Option<String> = row.try_get_by_index(1).map_err(Error::db(ctx()))?;
    let key = if per_key { flow_key.unwrap_or_default() } else { String::new() };
    set_pause(conn, ("kind", &kind, &key), Some(ends_at), Some(reason), now, ctx).await?;
    forget_ended(conn, now).await
}

/// Deletes the holds that have ended, so that the table every claim reads holds only what is in force (and
/// pauses); run where holds are written.
async fn forget_ended<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<()> {
    let b = Dialect::of(conn)?;
    let sql = format!("DELETE FROM outbox_pauses WHERE ends_at IS NOT NULL AND ends_at <= {}", b.ts("$1"));
    execute_write(conn, b.stmt(sql, vec![now.into()]), || "forgetting holds that ended".to_owned()).await?;
    Ok(())
}

/// Ends the pause or hold of `scope` `name` (and `key`); whether there was one in force at `now`.
pub(crate) async fn resume<C: ConnectionTrait + ?Sized>(
    conn: &C,
    scope: &str,
    name: &str,
    key: &str,
    now: i64,
) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let k = b.quoted("key");
    let sql = format!(
        "DELETE FROM outbox_pauses WHERE scope = $1 AND name = $2 AND {k} = $3 AND (ends_at IS NULL OR ends_at > {})",
        b.ts("$4")
    );
    let values: Vec<Value> = vec![scope.into(), name.into(), key.into(), now.into()];
    let res = execute_write(conn, b.stmt(sql, values), || format!("resuming {scope} `{name}`")).await?;
    // A hold that ended is gone too, in force or not.
    let sql = format!("DELETE FROM outbox_pauses WHERE scope = $1 AND name = $2 AND {k} = $3");
    let values: Vec<Value> = vec![scope.into(), name.into(), key.into()];
    execute_write(conn, b.stmt(sql, values), || format!("resuming {scope} `{name}`")).await?;
    Ok(res.rows_affected() > 0)
}

/// The pauses and holds in force at `now`, by scope, name and key.
pub(crate) async fn paused<C: ConnectionTrait + ?Sized>(conn: &C, now: i64) -> Result<Vec<PauseRow>> {
    let b = Dialect::of(conn)?;
    let k = b.quoted("key");
    let sql = format!(
        "SELECT scope, name, {k}, {}, reason, {} FROM outbox_pauses WHERE ends_at IS NULL OR ends_at > {} \
         ORDER BY scope, name, {k}",
        b.ms("ends_at"),
        b.ms("paused_at"),
        b.ts("$1"),
    );
    let rows = conn.query_all_raw(b.stmt(sql, vec![now.into()])).await.map_err(Error::db("reading the pauses"))?;
    decode::pauses(&rows)
}

/// A rate limit as stored: name, key, amount, window (ms), burst, level, at.
pub(crate) type RateRow = (String, String, i64, i64, i64, f64, i64);

/// Records the rate of `name` (its own bucket starts full; every key's takes the new rate).
pub(crate) async fn define_rate<C: ConnectionTrait + ?Sized>(
    conn: &C,
    name: &str,
    (amount, window_ms, burst): (i64, i64, i64),
    now: i64,
) -> Result<()> {
    let b = Dialect::of(conn)?;
    let k = b.quoted("key");
    let ctx = || format!("recording the rate of `{name}`");
    let update = "UPDATE outbox_rates SET amount = $2, window_ms = $3, burst = $4 WHERE name = $1 \
         AND (amount <> $2 OR window_ms <> $3 OR burst <> $4)";
    let rate = || -> Vec<Value> { vec![name.into(), amount.into(), window_ms.into(), burst.into()] };
    execute_write(conn, b.stmt(update, rate()), ctx).await?;
    let sql = format!(
        "INSERT INTO outbox_rates (name, {k}, amount, window_ms, burst, level, at) VALUES ($1, '', $2, $3, $4, $4, $5)"
    );
    let values: Vec<Value> = vec![name.into(), amount.into(), window_ms.into(), burst.into(), now.into()];
    if !super::insert_if_absent(conn, sql, values, ctx()).await? {
        // A rate written meanwhile by another process: this one's rate goes over it, as it would have.
        execute_write(conn, b.stmt(update, rate()), ctx).await?;
    }
    Ok(())
}

/// The bucket's level at `$now` (`$now` numbered as given), refilled and capped: the same arithmetic as `Bucket`.
fn level(now: &str) -> String {
    let refilled = format!("(level + ({now} - at) * amount * 1.0 / window_ms)");
    format!("(CASE WHEN {refilled} > burst THEN burst ELSE {refilled} END)")
}

/// Takes `cost` from the bucket of `name` and `key` (empty: the name's own) at `now` when it covers it, in one
/// statement; the level left, or `None` when it does not (or there is no such rate).
pub(crate) async fn take<C: ConnectionTrait + ?Sized>(
    conn: &C,
    name: &str,
    key: &str,
    cost: i64,
    now: i64,
) -> Result<Option<f64>> {
    let b = Dialect::of(conn)?;
    let k = b.quoted("key");
    if !key.is_empty() {
        let ctx = || format!("opening the bucket of `{name}` for key `{key}`");
        let sql = format!("SELECT amount, window_ms, burst FROM outbox_rates WHERE name = $1 AND {k} = ''");
        let row = conn.query_one_raw(b.stmt(sql, vec![name.into()])).await.map_err(Error::db(ctx()))?;
        let Some(row) = row else { return Ok(None) };
        let rate: Vec<i64> = (0..3)
            .map(|i| row.try_get_by_index::<i64>(i))
            .collect::<std::result::Result<_, _>>()
            .map_err(Error::db(ctx()))?;
        let sql = format!(
            "INSERT INTO outbox_rates (name, {k}, amount, window_ms, burst, level, at) VALUES ($1, $2, $3, $4, $5, $5, $6)"
        );
        let values: Vec<Value> =
            vec![name.into(), key.into(), rate[0].into(), rate[1].into(), rate[2].into(), now.into()];
        super::insert_if_absent(conn, sql, values, ctx()).await?;
    }
    let ctx = || format!("taking {cost} from the rate of `{name}`");
    let l = level("$4");
    let sql = format!(
        "UPDATE outbox_rates SET level = {l} - $3, at = $4 WHERE name = $1 AND {k} = $2 \
         AND {l} + 0.000000001 >= (CASE WHEN $3 > burst THEN burst ELSE $3 END)"
    );
    let values: Vec<Value> = vec![name.into(), key.into(), cost.into(), now.into()];
    if execute_write(conn, b.stmt(sql, values), ctx).await?.rows_affected() != 1 {
        return Ok(None);
    }
    // What is left now (another take may have drawn since, where `conn` is not a transaction).
    let sql = format!("SELECT level FROM outbox_rates WHERE name = $1 AND {k} = $2");
    let row = conn.query_one_raw(b.stmt(sql, vec![name.into(), key.into()])).await.map_err(Error::db(ctx()))?;
    row.map(|r| r.try_get_by_index::<f64>(0)).transpose().map_err(Error::db("reading a bucket's level"))
}

/// The rates of `name` (every name when `None`), each key's bucket as stored.
pub(crate) async fn rates<C: ConnectionTrait + ?Sized>(conn: &C, name: Option<&str>) -> Result<Vec<RateRow>> {
    let b = Dialect::of(conn)?;
    let k = b.quoted("key");
    let filter = if name.is_some() { " WHERE name = $1" } else { "" };
    let sql =
        format!("SELECT name, {k}, amount, window_ms, burst, level, at FROM outbox_rates{filter} ORDER BY name, {k}");
    let values = name.map(Value::from).into_iter().collect();
    let rows = conn.query_all_raw(b.stmt(sql, values)).await.map_err(Error::db("reading the rates"))?;
    decode::rates(&rows)
}

/// Sets the fair-share weight of `key` among the jobs of `kind`.
pub(crate) async fn set_weight<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kind: &str,
    key: &str,
    weight: i64,
) -> Result<()> {
    let b = Dialect::of(conn)?;
    let sql = format!("INSERT INTO outbox_fair (name, {}, weight, pass) VALUES ($1, $2, $3, 0)", b.quoted("key"))
        + &b.upsert(&format!("name, {}", b.quoted("key")), &["weight"]);
    let values: Vec<Value> = vec![kind.into(), key.into(), weight.into()];
    execute_write(conn, b.stmt(sql, values), || format!("weighting key `{key}` of kind `{kind}`")).await?;
    Ok(())
}

/// Per key of `kind`'s jobs that are pending or running: the key, its weight, its ready jobs, its running jobs.
pub(crate) async fn shares<C: ConnectionTrait + ?Sized>(conn: &C, kind: &str) -> Result<Vec<(String, i64, i64, i64)>> {
    let b = Dialect::of(conn)?;
    let k = b.quoted("key");
    let sql = format!(
        "SELECT k.fk, {}, k.ready, k.running FROM (SELECT flow_key AS fk, \
         COUNT(CASE WHEN status = 'pending' THEN 1 END) AS ready, \
         COUNT(CASE WHEN status = 'claimed' THEN 1 END) AS running FROM outbox_jobs \
         WHERE kind = $1 AND flow_key IS NOT NULL AND status IN ('pending', 'claimed') GROUP BY flow_key) k \
         LEFT JOIN outbox_fair f ON f.name = $1 AND f.{k} = k.fk \
         UNION SELECT f.{k}, {}, 0, 0 FROM outbox_fair f WHERE f.name = $1 AND f.{k} <> '' \
         AND f.weight <> 1 AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.kind = $1 AND j.flow_key = f.{k} \
         AND j.status IN ('pending', 'claimed')) ORDER BY 1",
        b.integer("COALESCE(f.weight, 1)"),
        b.integer("f.weight"),
    );
    let rows = conn
        .query_all_raw(b.stmt(sql, vec![kind.into()]))
        .await
        .map_err(Error::db(format!("reading the fair share of kind `{kind}`")))?;
    decode::shares(&rows)
}
