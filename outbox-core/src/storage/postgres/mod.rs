//! PostgreSQL: the worker's own connections (`store/`), its `LISTEN` connection (`listener.rs`), remote
//! workers' claims and outcomes through the same statements, and what a payload must not hold here. The
//! columns use PostgreSQL's own types (`timestamptz`, `jsonb`); shared statements convert at their edges
//! ([`super::Backend`]).

mod listener;
mod store;

use sea_orm::sqlx::postgres::PgPoolOptions;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, SqlxPostgresConnector, Statement};

use super::{ClaimedJob, Finished, Keep, Outcome, Store, WorkerStoreOpts};
use crate::error::{Error, Result, pointer_token};
use crate::job::Violation;
use store::{PgStore, PgStoreConfig};

/// See [`super::own_pool`]: `app`'s connection options, named `outbox-chores <worker>` in `pg_stat_activity`.
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
async fn current_schema(db: &DatabaseConnection) -> Result<String> {
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

/// The channel enqueues notify on commit; the payload is the schema of the jobs table, so workers of other
/// schemas in the same database ignore it.
pub(crate) const CHANNEL: &str = "outbox_jobs";

/// `timestamptz` of the integer milliseconds in SQL expression `ms` (exact, unlike `to_timestamp`), for the
/// worker's statements, which are constants.
macro_rules! ts {
    ($ms:literal) => {
        concat!("(TIMESTAMPTZ 'epoch' + (", $ms, ")::int8 * INTERVAL '1 millisecond')")
    };
}
use ts;

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

pub(super) async fn open_worker_store(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    bg: &tokio::runtime::Handle,
) -> Result<Store> {
    let config = store_config(db, opts).await?;
    Ok(std::sync::Arc::new(PgStore::open(db.get_postgres_connection_pool(), config, bg)))
}

async fn store_config(db: &DatabaseConnection, opts: WorkerStoreOpts) -> Result<PgStoreConfig> {
    Ok(PgStoreConfig {
        kinds: opts.unlimited_kinds(),
        limited: opts.limits,
        worker_id: opts.worker_id,
        queues: opts.queues,
        schema: current_schema(db).await?,
    })
}

/// A `LISTEN` connection of its own that wakes this process on every enqueue into the connection's schema.
pub(super) async fn watch(db: &DatabaseConnection) -> Result<crate::wake::Watch> {
    let schema = current_schema(db).await?;
    let options = db.get_postgres_connection_pool().connect_options().as_ref().clone();
    let pool = listener::pool(options.application_name("outbox-watch"));
    let task = tokio::spawn(listener::listen(pool, schema, "watch".to_owned(), false));
    Ok(crate::wake::Watch::listening(task))
}

/// A remote worker's claim: the in-process worker's statements, on the caller's pool.
pub(super) async fn remote_claim(
    db: &DatabaseConnection,
    opts: WorkerStoreOpts,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> Result<Vec<ClaimedJob>> {
    let c = store_config(db, opts).await?;
    if super::remote::rescue_due(now) {
        // A failed rescue is the next claim's to do; this claim goes on.
        match store::rescue_on(db.get_postgres_connection_pool(), &c.schema, now).await {
            Ok(rescued) => super::remote::log_rescued(&rescued, &c.worker_id),
            Err(e) => tracing::warn!(worker = %c.worker_id, error = %e, "rescuing expired claims failed"),
        }
    }
    let pool = db.get_postgres_connection_pool();
    store::promote_due(pool, now).await?;
    let queues = store::queues_of(pool, &c).await?;
    let rows = store::claim_rows(pool, &c, &queues, limit, now, lease_until, None).await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for row in &rows {
        match store::claimed_job(row) {
            Ok(job) => jobs.push(job),
            Err((u, attempt, run)) => {
                u.log(&c.worker_id);
                let error = u.error();
                let failed = Finished {
                    id: u.id,
                    kind: u.kind,
                    queue: String::new(),
                    attempt,
                    run,
                    outcome: Outcome::Failed { error },
                    keep: Keep::Row,
                };
                remote_finish(db, &c.worker_id, failed).await?;
            }
        }
    }
    Ok(jobs)
}

/// `batch` written by the worker's batched completion statement (see `remote::finish_batch`).
#[cfg(test)]
pub(super) async fn finish_batch(db: &DatabaseConnection, owner: &str, batch: Vec<Finished>) -> Result<Vec<bool>> {
    let pool = db.get_postgres_connection_pool();
    let written =
        store::retrying("writing a batch of outcomes", || store::write_batch(pool, owner, &batch, true, &[])).await?;
    Ok(batch.iter().map(|f| store::applied(&written, f)).collect())
}

/// Lets go the first job of each of the sequences `keys`, as a worker's listener does when a transaction of one
/// snapshot enqueued onto them (see `listener.rs`); how many jobs it let go, and the sequences whose lock another
/// transaction held (the listener tries those again).
#[cfg(test)]
pub(super) async fn release_sequences(db: &DatabaseConnection, keys: &[String]) -> Result<(u64, Vec<String>)> {
    let schema = current_schema(db).await?;
    let mut conn = db.get_postgres_connection_pool().acquire().await.map_err(Error::db("connecting"))?;
    store::release_sequences(&mut conn, &schema, keys).await.map_err(Error::db("letting go sequences"))
}

/// A remote worker's outcome, fenced like the in-process worker's.
pub(super) async fn remote_finish(db: &DatabaseConnection, owner: &str, finished: Finished) -> Result<bool> {
    let pool = db.get_postgres_connection_pool();
    let batch = std::slice::from_ref(&finished);
    let written =
        store::retrying("writing a remote worker's outcome", || store::write_batch(pool, owner, batch, false, &[]))
            .await?;
    let applied = store::applied(&written, &finished);
    super::log_finished(&finished, applied, owner);
    Ok(applied)
}
