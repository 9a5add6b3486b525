//! Test databases on each backend (a fresh SQLite file or a fresh PostgreSQL schema per test), raw SQL that
//! runs on both, and the [`conformance!`](crate::conformance) macro that runs one test body on each.

use std::future::Future;
use std::path::{Path, PathBuf};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, TransactionTrait};

/// The variable naming the PostgreSQL server the suite runs against.
const PG_VAR: &str = "OUTBOX_TEST_PG_URL";

/// Pool size of a PostgreSQL test connection. Tests run in parallel against one server whose connection limit
/// is finite; five connections still let a worker claim, renew leases and rescue at the same time.
const PG_POOL: u32 = 5;

/// The database engines the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A file in the test's own temp dir.
    Sqlite,
    /// A schema of the test's own on the server `OUTBOX_TEST_PG_URL` names.
    Postgres,
}

impl Backend {
    /// The backend an open connection or transaction talks to.
    pub fn of(db: &impl ConnectionTrait) -> Backend {
        match db.get_database_backend() {
            DbBackend::Sqlite => Backend::Sqlite,
            DbBackend::Postgres => Backend::Postgres,
            other => panic!("no test backend for {other:?}"),
        }
    }

    /// SQL for the instant `ms` milliseconds after the Unix epoch, as this backend's time columns hold it:
    /// integer milliseconds on SQLite, a `timestamptz` on PostgreSQL. `time(0)` is "long ago".
    pub fn time(self, ms: i64) -> String {
        match self {
            Backend::Sqlite => ms.to_string(),
            Backend::Postgres => format!("(timestamptz 'epoch' + {ms} * interval '1 millisecond')"),
        }
    }

    /// SQL for a JSON value bound as text (a `?` placeholder): PostgreSQL's `jsonb` columns take no text
    /// parameter without a cast.
    pub fn json_param(self) -> &'static str {
        match self {
            Backend::Sqlite => "?",
            Backend::Postgres => "CAST(? AS jsonb)",
        }
    }
}

/// A test database and a temp dir of the test's own.
pub struct TestDb {
    /// An open, migrated connection.
    pub db: DatabaseConnection,
    /// The engine holding the database.
    pub backend: Backend,
    /// sea-orm URL of the database: the SQLite file, or the PostgreSQL server with the test's schema as the
    /// search path (so another pool opened on it sees the same tables).
    pub url: String,
    /// The SQLite database file. On PostgreSQL it names nothing: the database is the schema in `url`.
    pub path: PathBuf,
    /// The test's PostgreSQL schema; `None` on SQLite.
    pub schema: Option<String>,
    /// Owns the directory for the test's files (and the SQLite database); dropped last.
    pub dir: tempfile::TempDir,
}

impl TestDb {
    /// Another pool on the same database, sized like the first.
    pub async fn connect(&self) -> DatabaseConnection {
        match self.backend {
            Backend::Sqlite => outbox_core::connect(&self.url).await.expect("connect"),
            Backend::Postgres => connect_pg(&self.url).await,
        }
    }
}

/// A fresh migrated SQLite file database.
pub async fn fresh_db() -> TestDb {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    let url = sqlite_url(&path);
    let db = outbox_core::connect(&url).await.expect("connect");
    outbox_core::migrate(&db).await.expect("migrate");
    TestDb { db, backend: Backend::Sqlite, url, path, schema: None, dir }
}

/// A fresh migrated database on `backend` for the test named `test`. On PostgreSQL that is a new schema
/// `t_<random hex>` on the server `OUTBOX_TEST_PG_URL` names; unset, the test is skipped with a visible
/// message (`None`), except under `CI`, where a missing server is a failure.
pub async fn fresh(backend: Backend, test: &str) -> Option<TestDb> {
    match backend {
        Backend::Sqlite => Some(fresh_db().await),
        Backend::Postgres => Some(fresh_schema(&pg_server(test)?).await),
    }
}

/// The PostgreSQL server the tests run against, from `OUTBOX_TEST_PG_URL`. Unset, `test` is skipped with a
/// visible message (`None`); under `CI`, a missing server is a failure.
pub fn pg_server(test: &str) -> Option<String> {
    crate::required_server(
        PG_VAR,
        "a PostgreSQL server",
        "set it to a server's URL, such as postgres://outbox@127.0.0.1:5433/outbox",
        test,
    )
}

async fn fresh_schema(server: &str) -> TestDb {
    let schema = format!("t_{}", random_hex());
    let admin = connect_pg(server).await;
    admin.execute_unprepared(&format!("CREATE SCHEMA {schema}")).await.expect("create the test's schema");
    let _ = admin.close().await;
    let separator = if server.contains('?') { '&' } else { '?' };
    let url = format!("{server}{separator}options=-c%20search_path%3D{schema}");
    let db = connect_pg(&url).await;
    outbox_core::migrate(&db).await.expect("migrate");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    TestDb { db, backend: Backend::Postgres, url, path, schema: Some(schema), dir }
}

async fn connect_pg(url: &str) -> DatabaseConnection {
    let opts = outbox_core::ConnectOpts { max_connections: PG_POOL, ..Default::default() };
    outbox_core::connect_with(url, opts).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// 64 random bits in hex: the standard library's per-thread random hash keys, mixed with what tells
/// processes, calls and instants apart.
fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    format!("{:016x}", hasher.finish())
}

/// Runs `body` on a fresh database of `backend`; what [`conformance!`](crate::conformance) expands to.
/// A PostgreSQL schema is dropped after a passing test and kept after a failing one, for a look at what it
/// left.
pub async fn run<F, Fut>(backend: Backend, test: &str, body: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(t) = fresh(backend, test).await else { return };
    let server = t.schema.as_ref().and_then(|_| std::env::var(PG_VAR).ok());
    let schema = t.schema.clone();
    body(t).await;
    if let (Some(server), Some(schema)) = (server, schema) {
        drop_schema(&server, &schema).await;
    }
}

/// Best effort: a throwaway cluster does not need it, and a schema still locked by a stray connection is not
/// worth failing a passed test for.
async fn drop_schema(server: &str, schema: &str) {
    let admin = connect_pg(server).await;
    let dropped = async {
        let txn = admin.begin().await?;
        txn.execute_unprepared("SET LOCAL lock_timeout = '5s'").await?;
        txn.execute_unprepared(&format!("DROP SCHEMA {schema} CASCADE")).await?;
        txn.commit().await
    }
    .await;
    if let Err(e) = dropped {
        eprintln!("could not drop the test schema {schema}: {e}");
    }
    let _ = admin.close().await;
}

/// Runs one test body on SQLite and on PostgreSQL, each on a fresh database of its own.
///
/// `conformance!(name)` emits a module `name` with the tests `name::sqlite` and `name::postgres`, which call
/// the async function `name(t: TestDb)` defined next to it. The tests run on a two-thread runtime; a second
/// argument replaces the `#[tokio::test]` arguments. The PostgreSQL test is skipped (with a visible
/// `SKIPPED` line) when `OUTBOX_TEST_PG_URL` is unset, and fails instead under `CI`.
///
/// The body stays an ordinary function, so `cargo fmt` formats it and an unregistered body is dead code.
///
/// ```no_run
/// use outbox_tests::{TestDb, conformance, scalar};
///
/// conformance!(migrate_leaves_no_jobs);
/// async fn migrate_leaves_no_jobs(t: TestDb) {
///     assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);
/// }
///
/// // A test that installs a thread-local tracing subscriber wants one thread.
/// conformance!(logs_a_warning, flavor = "current_thread");
/// async fn logs_a_warning(t: TestDb) {
///     let _guard = tracing::subscriber::set_default(tracing_subscriber::fmt().finish());
///     assert_eq!(t.backend, outbox_tests::Backend::of(&t.db));
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance {
    ($test:ident) => {
        $crate::conformance!($test, flavor = "multi_thread", worker_threads = 2);
    };
    ($test:ident, $($runtime:tt)+) => {
        mod $test {
            #[::tokio::test($($runtime)+)]
            async fn sqlite() {
                $crate::run($crate::Backend::Sqlite, concat!(module_path!(), "::sqlite"), super::$test).await;
            }

            #[::tokio::test($($runtime)+)]
            async fn postgres() {
                $crate::run($crate::Backend::Postgres, concat!(module_path!(), "::postgres"), super::$test).await;
            }
        }
    };
}

/// sea-orm URL of an SQLite file, created if missing.
pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// Runs one statement with positional values (`?`), on either backend.
pub async fn exec(db: &impl ConnectionTrait, sql: &str, values: Vec<sea_orm::Value>) -> u64 {
    try_exec(db, sql, values).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Runs one statement with positional values (`?`), on either backend, and returns what the database said.
pub async fn try_exec(db: &impl ConnectionTrait, sql: &str, values: Vec<sea_orm::Value>) -> Result<u64, DbErr> {
    Ok(db.execute_raw(statement(db, sql, values)).await?.rows_affected())
}

/// One integer from a query, on either backend.
pub async fn scalar(db: &impl ConnectionTrait, sql: &str) -> i64 {
    let row = db.query_one_raw(statement(db, sql, vec![])).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let row = row.unwrap_or_else(|| panic!("{sql}: no row"));
    // PostgreSQL counts in bigint but keeps integer columns in int4, which sqlx does not widen by itself.
    row.try_get_by_index::<i64>(0)
        .or_else(|_| row.try_get_by_index::<i32>(0).map(i64::from))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn statement(db: &impl ConnectionTrait, sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    Statement::from_sql_and_values(db.get_database_backend(), numbered(Backend::of(db), sql), values)
}

/// `sql` with its `?` placeholders as PostgreSQL wants them (`$1`, `$2`, ...); quoted strings and identifiers
/// are left alone.
fn numbered(backend: Backend, sql: &str) -> String {
    if backend == Backend::Sqlite {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let (mut quote, mut n) = (None, 0);
    for c in sql.chars() {
        match (quote, c) {
            // A doubled quote inside a string closes and reopens it, which reads the same.
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '?') => {
                n += 1;
                out.push_str(&format!("${n}"));
                continue;
            }
            (None, _) => {}
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_outside_quotes_on_postgres_only() {
        let sql = r#"UPDATE t SET a = ?, b = 'it''s ?', "odd?" = ? WHERE id = ?"#;
        assert_eq!(numbered(Backend::Sqlite, sql), sql);
        assert_eq!(
            numbered(Backend::Postgres, sql),
            r#"UPDATE t SET a = $1, b = 'it''s ?', "odd?" = $2 WHERE id = $3"#
        );
        assert_eq!(numbered(Backend::Postgres, "CAST(? AS jsonb)"), "CAST($1 AS jsonb)");
    }

    #[test]
    fn random_names_differ() {
        let names: std::collections::HashSet<String> = (0..1000).map(|_| random_hex()).collect();
        assert_eq!(names.len(), 1000);
        assert!(names.iter().all(|n| n.len() == 16 && n.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
