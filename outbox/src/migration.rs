//! The schema migrations, tracked in the library's own `outbox_migrations` table so they never mix with the
//! application's. The statements are each engine's SQL files (`storage/<engine>/migrations/`), named in
//! `storage/schema.rs`; a database an earlier build migrated is taken over when its schema is this one, and
//! refused with what to do otherwise.

use sea_orm::sea_query::{Alias, IntoIden};
use sea_orm::{ConnectionTrait, DbErr, DynIden};
use sea_orm_migration::{MigrationName, MigrationTrait, MigratorTrait, SchemaManager, async_trait};

use crate::error::{Error, Result};
use crate::storage::{Dialect, schema};

/// The migrator of the outbox tables. Run it with [`migrate`], or call `Migrator::up` from the application's
/// own start-up; it keeps its state in `outbox_migrations`. A database an earlier build migrated through its dated
/// migrations needs [`migrate`] once, which takes it over: `Migrator::up` refuses their records.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        (0..schema::MIGRATIONS.len()).map(|step| Box::new(Step(step)) as Box<dyn MigrationTrait>).collect()
    }

    fn migration_table_name() -> DynIden {
        Alias::new("outbox_migrations").into_iden()
    }
}

/// Brings the outbox tables up to date on `db`. Safe to call at every start-up. A database an earlier build
/// migrated through its thirteen dated migrations is taken over (their records become `001_schema`'s; call this
/// rather than `Migrator::up` for that); one whose tables an earlier build created otherwise is refused
/// ([`Error::Unsupported`], saying what to do) and left untouched.
pub async fn migrate(db: &sea_orm::DatabaseConnection) -> Result<()> {
    let state = schema::dated(db).await?;
    schema::take_over_dated(db, state).await?;
    Migrator::up(db, None).await.map_err(Error::db("running outbox migrations"))
}

/// The names of the migrations this build has that `db` has not applied yet: empty when its schema is
/// current. A database without the outbox tables lists them all; one an earlier build created is refused,
/// as by [`migrate`].
pub async fn pending_migrations(db: &sea_orm::DatabaseConnection) -> Result<Vec<String>> {
    match schema::dated(db).await? {
        // Its schema is `001_schema`'s; `migrate` records it so, then applies the rest.
        schema::Dated::Complete => return Ok(schema::MIGRATIONS.iter().map(|m| (*m).to_owned()).collect()),
        // `migrate` deletes the stale records; nothing to apply.
        schema::Dated::Stale => return Ok(Vec::new()),
        schema::Dated::None => {}
    }
    let pending =
        Migrator::get_pending_migrations(db).await.map_err(Error::db("reading the applied outbox migrations"))?;
    Ok(pending.iter().map(|m| m.name().to_owned()).collect())
}

/// One migration: an index into [`schema::MIGRATIONS`].
struct Step(usize);

impl MigrationName for Step {
    fn name(&self) -> &str {
        schema::MIGRATIONS[self.0]
    }
}

fn statements(manager: &SchemaManager<'_>, step: usize) -> std::result::Result<(&'static str, &'static str), DbErr> {
    let unsupported = |e: Error| DbErr::Migration(e.to_string());
    let dialect = Dialect::of(manager.get_connection()).map_err(unsupported)?;
    schema::statements(dialect, step)
        .ok_or_else(|| DbErr::Migration(format!("this build of outbox has no migration number {}", step + 1)))
}

#[async_trait::async_trait]
impl MigrationTrait for Step {
    async fn up(&self, manager: &SchemaManager) -> std::result::Result<(), DbErr> {
        manager.get_connection().execute_unprepared(statements(manager, self.0)?.0).await.map(drop)
    }

    async fn down(&self, manager: &SchemaManager) -> std::result::Result<(), DbErr> {
        let conn = manager.get_connection();
        // Tables made at run time (SQLite's archive partitions) go first.
        schema::before_undo(conn, self.0)
            .await
            .map_err(|e| DbErr::Migration(format!("undoing {}: {e}", self.name())))?;
        conn.execute_unprepared(statements(manager, self.0)?.1).await.map(drop)
    }

    /// Applied and recorded in one transaction on one connection: never seen half done.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}
