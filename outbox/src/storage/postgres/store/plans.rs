//! The worker's statements find their rows by id, however many a statement takes and whatever the table's
//! size: their plans on 30,000 jobs, for batches of hundreds (a worker of high concurrency, a completion batch
//! behind a slow write), read no whole table. The claims and completions run on connections that plan each
//! statement once (`force_generic_plan`, see `PgStore::open`), so their generic plans are held to the same.

use sea_orm::sqlx::{self, Row};
use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::super::wake::{SWEEP, SWEEP_KEYS_LOCK};
use super::EXTEND;
use super::claim::{
    CLAIM_ONE, CLAIM_ONE_AFTER, CLAIM_QUEUES, CLAIM_QUEUES_AFTER, PROMOTE, PROMOTE_PER_CLAIM, QUEUES, RUNNING,
};
use super::complete::{FINISH, FINISH_DISCARDING, FINISH_ONE, FINISH_PLAIN, outcomes};
use super::rescue::{RESCUE, SWEEP_LOCK};
use crate::error::{Error, Result};
use crate::storage::{Dialect, Finished, Keep, Outcome};

/// Jobs in the table, their ids in the order of their rows as time-ordered ids are.
const TABLE: usize = 30_000;
/// Jobs per statement: past about 230 on 20,000 jobs, claims and completions that joined their ids to the
/// table were planned as a hash join over a scan of all of it.
const BATCH: usize = 600;

/// The relations `plan` (`EXPLAIN (FORMAT JSON)`) reads with nodes of type `node` (`Seq Scan`, `Tid Scan`).
fn scans(plan: &serde_json::Value, node: &str, found: &mut Vec<String>) {
    match plan {
        serde_json::Value::Object(n) => {
            if n.get("Node Type").and_then(|t| t.as_str()) == Some(node) {
                found.push(n.get("Relation Name").and_then(|r| r.as_str()).unwrap_or("?").to_owned());
            }
            n.values().for_each(|v| scans(v, node, found));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| scans(v, node, found)),
        _ => {}
    }
}

/// An SQL literal of `s`.
fn text(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// An SQL literal of the text array `items`.
fn texts(items: &[String]) -> String {
    format!("ARRAY[{}]::text[]", items.iter().map(|s| text(s)).collect::<Vec<_>>().join(", "))
}

/// The literals of a finish statement's ids (`$1`) and outcomes (`$2`) for `batch`, and the statement.
fn outcome_literals(batch: &[Finished], batched: bool) -> (String, String, &'static str) {
    let (ids, map, sql) = outcomes(batch, batched);
    (texts(&ids), format!("{}::jsonb", text(&map.to_string())), sql)
}

/// Inserts `n` pending jobs of kind `probe`, their ids in the order of their rows as time-ordered ids are.
async fn insert_jobs(db: &DatabaseConnection, n: usize) -> Result<()> {
    let insert = format!(
        "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, \
         schema_hash, created_at, updated_at) SELECT lpad(to_hex(g), 8, '0') || '-0000-7000-8000-000000000000', \
         'probe', 'default', \
         jsonb_build_object('n', g), 'pending', 0, 0, 3, now(), 'h', now(), now() FROM generate_series(1, {n}) g"
    );
    db.execute_unprepared(&insert).await.map_err(Error::db("inserting jobs"))?;
    Ok(())
}

/// Fails when `sql`, prepared and run with the literals `args`, is planned to scan `outbox_jobs` whole: planned
/// for those values (`generic` false), or once for any (`generic`), as the worker's claimer and writer plan it.
/// The plan.
async fn reads_by_id(
    db: &DatabaseConnection,
    what: &str,
    sql: &str,
    args: &[String],
    generic: bool,
) -> Result<serde_json::Value> {
    let mode = if generic { "force_generic_plan" } else { "force_custom_plan" };
    let what = format!("{what} ({mode})");
    let mut conn = db.get_postgres_connection_pool().acquire().await.map_err(Error::db("connecting"))?;
    let script = format!("SET plan_cache_mode = {mode}; PREPARE planned AS {sql}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(script))
        .execute(&mut *conn)
        .await
        .map_err(Error::db(format!("preparing {what}")))?;
    let explain = format!("EXPLAIN (FORMAT JSON) EXECUTE planned({})", args.join(", "));
    let row = sqlx::query(sqlx::AssertSqlSafe(explain)).fetch_one(&mut *conn).await;
    sqlx::raw_sql("DEALLOCATE planned; RESET plan_cache_mode")
        .execute(&mut *conn)
        .await
        .map_err(Error::db("deallocating"))?;
    let row = row.map_err(Error::db(format!("explaining {what}")))?;
    let plan: serde_json::Value = row.try_get(0).map_err(Error::db(format!("reading the plan of {what}")))?;
    let mut whole = Vec::new();
    scans(&plan, "Seq Scan", &mut whole);
    assert!(!whole.iter().any(|r| r == "outbox_jobs"), "{what} scans the whole jobs table: {plan}");
    Ok(plan)
}

async fn plans_read_rows_by_id(db: &DatabaseConnection) -> Result<()> {
    insert_jobs(db, TABLE).await?;
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
    let now = crate::storage::now_ms();
    let lease = now + 60_000;
    let (now, lease, limit, w) = (now.to_string(), lease.to_string(), BATCH.to_string(), text("w"));
    let kinds = texts(&["probe".to_owned()]);
    let two_kinds = texts(&["probe".to_owned(), "other".to_owned()]);
    let queues = texts(&["default".to_owned()]);
    let two_queues = texts(&["default".to_owned(), "other".to_owned()]);
    let claims = "ARRAY[1, 2]::int8[]".to_owned();
    // A claim of the batch, as the claim statements record one, so the statements that read the claims find it.
    let claim = format!(
        "INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT 'w', now(), array_agg(id) \
         FROM (SELECT id FROM outbox_jobs ORDER BY id LIMIT {BATCH}) b; ANALYZE outbox_claims"
    );
    db.execute_unprepared(&claim).await.map_err(Error::db("recording a claim"))?;

    let batch: Vec<Finished> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| Finished {
            id: id.clone(),
            kind: "probe".into(),
            queue: "default".into(),
            attempt: 1,
            run: 1,
            outcome: Outcome::Completed { output: None },
            keep: [Keep::Row, Keep::Nothing, Keep::Archive][n % 3],
            parent: false,
        })
        .collect();
    let (ids, map, sql) = outcome_literals(&batch, true);
    assert_eq!(sql, FINISH_DISCARDING, "a batch with completions kept nowhere deletes them");
    let (one_id, one_map, _) = outcome_literals(&batch[..1], false);
    let kept: Vec<Finished> = batch.iter().map(|f| Finished { keep: Keep::Row, ..f.clone() }).collect();
    let (plain_ids, plain_map, sql) = outcome_literals(&kept, true);
    assert_eq!(sql, FINISH_PLAIN, "completions without output, all kept");

    // The claimer's and the writer's statements, in both kinds of plan.
    let planned_once = [
        (
            "a claim of one kind from one queue",
            CLAIM_ONE,
            vec![w.clone(), now.clone(), lease.clone(), kinds.clone(), limit.clone(), queues.clone()],
        ),
        (
            "a claim of one kind from one queue, from the cursor",
            CLAIM_ONE_AFTER,
            vec![
                w.clone(),
                now.clone(),
                lease.clone(),
                kinds.clone(),
                limit.clone(),
                queues.clone(),
                "0".into(),
                "0".into(),
                text("0"),
            ],
        ),
        (
            "a claim of several kinds and queues",
            CLAIM_QUEUES,
            vec![w.clone(), now.clone(), lease.clone(), two_kinds.clone(), limit.clone(), two_queues.clone()],
        ),
        (
            "a claim of several kinds and queues, from the cursor",
            CLAIM_QUEUES_AFTER,
            vec![
                w.clone(),
                now.clone(),
                lease.clone(),
                two_kinds.clone(),
                limit.clone(),
                two_queues.clone(),
                "0".into(),
                "0".into(),
                text("0"),
            ],
        ),
        ("letting scheduled jobs in", PROMOTE, vec![now.clone(), PROMOTE_PER_CLAIM.to_string()]),
        ("a completion", FINISH, vec![ids.clone(), map.clone(), now.clone(), w.clone(), claims.clone()]),
        (
            "a completion of plain ones",
            FINISH_PLAIN,
            vec![plain_ids, plain_map, now.clone(), w.clone(), claims.clone()],
        ),
        (
            "a completion that deletes",
            FINISH_DISCARDING,
            vec![ids.clone(), map.clone(), now.clone(), w.clone(), claims.clone()],
        ),
        ("a completion of one job", FINISH_ONE, vec![one_id, one_map, now.clone(), w.clone(), claims]),
    ];
    for (what, sql, args) in &planned_once {
        for generic in [false, true] {
            let plan = reads_by_id(db, what, sql, args, generic).await?;
            // A claim updates the rows it locked where the lock found them, not by a second lookup of each id.
            if what.starts_with("a claim") {
                let mut by_tid = Vec::new();
                scans(&plan, "Tid Scan", &mut by_tid);
                assert_eq!(by_tid, ["outbox_jobs"], "{what} does not update its rows by their ctid: {plan}");
            }
        }
    }
    reads_by_id(db, "a lease renewal", EXTEND, &[lease.clone(), w.clone(), ids], false).await?;
    reads_by_id(db, "a limited kind's running jobs", RUNNING, &[text("probe")], false).await?;
    reads_by_id(db, "the queues of ready jobs", QUEUES, std::slice::from_ref(&kinds), false).await?;
    reads_by_id(db, "a rescue", RESCUE, &[now], false).await?;
    reads_by_id(db, "the sweep's waiting sequences", SWEEP_LOCK, &[text("public")], false).await?;
    reads_by_id(db, "the sweep", SWEEP, &[texts(&["k".to_owned()])], false).await?;
    let keys = [text("public"), texts(&["k".to_owned()])];
    reads_by_id(db, "the release of sequences enqueued onto under a snapshot", SWEEP_KEYS_LOCK, &keys, false).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_of_hundreds_of_jobs_find_them_by_id() {
    let name = "postgres::plans::statements_of_hundreds_of_jobs_find_them_by_id";
    crate::storage::conformance::run(Dialect::Postgres, name, plans_read_rows_by_id).await;
}

/// A claim updates its jobs' rows in place: every row it claims is a heap-only update (no index entry, the row's
/// new version on its own page), as the server counts for the claim's own transaction. Before the indexes read generated columns none
/// were: the ready index read the status and the index of finished jobs `updated_at`, both of which a claim
/// changes. With pages filled to half (`fillfactor = 50`), the last rows of a page whose every job is
/// claimed at once did not fit (261 of 300 here).
async fn claims_update_rows_in_place(db: &DatabaseConnection) -> Result<()> {
    insert_jobs(db, 1_000).await?;
    let now = crate::storage::now_ms();
    let lease = now + 60_000;
    let args = [
        text("w"),
        now.to_string(),
        lease.to_string(),
        texts(&["probe".to_owned()]),
        "300".to_owned(),
        texts(&["default".to_owned()]),
    ];
    let mut conn = db.get_postgres_connection_pool().acquire().await.map_err(Error::db("connecting"))?;
    let script = format!("BEGIN; PREPARE claim AS {CLAIM_ONE}; EXECUTE claim({})", args.join(", "));
    sqlx::raw_sql(sqlx::AssertSqlSafe(script)).execute(&mut *conn).await.map_err(Error::db("claiming"))?;
    let counts = "SELECT pg_stat_get_xact_tuples_updated('outbox_jobs'::regclass), \
         pg_stat_get_xact_tuples_hot_updated('outbox_jobs'::regclass), \
         (SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed')";
    let row = sqlx::query(counts).fetch_one(&mut *conn).await.map_err(Error::db("counting updates"))?;
    sqlx::raw_sql("COMMIT; DEALLOCATE claim").execute(&mut *conn).await.map_err(Error::db("committing"))?;
    let (updated, hot, claimed): (i64, i64, i64) = (
        row.try_get(0).map_err(Error::db("reading"))?,
        row.try_get(1).map_err(Error::db("reading"))?,
        row.try_get(2).map_err(Error::db("reading"))?,
    );
    assert_eq!((claimed, updated), (300, 300), "the claim took 300 jobs");
    assert_eq!(hot, updated, "{hot} of the claim's {updated} row updates were heap-only");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_update_their_rows_in_place() {
    let name = "postgres::plans::claims_update_their_rows_in_place";
    crate::storage::conformance::run(Dialect::Postgres, name, claims_update_rows_in_place).await;
}
