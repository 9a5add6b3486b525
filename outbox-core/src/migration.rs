//! Schema migrations, tracked in the library's own `outbox_migrations` table so they never mix with the
//! application's.

use sea_orm::sea_query::{Alias, IntoIden};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, DynIden};
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
        vec![
            Box::new(Step {
                name: "m20261122_000001_create_outbox_jobs",
                up: |backend| match backend {
                    DbBackend::Sqlite => Some(storage::sqlite::SCHEMA_V1),
                    DbBackend::Postgres => Some(storage::postgres::SCHEMA_V1),
                    _ => None,
                },
                down: |backend| match backend {
                    DbBackend::Postgres => {
                        &["DROP TABLE IF EXISTS outbox_jobs", "DROP FUNCTION IF EXISTS outbox_jobs_notify()"]
                    }
                    _ => &["DROP TABLE IF EXISTS outbox_jobs"],
                },
            }),
            Box::new(Step {
                name: "m20261122_000002_create_outbox_job_events",
                up: |backend| match backend {
                    DbBackend::Sqlite => Some(storage::sqlite::SCHEMA_V2_EVENTS),
                    DbBackend::Postgres => Some(storage::postgres::SCHEMA_V2_EVENTS),
                    _ => None,
                },
                down: |backend| match backend {
                    DbBackend::Postgres => &[
                        "DROP TRIGGER IF EXISTS outbox_jobs_transition ON outbox_jobs",
                        "DROP TRIGGER IF EXISTS outbox_jobs_purged ON outbox_jobs",
                        "DROP FUNCTION IF EXISTS outbox_jobs_transition()",
                        "DROP FUNCTION IF EXISTS outbox_jobs_purged()",
                        "DROP TABLE IF EXISTS outbox_job_events",
                    ],
                    _ => &[
                        "DROP TRIGGER IF EXISTS outbox_jobs_transition",
                        "DROP TRIGGER IF EXISTS outbox_jobs_purged",
                        "DROP TABLE IF EXISTS outbox_job_events",
                    ],
                },
            }),
            Box::new(Step {
                name: "m20261122_000003_create_outbox_kinds",
                up: |backend| match backend {
                    DbBackend::Sqlite => Some(storage::sqlite::SCHEMA_V3_KINDS),
                    DbBackend::Postgres => Some(storage::postgres::SCHEMA_V3_KINDS),
                    _ => None,
                },
                down: |_| &["DROP TABLE IF EXISTS outbox_kinds"],
            }),
        ]
    }

    fn migration_table_name() -> DynIden {
        Alias::new("outbox_migrations").into_iden()
    }
}

/// Brings the outbox tables up to date on `db`. Safe to call at every start-up.
pub async fn migrate(db: &sea_orm::DatabaseConnection) -> Result<()> {
    Migrator::up(db, None).await.map_err(Error::db("running outbox migrations"))
}

/// One migration: the statements of each supported backend, and how to undo them on each.
struct Step {
    name: &'static str,
    up: fn(DbBackend) -> Option<&'static [&'static str]>,
    down: fn(DbBackend) -> &'static [&'static str],
}

impl MigrationName for Step {
    fn name(&self) -> &str {
        self.name
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
        let backend = manager.get_database_backend();
        let statements = (self.up)(backend).ok_or_else(|| {
            DbErr::Migration(format!("outbox does not support the {backend:?} backend; use SQLite or PostgreSQL"))
        })?;
        run_all(manager, statements).await
    }

    async fn down(&self, manager: &SchemaManager) -> std::result::Result<(), DbErr> {
        run_all(manager, (self.down)(manager.get_database_backend())).await
    }
}
