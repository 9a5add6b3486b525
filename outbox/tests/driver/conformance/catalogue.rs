//! The catalogue of the statements each engine issues, `storage/<engine>/statements.sql`, held equal to the code:
//! every operation of the storage files is run here once per variant on a fresh database, and the statements it
//! sent are recorded as sea-orm saw them; the worker's own connections, which send their statements past sea-orm,
//! add the statements their store lists ([`Engine::statements`]). The test fails when the rendering and the
//! checked-in file differ; `OUTBOX_BLESS=1` writes the rendering over the file instead, to be read in review.

use std::sync::{Arc, Mutex};

use sea_orm::DatabaseConnection;

use super::{T0, fresh, job, keyed, mark_claimed, mark_completed, mark_failed, sequenced};
use crate::error::Result;
use crate::record::{JobFilter, JobStatus};
use crate::storage::engine::Engine;
use crate::storage::{
    Dialect, archive, enqueue, events, jobs, kinds, locks, on_engine, reconciliations, remote, retention, scan,
    schedules, stats, workers,
};

driver_tests!(every_statement_is_in_the_engine_s_catalogue);

/// The statements sea-orm sent since the last take.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    fn take(&self) -> Vec<String> {
        let mut seen = std::mem::take(&mut *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        seen.dedup();
        seen
    }
}

/// The rendering: sections of statements, each under the name of what sent it.
struct Catalogue {
    text: String,
    recorder: Recorder,
}

impl Catalogue {
    /// The statements recorded since the last section, under `name`; none is a mistake of this test.
    fn section(&mut self, name: &str) {
        let statements = self.recorder.take();
        assert!(!statements.is_empty(), "`{name}` sent no statement");
        self.write(name, statements.iter().map(String::as_str));
    }

    fn write<'a>(&mut self, name: &str, statements: impl Iterator<Item = &'a str>) {
        self.text.push_str(&format!("\n-- {name}\n"));
        for sql in statements {
            self.text.push_str(&pretty(sql));
            self.text.push_str(";\n");
        }
    }
}

async fn every_statement_is_in_the_engine_s_catalogue(db: &DatabaseConnection) -> Result<()> {
    let d = Dialect::of(db)?;
    let Some((mut db, _owned)) = fresh(d, "catalogue").await else { return Ok(()) };
    crate::migrate(&db).await?;
    let recorder = Recorder::default();
    let sink = recorder.clone();
    db.set_metric_callback(move |info| {
        sink.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(info.statement.sql.clone());
    });
    let db = &db;
    let mut c = Catalogue { text: String::new(), recorder };
    let name = match d {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => "SQLite",
        #[cfg(feature = "postgres")]
        Dialect::Postgres => "PostgreSQL",
        #[cfg(feature = "mysql")]
        Dialect::MySql => "MySQL",
    };
    c.text.push_str(&format!(
        "-- Every statement outbox sends to {name}, rendered by the conformance suite's `catalogue.rs` (run it with\n\
         -- OUTBOX_BLESS=1 to write this file again). Sections name the operation and its variant; a batch shows two\n\
         -- rows where it repeats one per job. The worker's own statements are at the end.\n"
    ));

    // Enqueue (`enqueue.rs`).
    enqueue::insert_job(db, &job("a")).await?;
    c.section("enqueue: one job");
    enqueue::insert_job(db, &keyed("k1", "key")).await?;
    c.section("enqueue: one job with an idempotency key");
    enqueue::insert_jobs(db, &[job("b1"), job("b2")]).await?;
    c.section("enqueue: a batch");
    enqueue::insert_jobs(db, &[keyed("b3", "k3"), keyed("b4", "k4")]).await?;
    c.section("enqueue: a batch with idempotency keys");
    enqueue::insert_jobs(db, &[sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    c.section("enqueue: a batch of sequenced jobs");
    enqueue::insert_jobs(db, &[keyed("b5", "key"), job("b6")]).await?;
    c.section("enqueue: a batch a duplicate key cut short (the rows read back)");
    enqueue::find_twin(db, "k", "key", None).await?;
    c.section("enqueue: the active job holding a key");
    enqueue::supersede(db, "s1").await?;
    c.section("enqueue: a job superseded by later jobs of its sequence");

    // Jobs (`jobs.rs`).
    jobs::get(db, "a").await?;
    c.section("jobs: one job");
    jobs::list(db, &JobFilter::default()).await?;
    c.section("jobs: a list");
    let filter = JobFilter {
        status: Some(JobStatus::Pending),
        kind: Some("k".into()),
        queue: Some("default".into()),
        sequence: Some("s".into()),
        limit: 10,
        ..Default::default()
    };
    jobs::list(db, &filter).await?;
    c.section("jobs: a list by status, kind, queue and sequence");
    let filter = JobFilter {
        since: Some(crate::time::from_ms(T0)),
        key: Some("key".into()),
        before: Some("b9".into()),
        limit: 10,
        ..Default::default()
    };
    jobs::list(db, &filter).await?;
    c.section("jobs: a page of a list by key, finished since a time");
    mark_claimed(db, "b1", T0, T0 + 1_000).await?;
    mark_completed(db, "b2", T0 + 1).await?;
    mark_failed(db, "b3", "boom", T0 + 2).await?;
    c.recorder.take();
    jobs::stuck(db, T0 + 5_000).await?;
    c.section("jobs: stuck claims");
    jobs::retry(db, "b3", T0 + 3).await?;
    c.section("jobs: retry one");
    mark_failed(db, "b3", "boom", T0 + 4).await?;
    c.recorder.take();
    jobs::retry_failed(db, Some("k"), Some("boom"), T0 + 5).await?;
    c.section("jobs: retry the failed jobs of a kind and error");
    jobs::cancel(db, "b4", T0 + 6).await?;
    c.section("jobs: cancel");
    jobs::list(db, &JobFilter { subject: Some("order:1".into()), ..Default::default() }).await?;
    c.section("jobs: a list by subject");
    jobs::cancel_subject(db, "order:1", T0 + 6).await?;
    c.section("jobs: cancel the jobs of a subject");
    jobs::retry_subject(db, "order:1", T0 + 6).await?;
    c.section("jobs: retry the jobs of a subject");
    jobs::delete(db, "b4").await?;
    c.section("jobs: delete");
    jobs::purge(db, &[JobStatus::Completed], T0 + 10_000).await?;
    c.section("jobs: purge completed jobs");
    jobs::purge(db, &[JobStatus::Failed, JobStatus::Cancelled], T0 + 10_000).await?;
    c.section("jobs: purge failed and cancelled jobs");

    // Counts (`stats.rs`).
    stats::counts(db).await?;
    c.section("stats: counts by status");
    stats::finished_since(db, T0).await?;
    c.section("stats: finished since");
    stats::activity(db, T0, 60_000).await?;
    c.section("stats: activity by minute");
    stats::failure_groups(db, 10).await?;
    c.section("stats: failures grouped by error");
    stats::durations(db, T0).await?;
    c.section("stats: durations by kind");
    stats::duplicates(db, 10).await?;
    c.section("stats: duplicate keys");
    stats::queues(db, T0).await?;
    c.section("stats: queues");
    stats::blocked(db, 10).await?;
    c.section("stats: blocked sequences");

    // History and the feed (`events.rs`).
    events::history(db, "a").await?;
    c.section("events: a job's history");
    events::outlived(db, "a").await?;
    c.section("events: whether a job outlived its row");
    let head = events::feed_head(db).await?;
    c.section("events: the feed's end");
    events::feed(db, &head, 10).await?;
    c.section("events: the feed after a position");

    // Kinds, workers, schedules, locks, reconciliations.
    kinds::record(db, &[super::kinds::kind_row("k")], "w", T0).await?;
    c.section("kinds: record");
    kinds::list(db, None).await?;
    c.section("kinds: list");
    kinds::list(db, Some("k")).await?;
    c.section("kinds: one");
    workers::upsert(db, &super::workers::worker_row("w", T0, T0 + 5_000)).await?;
    c.section("workers: register or renew");
    workers::list(db, T0).await?;
    c.section("workers: list");
    workers::remove(db, "w").await?;
    c.section("workers: remove");
    let schedule = super::schedules::schedule("every-minute");
    schedules::register(db, &schedule, T0).await?;
    c.section("schedules: register");
    schedules::claim_tick(db, &schedule, T0 + 60_000, T0).await?;
    c.section("schedules: claim a tick");
    schedules::set_tick_job(db, "every-minute", "a").await?;
    c.section("schedules: the tick's job");
    schedules::list(db).await?;
    c.section("schedules: list");
    locks::take(db, "retention", "w", T0, T0 + 1_000).await?;
    c.section("locks: take or renew");
    locks::held_by_other(db, "retention", "v", T0).await?;
    c.section("locks: held by another");
    locks::release(db, "retention", "w").await?;
    c.section("locks: release");
    reconciliations::record(db, &super::reconciliations::report("fs", T0, 1)).await?;
    c.section("reconciliations: record");
    reconciliations::list(db).await?;
    c.section("reconciliations: list");

    // Retention and the archive (`retention.rs`, `archive.rs`).
    let rules = retention::PruneRules { statuses: vec![(JobStatus::Completed, T0 + 5_000, vec![("slow".into(), T0)])] };
    retention::prune(db, &rules, T0 + 10_000, 100).await?;
    c.section("retention: prune finished jobs");
    retention::prune_feed(db, T0, 100).await?;
    c.section("retention: prune the feed");
    archive::upkeep(db, &archive::Upkeep { span: 3_600_000, cutoff: Some(T0), ahead: true, batch: 100 }, T0).await?;
    c.section("archive: upkeep");
    archive::in_use(db).await?;
    c.section("archive: whether it holds jobs");
    let since = archive::jobs_and_archive_since(db, T0).await?;
    let listing = c.recorder.take();
    c.write(
        "archive: the jobs and the archive finished since a time, a relation other statements read",
        listing.iter().map(String::as_str).chain([since.as_str()]),
    );

    // The reconcilers' scans (`scan.rs`).
    let txn = crate::storage::begin_read(db).await?;
    scan::open_path_scan(&txn, &[("fs.write", "$.path")]).await?;
    c.section("scan: the latest completed job of every path");
    scan::page(&txn, 0, 10).await?;
    c.section("scan: a page");
    scan::open_key_scan(&txn, "aws.put", &["$.bucket", "$.key"]).await?;
    c.section("scan: the latest completed job of every key");
    drop(txn);
    c.recorder.take();

    // Remote workers (`remote.rs`); their claims and outcomes are the worker's statements, below.
    remote::extend(db, "w", "a", 1, T0).await?;
    c.section("remote: renew one lease");

    // The schema's reads (`schema.rs`).
    crate::pending_migrations(db).await?;
    c.section("schema: the applied migrations");

    // The worker's own connections.
    for (name, sql) in on_engine!(d, E => E::statements()) {
        c.write(&format!("worker: {name}"), [sql.as_str()].into_iter());
    }

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(on_engine!(d, E => E::STATEMENTS_FILE));
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    if written != c.text {
        if std::env::var_os("OUTBOX_BLESS").is_some() {
            std::fs::write(&path, &c.text).expect("write the catalogue");
        } else {
            let line = written.lines().zip(c.text.lines()).position(|(a, b)| a != b).unwrap_or(0) + 1;
            panic!(
                "{} differs from the statements this build sends, from line {line} on; read the difference with \
                 `OUTBOX_BLESS=1 cargo test -p outbox catalogue` and `git diff`",
                path.display()
            );
        }
    }
    Ok(())
}

/// `sql` laid out for reading: each clause at the statement's top level starts a line, as does each common table
/// expression; the words are the statement's own.
fn pretty(sql: &str) -> String {
    const CLAUSES: [&str; 12] = [
        "FROM ",
        "WHERE ",
        "ORDER BY ",
        "GROUP BY ",
        "HAVING ",
        "LIMIT ",
        "RETURNING ",
        "SET ",
        "VALUES ",
        "UNION ",
        "ON CONFLICT ",
        "SELECT ",
    ];
    let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(sql.len() + 64);
    let (mut depth, mut quoted) = (0usize, false);
    let mut rest = sql.as_str();
    while let Some(c) = rest.chars().next() {
        if !quoted
            && depth == 0
            && out.ends_with(' ')
            && let Some(clause) = CLAUSES.iter().find(|k| rest.starts_with(**k))
        {
            // `INSERT ... SELECT` and `WITH ... SELECT` start a line; a `SELECT` right after `(` is inside.
            out.pop();
            out.push('\n');
            out.push_str(clause);
            rest = &rest[clause.len()..];
            continue;
        }
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth = depth.saturating_sub(1),
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
        // Common table expressions: `WITH a AS (...), b AS (...)` puts each on a line of its own.
        if c == ',' && !quoted && depth == 0 && rest.starts_with(' ') && rest.contains(" AS (") {
            let next = rest.trim_start();
            if next.split_whitespace().nth(1) == Some("AS") {
                out.push('\n');
                rest = next;
            }
        }
    }
    out
}
