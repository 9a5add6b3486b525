//! Schema migrations, tracked in the library's own `outbox_migrations` table so they never mix with the
//! application's. Each backend keeps its statements (and their undo) in its storage folder.

use sea_orm::sea_query::{Alias, IntoIden};
use sea_orm::{ConnectionTrait, DbErr, DynIden};
use sea_orm_migration::{MigrationName, MigrationTrait, MigratorTrait, SchemaManager, async_trait};

use crate::error::{Error, Result};
use crate::storage::{self, MIGRATION_NAMES};

/// The migrator of the outbox tables. Run it with [`migrate`], or call `Migrator::up` from the application's
/// own start-up; it keeps its state in `outbox_migrations`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        MIGRATION_NAMES
            .iter()
            .enumerate()
            .map(|(index, name)| Box::new(Step { name, index }) as Box<dyn MigrationTrait>)
            .collect()
    }

    fn migration_table_name() -> DynIden {
        Alias::new("outbox_migrations").into_iden()
    }
}

/// Brings the outbox tables up to date on `db`. Safe to call at every start-up.
pub async fn migrate(db: &sea_orm::DatabaseConnection) -> Result<()> {
    Migrator::up(db, None).await.map_err(Error::db("running outbox migrations"))
}

/// The names of the migrations this build has that `db` has not applied yet: empty when its schema is
/// current. A database without the outbox tables lists them all.
pub async fn pending_migrations(db: &sea_orm::DatabaseConnection) -> Result<Vec<String>> {
    let pending =
        Migrator::get_pending_migrations(db).await.map_err(Error::db("reading the applied outbox migrations"))?;
    Ok(pending.iter().map(|m| m.name().to_owned()).collect())
}

/// One migration, whose statements depend on the backend it runs on.
struct Step {
    name: &'static str,
    index: usize,
}

impl MigrationName for Step {
    fn name(&self) -> &str {
        self.name
    }
}

impl Step {
    fn statements(&self, manager: &SchemaManager<'_>) -> std::result::Result<storage::Migration, DbErr> {
        let backend = manager.get_database_backend();
        storage::migration(backend, self.index).ok_or_else(|| {
            DbErr::Migration(format!("outbox does not support the {backend:?} backend; see `outbox_core::connect`"))
        })
    }
}

async fn run_all(manager: &SchemaManager<'_>, statements: &[&str]) -> std::result::Result<(), DbErr> {
    for sql in statements {
        manager.get_connection().execute_unprepared(sql).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Step {
    async fn up(&self, manager: &SchemaManager) -> std::result::Result<(), DbErr> {
        run_all(manager, self.statements(manager)?.up).await
    }

    async fn down(&self, manager: &SchemaManager) -> std::result::Result<(), DbErr> {
        run_all(manager, self.statements(manager)?.down).await
    }

    /// Every backend, SQLite included, applies a migration and records it in one transaction on one
    /// connection: a migration that rebuilds a table must never be seen half done, nor its statements spread
    /// over the pool's connections.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}
