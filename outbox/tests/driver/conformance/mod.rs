//! Driver-level conformance: each storage operation called directly on every backend.
//!
//! Every test body runs once per backend of [`driver_tests!`], each on a fresh database of its own (a file in a
//! temp dir, a PostgreSQL schema dropped even when the test panics); a backend added there runs them all. Jobs
//! are put into states with plain SQL written once for every backend ([`set`]). The bodies are in one file per
//! area, named after the file of `storage/` whose operations they call; this one holds what they share.

use sea_orm::{ConnectionTrait, DatabaseConnection, Value};

use super::enqueue::NewJob;
use super::{Dialect, Finished, Keep, Outcome, WorkerStoreOpts};
use crate::error::Result;
use crate::record::JobRecord;

/// One test per body and backend, `<backend>::<body>`: the list of backends, each behind its feature. MySQL, whose
/// engine is being built, runs the bodies listed after `mysql:` (an area joins once the engine does what it calls).
macro_rules! driver_tests {
    ($($test:ident),+ ; mysql: $($my:ident),* $(,)?) => {
        driver_tests!(@on "sqlite", sqlite, Sqlite; $($test),+);
        driver_tests!(@on "postgres", postgres, Postgres; $($test),+);
        driver_tests!(@on "mysql", mysql, MySql; $($my),*);
        // Built with MySQL alone, the bodies it does not run yet are still compiled and checked, not dead code.
        #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
        #[allow(dead_code)]
        fn not_on_mysql_yet() {
            $(let _ = $test;)+
        }
    };
    ($($test:ident),+ $(,)?) => {
        driver_tests!($($test),+ ; mysql: );
    };
    (@on $feature:literal, $module:ident, $variant:ident; $($test:ident),*) => {
        #[cfg(feature = $feature)]
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let name = concat!(stringify!($module), "::", stringify!($test));
                    crate::storage::conformance::run(crate::storage::Dialect::$variant, name, super::$test).await;
                }
            )*
        }
    };
}

mod catalogue;
mod enqueue;
mod events;
mod jobs;
mod kinds;
mod locks;
mod reconciliations;
mod remote;
mod retention;
mod scan;
mod schedules;
mod schema;
mod sequences;
mod stats;
mod worker_store;
mod workers;

/// Runs `body` on a fresh migrated database of `backend`, and closes it.
pub(super) async fn run(backend: Dialect, test: &str, body: impl AsyncFnOnce(&DatabaseConnection) -> Result<()>) {
    let Some((db, _owned)) = fresh(backend, test).await else { return };
    crate::migrate(&db).await.expect("migrate");
    body(&db).await.unwrap_or_else(|e| panic!("{test}: {e}"));
    db.close().await.expect("close the database");
}

/// A fresh empty database of `backend`, and what removes it when dropped (a temp dir, a PostgreSQL schema);
/// `None` where the backend's server is not configured (the test is skipped).
pub(super) async fn fresh(backend: Dialect, test: &str) -> Option<(DatabaseConnection, Box<dyn std::any::Any>)> {
    Some(match backend {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => {
            let _ = test;
            let dir = tempfile::tempdir().expect("a temp dir");
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("outbox.db").display());
            (crate::connect(&url).await.expect("open the SQLite file"), Box::new(dir))
        }
        #[cfg(feature = "postgres")]
        Dialect::Postgres => {
            let server = pg_server(test)?;
            let schema = PgSchema { name: format!("d_{:016x}", fastrand::u64(..)), server };
            let url = with_options(&schema.server, &format!("-c search_path={}", schema.name));
            let opts = crate::ConnectOpts { max_connections: 3, ..Default::default() };
            let db = crate::connect_with(&url, opts).await.expect("connect to PostgreSQL");
            db.execute_unprepared(&format!("CREATE SCHEMA {}", schema.name)).await.expect("create the schema");
            (db, Box::new(schema))
        }
        #[cfg(feature = "mysql")]
        Dialect::MySql => {
            let server = server(MYSQL_VAR, test)?;
            let database = MySqlDatabase { name: format!("d_{:016x}", fastrand::u64(..)), server };
            let opts = crate::ConnectOpts { max_connections: 1, ..Default::default() };
            let admin = crate::connect_with(&database.server, opts).await.expect("connect to MySQL");
            admin.execute_unprepared(&format!("CREATE DATABASE {}", database.name)).await.expect("create the database");
            admin.close().await.expect("close");
            let url = with_database(&database.server, &database.name);
            let opts = crate::ConnectOpts { max_connections: 3, ..Default::default() };
            (crate::connect_with(&url, opts).await.expect("connect to MySQL"), Box::new(database))
        }
    })
}

#[cfg(feature = "postgres")]
const PG_VAR: &str = "OUTBOX_TEST_PG_URL";

#[cfg(feature = "mysql")]
const MYSQL_VAR: &str = "OUTBOX_TEST_MYSQL_URL";

/// The server of `OUTBOX_TEST_PG_URL`.
#[cfg(feature = "postgres")]
fn pg_server(test: &str) -> Option<String> {
    server(PG_VAR, test)
}

/// The server the variable `var` names; unset, the test is skipped with a line past the harness's capture, and
/// fails under CI.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn server(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!("{var} is unset under CI"),
        _ => {
            // Straight to stderr: the harness captures what `eprintln!` prints, and a skip must be seen.
            let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("SKIPPED {test}: set {var}\n"));
            None
        }
    }
}

/// `server` (a `mysql://` URL) naming the database `name` instead of its own.
#[cfg(feature = "mysql")]
fn with_database(server: &str, name: &str) -> String {
    let (base, query) = server.split_once('?').map_or((server, None), |(b, q)| (b, Some(q)));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let root = base[authority..].find('/').map_or(base.len(), |i| authority + i);
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    format!("{}/{name}{query}", &base[..root])
}

/// A test's database, dropped with this ([`drop_with_admin`]); the connections still in it are killed first.
#[cfg(feature = "mysql")]
struct MySqlDatabase {
    name: String,
    server: String,
}

#[cfg(feature = "mysql")]
impl Drop for MySqlDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        drop_with_admin("database", &self.name, &self.server, |admin| async move {
            let holders = "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST \
                           WHERE DB = $1 AND ID <> CONNECTION_ID()";
            let rows = admin.query_all_raw(Dialect::MySql.stmt(holders, vec![name.clone().into()])).await;
            for row in rows.map_err(|e| e.to_string())? {
                let id: i64 = row.try_get_by_index(0).map_err(|e| e.to_string())?;
                // Gone already is as good.
                let _ = admin.execute_unprepared(&format!("KILL CONNECTION {id}")).await;
            }
            admin.execute_unprepared("SET SESSION lock_wait_timeout = 10").await.map_err(|e| e.to_string())?;
            let drop = format!("DROP DATABASE IF EXISTS {name}");
            admin.execute_unprepared(&drop).await.map(|_| ()).map_err(|e| e.to_string())
        });
    }
}

/// `server` with PostgreSQL command-line `options` as its connection options.
#[cfg(feature = "postgres")]
fn with_options(server: &str, options: &str) -> String {
    let separator = if server.contains('?') { '&' } else { '?' };
    format!("{server}{separator}options={}", options.replace(' ', "%20").replace('=', "%3D"))
}

/// A test's schema, dropped with this ([`drop_with_admin`]); whoever still holds a lock in it is ended first.
#[cfg(feature = "postgres")]
struct PgSchema {
    name: String,
    server: String,
}

#[cfg(feature = "postgres")]
impl Drop for PgSchema {
    fn drop(&mut self) {
        let name = self.name.clone();
        drop_with_admin("schema", &self.name, &self.server, |admin| async move {
            let holders = format!(
                "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                 JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{name}' \
                 AND l.pid <> pg_backend_pid()"
            );
            admin.execute_unprepared(&holders).await.map_err(|e| e.to_string())?;
            let drop = format!("DROP SCHEMA IF EXISTS {name} CASCADE");
            admin.execute_unprepared(&drop).await.map(|_| ()).map_err(|e| e.to_string())
        });
    }
}

/// Drops a test's schema or database: on a thread, runtime and one-connection pool to `server` of its own, since
/// the test's runtime may be the one unwinding. `drop` ends whoever still holds a lock in it (a transaction of the
/// failed test), then drops it; a failure panics, or is printed while the test already panics.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn drop_with_admin<F, Fut>(what: &str, name: &str, server: &str, drop: F)
where
    F: FnOnce(sea_orm::DatabaseConnection) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::result::Result<(), String>>,
{
    let server = server.to_owned();
    let dropped = std::thread::spawn(move || -> std::result::Result<(), String> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        runtime.map_err(|e| e.to_string())?.block_on(async {
            let opts = crate::ConnectOpts { max_connections: 1, ..Default::default() };
            let admin = crate::connect_with(&server, opts).await.map_err(|e| e.to_string())?;
            drop(admin.clone()).await?;
            admin.close().await.map_err(|e| e.to_string())
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the dropping thread panicked".into()));
    match dropped {
        Ok(()) => {}
        Err(e) if std::thread::panicking() => eprintln!("could not drop the test {what} {name}: {e}"),
        Err(e) => panic!("could not drop the test {what} {name}: {e}"),
    }
}

/// A fixed time long past (ms): jobs enqueued at it are due.
const T0: i64 = 1_700_000_000_000;

fn job(id: &str) -> NewJob {
    NewJob {
        id: id.into(),
        kind: "k".into(),
        queue: "default".into(),
        payload: r#"{"n":1}"#.into(),
        priority: 0,
        max_attempts: 3,
        run_at: T0,
        key: None,
        schema_hash: "hash".into(),
        created_at: T0,
        sequence_key: None,
        hold: true,
        scheduled: false,
        flow_key: None,
        cost: None,
        subject: None,
        trace: None,
    }
}

fn keyed(id: &str, key: &str) -> NewJob {
    NewJob { key: Some(key.into()), ..job(id) }
}

fn sequenced(id: &str, sequence: &str) -> NewJob {
    NewJob { sequence_key: Some(sequence.into()), ..job(id) }
}

/// Enqueues each job, which must be written.
async fn add(db: &DatabaseConnection, jobs: &[NewJob]) -> Result<()> {
    for j in jobs {
        assert!(super::enqueue::insert_job(db, j).await?, "job `{}` was not written", j.id);
    }
    Ok(())
}

/// `UPDATE outbox_jobs SET <assignments> WHERE id = <id>`, where `{0}`, `{1}`, ... in `assignments` stand for
/// the times `at` (ms) in the columns' type; the job must exist.
async fn set(db: &DatabaseConnection, id: &str, assignments: &str, at: &[i64]) -> Result<()> {
    let b = Dialect::of(db)?;
    let mut sql = format!("UPDATE outbox_jobs SET {assignments} WHERE id = $1");
    let mut values = vec![Value::from(id)];
    for (i, t) in at.iter().enumerate() {
        sql = sql.replace(&format!("{{{i}}}"), &b.ts(&format!("${}", i + 2)));
        values.push((*t).into());
    }
    assert_eq!(db.execute_raw(b.stmt(sql, values)).await?.rows_affected(), 1, "no job `{id}`");
    Ok(())
}

async fn mark_claimed(db: &DatabaseConnection, id: &str, at: i64, lease: i64) -> Result<()> {
    let sql = "status = 'claimed', attempts = attempts + 1, locked_by = 'w', locked_at = {0}, claimed_at = {0}, \
               lease_expires_at = {1}, updated_at = {0}";
    set(db, id, sql, &[at, lease]).await
}

async fn mark_completed(db: &DatabaseConnection, id: &str, at: i64) -> Result<()> {
    let sql = "status = 'completed', attempts = 1, claimed_at = {0}, completed_at = {0}, updated_at = {0}";
    set(db, id, sql, &[at]).await
}

async fn mark_failed(db: &DatabaseConnection, id: &str, error: &str, at: i64) -> Result<()> {
    set(db, id, &format!("status = 'failed', attempts = 1, last_error = '{error}', updated_at = {{0}}"), &[at]).await
}

/// A worker has claimed once at `T0`, of a kind no job has (nothing comes due): on MySQL, a sequence's first job
/// goes in waiting, and is let go when a worker's claim looks at its sequence; elsewhere nothing changes.
async fn looked_at_by_a_worker(db: &DatabaseConnection) -> Result<()> {
    let store = super::open_worker_store(db, opts("look", &["none"]), &tokio::runtime::Handle::current()).await?;
    assert!(store.claim(1, T0, T0 + 1_000).await?.is_empty());
    store.close().await;
    Ok(())
}

async fn get(db: &DatabaseConnection, id: &str) -> Result<JobRecord> {
    Ok(super::jobs::get(db, id).await?.unwrap_or_else(|| panic!("no job `{id}`")))
}

fn ids(records: &[JobRecord]) -> Vec<&str> {
    records.iter().map(|r| r.id.as_str()).collect()
}

fn opts(worker: &str, kinds: &[&str]) -> WorkerStoreOpts {
    let kinds = kinds.iter().map(|k| (*k).to_owned()).collect();
    WorkerStoreOpts { worker_id: worker.into(), kinds, flows: Vec::new(), queues: None }
}

/// The outcome of job `id`'s claim of run `run`, its first attempt since (its attempt is its run: no test that
/// tells them apart uses this).
fn finished(id: &str, run: i32, outcome: Outcome) -> Finished {
    Finished {
        id: id.into(),
        kind: "k".into(),
        queue: "default".into(),
        attempt: run,
        run,
        outcome,
        keep: Keep::Row,
        parent: false,
    }
}

fn completed() -> Outcome {
    Outcome::Completed { output: Some(r#"{"ok":true}"#.into()) }
}
