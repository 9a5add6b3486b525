//! The Anthropic API backend end to end: jobs run by a real worker against a real HTTP server on 127.0.0.1,
//! one answered, one refused with 401. The canary key must not reach the database, the files or the errors.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::fixture;
use common::http::{Server, reply};
use common::{Backend, TestDb, conformance, env, job, output};
use outbox::{EnqueueOpts, JobStatus};
use outbox_fs::ClaudeExtraction;
use outbox_fs::extract::{AnthropicApi, ApiKey, ApiOpts};

const CANARY: &str = "sk-ant-canary-pipeline-9f8e7d6c5b4a";

/// Every file under `dir`, as bytes (the database, its WAL, the answers and sidecars).
fn all_bytes(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            all_bytes(&path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path.display().to_string(), bytes));
        }
    }
}

conformance!(the_api_key_never_reaches_the_database_files_or_errors, mysql);
async fn the_api_key_never_reaches_the_database_files_or_errors(t: TestDb) {
    let env = env(t);
    let server =
        Server::start(vec![reply(200, fixture("api_message.json")), reply(401, fixture("api_error_401.json"))]).await;
    let mut opts = ApiOpts::new("claude-sonnet-4-5").with_key(ApiKey::new(CANARY));
    opts.base_url = server.base.clone();
    opts.retries = 0;
    let api = Arc::new(AnthropicApi::new(opts).expect("client"));

    let answered = ClaudeExtraction::new("Extract requirement R-1.", "answers/r1.md", "R-1");
    let refused = ClaudeExtraction::new("Extract requirement R-2.", "answers/r2.md", "R-2");
    let a = outbox::enqueue(&env.db, &answered, EnqueueOpts::new()).await.expect("enqueue");
    // One after the other, so the scripted replies meet the jobs in order.
    let b = outbox::enqueue(&env.db, &refused, EnqueueOpts::new().delay(Duration::from_millis(300)))
        .await
        .expect("enqueue");
    let builder = outbox::Worker::builder(&env.db).concurrency(1).poll_interval(Duration::from_millis(20));
    let worker = outbox_fs::register_handlers(builder, &env.root, Some(api)).build().await.expect("build").start();
    let settled = common::eventually(Duration::from_secs(20), || async {
        job(&env.db, b.id()).await.status.is_terminal() && job(&env.db, a.id()).await.status.is_terminal()
    })
    .await;
    worker.shutdown().await.expect("shutdown");
    assert!(settled, "the jobs did not finish");

    let done = job(&env.db, a.id()).await;
    assert_eq!(done.status, JobStatus::Completed);
    assert!(output(&done)["model"].is_string(), "{:?}", done.output);
    let failed = job(&env.db, b.id()).await;
    assert_eq!(failed.status, JobStatus::Failed);
    let error = failed.last_error.expect("error");
    assert!(error.contains("401") && error.contains("authentication_error"), "{error}");
    // The key went to the server on both requests...
    assert!(server.seen().iter().all(|s| s.header("x-api-key") == Some(CANARY)));
    // ...and nowhere else: not in any row, history, answer, sidecar, database page or WAL frame.
    let mut files = Vec::new();
    all_bytes(env.t.dir.path(), &mut files);
    match env.backend {
        // The database is a file in the temp dir, searched page by page with the rest.
        Backend::Sqlite => assert!(files.iter().any(|(name, _)| name.ends_with("outbox.db"))),
        // The database is on a server: search every row of every table in the test's schema instead, after
        // making sure that search finds what the rows do hold.
        Backend::MySql => {
            assert!(mysql_tables_holding(&env.db, "R-2").await > 0, "the search sees the rows");
            assert_eq!(mysql_tables_holding(&env.db, CANARY).await, 0, "the api key leaked into the database");
        }
        Backend::Postgres => {
            assert!(tables_holding(&env.db, "R-2").await > 0, "the search sees the rows");
            assert_eq!(tables_holding(&env.db, CANARY).await, 0, "the api key leaked into the database");
        }
    }
    for (name, bytes) in files {
        let hit = bytes.windows(CANARY.len()).any(|w| w == CANARY.as_bytes());
        assert!(!hit, "the api key leaked into {name}");
    }
}

/// PostgreSQL: how many tables of the current schema hold `needle` anywhere in their rows.
async fn tables_holding(db: &sea_orm::DatabaseConnection, needle: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.tables t WHERE t.table_schema = current_schema() \
         AND query_to_xml(format('SELECT * FROM %I.%I', t.table_schema, t.table_name), true, false, '')::text \
         LIKE '%{needle}%'"
    );
    outbox_tests::scalar(db, &sql).await
}

/// MariaDB: how many tables of the test's database hold `needle` anywhere in their rows, every column read as text.
async fn mysql_tables_holding(db: &sea_orm::DatabaseConnection, needle: &str) -> i64 {
    use sea_orm::ConnectionTrait;
    let sql = "SELECT table_name, GROUP_CONCAT(CONCAT('CONVERT(`', column_name, '` USING utf8mb4)')) \
               FROM information_schema.columns \
               WHERE table_schema = DATABASE() GROUP BY table_name";
    let tables = db
        .query_all_raw(sea_orm::Statement::from_string(db.get_database_backend(), sql))
        .await
        .expect("the tables and their columns");
    let mut holding = 0;
    for row in tables {
        let (table, columns): (String, String) =
            (row.try_get_by_index(0).expect("a table"), row.try_get_by_index(1).expect("its columns"));
        let sql = format!("SELECT COUNT(*) FROM `{table}` WHERE CONCAT_WS('|', {columns}) LIKE '%{needle}%'");
        if outbox_tests::scalar(db, &sql).await > 0 {
            holding += 1;
        }
    }
    holding
}
