//! Schema migrations, tracked in the library's own `outbox_migrations` table so they never mix with the
//! application's.

use sea_orm::sea_query::{Alias, IntoIden};
use sea_orm::{ConnectionTrait, DbBackend, DynIden};
use sea_orm_migration::{MigrationName, MigrationTrait, MigratorTrait, SchemaManager, async_trait};

use crate::error::{Error, Result};
use crate::storage;

/// The migrator of the outbox tables. Run it with [`migrate`], or call `Migrator::up` from the application's
/// own start-up; it keeps its state in `outbox_migrations`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(CreateJobs)]
    }

    fn migration_table_name() -> DynIden {
        Alias::new("outbox_migrations").into_iden()
    }
}

/// Brings the outbox tables up to date on `db`. Safe to call at every start-up.
pub async fn migrate(db: &sea_orm::DatabaseConnection) -> Result<()> {
    Migrator::up(db, None).await.map_err(Error::db("running outbox migrations"))
}

struct CreateJobs;

impl MigrationName for CreateJobs {
    fn name(&self) -> &str {
        "m20261122_000001_create_outbox_jobs"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for CreateJobs {
    async fn up(&self, manager: &SchemaManager) -> std::result::Result<(), sea_orm::DbErr> {
        let statements = match manager.get_database_backend() {
            DbBackend::Sqlite => storage::sqlite::SCHEMA_V1,
            other => {
                return Err(sea_orm::DbErr::Migration(format!("outbox does not support the {other:?} backend yet")));
            }
        };
        for sql in statements {
            manager.get_connection().execute_unprepared(sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> std::result::Result<(), sea_orm::DbErr> {
        manager.get_connection().execute_unprepared("DROP TABLE IF EXISTS outbox_jobs").await?;
        Ok(())
    }
}
