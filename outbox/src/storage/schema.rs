//! The schema's migrations, named the same on every engine and numbered (`NNN_name`); each engine's statements are
//! in its folder: `migrations/NNN_name.sql`, and `schema.sql`, the current schema whole, which a test holds equal
//! to what the migrations make. Before the first release the schema was squashed into `001_schema`: a database an
//! earlier build migrated through the thirteen dated migrations is taken over, one that applied only some of them,
//! or the nine of builds before those, is refused with what to do.

use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::dialect::Params;
use super::engine::Engine;
use super::{Dialect, on_engine};
use crate::error::{Error, Result};

/// The migrations' names, in the order they apply.
pub(crate) const MIGRATIONS: [&str; 4] = ["001_schema", "002_flow", "003_subject", "004_workflow"];

/// The dated migrations of the builds before `001_schema`, in order. A database that applied them all has this
/// build's schema (held by a test) but for what [`Engine::ADOPT_DATED`] changes.
pub(crate) const DATED: [&str; 13] = [
    "m20261128_000001_outbox_schema",
    "m20261129_000002_ready_jobs",
    "m20261130_000003_keep_nothing",
    "m20261201_000004_fewer_writes",
    "m20261202_000005_active_keys",
    "m20261203_000006_columns_last",
    "m20261204_000007_archive",
    "m20261205_000008_claims",
    "m20261206_000009_one_ready_index",
    "m20261207_000010_hot_claim",
    "m20261208_000011_room_for_both",
    "m20261209_000012_finished_log",
    "m20261210_000013_snapshot_enqueue",
];

/// The migrations of builds before the schema was written as one. Their tables may match, but a database that
/// lists them grew through nine steps this build cannot vouch for: it is refused, never modified.
const LEGACY: &str = "m20261122_000001_create_outbox_jobs m20261122_000002_create_outbox_job_events \
    m20261122_000003_create_outbox_kinds m20261123_000004_sequences_and_limits m20261123_000005_enforced_types \
    m20261124_000006_event_feed_and_workers m20261125_000007_batched_worker_events m20261126_000008_inline_feed_rows \
    m20261127_000009_schedules_locks_reconciliations";

/// The statements of migration `step` (an index into [`MIGRATIONS`]) on `dialect`'s engine, and those undoing it.
pub(crate) fn statements(dialect: Dialect, step: usize) -> Option<(&'static str, &'static str)> {
    on_engine!(dialect, E => E::MIGRATIONS.get(step).map(|m| (m.up, m.down)))
}

/// Makes ready the undoing of migration `step`: what its statements cannot say (tables made at run time).
pub(crate) async fn before_undo<C: ConnectionTrait + ?Sized>(conn: &C, step: usize) -> Result<()> {
    if step != 0 {
        return Ok(());
    }
    on_engine!(Dialect::of(conn)?, E => E::before_undo(conn).await)
}

/// Whether `conn`'s database has the table `outbox_migrations`.
async fn has_migrations_table<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<bool> {
    let b = Dialect::of(conn)?;
    let sql = on_engine!(b, E => E::HAS_MIGRATIONS_TABLE);
    Ok(count(conn.query_one_raw(b.stmt(sql, vec![])).await.map_err(read())?)? > 0)
}

fn read() -> impl FnOnce(sea_orm::DbErr) -> Error {
    Error::db("reading the applied outbox migrations")
}

fn count(row: Option<sea_orm::QueryResult>) -> Result<i64> {
    row.map(|r| r.try_get_by_index::<i64>(0)).transpose().map_err(read()).map(Option::unwrap_or_default)
}

/// What `conn`'s migrations table records of the migrations of earlier builds and of `001_schema`; all empty
/// where there is no such table.
#[derive(Debug, Default)]
struct Recorded {
    /// Whether it lists a migration of the builds before the schema was written as one ([`LEGACY`]).
    legacy: bool,
    /// The dated migrations it lists, in order.
    dated: Vec<&'static str>,
    /// Whether it lists `001_schema`.
    squashed: bool,
}

/// Reads [`Recorded`] in one statement.
async fn recorded<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Recorded> {
    if !has_migrations_table(conn).await? {
        return Ok(Recorded::default());
    }
    let b = Dialect::of(conn)?;
    let mut p = Params::default();
    let names = LEGACY.split_whitespace().chain(DATED).chain(MIGRATIONS.iter().copied().take(1));
    let marks: Vec<String> = names.map(|n| p.push(n)).collect();
    let sql = format!("SELECT version FROM outbox_migrations WHERE version IN ({})", marks.join(", "));
    let rows = conn.query_all_raw(b.stmt(sql, p.0)).await.map_err(read())?;
    let mut found = Recorded::default();
    for row in rows {
        let version: String = row.try_get_by_index(0).map_err(read())?;
        found.legacy |= LEGACY.split_whitespace().any(|n| n == version);
        found.squashed |= version == MIGRATIONS[0];
        found.dated.extend(DATED.iter().find(|n| **n == version));
    }
    found.dated.sort_unstable();
    Ok(found)
}

/// What the migrations table of `conn`'s database says of the dated migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dated {
    /// It records none of them.
    None,
    /// It records them all and not `001_schema`: [`take_over_dated`] takes it over.
    Complete,
    /// It records `001_schema` and some of them still (a take-over cut short by hand): their records are stale,
    /// and [`take_over_dated`] deletes them.
    Stale,
}

/// What `conn`'s database records of the dated migrations, once a database an earlier build created is refused
/// ([`refuse_legacy`]); a database that applied only some of them, and not `001_schema`, is refused
/// ([`Error::Unsupported`], saying what to do).
pub(crate) async fn dated<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Dated> {
    let Recorded { legacy, dated, squashed } = recorded(conn).await?;
    refused_legacy(legacy)?;
    if dated.is_empty() {
        return Ok(Dated::None);
    }
    if squashed {
        return Ok(Dated::Stale);
    }
    if dated.len() == DATED.len() {
        return Ok(Dated::Complete);
    }
    let last = dated.last().copied().unwrap_or_default();
    let missing = DATED.iter().filter(|n| !dated.contains(n)).copied().collect::<Vec<_>>().join(", ");
    Err(Error::Unsupported(format!(
        "this database's outbox tables were migrated by an earlier build up to `{last}`, which this build's one \
         migration `{}` replaces only once all thirteen were applied (missing: {missing}); it was left untouched. \
         Run `outbox migrate` with the build that made them first, then with this one",
        MIGRATIONS[0]
    )))
}

/// Takes over a database the dated migrations made, before the migrator reads its records (it refuses records of
/// migrations it does not know): in one write transaction, applies [`Engine::ADOPT_DATED`] and replaces their
/// records with `001_schema`'s. Nothing else changes: the schema is the same (a test holds it so), and the jobs
/// stay. Two processes migrating at once take it over once: the second finds the records gone under the lock of
/// the first's delete and changes nothing. `state` is what [`dated`] read.
pub(crate) async fn take_over_dated(db: &DatabaseConnection, state: Dated) -> Result<()> {
    if state == Dated::None {
        return Ok(());
    }
    let b = Dialect::of(db)?;
    let ctx = || Error::db("taking over the dated outbox migrations");
    let txn = super::begin_write(db).await?;
    let mut p = Params::default();
    let marks: Vec<String> = DATED.iter().map(|n| p.push(*n)).collect();
    let sql = format!("DELETE FROM outbox_migrations WHERE version IN ({})", marks.join(", "));
    let deleted = txn.execute_raw(b.stmt(sql, p.0)).await.map_err(ctx())?.rows_affected();
    if state == Dated::Complete && deleted == DATED.len() as u64 {
        txn.execute_unprepared(on_engine!(b, E => E::ADOPT_DATED)).await.map_err(ctx())?;
        let sql =
            "INSERT INTO outbox_migrations (version, applied_at) VALUES ($1, $2) ON CONFLICT (version) DO NOTHING";
        let applied = chrono::Utc::now().timestamp();
        txn.execute_raw(b.stmt(sql, vec![MIGRATIONS[0].into(), applied.into()])).await.map_err(ctx())?;
        tracing::info!(migration = MIGRATIONS[0], "took over the outbox tables of the thirteen dated migrations");
    }
    txn.commit().await.map_err(ctx())?;
    Ok(())
}

/// Refuses a database whose outbox tables an earlier build created, saying what to do; a database without
/// them, or with this build's, passes.
pub(crate) async fn refuse_legacy<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<()> {
    refused_legacy(recorded(conn).await?.legacy)
}

/// The refusal of a database whose migrations table lists a `legacy` migration.
fn refused_legacy(legacy: bool) -> Result<()> {
    if !legacy {
        return Ok(());
    }
    Err(Error::Unsupported(
        "this database's outbox tables were created by an earlier build of outbox (its `outbox_migrations` lists \
         `m20261122_000001_create_outbox_jobs`), whose nine migrations this build replaces with a schema of its own: it cannot be \
         upgraded in place and was left untouched. Let the old build's workers finish the jobs, then drop the \
         outbox tables (`outbox_*`; on SQLite a file of their own can be deleted) and run `outbox migrate`"
            .into(),
    ))
}
