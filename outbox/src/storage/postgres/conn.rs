//! PostgreSQL's connections: the pools a worker opens beside the application's, the schema the outbox tables are
//! in, and what a payload must not hold here.

use sea_orm::sqlx::postgres::PgPoolOptions;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, SqlxPostgresConnector, Statement};

use super::store::{self, PgStoreConfig};
use crate::error::{Error, Result, pointer_token};
use crate::job::Violation;
use crate::storage::WorkerStoreOpts;

/// See [`crate::storage::own_pool`]: `app`'s connection options, named `outbox-chores <worker>` in `pg_stat_activity`.
pub(super) fn own_pool(app: &DatabaseConnection, worker_id: &str, max: u32) -> DatabaseConnection {
    let options = app.get_postgres_connection_pool().connect_options().as_ref().clone();
    let options = options.application_name(&store::application_name("outbox-chores", worker_id));
    let pool = PgPoolOptions::new()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(std::time::Duration::from_secs(30))
        .connect_lazy_with(options);
    SqlxPostgresConnector::from_sqlx_postgres_pool(pool)
}

/// The schema the outbox tables are found in (the first of the connection's `search_path` that exists).
pub(super) async fn current_schema(db: &DatabaseConnection) -> Result<String> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, "SELECT current_schema()::text"))
        .await
        .map_err(Error::db("reading the current schema"))?;
    row.and_then(|r| r.try_get_by_index::<Option<String>>(0).transpose())
        .transpose()
        .map_err(Error::db("reading the current schema"))?
        .ok_or_else(|| Error::Invalid("the connection's search_path names no existing schema".into()))
}

/// `text` and `jsonb` refuse the NUL character (`\u0000`), in strings and in object keys alike.
fn nul_violations(value: &serde_json::Value, path: &mut String, out: &mut Vec<Violation>) {
    const WHY: &str = "contains the NUL character (\\u0000), which PostgreSQL cannot store";
    match value {
        serde_json::Value::String(s) if s.contains('\0') => {
            out.push(Violation { path: path.clone(), message: format!("the string {WHY}") })
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                nul_violations(item, path, out);
                path.truncate(len);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&pointer_token(key));
                if key.contains('\0') {
                    out.push(Violation { path: path.clone(), message: format!("the key {WHY}") });
                }
                nul_violations(item, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// What of a payload `text` and `jsonb` cannot hold: the NUL character. JSON text escapes it as `\u0000`, so
/// without that sequence there is none to find.
pub(super) fn unstorable(payload: &serde_json::Value, text: &str) -> Vec<Violation> {
    if !text.contains("\\u0000") {
        return Vec::new();
    }
    let mut out = Vec::new();
    nul_violations(payload, &mut String::new(), &mut out);
    out
}

pub(super) async fn store_config(db: &DatabaseConnection, opts: WorkerStoreOpts) -> Result<PgStoreConfig> {
    Ok(PgStoreConfig {
        kinds: opts.unlimited_kinds(),
        limited: opts.flows,
        worker_id: opts.worker_id,
        queues: opts.queues,
        schema: current_schema(db).await?,
    })
}
