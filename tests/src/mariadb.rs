//! A MariaDB server for the tests that run on it, and a database of a test's own there, dropped with it.
//!
//! The server is the one `OUTBOX_TEST_MYSQL_URL` names (CI starts a throwaway one from Debian's packages). Unset,
//! a test that needs it is skipped with a visible message, and fails instead under `CI`.

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbErr};

/// The variable naming the MariaDB server the tests run against.
pub const MYSQL_VAR: &str = "OUTBOX_TEST_MYSQL_URL";

/// The MariaDB server the tests run against, from `OUTBOX_TEST_MYSQL_URL`. Unset, `test` is skipped with a
/// visible message (`None`); under `CI`, a missing server is a failure.
pub fn mariadb_server(test: &str) -> Option<String> {
    crate::required_server(
        MYSQL_VAR,
        "a MariaDB server",
        "set it to a server's URL, such as mysql://outbox@127.0.0.1:3306/outbox",
        test,
    )
}

/// A database of a test's own on the MariaDB server (`t_<random hex>`), dropped when this is: at the end of the
/// test, and while a failing test unwinds.
#[derive(Debug)]
pub struct TestMariaDb {
    /// A pool on the test's database.
    pub db: DatabaseConnection,
    /// The URL of the test's database, for more pools on it.
    pub url: String,
    /// Dropped after `db`: drops the database.
    database: Dropped,
}

/// Drops the test's database when dropped, from the moment it was created: a test that fails setting up leaves
/// none behind either.
#[derive(Debug)]
struct Dropped {
    name: String,
    server: String,
}

impl Drop for Dropped {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        crate::database::drop_on_own_runtime(
            "database",
            &self.name,
            async move { drop_database(&server, &name).await },
        );
    }
}

impl TestMariaDb {
    /// A fresh, empty database on the server `OUTBOX_TEST_MYSQL_URL` names, for the test named `test`; `None`
    /// (after a visible `SKIPPED` line) when the variable is unset outside CI.
    pub async fn fresh(test: &str) -> Option<TestMariaDb> {
        let server = mariadb_server(test)?;
        let name = format!("t_{}", crate::database::random_hex());
        let admin = connect(&server, 1).await;
        admin.execute_unprepared(&format!("CREATE DATABASE {name}")).await.expect("create the test's database");
        let database = Dropped { name, server };
        let _ = admin.close().await;
        let url = with_database(&database.server, &database.name);
        let db = connect(&url, 5).await;
        Some(TestMariaDb { db, url, database })
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.database.name
    }

    /// Another pool on the test's database, of `max` connections.
    pub async fn connect(&self, max: u32) -> DatabaseConnection {
        connect(&self.url, max).await
    }
}

/// Whether the server holds a database named `name`.
pub async fn database_exists(server: &str, name: &str) -> Result<bool, DbErr> {
    let admin = connect(server, 1).await;
    let found = admin
        .query_one_raw(with_name("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", name))
        .await?
        .map(|row| row.try_get_by_index::<i64>(0))
        .transpose()?
        .unwrap_or(0);
    let _ = admin.close().await;
    Ok(found == 1)
}

/// Drops the database `name`. Connections a failed test left holding locks in it are killed first, so the drop
/// does not wait for them.
async fn drop_database(server: &str, name: &str) -> Result<(), DbErr> {
    let admin = connect(server, 1).await;
    let holders = admin
        .query_all_raw(with_name(
            "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
            name,
        ))
        .await?;
    for row in holders {
        let id: i64 = row.try_get_by_index(0)?;
        // Gone since it was listed is as good as killed.
        let _ = admin.execute_unprepared(&format!("KILL CONNECTION {id}")).await;
    }
    // A connection that outlived its kill would hold the drop for the server's default wait, a year.
    admin.execute_unprepared("SET SESSION lock_wait_timeout = 10").await?;
    let dropped = admin.execute_unprepared(&format!("DROP DATABASE IF EXISTS {name}")).await.map(|_| ());
    let _ = admin.close().await;
    dropped
}

/// `sql` with `name` bound to its one placeholder.
fn with_name(sql: &str, name: &str) -> sea_orm::Statement {
    sea_orm::Statement::from_sql_and_values(sea_orm::DbBackend::MySql, sql, [name.into()])
}

/// `server` (a URL naming any database) with `database` as its database.
fn with_database(server: &str, database: &str) -> String {
    let (base, query) = server.split_once('?').map_or((server, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_end..].find('/') {
        Some(slash) => &base[..authority_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}

pub(crate) async fn connect(url: &str, max: u32) -> DatabaseConnection {
    let mut options = ConnectOptions::new(url);
    options.max_connections(max).min_connections(0).sqlx_logging(false);
    Database::connect(options).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}
