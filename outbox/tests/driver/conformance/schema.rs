//! Conformance of `storage/schema.rs`: the current schema of each engine (`schema.sql`) is what its migrations
//! make, catalog for catalog; a database the dated migrations of earlier builds made is taken over with its jobs,
//! one they made only in part is refused and left as it was, and one made before them is refused.

use sea_orm::{ConnectionTrait, DatabaseConnection};
use sea_orm_migration::MigratorTrait;

use super::{T0, fresh, get};
use crate::error::{Error, Result};
use crate::storage::engine::Engine;
use crate::storage::schema::{self, DATED};
use crate::storage::{Dialect, on_engine};

driver_tests!(
    refuse_legacy_refuses_an_old_schema,
    schema_file_is_what_the_migrations_make,
    a_database_the_dated_migrations_made_is_taken_over_with_its_jobs,
    a_database_the_dated_migrations_made_in_part_is_refused_and_left_as_it_was;
    // No build before `001_schema` ran on MySQL: there is no dated database to take over.
    mysql: refuse_legacy_refuses_an_old_schema, schema_file_is_what_the_migrations_make,
);

async fn refuse_legacy_refuses_an_old_schema(db: &DatabaseConnection) -> Result<()> {
    schema::refuse_legacy(db).await?;
    let b = Dialect::of(db)?;
    let legacy =
        "INSERT INTO outbox_migrations (version, applied_at) VALUES ('m20261122_000001_create_outbox_jobs', 0)";
    db.execute_raw(b.stmt(legacy, vec![])).await?;
    let err = schema::refuse_legacy(db).await;
    assert!(matches!(&err, Err(Error::Unsupported(m)) if m.contains("outbox migrate")), "{err:?}");
    Ok(())
}

/// The thirteen dated migrations' statements on `d`'s engine, in order (`tests/fixtures/dated/`; the last six
/// changed PostgreSQL only).
fn dated_statements(d: Dialect) -> &'static str {
    match d {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => concat!(
            include_str!("../../fixtures/dated/sqlite/schema.sql"),
            include_str!("../../fixtures/dated/sqlite/ready.sql"),
            include_str!("../../fixtures/dated/sqlite/keep.sql"),
            include_str!("../../fixtures/dated/sqlite/fewer_writes.sql"),
            include_str!("../../fixtures/dated/sqlite/active_keys.sql"),
            include_str!("../../fixtures/dated/sqlite/columns_last.sql"),
            include_str!("../../fixtures/dated/sqlite/archive.sql"),
        ),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => concat!(
            include_str!("../../fixtures/dated/postgres/schema.sql"),
            include_str!("../../fixtures/dated/postgres/ready.sql"),
            include_str!("../../fixtures/dated/postgres/keep.sql"),
            include_str!("../../fixtures/dated/postgres/fewer_writes.sql"),
            include_str!("../../fixtures/dated/postgres/active_keys.sql"),
            include_str!("../../fixtures/dated/postgres/columns_last.sql"),
            include_str!("../../fixtures/dated/postgres/archive.sql"),
            include_str!("../../fixtures/dated/postgres/claims.sql"),
            include_str!("../../fixtures/dated/postgres/one_ready_index.sql"),
            include_str!("../../fixtures/dated/postgres/hot_claim.sql"),
            include_str!("../../fixtures/dated/postgres/room_for_both.sql"),
            include_str!("../../fixtures/dated/postgres/finished_log.sql"),
            include_str!("../../fixtures/dated/postgres/snapshot_enqueue.sql"),
        ),
        #[cfg(feature = "mysql")]
        Dialect::MySql => unreachable!("no build before `001_schema` ran on MySQL"),
    }
}

/// A fresh database of `d`'s engine with what an earlier build's `outbox migrate` left after applying the first
/// `steps` dated migrations: all their statements (the fixture is the whole series: only the records say how far
/// it got) and their records.
async fn dated_database(d: Dialect, test: &str, steps: usize) -> Option<(DatabaseConnection, Box<dyn std::any::Any>)> {
    let (db, owned) = fresh(d, test).await?;
    db.execute_unprepared(dated_statements(d)).await.expect("the dated migrations apply");
    crate::Migrator::install(&db).await.expect("the migrations table");
    for name in &DATED[..steps] {
        let sql = "INSERT INTO outbox_migrations (version, applied_at) VALUES ($1, 0)";
        db.execute_raw(d.stmt(sql, vec![(*name).into()])).await.expect("a dated migration's record");
    }
    Some((db, owned))
}

async fn schema_file_is_what_the_migrations_make(db: &DatabaseConnection) -> Result<()> {
    let d = Dialect::of(db)?;
    let Some((file, _owned)) = fresh(d, "schema file").await else { return Ok(()) };
    file.execute_unprepared(on_engine!(d, E => E::SCHEMA)).await?;
    let (migrated, written) = (catalog(db).await?, catalog(&file).await?);
    assert!(migrated.len() > 40, "the catalog read too little: {migrated:#?}");
    assert_same(&migrated, &written, "what the migrations make", "schema.sql");
    file.close().await?;
    Ok(())
}

async fn a_database_the_dated_migrations_made_is_taken_over_with_its_jobs(db: &DatabaseConnection) -> Result<()> {
    let d = Dialect::of(db)?;
    let Some((old, _owned)) = dated_database(d, "dated", DATED.len()).await else { return Ok(()) };
    // Written as the dated schema's columns take it: this build's enqueue writes the columns of `002_flow` and
    // `003_subject`.
    let insert = format!(
        "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, \
         schema_hash, created_at, updated_at) VALUES ('kept', 'k', 'default', {}, 'pending', 0, 0, 3, {t}, 'hash', {t}, {t})",
        d.json("$1"),
        t = d.ts("$2"),
    );
    old.execute_raw(d.stmt(insert, vec![r#"{"n":1}"#.into(), T0.into()])).await?;
    assert_eq!(
        crate::pending_migrations(&old).await?,
        ["001_schema", "002_flow", "003_subject", "004_workflow"],
        "taking over, then this build's migrations"
    );
    crate::migrate(&old).await?;
    let records = old.query_all_raw(d.stmt("SELECT version FROM outbox_migrations ORDER BY 1", vec![])).await?;
    let records: Vec<String> = records.iter().map(|r| r.try_get_by_index(0)).collect::<std::result::Result<_, _>>()?;
    assert_eq!(records, ["001_schema", "002_flow", "003_subject", "004_workflow"]);
    assert!(crate::pending_migrations(&old).await?.is_empty());
    assert_same(&catalog(db).await?, &catalog(&old).await?, "a new database", "a database taken over");
    assert_eq!(get(&old, "kept").await?.status.as_str(), "pending", "the job enqueued before stays");
    // Migrated again: nothing to do.
    crate::migrate(&old).await?;
    // A dated record left beside `001_schema` (a take-over cut short by hand) is stale: deleted, nothing applied.
    let stale = "INSERT INTO outbox_migrations (version, applied_at) VALUES ($1, 0)";
    old.execute_raw(d.stmt(stale, vec![DATED[3].into()])).await?;
    assert!(crate::pending_migrations(&old).await?.is_empty(), "a stale record leaves nothing to apply");
    crate::migrate(&old).await?;
    let records = old.query_all_raw(d.stmt("SELECT version FROM outbox_migrations ORDER BY 1", vec![])).await?;
    let records: Vec<String> = records.iter().map(|r| r.try_get_by_index(0)).collect::<std::result::Result<_, _>>()?;
    assert_eq!(records, ["001_schema", "002_flow", "003_subject", "004_workflow"], "the stale record is gone");
    old.close().await?;
    Ok(())
}

async fn a_database_the_dated_migrations_made_in_part_is_refused_and_left_as_it_was(
    db: &DatabaseConnection,
) -> Result<()> {
    let d = Dialect::of(db)?;
    let Some((old, _owned)) = dated_database(d, "dated in part", 12).await else { return Ok(()) };
    let before = catalog(&old).await?;
    for (what, err) in
        [("migrate", crate::migrate(&old).await), ("pending", crate::pending_migrations(&old).await.map(drop))]
    {
        let Err(Error::Unsupported(message)) = err else { panic!("{what}: {err:?}") };
        assert!(message.contains("up to `m20261209_000012_finished_log`"), "{what}: {message}");
        assert!(message.contains("missing: m20261210_000013_snapshot_enqueue"), "{what}: {message}");
    }
    let records = old.query_all_raw(d.stmt("SELECT COUNT(*) FROM outbox_migrations", vec![])).await?;
    assert_eq!(records[0].try_get_by_index::<i64>(0)?, 12, "the records were left as they were");
    assert_same(&before, &catalog(&old).await?, "before", "after the refusals");
    old.close().await?;
    Ok(())
}

/// Fails with the lines that differ when `a` and `b` are not the same catalog.
fn assert_same(a: &[String], b: &[String], a_name: &str, b_name: &str) {
    if a == b {
        return;
    }
    let only_a: Vec<&String> = a.iter().filter(|l| !b.contains(l)).collect();
    let only_b: Vec<&String> = b.iter().filter(|l| !a.contains(l)).collect();
    panic!(
        "the catalogs differ\nonly in {a_name}:\n{}\nonly in {b_name}:\n{}\n(or in order: {} lines against {})",
        only_a.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
        only_b.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
        a.len(),
        b.len()
    );
}

/// The outbox catalog of `db`'s database (its migrations table left out), one line per relation, column (in
/// order), constraint, index, trigger, function and view, each as the database itself writes it back.
async fn catalog(db: &DatabaseConnection) -> Result<Vec<String>> {
    match Dialect::of(db)? {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => sqlite_catalog(db).await,
        #[cfg(feature = "postgres")]
        Dialect::Postgres => postgres_catalog(db).await,
        #[cfg(feature = "mysql")]
        Dialect::MySql => mysql_catalog(db).await,
    }
}

/// MySQL's catalog of the connection's database, as [`catalog`] describes it, from `information_schema` (the
/// database's own name, which views and triggers may spell, written `<db>`).
#[cfg(feature = "mysql")]
async fn mysql_catalog(db: &DatabaseConnection) -> Result<Vec<String>> {
    let d = Dialect::MySql;
    let queries: &[&str] = &[
        "SELECT CONCAT_WS(' ', 'table', TABLE_NAME, TABLE_TYPE, COALESCE(ENGINE, ''), COALESCE(TABLE_COLLATION, ''), \
             COALESCE(CREATE_OPTIONS, '')) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'outbox_migrations' ORDER BY 1",
        "SELECT CONCAT_WS(' ', 'column', TABLE_NAME, ORDINAL_POSITION, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, \
             COALESCE(COLUMN_DEFAULT, '-'), EXTRA, COALESCE(GENERATION_EXPRESSION, '-'), \
             COALESCE(CHARACTER_SET_NAME, '-'), COALESCE(COLLATION_NAME, '-')) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'outbox_migrations' \
             ORDER BY TABLE_NAME, ORDINAL_POSITION",
        "SELECT CONCAT_WS(' ', 'index', TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME, \
             COALESCE(COLLATION, '-'), COALESCE(SUB_PART, '-'), INDEX_TYPE) FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'outbox_migrations' ORDER BY 1",
        "SELECT CONCAT_WS(' ', 'check', TABLE_NAME, CONSTRAINT_NAME, CHECK_CLAUSE) \
             FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE() ORDER BY 1",
        "SELECT CONCAT_WS(' ', 'trigger', TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION, EVENT_OBJECT_TABLE, \
             ACTION_ORDER, SQL_MODE, REPLACE(ACTION_STATEMENT, DATABASE(), '<db>')) \
             FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() ORDER BY 1",
        "SELECT CONCAT_WS(' ', 'view', TABLE_NAME, REPLACE(VIEW_DEFINITION, DATABASE(), '<db>')) \
             FROM information_schema.VIEWS WHERE TABLE_SCHEMA = DATABASE() ORDER BY 1",
        "SELECT CONCAT_WS(' ', 'routine', ROUTINE_NAME, ROUTINE_TYPE, DTD_IDENTIFIER, SQL_DATA_ACCESS, \
             IS_DETERMINISTIC, SQL_MODE, REPLACE(ROUTINE_DEFINITION, DATABASE(), '<db>')) \
             FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() ORDER BY 1",
        "SELECT CONCAT_WS(' ', 'partition', TABLE_NAME, PARTITION_NAME, PARTITION_METHOD, PARTITION_EXPRESSION, \
             PARTITION_DESCRIPTION) FROM information_schema.PARTITIONS \
             WHERE TABLE_SCHEMA = DATABASE() AND PARTITION_NAME IS NOT NULL ORDER BY 1",
    ];
    let mut lines = Vec::new();
    for sql in queries {
        for row in db.query_all_raw(d.stmt(*sql, vec![])).await? {
            lines.push(row.try_get_by_index::<String>(0)?);
        }
    }
    Ok(lines)
}

/// PostgreSQL's catalog of the connection's schema, as [`catalog`] describes it.
#[cfg(feature = "postgres")]
async fn postgres_catalog(db: &DatabaseConnection) -> Result<Vec<String>> {
    let d = Dialect::Postgres;
    let queries: &[&str] = &[
        "SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' \
             || coalesce(array_to_string(c.reloptions, ','), '') || ' ' || coalesce(pg_get_partkeydef(c.oid), '') \
             || ' ' || coalesce(pg_get_expr(c.relpartbound, c.oid), '') FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() \
             AND c.relkind IN ('r', 'p', 'v', 'S') AND c.relname <> 'outbox_migrations' ORDER BY 1",
        "SELECT 'column ' || c.relname || ' ' || a.attnum || ' ' || a.attname || ' ' \
             || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' \
             || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || a.attgenerated::text || ' ' \
             || a.attidentity::text || ' ' || coalesce((SELECT collname FROM pg_collation WHERE oid = a.attcollation), '') \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v') AND a.attnum > 0 \
             AND NOT a.attisdropped AND c.relname <> 'outbox_migrations' ORDER BY c.relname, a.attnum",
        "SELECT 'constraint ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid) \
             FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relname <> 'outbox_migrations' AND k.contype <> 'n' ORDER BY 1",
        "SELECT 'index ' || replace(pg_get_indexdef(i.indexrelid), current_schema() || '.', '') FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relname <> 'outbox_migrations' ORDER BY 1",
        "SELECT 'trigger ' || replace(pg_get_triggerdef(t.oid), current_schema() || '.', '') FROM pg_trigger t \
             JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND NOT t.tgisinternal ORDER BY 1",
        "SELECT 'function ' || replace(pg_get_functiondef(p.oid), current_schema() || '.', '') FROM pg_proc p \
             JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema() ORDER BY 1",
        "SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'v' \
             ORDER BY 1",
    ];
    let mut lines = Vec::new();
    for sql in queries {
        for row in db.query_all_raw(d.stmt(*sql, vec![])).await? {
            lines.push(row.try_get_by_index::<String>(0)?);
        }
    }
    Ok(lines)
}

/// SQLite keeps each object's statement as written (a column added later is spliced into its table's): a table
/// is read as its columns in order (`table_xinfo`) and the set of its definition's parts, everything else as its
/// statement, comments and spacing aside.
#[cfg(feature = "sqlite")]
async fn sqlite_catalog(db: &DatabaseConnection) -> Result<Vec<String>> {
    let d = Dialect::Sqlite;
    let objects = "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
                   AND name <> 'outbox_migrations' ORDER BY type, name";
    let mut lines = Vec::new();
    for row in db.query_all_raw(d.stmt(objects, vec![])).await? {
        let (kind, name): (String, String) = (row.try_get_by_index(0)?, row.try_get_by_index(1)?);
        let sql: Option<String> = row.try_get_by_index(2)?;
        let sql = strip(&sql.unwrap_or_default());
        if kind != "table" {
            lines.push(format!("{kind} {name} {}", spaced(&sql)));
            continue;
        }
        let info =
            format!("SELECT cid, name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo('{name}')");
        for c in db.query_all_raw(d.stmt(info, vec![])).await? {
            let (cid, column, ty): (i64, String, String) =
                (c.try_get_by_index(0)?, c.try_get_by_index(1)?, c.try_get_by_index(2)?);
            let (not_null, default): (i64, Option<String>) = (c.try_get_by_index(3)?, c.try_get_by_index(4)?);
            let (pk, hidden): (i64, i64) = (c.try_get_by_index(5)?, c.try_get_by_index(6)?);
            lines.push(format!("column {name} {cid} {column} {ty} {not_null} {default:?} {pk} {hidden}"));
        }
        let (open, close) = (sql.find('(').map_or(0, |i| i + 1), sql.rfind(')').unwrap_or(sql.len()));
        let body = sql.get(open..close).unwrap_or("");
        let mut parts = split_top(body).into_iter().map(|p| spaced(&p)).collect::<Vec<_>>();
        parts.sort();
        // What follows the definition (`STRICT`, `WITHOUT ROWID`) is the table's too.
        let options = spaced(sql.get(close + 1..).unwrap_or(""));
        lines.push(format!("table {name} {} {options}", parts.join(" | ")));
    }
    Ok(lines)
}

/// `sql` without its `--` comments.
#[cfg(feature = "sqlite")]
fn strip(sql: &str) -> String {
    sql.lines().map(|l| l.split_once("--").map_or(l, |(code, _)| code)).collect::<Vec<_>>().join("\n")
}

/// `sql` with every run of white space one space.
#[cfg(feature = "sqlite")]
fn spaced(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The parts of a table definition's body, split at its top-level commas.
#[cfg(feature = "sqlite")]
fn split_top(body: &str) -> Vec<String> {
    let (mut parts, mut depth, mut part) = (Vec::new(), 0, String::new());
    for c in body.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut part));
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
    parts.push(part);
    parts
}

/// MySQL alone: the nesting its engine refuses before any SQL is where the server's `JSON` check starts refusing
/// (31 levels are stored, 32 are not), and the refusal names the first value too deep.
#[cfg(feature = "mysql")]
mod mysql_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_nesting_refused_before_sql_is_the_server_s_limit() {
        let name = "mysql::the_nesting_refused_before_sql_is_the_server_s_limit";
        super::super::run(super::Dialect::MySql, name, super::nesting_limit).await;
    }
}

#[cfg(feature = "mysql")]
async fn nesting_limit(db: &DatabaseConnection) -> Result<()> {
    let d = Dialect::MySql;
    for depth in [30, 31, 32, 33] {
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let payload: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let refused = crate::storage::unstorable(d, &payload, &text);
        let insert = "INSERT INTO outbox_jobs (id, kind, queue, payload, schema_hash, created_at, run_at, updated_at) \
                      VALUES ($1, 'k', 'default', $2, 'h', 0, 0, 0)";
        let stored = db.execute_raw(d.stmt(insert, vec![format!("nested-{depth}").into(), text.into()])).await;
        assert_eq!(refused.is_empty(), stored.is_ok(), "depth {depth}: refused {refused:?}, stored {stored:?}");
        assert_eq!(refused.is_empty(), depth <= 31, "depth {depth}");
    }
    let deep = format!(r#"{{"a": [1, {{"b": {}{}}}]}}"#, "[".repeat(30), "]".repeat(30));
    let payload: serde_json::Value = serde_json::from_str(&deep).expect("JSON");
    let refused = crate::storage::unstorable(d, &payload, &deep);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].path, format!("/a/1/b{}", "/0".repeat(28)), "the first array past 31 levels");
    Ok(())
}

/// MySQL alone: DDL commits each statement, so a migration cut short is completed by running it again. The schema
/// run again over a migrated database with a job in it changes nothing and keeps the job.
#[cfg(feature = "mysql")]
mod mysql_again {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_schema_run_again_changes_nothing() {
        let name = "mysql::the_schema_run_again_changes_nothing";
        super::super::run(super::Dialect::MySql, name, super::run_again).await;
    }
}

#[cfg(feature = "mysql")]
async fn run_again(db: &DatabaseConnection) -> Result<()> {
    let d = Dialect::MySql;
    let insert = "INSERT INTO outbox_jobs (id, kind, queue, payload, schema_hash, created_at, run_at, updated_at) \
                  VALUES ('kept', 'k', 'default', '{}', 'h', 0, 0, 0)";
    db.execute_raw(d.stmt(insert, vec![])).await?;
    let before = catalog(db).await?;
    assert!(before.len() > 40, "the catalog read too little: {before:#?}");
    db.execute_unprepared(on_engine!(d, E => E::SCHEMA)).await?;
    assert_same(&before, &catalog(db).await?, "migrated", "run again");
    assert_eq!(get(db, "kept").await?.status.as_str(), "pending", "the job stays");
    Ok(())
}
