//! MySQL's connections: the settings of the pools outbox opens, the transactions it begins, the errors it explains,
//! the worker's own pool, and what a payload must not hold here.

use std::time::{Duration, Instant};

use sea_orm::sqlx::mysql::{MySqlDatabaseError, MySqlPoolOptions};
use sea_orm::{
    AccessMode, ConnectOptions, DatabaseConnection, DatabaseTransaction, DbErr, IsolationLevel, RuntimeErr,
    SqlxMySqlConnector, TransactionTrait,
};

use crate::error::{Error, Result, pointer_token};
use crate::job::Violation;

/// How long a statement of a pool outbox opens waits for a row lock (`innodb_lock_wait_timeout`) and for a table's
/// metadata lock (`lock_wait_timeout`), in whole seconds, at least one. The isolation level is left to the
/// application: outbox's own transactions name theirs ([`begin_write`], [`begin_read`]).
pub(super) fn tune(options: &mut ConnectOptions, busy_timeout: Duration) {
    let seconds = busy_timeout.as_secs().max(1);
    let set = format!("SET SESSION innodb_lock_wait_timeout = {seconds}, SESSION lock_wait_timeout = {seconds}");
    options.map_sqlx_mysql_pool_opts(move |pool| {
        let set = set.clone();
        pool.after_connect(move |conn, _meta| {
            let set = set.clone();
            Box::pin(async move {
                sea_orm::sqlx::raw_sql(sea_orm::sqlx::AssertSqlSafe(set)).execute(conn).await?;
                Ok(())
            })
        })
    });
}

/// `READ COMMITTED`: each statement reads what is committed when it starts, and InnoDB takes no gap locks, so
/// writers of different jobs do not wait on each other's ranges.
pub(super) async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    db.begin_with_config(Some(IsolationLevel::ReadCommitted), None)
        .await
        .map_err(Error::db("beginning a write transaction"))
}

/// `REPEATABLE READ`: one snapshot for the whole scan. Not `READ ONLY`: a scan writes a temporary table, which a
/// read-only transaction refuses.
pub(super) async fn begin_read(db: &DatabaseConnection) -> Result<DatabaseTransaction> {
    db.begin_with_config(Some(IsolationLevel::RepeatableRead), Some(AccessMode::ReadWrite))
        .await
        .map_err(Error::db("beginning a read transaction"))
}

/// The server's error number of `err`, when the server answered with one.
pub(super) fn error_number(err: &DbErr) -> Option<u16> {
    let (DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e))) = err else { return None };
    e.as_database_error()?.try_downcast_ref::<MySqlDatabaseError>().map(MySqlDatabaseError::number)
}

/// The error of a write through the caller's connection, with what it means here and what to do about it.
pub(super) fn write_failed(context: String, err: DbErr, started: Instant) -> Error {
    let waited = started.elapsed().as_secs_f64();
    let hint = match error_number(&err) {
        Some(1205) => format!(
            " (waited {waited:.1} s for a row lock another transaction holds: only this statement was rolled back; \
             information_schema.INNODB_TRX shows the long transaction, innodb_lock_wait_timeout how long a \
             statement waits)"
        ),
        Some(1213) => " (a deadlock: the server rolled back the whole transaction; run it again)".to_owned(),
        Some(1442) => " (a trigger on an outbox table that writes the table itself: MariaDB refuses it; drop \
                        the trigger, which is not outbox's)"
            .to_owned(),
        Some(4025) => " (a row broke a CHECK constraint of the outbox tables)".to_owned(),
        _ => String::new(),
    };
    Error::db(format!("{context}{hint}"))(err)
}

/// See [`crate::storage::own_pool`]: `app`'s connection options, opened lazily.
pub(super) fn own_pool(app: &DatabaseConnection, max: u32) -> DatabaseConnection {
    let options = app.get_mysql_connection_pool().connect_options().as_ref().clone();
    let pool = MySqlPoolOptions::new()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(30))
        .connect_lazy_with(options);
    SqlxMySqlConnector::from_sqlx_mysql_pool(pool)
}

/// The deepest nesting of arrays and objects MariaDB's `JSON_VALID` accepts, which the `JSON` columns check (deeper
/// is refused from 32 on, in 10.6 to 12.1).
const MAX_DEPTH: usize = 31;

/// What of a payload MariaDB's `JSON` columns refuse: arrays and objects nested more than [`MAX_DEPTH`] deep, named
/// at the first value past the limit. JSON text opens each level with a bracket, so text with fewer cannot nest
/// so deep.
pub(super) fn unstorable(payload: &serde_json::Value, text: &str) -> Vec<Violation> {
    if text.bytes().filter(|b| matches!(b, b'[' | b'{')).count() <= MAX_DEPTH {
        return Vec::new();
    }
    let mut path = String::new();
    match too_deep(payload, 1, &mut path) {
        true => vec![Violation {
            path,
            message: format!(
                "arrays and objects are nested more than {MAX_DEPTH} deep here, which MariaDB's JSON columns refuse"
            ),
        }],
        false => Vec::new(),
    }
}

/// Whether `value`, at nesting `depth` (1 for the payload itself), holds a container deeper than [`MAX_DEPTH`];
/// `path` is left at the first such container.
fn too_deep(value: &serde_json::Value, depth: usize, path: &mut String) -> bool {
    let children: Box<dyn Iterator<Item = (String, &serde_json::Value)>> = match value {
        serde_json::Value::Array(items) => Box::new(items.iter().enumerate().map(|(i, v)| (i.to_string(), v))),
        serde_json::Value::Object(map) => Box::new(map.iter().map(|(k, v)| (pointer_token(k), v))),
        _ => return false,
    };
    if depth > MAX_DEPTH {
        return true;
    }
    for (token, child) in children {
        let len = path.len();
        path.push('/');
        path.push_str(&token);
        if too_deep(child, depth + 1, path) {
            return true;
        }
        path.truncate(len);
    }
    false
}
