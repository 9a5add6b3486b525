//! The worker's statements find their rows by id, however many a statement takes and whatever the table's
//! size: their plans on 30,000 jobs, for batches of hundreds (a worker of high concurrency, a completion batch
//! behind a slow write), read no whole table.

use sea_orm::sqlx::{self, Row};
use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::claim::{CLAIM_ANY_QUEUE, CLAIM_ONE_KIND, CLAIM_QUEUES, PROMOTE, PROMOTE_PER_CLAIM};
use super::complete::{FINISH, FINISH_DISCARDING, outcomes};
use super::{EXTEND, RESCUE};
use crate::error::{Error, Result};
use crate::storage::{Backend, Finished, Outcome};

/// Jobs in the table, their ids in the order of their rows as time-ordered ids are (UUIDv7).
const TABLE: usize = 30_000;
/// Jobs per statement: past about 230 on 20,000 jobs, claims and completions that joined their ids to the
/// table were planned as a hash join over a scan of all of it.
const BATCH: usize = 600;

/// The table scans of `plan` (`EXPLAIN (FORMAT JSON)`), by relation.
fn table_scans(plan: &serde_json::Value, found: &mut Vec<String>) {
    match plan {
        serde_json::Value::Object(node) => {
            if node.get("Node Type").and_then(|t| t.as_str()) == Some("Seq Scan") {
                found.push(node.get("Relation Name").and_then(|r| r.as_str()).unwrap_or("?").to_owned());
            }
            node.values().for_each(|v| table_scans(v, found));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| table_scans(v, found)),
        _ => {}
    }
}

/// Fails when the plan of `query` scans `outbox_jobs` whole.
async fn reads_by_id(
    db: &DatabaseConnection,
    what: &str,
    query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<()> {
    let row =
        query.fetch_one(db.get_postgres_connection_pool()).await.map_err(Error::db(format!("explaining {what}")))?;
    let plan: serde_json::Value = row.try_get(0).map_err(Error::db(format!("reading the plan of {what}")))?;
    let mut scans = Vec::new();
    table_scans(&plan, &mut scans);
    assert!(!scans.iter().any(|r| r == "outbox_jobs"), "{what} scans the whole jobs table: {plan}");
    Ok(())
}

/// `sql` under `EXPLAIN`, as the driver takes statements (`'static`; a test's few are leaked).
fn explain(sql: &str) -> &'static str {
    Box::leak(format!("EXPLAIN (FORMAT JSON) {sql}").into_boxed_str())
}

async fn plans_read_rows_by_id(db: &DatabaseConnection) -> Result<()> {
    let insert = format!(
        "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, \
         schema_hash, created_at, updated_at) SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000000', \
         'probe', 'default', \
         jsonb_build_object('n', g), 'pending', 0, 0, 3, now(), 'h', now(), now() FROM generate_series(1, {TABLE}) g"
    );
    db.execute_unprepared(&insert).await.map_err(Error::db("inserting jobs"))?;
    db.execute_unprepared("ANALYZE outbox_jobs").await.map_err(Error::db("analyzing"))?;
    let rows = db
        .query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            format!("SELECT id FROM outbox_jobs ORDER BY id LIMIT {BATCH}"),
        ))
        .await
        .map_err(Error::db("reading ids"))?;
    let ids: Vec<String> = rows
        .iter()
        .map(|r| r.try_get_by_index(0))
        .collect::<std::result::Result<_, _>>()
        .map_err(Error::db("reading ids"))?;
    let (now, lease, limit) = (crate::storage::now_ms(), crate::storage::now_ms() + 60_000, BATCH as i64);
    let kinds = vec!["probe".to_owned()];

    let claim = explain(CLAIM_ONE_KIND);
    let q = sqlx::query(claim).bind("w").bind(now).bind(lease).bind(&kinds).bind(limit);
    reads_by_id(db, "a claim of one kind", q).await?;
    let claim = explain(CLAIM_ANY_QUEUE);
    let q = sqlx::query(claim).bind("w").bind(now).bind(lease).bind(&kinds).bind(limit);
    reads_by_id(db, "a claim of several kinds", q).await?;
    let claim = explain(CLAIM_QUEUES);
    let queues = vec!["default".to_owned()];
    let q = sqlx::query(claim).bind("w").bind(now).bind(lease).bind(&kinds).bind(limit).bind(&queues);
    reads_by_id(db, "a claim of some queues", q).await?;

    let batch: Vec<Finished> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| Finished {
            id: id.clone(),
            kind: "probe".into(),
            queue: "default".into(),
            attempt: 1,
            outcome: Outcome::Completed { output: None },
            discard: n % 2 == 0,
        })
        .collect();
    let (ids, map, _) = outcomes(&batch);
    for (what, sql) in [("a completion", FINISH), ("a completion that deletes", FINISH_DISCARDING)] {
        let finish = explain(sql);
        let q = sqlx::query(finish).bind(&ids).bind(&map).bind(now).bind("w");
        reads_by_id(db, what, q).await?;
    }
    let extend = explain(EXTEND);
    reads_by_id(db, "a lease renewal", sqlx::query(extend).bind(lease).bind("w").bind(&ids)).await?;
    let rescue = explain(RESCUE);
    reads_by_id(db, "a rescue", sqlx::query(rescue).bind(now)).await?;
    let promote = explain(PROMOTE);
    reads_by_id(db, "letting scheduled jobs in", sqlx::query(promote).bind(now).bind(PROMOTE_PER_CLAIM)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_of_hundreds_of_jobs_find_them_by_id() {
    let name = "postgres::plans::statements_of_hundreds_of_jobs_find_them_by_id";
    crate::storage::conformance::run(Backend::Postgres, name, plans_read_rows_by_id).await;
}
