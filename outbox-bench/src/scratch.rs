//! A fresh database for every run: a WAL-mode SQLite file in a temporary directory, or a schema of its own on
//! the PostgreSQL server, dropped when the run is done.

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;

use sea_orm::sqlx::{self, Connection};
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use tempfile::TempDir;

use crate::BoxError;
use crate::engine::SyncMode;

/// Where a run creates its database.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A file in a new temporary directory.
    Sqlite(SyncMode),
    /// A new schema on the server at `server`.
    Postgres { server: String, sync: SyncMode },
}

impl Target {
    pub(crate) fn sync(&self) -> SyncMode {
        match self {
            Target::Sqlite(sync) | Target::Postgres { sync, .. } => *sync,
        }
    }
}

/// How a run's database is opened again (by a baseline or a child process): the SQLite file, or the URL
/// that selects the PostgreSQL schema and the commit setting.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    File(PathBuf),
    Url(String),
}

impl Location {
    /// A location given on a child's command line.
    pub(crate) fn parse(arg: &str) -> Location {
        if arg.starts_with("postgres://") || arg.starts_with("postgresql://") || arg.starts_with("mysql://") {
            Location::Url(arg.to_owned())
        } else {
            Location::File(PathBuf::from(arg))
        }
    }

    /// What [`Location::parse`] reads back.
    pub(crate) fn arg(&self) -> std::ffi::OsString {
        match self {
            Location::File(path) => path.clone().into_os_string(),
            Location::Url(url) => url.into(),
        }
    }
}

/// Opens (creating an SQLite file if needed) the database at `location` and brings the outbox tables up to
/// date.
pub(crate) async fn connect(location: &Location, sync: SyncMode) -> Result<DatabaseConnection, BoxError> {
    let url = match location {
        Location::File(path) => format!("sqlite://{}?mode=rwc", path.display()),
        Location::Url(url) => url.clone(),
    };
    let opts = outbox::ConnectOpts { full_sync: sync.is_full(), ..Default::default() };
    let db = outbox::connect_with(&url, opts).await?;
    outbox::migrate(&db).await?;
    Ok(db)
}

/// A run's database, migrated, with the `orders` table the enqueue cases write next to their jobs.
pub(crate) struct Scratch {
    pub(crate) db: DatabaseConnection,
    pub(crate) prepared: Prepared,
}

/// A run's database without an open pool: where it is, and what removes it.
pub(crate) struct Prepared {
    pub(crate) location: Location,
    owner: Owner,
}

enum Owner {
    Dir(TempDir),
    Schema { server: String, name: String },
}

impl Scratch {
    pub(crate) async fn new(target: &Target) -> Result<Scratch, BoxError> {
        let (location, owner, orders) = match target {
            Target::Sqlite(_) => {
                let dir = tempfile::tempdir()?;
                let location = Location::File(dir.path().join("bench.db"));
                (
                    location,
                    Owner::Dir(dir),
                    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT, total INTEGER)",
                )
            }
            Target::Postgres { server, sync } => {
                let name =
                    format!("bench_{:016x}", std::collections::hash_map::RandomState::new().build_hasher().finish());
                let mut admin = sqlx::PgConnection::connect(server).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}"))).execute(&mut admin).await?;
                admin.close().await?;
                let commit = if sync.is_full() { "on" } else { "off" };
                let separator = if server.contains('?') { '&' } else { '?' };
                let url = format!(
                    "{server}{separator}options=-c%20search_path%3D{name}%20-c%20synchronous_commit%3D{commit}"
                );
                let owner = Owner::Schema { server: server.clone(), name };
                (Location::Url(url), owner, "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, total bigint)")
            }
        };
        let prepared = Prepared { location, owner };
        let db = connect(&prepared.location, target.sync()).await?;
        db.execute_unprepared(orders).await?;
        Ok(Scratch { db, prepared })
    }

    /// Closes the pool, leaving the database to a baseline or a child process.
    pub(crate) async fn into_prepared(self) -> Result<Prepared, BoxError> {
        self.db.close().await?;
        Ok(self.prepared)
    }

    /// Closes the pool and removes the database.
    pub(crate) async fn remove(self) -> Result<(), BoxError> {
        self.into_prepared().await?.remove().await
    }

    /// Fails unless the integer `sql` returns is `want`.
    pub(crate) async fn expect_count(&self, sql: &str, want: u64, what: &str) -> Result<(), BoxError> {
        expect_count(&self.db, sql, want, what).await
    }
}

impl Prepared {
    /// Deletes the file and its directory, or drops the schema.
    pub(crate) async fn remove(self) -> Result<(), BoxError> {
        match self.owner {
            Owner::Dir(dir) => Ok(dir.close()?),
            Owner::Schema { server, name } => {
                let mut admin = sqlx::PgConnection::connect(&server).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {name} CASCADE"))).execute(&mut admin).await?;
                Ok(admin.close().await?)
            }
        }
    }
}

/// Fails unless the integer `sql` returns on `db` is `want`.
pub(crate) async fn expect_count(db: &DatabaseConnection, sql: &str, want: u64, what: &str) -> Result<(), BoxError> {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await?;
    let got: i64 = row.ok_or("COUNT returned no row")?.try_get_by_index(0)?;
    if u64::try_from(got)? != want {
        return Err(format!("outbox {what}: expected {want} rows, found {got}").into());
    }
    Ok(())
}
