//! Test databases on each backend (a fresh SQLite file, a fresh PostgreSQL schema or a fresh MariaDB database per
//! test), raw SQL that runs on each, and the [`conformance!`](crate::conformance) macro that runs one test body on
//! each.

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
    /// A database of the test's own on the MariaDB server `OUTBOX_TEST_MYSQL_URL` names (tests that opt in:
    /// `conformance!(name, mysql)`).
    MySql,
}

impl Backend {
    /// The backend an open connection or transaction talks to.
    pub fn of(db: &impl ConnectionTrait) -> Backend {
        match db.get_database_backend() {
            DbBackend::Sqlite => Backend::Sqlite,
            DbBackend::Postgres => Backend::Postgres,
            DbBackend::MySql => Backend::MySql,
            other => panic!("no test backend for {other:?}"),
        }
    }

    /// SQL for the instant `ms` milliseconds after the Unix epoch, as this backend's time columns hold it:
    /// integer milliseconds on SQLite and MySQL, a `timestamptz` on PostgreSQL. `time(0)` is "long ago".
    pub fn time(self, ms: i64) -> String {
        match self {
            Backend::Sqlite | Backend::MySql => ms.to_string(),
            Backend::Postgres => format!("(timestamptz 'epoch' + {ms} * interval '1 millisecond')"),
        }
    }

    /// SQL for a JSON value bound as text (a `?` placeholder): PostgreSQL's `jsonb` columns take no text
    /// parameter without a cast.
    pub fn json_param(self) -> &'static str {
        match self {
            Backend::Sqlite | Backend::MySql => "?",
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
    /// The test's PostgreSQL schema, dropped with the `TestDb`; `None` on the others.
    pub schema: Option<TestSchema>,
    /// The test's MariaDB database, dropped with the `TestDb`; `None` on the others.
    pub mariadb: Option<crate::TestMariaDb>,
    /// Owns the directory for the test's files (and the SQLite database); dropped last.
    pub dir: tempfile::TempDir,
}

impl TestDb {
    /// Another pool on the same database, sized like the first.
    pub async fn connect(&self) -> DatabaseConnection {
        connect_to(self.backend, &self.url).await
    }
}

/// A pool on the database `url` of `backend` names, sized like a test's first: for a test that needs one
/// made on another runtime (a pool's PostgreSQL connections belong to the runtime that opened them).
pub async fn connect_to(backend: Backend, url: &str) -> DatabaseConnection {
    match backend {
        Backend::Sqlite => outbox::connect(url).await.expect("connect"),
        Backend::Postgres => connect_pg(url).await,
        Backend::MySql => {
            let opts = outbox::ConnectOpts { max_connections: PG_POOL, ..Default::default() };
            outbox::connect_with(url, opts).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"))
        }
    }
}

/// A fresh migrated SQLite file database: a copy of one migrated once per test process.
pub async fn fresh_db() -> TestDb {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    std::fs::write(&path, migrated_sqlite().await).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    let url = sqlite_url(&path);
    let db = outbox::connect(&url).await.expect("connect");
    TestDb { db, backend: Backend::Sqlite, url, path, schema: None, mariadb: None, dir }
}

/// The bytes of an SQLite database file that every migration has run on, made once per test process.
async fn migrated_sqlite() -> &'static [u8] {
    static TEMPLATE: tokio::sync::OnceCell<Vec<u8>> = tokio::sync::OnceCell::const_new();
    TEMPLATE
        .get_or_init(|| async {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("template.db");
            let db = outbox::connect(&sqlite_url(&path)).await.expect("connect");
            outbox::migrate(&db).await.expect("migrate");
            // Everything into the database file itself: the copies are made of that file alone.
            db.execute_unprepared("PRAGMA wal_checkpoint(TRUNCATE)").await.expect("checkpoint");
            db.close().await.expect("close the template");
            let wal = dir.path().join("template.db-wal");
            assert!(std::fs::metadata(&wal).map_or(true, |m| m.len() == 0), "{} still holds pages", wal.display());
            std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        })
        .await
}

/// A fresh migrated database on `backend` for the test named `test`. On PostgreSQL that is a new schema
/// `t_<random hex>` on the server `OUTBOX_TEST_PG_URL` names; unset, the test is skipped with a visible
/// message (`None`), except under `CI`, where a missing server is a failure.
pub async fn fresh(backend: Backend, test: &str) -> Option<TestDb> {
    match backend {
        Backend::Sqlite => Some(fresh_db().await),
        Backend::Postgres => Some(fresh_schema(&pg_server(test)?).await),
        Backend::MySql => {
            let t = crate::TestMariaDb::fresh(test).await?;
            outbox::migrate(&t.db).await.expect("migrate");
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("outbox.db");
            let (db, url) = (t.db.clone(), t.url.clone());
            Some(TestDb { db, backend: Backend::MySql, url, path, schema: None, mariadb: Some(t), dir })
        }
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
    let name = format!("t_{}", random_hex());
    let url = with_options(server, &format!("-c search_path={name}"));
    // A throwaway schema needs no durable commits: its migrations skip the wait for the disk.
    let setup =
        connect_pg_sized(&with_options(server, &format!("-c search_path={name} -c synchronous_commit=off")), 1).await;
    setup.execute_unprepared(&format!("CREATE SCHEMA {name}")).await.expect("create the test's schema");
    let schema = TestSchema { name, server: server.to_owned() };
    outbox::migrate(&setup).await.expect("migrate");
    let _ = setup.close().await;
    let db = connect_pg(&url).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("outbox.db");
    TestDb { db, backend: Backend::Postgres, url, path, schema: Some(schema), mariadb: None, dir }
}

/// A PostgreSQL schema of a test's own, dropped when this is: at the end of the test, and while a failing
/// test unwinds (set `OUTBOX_TEST_KEEP_SCHEMAS` to keep a failed test's schema for a look at what it left).
#[derive(Debug)]
pub struct TestSchema {
    name: String,
    server: String,
}

impl TestSchema {
    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("OUTBOX_TEST_KEEP_SCHEMAS").is_some() {
            eprintln!("kept the failed test's schema {} (OUTBOX_TEST_KEEP_SCHEMAS is set)", self.name);
            return;
        }
        let (server, name) = (self.server.clone(), self.name.clone());
        drop_on_own_runtime("schema", &self.name, async move { drop_schema(&server, &name).await });
    }
}

/// Runs `drop` (of the test's `what` called `name`) to its end on a thread and runtime of its own: the test's
/// runtime may be the one unwinding, or shutting down. A failure is printed, not raised: the test's own outcome
/// stands.
pub(crate) fn drop_on_own_runtime<F>(what: &str, name: &str, drop: F)
where
    F: Future<Output = Result<(), DbErr>> + Send + 'static,
{
    let dropped = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(drop).map_err(std::io::Error::other)
    })
    .join();
    match dropped {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("could not drop the test {what} {name}: {e}"),
        Err(_) => eprintln!("could not drop the test {what} {name}: connecting to the server panicked"),
    }
}

/// `server` with `options` (PostgreSQL's command-line settings) as its connection options.
fn with_options(server: &str, options: &str) -> String {
    let separator = if server.contains('?') { '&' } else { '?' };
    format!("{server}{separator}options={}", options.replace(' ', "%20").replace('=', "%3D"))
}

async fn connect_pg(url: &str) -> DatabaseConnection {
    connect_pg_sized(url, PG_POOL).await
}

async fn connect_pg_sized(url: &str, max_connections: u32) -> DatabaseConnection {
    let opts = outbox::ConnectOpts { max_connections, ..Default::default() };
    outbox::connect_with(url, opts).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// 64 random bits in hex, for names that must not collide across test processes.
pub(crate) fn random_hex() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// Runs `body` on a fresh database of `backend`; what [`conformance!`](crate::conformance) expands to.
/// A PostgreSQL schema is dropped when the body ends, passing or failing (see [`TestSchema`]).
pub async fn run<F, Fut>(backend: Backend, test: &str, body: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    // Boxed, both: set up and run inline, the two futures nest deeper than the compiler's layout depth allows
    // once sea-orm is built with all three drivers.
    let Some(t) = Box::pin(fresh(backend, test)).await else { return };
    Box::pin(body(t)).await;
}

/// Drops `schema`. A connection the test left holding a lock in it (a worker of a failed test, frozen with its
/// runtime) is ended after a second of waiting, and the drop tried again; what still fails is named.
async fn drop_schema(server: &str, schema: &str) -> Result<(), DbErr> {
    let admin = connect_pg_sized(&with_options(server, "-c synchronous_commit=off"), 1).await;
    let attempt = async || {
        let txn = admin.begin().await?;
        txn.execute_unprepared("SET LOCAL lock_timeout = '1s'").await?;
        txn.execute_unprepared(&format!("DROP SCHEMA {schema} CASCADE")).await?;
        txn.commit().await
    };
    let mut dropped = attempt().await;
    if dropped.is_err() {
        let holders = format!(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{schema}' AND l.pid <> pg_backend_pid()"
        );
        admin.execute_unprepared(&holders).await?;
        dropped = attempt().await;
    }
    let _ = admin.close().await;
    dropped
}

/// Runs one test body on SQLite and on PostgreSQL (and on MariaDB, for a test that opts in), each on a fresh
/// database of its own.
///
/// `conformance!(name)` emits a module `name` with the tests `name::sqlite` and `name::postgres`, which call
/// the async function `name(t: TestDb)` defined next to it; `conformance!(name, mysql)` adds `name::mysql`. The
/// tests run on a two-thread runtime; arguments after the name (and after `mysql`) replace the `#[tokio::test]`
/// arguments. A server test is skipped (with a visible `SKIPPED` line) when its variable (`OUTBOX_TEST_PG_URL`,
/// `OUTBOX_TEST_MYSQL_URL`) is unset, and fails instead under `CI`. The MariaDB engine is being built: a test opts
/// in once it passes there.
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
    ($test:ident, mysql) => {
        $crate::conformance!(@emit $test, [mysql], (flavor = "multi_thread", worker_threads = 2));
    };
    ($test:ident) => {
        $crate::conformance!(@emit $test, [], (flavor = "multi_thread", worker_threads = 2));
    };
    (@emit $test:ident, [$($mysql:ident)?], $runtime:tt) => {
        mod $test {
            #[::tokio::test $runtime]
            async fn sqlite() {
                $crate::run($crate::Backend::Sqlite, concat!(module_path!(), "::sqlite"), super::$test).await;
            }

            #[::tokio::test $runtime]
            async fn postgres() {
                $crate::run($crate::Backend::Postgres, concat!(module_path!(), "::postgres"), super::$test).await;
            }

            $(
                #[::tokio::test $runtime]
                async fn $mysql() {
                    $crate::run($crate::Backend::MySql, concat!(module_path!(), "::mysql"), super::$test).await;
                }
            )?
        }
    };
    ($test:ident, mysql, $($runtime:tt)+) => {
        $crate::conformance!(@emit $test, [mysql], ($($runtime)+));
    };
    ($test:ident, $($runtime:tt)+) => {
        $crate::conformance!(@emit $test, [], ($($runtime)+));
    };
}

/// Runs one test body on SQLite alone, for tests whose subject does not depend on the backend (the
/// dashboard, which reads the API): `sqlite_only!(name)` emits the test `name::sqlite`, like
/// [`conformance!`](crate::conformance) without its PostgreSQL half.
#[macro_export]
macro_rules! sqlite_only {
    ($test:ident) => {
        mod $test {
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                $crate::run($crate::Backend::Sqlite, concat!(module_path!(), "::sqlite"), super::$test).await;
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

/// The claimed jobs no rescue would see, so that a worker dying with them would strand them for good: on
/// PostgreSQL those no claim row lists at or before their own lease (the rescuers read the claims), on SQLite
/// those without a lease (the rescuers read the leases).
pub async fn unrescuable(db: &impl ConnectionTrait) -> Vec<String> {
    let sql = match db.get_database_backend() {
        // MySQL's rescuers read the claimed jobs themselves, as SQLite's do.
        DbBackend::Sqlite | DbBackend::MySql => {
            "SELECT id FROM outbox_jobs WHERE status = 'claimed' AND lease_expires_at IS NULL ORDER BY id"
        }
        _ => {
            "SELECT j.id FROM outbox_jobs j WHERE j.status = 'claimed' AND NOT EXISTS (SELECT 1 FROM outbox_claims c \
             WHERE j.id = ANY(c.jobs) AND c.lease_expires_at <= COALESCE(j.lease_expires_at, timestamptz 'epoch')) \
             ORDER BY 1"
        }
    };
    let rows = db.query_all_raw(statement(db, sql, vec![])).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.iter().map(|r| r.try_get_by_index::<String>(0).unwrap_or_else(|e| panic!("{sql}: {e}"))).collect()
}

/// Asserts that every claimed job is one a rescue would find ([`unrescuable`]), and that some job is claimed
/// when `claimed` says so, so that the check checks something.
pub async fn assert_every_claim_rescuable(db: &impl ConnectionTrait, claimed: bool, when: &str) {
    let lost = unrescuable(db).await;
    assert!(lost.is_empty(), "{when}: claimed jobs no rescue can find: {lost:?}");
    if claimed {
        let n = scalar(db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed'").await;
        assert!(n > 0, "{when}: no job is claimed, so the check checked nothing");
    }
}

/// `sql` with `?` placeholders for `db`, whichever engine it is on (MySQL takes `?` as SQLite does).
fn statement(db: &impl ConnectionTrait, sql: &str, values: Vec<sea_orm::Value>) -> Statement {
    let sql = match db.get_database_backend() {
        DbBackend::Postgres => numbered(Backend::Postgres, sql),
        _ => sql.to_owned(),
    };
    Statement::from_sql_and_values(db.get_database_backend(), sql, values)
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
