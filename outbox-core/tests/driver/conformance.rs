//! Driver-level conformance: each storage operation called directly on every backend.
//!
//! Every test body below runs once per backend of [`driver_tests!`], each on a fresh database of its own (a
//! file in a temp dir, a PostgreSQL schema dropped even when the test panics); a backend added there runs
//! them all. Jobs are put into states with plain SQL written once for every backend ([`set`]).

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, Value};

use super::enqueue::{self, NewJob, Twin};
use super::kinds::{self, KindRow};
use super::retention::{self, PruneRules};
use super::schedules::{self, ScheduleRow};
use super::workers::{self, WorkerRow};
use super::{
    Backend, Finished, Keep, Outcome, WorkerStoreOpts, events, jobs, locks, reconciliations, remote, scans, stats,
};
use crate::error::{Error, Result};
use crate::record::{FeedEvent, JobEventKind, JobFilter, JobRecord, JobStatus, ReconciliationRecord, from_ms};
use crate::stats::{DuplicateKey, FailureGroup, KindDurations, QueueCounts, StatusCount};

/// One test per body and backend, `<backend>::<body>`: the list of backends, each behind its feature.
macro_rules! driver_tests {
    ($($test:ident),* $(,)?) => {
        driver_tests!(@on "sqlite", sqlite, Sqlite; $($test),*);
        driver_tests!(@on "postgres", postgres, Postgres; $($test),*);
    };
    (@on $feature:literal, $module:ident, $variant:ident; $($test:ident),*) => {
        #[cfg(feature = $feature)]
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let name = concat!(stringify!($module), "::", stringify!($test));
                    super::run(crate::storage::Backend::$variant, name, super::$test).await;
                }
            )*
        }
    };
}

/// Runs `body` on a fresh migrated database of `backend`, and closes it.
pub(super) async fn run(backend: Backend, test: &str, body: impl AsyncFnOnce(&DatabaseConnection) -> Result<()>) {
    let (db, _owned): (DatabaseConnection, Box<dyn std::any::Any>) = match backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("a temp dir");
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("outbox.db").display());
            (crate::connect(&url).await.expect("open the SQLite file"), Box::new(dir))
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let Some(server) = pg_server(test) else { return };
            let schema = PgSchema { name: format!("d_{:016x}", fastrand::u64(..)), server };
            let url = with_options(&schema.server, &format!("-c search_path={}", schema.name));
            let opts = crate::ConnectOpts { max_connections: 3, ..Default::default() };
            let db = crate::connect_with(&url, opts).await.expect("connect to PostgreSQL");
            db.execute_unprepared(&format!("CREATE SCHEMA {}", schema.name)).await.expect("create the schema");
            (db, Box::new(schema))
        }
    };
    crate::migrate(&db).await.expect("migrate");
    body(&db).await.unwrap_or_else(|e| panic!("{test}: {e}"));
    db.close().await.expect("close the database");
}

#[cfg(feature = "postgres")]
const PG_VAR: &str = "OUTBOX_TEST_PG_URL";

/// The server of `OUTBOX_TEST_PG_URL`; unset, the test is skipped with a line past the harness's capture,
/// and fails under CI.
#[cfg(feature = "postgres")]
fn pg_server(test: &str) -> Option<String> {
    match std::env::var(PG_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!("{PG_VAR} is unset under CI"),
        _ => {
            // Straight to stderr: the harness captures what `eprintln!` prints, and a skip must be seen.
            let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("SKIPPED {test}: set {PG_VAR}\n"));
            None
        }
    }
}

/// `server` with PostgreSQL command-line `options` as its connection options.
#[cfg(feature = "postgres")]
fn with_options(server: &str, options: &str) -> String {
    let separator = if server.contains('?') { '&' } else { '?' };
    format!("{server}{separator}options={}", options.replace(' ', "%20").replace('=', "%3D"))
}

/// A test's schema, dropped with this: on a thread, runtime and connection of its own, since the test's
/// runtime may be the one unwinding. Whoever still holds a lock in it (a transaction of the failed test) is
/// ended first.
#[cfg(feature = "postgres")]
struct PgSchema {
    name: String,
    server: String,
}

#[cfg(feature = "postgres")]
impl Drop for PgSchema {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || -> std::result::Result<(), String> {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            runtime.map_err(|e| e.to_string())?.block_on(async {
                let opts = crate::ConnectOpts { max_connections: 1, ..Default::default() };
                let admin = crate::connect_with(&server, opts).await.map_err(|e| e.to_string())?;
                let holders = format!(
                    "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{name}' \
                     AND l.pid <> pg_backend_pid()"
                );
                admin.execute_unprepared(&holders).await.map_err(|e| e.to_string())?;
                let drop = format!("DROP SCHEMA IF EXISTS {name} CASCADE");
                admin.execute_unprepared(&drop).await.map_err(|e| e.to_string())?;
                admin.close().await.map_err(|e| e.to_string())
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the dropping thread panicked".into()));
        match dropped {
            Ok(()) => {}
            Err(e) if std::thread::panicking() => eprintln!("could not drop the test schema {}: {e}", self.name),
            Err(e) => panic!("could not drop the test schema {}: {e}", self.name),
        }
    }
}

driver_tests!(
    insert_job_writes_a_pending_job,
    insert_job_skips_an_active_key,
    insert_job_takes_a_key_its_holder_left,
    find_twin_is_behind_a_later_job_of_its_sequence,
    insert_jobs_returns_the_ids_written,
    insert_jobs_writes_each_row_as_given,
    insert_jobs_puts_the_second_of_a_sequence_waiting,
    insert_job_waits_only_behind_a_blocking_job,
    get_of_an_unknown_id_is_none,
    list_filters_by_status_kind_queue_and_key,
    list_pages_newest_first,
    list_of_a_sequence_and_since,
    stuck_lists_expired_claims,
    retry_puts_a_failed_job_back,
    retry_refuses_a_key_an_active_job_holds,
    retry_failed_takes_the_latest_of_each_key,
    cancel_cancels_pending_jobs_only,
    cancel_releases_a_held_sequence,
    purge_deletes_old_finished_jobs,
    delete_removes_one_finished_job,
    counts_by_kind_and_status,
    finished_since_counts_recent_finished_jobs,
    activity_counts_per_bucket,
    failure_groups_by_kind_and_error,
    durations_of_completed_jobs,
    duplicates_lists_repeated_keys,
    queues_count_every_state,
    blocked_lists_held_sequences,
    history_lists_the_transitions,
    history_of_an_unknown_job_is_not_found,
    feed_pages_through_single_and_batch_rows,
    feed_after_the_head_shows_only_later_events,
    feed_refuses_an_invalid_id,
    kinds_are_recorded_and_listed,
    kinds_refresh_keeps_first_seen,
    workers_upsert_list_and_remove,
    schedules_register_returns_the_last_tick,
    schedules_claim_each_tick_once,
    locks_refuse_another_holder_until_expiry,
    locks_release_by_the_holder_only,
    locks_held_by_other_is_a_read,
    prune_keeps_the_latest_of_a_sequence,
    prune_feed_deletes_old_worker_rows,
    reconciliations_keep_the_latest_report,
    path_scan_keeps_the_latest_completed_job_per_path,
    key_scan_groups_by_values,
    remote_claim_takes_due_jobs_of_its_kinds_and_queues,
    remote_claim_honours_limits_and_sequences,
    remote_finish_is_fenced,
    a_batch_of_plain_completions_is_fenced,
    remote_extend_is_fenced_and_never_shortens,
    refuse_legacy_refuses_an_old_schema,
    store_claims_and_finishes,
    store_extends_its_own_claims,
    store_rescues_expired_claims,
    store_claim_lets_in_scheduled_jobs_once_due,
    store_claim_reads_only_served_kinds_and_queues,
    store_claims_each_job_once_and_a_later_higher_priority_within_a_second,
    store_claims_a_job_ahead_of_a_short_read_by_the_next_claim,
    store_stale_outcome_leaves_the_newer_claim_rescuable,
    a_batch_with_a_stale_and_a_fresh_outcome_writes_the_fresh_one,
    an_operator_retry_fences_out_the_earlier_run,
    a_remote_heartbeat_answers_the_lease_it_stored,
    insert_jobs_counts_a_row_finished_before_its_read_back,
    a_completion_written_alone_deletes_a_job_kept_nowhere,
    purge_takes_the_events_of_jobs_deleted_as_they_completed,
);

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
        assert!(enqueue::insert_job(db, j).await?, "job `{}` was not written", j.id);
    }
    Ok(())
}

/// `UPDATE outbox_jobs SET <assignments> WHERE id = <id>`, where `{0}`, `{1}`, ... in `assignments` stand for
/// the times `at` (ms) in the columns' type; the job must exist.
async fn set(db: &DatabaseConnection, id: &str, assignments: &str, at: &[i64]) -> Result<()> {
    let b = Backend::of(db)?;
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

async fn get(db: &DatabaseConnection, id: &str) -> Result<JobRecord> {
    Ok(jobs::get(db, id).await?.unwrap_or_else(|| panic!("no job `{id}`")))
}

fn ids(records: &[JobRecord]) -> Vec<&str> {
    records.iter().map(|r| r.id.as_str()).collect()
}

fn opts(worker: &str, kinds: &[&str]) -> WorkerStoreOpts {
    let kinds = kinds.iter().map(|k| (*k).to_owned()).collect();
    WorkerStoreOpts { worker_id: worker.into(), kinds, limits: Vec::new(), queues: None }
}

/// The outcome of job `id`'s claim of run `run`, its first attempt since (its attempt is its run: no test that
/// tells them apart uses this).
fn finished(id: &str, run: i32, outcome: Outcome) -> Finished {
    Finished { id: id.into(), kind: "k".into(), queue: "default".into(), attempt: run, run, outcome, keep: Keep::Row }
}

fn completed() -> Outcome {
    Outcome::Completed { output: Some(r#"{"ok":true}"#.into()) }
}

async fn insert_job_writes_a_pending_job(db: &DatabaseConnection) -> Result<()> {
    add(db, &[NewJob { queue: "q".into(), priority: 5, max_attempts: 7, run_at: T0 + 9, ..job("a") }]).await?;
    let a = get(db, "a").await?;
    assert_eq!((a.status, a.kind.as_str(), a.queue.as_str(), a.priority), (JobStatus::Pending, "k", "q", 5));
    assert_eq!((a.attempts, a.max_attempts, a.runs, a.run_at), (0, 7, 0, from_ms(T0 + 9)));
    assert_eq!((a.payload, a.schema_hash.as_str()), (serde_json::json!({"n": 1}), "hash"));
    assert_eq!((a.created_at, a.updated_at, a.sequence_key, a.waiting_for), (from_ms(T0), from_ms(T0), None, None));
    Ok(())
}

async fn insert_job_skips_an_active_key(db: &DatabaseConnection) -> Result<()> {
    assert!(enqueue::insert_job(db, &keyed("a", "x")).await?);
    assert!(!enqueue::insert_job(db, &keyed("b", "x")).await?, "the key is held by `a`");
    assert!(enqueue::insert_job(db, &NewJob { kind: "other".into(), ..keyed("c", "x") }).await?);
    assert_eq!(enqueue::find_twin(db, "k", "x", None).await?.map(|t| t.id).as_deref(), Some("a"));
    assert_eq!(enqueue::find_twin(db, "other", "x", None).await?.map(|t| t.id).as_deref(), Some("c"));
    assert_eq!(enqueue::find_twin(db, "k", "y", None).await?, None);
    assert!(jobs::get(db, "b").await?.is_none());
    Ok(())
}

async fn insert_job_takes_a_key_its_holder_left(db: &DatabaseConnection) -> Result<()> {
    add(db, &[keyed("a", "x")]).await?;
    mark_claimed(db, "a", T0, T0 + 1_000).await?;
    assert!(!enqueue::insert_job(db, &keyed("b", "x")).await?, "a claimed job holds its key");
    mark_completed(db, "a", T0 + 10).await?;
    assert_eq!(enqueue::find_twin(db, "k", "x", None).await?, None);
    assert!(enqueue::insert_job(db, &keyed("b", "x")).await?);
    assert_eq!(enqueue::find_twin(db, "k", "x", None).await?.map(|t| t.id).as_deref(), Some("b"));
    Ok(())
}

async fn find_twin_is_behind_a_later_job_of_its_sequence(db: &DatabaseConnection) -> Result<()> {
    let in_s = |id: &str, key: &str| NewJob { sequence_key: Some("s".into()), ..keyed(id, key) };
    add(db, &[in_s("create", "c")]).await?;
    let twin = |seq: Option<&'static str>| enqueue::find_twin(db, "k", "c", seq);
    assert_eq!(twin(Some("s")).await?, Some(Twin { id: "create".into(), behind: false }));
    add(db, &[in_s("delete", "d")]).await?;
    assert_eq!(twin(Some("s")).await?, Some(Twin { id: "create".into(), behind: true }), "`delete` came after it");
    assert_eq!(twin(Some("other")).await?, Some(Twin { id: "create".into(), behind: false }), "another sequence");
    assert_eq!(twin(None).await?, Some(Twin { id: "create".into(), behind: false }));
    assert!(!enqueue::insert_job(db, &in_s("again", "c")).await?, "the key is still held");
    enqueue::supersede(db, "create").await?;
    assert_eq!(twin(Some("s")).await?, None, "a superseded job takes no duplicates");
    assert!(enqueue::insert_job(db, &in_s("again", "c")).await?);
    assert_eq!(twin(Some("s")).await?, Some(Twin { id: "again".into(), behind: false }));
    let a = get(db, "again").await?;
    assert!(a.sequence_no > get(db, "delete").await?.sequence_no, "at the tail");
    assert_eq!(get(db, "create").await?.status, JobStatus::Pending, "the superseded job still runs");
    Ok(())
}

async fn insert_jobs_returns_the_ids_written(db: &DatabaseConnection) -> Result<()> {
    add(db, &[keyed("a", "x")]).await?;
    let batch = [keyed("b", "x"), keyed("c", "y"), keyed("d", "y"), job("e")];
    let mut written = enqueue::insert_jobs(db, &batch).await?;
    written.sort();
    assert_eq!(written, ["c", "e"], "`b` meets the active `a`, `d` the `c` of its own batch");
    assert!(jobs::get(db, "b").await?.is_none() && jobs::get(db, "d").await?.is_none());
    assert_eq!(enqueue::insert_jobs(db, &[]).await?, Vec::<String>::new());
    Ok(())
}

/// Ids of the jobs a `WHERE` condition selects, in id order.
async fn ids_where(db: &DatabaseConnection, condition: &str) -> Result<Vec<String>> {
    let b = Backend::of(db)?;
    let sql = format!("SELECT id FROM outbox_jobs WHERE {condition} ORDER BY id");
    let rows = db.query_all_raw(b.stmt(sql, Vec::new())).await?;
    Ok(rows.iter().map(|r| r.try_get_by_index::<String>(0)).collect::<std::result::Result<_, _>>()?)
}

/// A batch binds a value its rows share once: rows that share all but their ids, and rows that differ in every
/// column, each read back as given.
async fn insert_jobs_writes_each_row_as_given(db: &DatabaseConnection) -> Result<()> {
    let alike: Vec<NewJob> = (0..5).map(|i| job(&format!("a{i}"))).collect();
    let varied: Vec<NewJob> = (0..4_i32)
        .map(|i| NewJob {
            kind: format!("k{}", i % 2),
            queue: format!("q{i}"),
            payload: format!(r#"{{"n":{i}}}"#),
            priority: i,
            max_attempts: i + 1,
            run_at: T0 + i64::from(i),
            key: (i % 2 == 0).then(|| format!("key{i}")),
            schema_hash: format!("hash{}", i % 3),
            created_at: T0 - i64::from(i),
            hold: i % 2 == 0,
            scheduled: i == 3,
            ..job(&format!("v{i}"))
        })
        .collect();
    for batch in [&alike, &varied] {
        assert_eq!(enqueue::insert_jobs(db, batch).await?.len(), batch.len());
        for j in batch.iter() {
            let r = get(db, &j.id).await?;
            assert_eq!(
                (r.kind.as_str(), r.queue.as_str(), r.priority, r.max_attempts),
                (&*j.kind, &*j.queue, j.priority, j.max_attempts),
                "{}",
                j.id
            );
            assert_eq!(
                (r.payload.to_string(), r.run_at, r.idempotency_key.as_deref()),
                (j.payload.clone(), from_ms(j.run_at), j.key.as_deref()),
                "{}",
                j.id
            );
            assert_eq!(
                (r.schema_hash.as_str(), r.created_at, r.updated_at),
                (&*j.schema_hash, from_ms(j.created_at), from_ms(j.created_at)),
                "{}",
                j.id
            );
            assert_eq!((r.status, r.attempts), (JobStatus::Pending, 0), "{}", j.id);
        }
    }
    assert_eq!(ids_where(db, "scheduled").await?, ["v3"]);
    assert_eq!(ids_where(db, "sequence_hold = 0").await?, ["v1", "v3"]);
    Ok(())
}

async fn insert_jobs_puts_the_second_of_a_sequence_waiting(db: &DatabaseConnection) -> Result<()> {
    let written = enqueue::insert_jobs(db, &[sequenced("s1", "s"), sequenced("s2", "s"), job("free")]).await?;
    assert_eq!(written.len(), 3);
    let (s1, s2) = (get(db, "s1").await?, get(db, "s2").await?);
    assert_eq!((s1.waiting_for, s2.waiting_for.as_deref()), (None, Some("s1")));
    assert!(s1.sequence_no.expect("a place") < s2.sequence_no.expect("a place"));
    assert_eq!(get(db, "free").await?.sequence_no, None);
    Ok(())
}

async fn insert_job_waits_only_behind_a_blocking_job(db: &DatabaseConnection) -> Result<()> {
    add(db, &[sequenced("a1", "a"), sequenced("b1", "b"), NewJob { hold: false, ..sequenced("c1", "c") }]).await?;
    mark_completed(db, "a1", T0 + 1).await?;
    mark_failed(db, "b1", "boom", T0 + 1).await?;
    mark_failed(db, "c1", "boom", T0 + 1).await?;
    add(db, &[sequenced("a2", "a"), sequenced("b2", "b"), sequenced("c2", "c")]).await?;
    assert_eq!(get(db, "a2").await?.waiting_for, None, "behind a completed job");
    assert_eq!(get(db, "b2").await?.waiting_for.as_deref(), Some("b1"), "behind a failed job that holds");
    assert_eq!(get(db, "c2").await?.waiting_for, None, "behind a failed job that lets go");
    assert!(get(db, "b1").await?.holds_sequence && !get(db, "c1").await?.holds_sequence);
    Ok(())
}

async fn get_of_an_unknown_id_is_none(db: &DatabaseConnection) -> Result<()> {
    assert_eq!(jobs::get(db, "nope").await?, None);
    Ok(())
}

async fn list_filters_by_status_kind_queue_and_key(db: &DatabaseConnection) -> Result<()> {
    let other = |id: &str| NewJob { kind: "other".into(), ..job(id) };
    add(db, &[keyed("a", "x"), other("b"), NewJob { queue: "q2".into(), ..job("c") }, job("d")]).await?;
    mark_completed(db, "d", T0 + 1).await?;
    let list = async |filter: JobFilter| jobs::list(db, &JobFilter { limit: 10, ..filter }).await;
    assert_eq!(ids(&list(JobFilter { status: Some(JobStatus::Completed), ..Default::default() }).await?), ["d"]);
    assert_eq!(ids(&list(JobFilter { kind: Some("k".into()), ..Default::default() }).await?), ["d", "c", "a"]);
    let q = JobFilter { kind: Some("k".into()), queue: Some("default".into()), ..Default::default() };
    assert_eq!(ids(&list(q).await?), ["d", "a"]);
    assert_eq!(ids(&list(JobFilter { key: Some("x".into()), ..Default::default() }).await?), ["a"]);
    Ok(())
}

async fn list_pages_newest_first(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("j1"), job("j2"), job("j3"), job("j4"), job("j5")]).await?;
    let page = async |before: Option<&str>| {
        jobs::list(db, &JobFilter { before: before.map(Into::into), limit: 2, ..Default::default() }).await
    };
    assert_eq!(ids(&page(None).await?), ["j5", "j4"]);
    assert_eq!(ids(&page(Some("j4")).await?), ["j3", "j2"]);
    assert_eq!(ids(&page(Some("j2")).await?), ["j1"]);
    assert_eq!(ids(&page(Some("j1")).await?), Vec::<&str>::new());
    Ok(())
}

async fn list_of_a_sequence_and_since(db: &DatabaseConnection) -> Result<()> {
    add(db, &[sequenced("s1", "s"), sequenced("s2", "s"), sequenced("s3", "s"), job("a")]).await?;
    let in_sequence = JobFilter { sequence: Some("s".into()), limit: 2, ..Default::default() };
    assert_eq!(ids(&jobs::list(db, &in_sequence).await?), ["s3", "s2"]);
    mark_completed(db, "a", T0 + 5_000).await?;
    let since = JobFilter { since: Some(from_ms(T0 + 1_000)), ..Default::default() };
    assert_eq!(ids(&jobs::list(db, &since).await?), ["a"]);
    Ok(())
}

async fn stuck_lists_expired_claims(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c")]).await?;
    mark_claimed(db, "a", T0, T0 + 10_000).await?;
    mark_claimed(db, "b", T0, T0 + 100).await?;
    assert_eq!(ids(&jobs::stuck(db, T0 + 1_000).await?), ["b"]);
    assert_eq!(ids(&jobs::stuck(db, T0 + 20_000).await?), ["b", "a"]);
    assert!(jobs::stuck(db, T0).await?.is_empty());
    Ok(())
}

async fn retry_puts_a_failed_job_back(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a")]).await?;
    assert!(!jobs::retry(db, "a", T0 + 1).await?, "a pending job is not retried");
    mark_failed(db, "a", "boom", T0 + 1).await?;
    assert!(jobs::retry(db, "a", T0 + 50).await?);
    let a = get(db, "a").await?;
    assert_eq!(
        (a.status, a.attempts, a.run_at, a.updated_at),
        (JobStatus::Pending, 0, from_ms(T0 + 50), from_ms(T0 + 50))
    );
    assert!(!jobs::retry(db, "nope", T0).await?);
    Ok(())
}

async fn retry_refuses_a_key_an_active_job_holds(db: &DatabaseConnection) -> Result<()> {
    add(db, &[keyed("a", "x")]).await?;
    mark_failed(db, "a", "boom", T0 + 1).await?;
    add(db, &[keyed("b", "x")]).await?;
    assert!(!jobs::retry(db, "a", T0 + 2).await?);
    assert_eq!(get(db, "a").await?.status, JobStatus::Failed);
    Ok(())
}

async fn retry_failed_takes_the_latest_of_each_key(db: &DatabaseConnection) -> Result<()> {
    add(db, &[keyed("a", "x")]).await?;
    mark_failed(db, "a", "boom", T0 + 1).await?;
    add(db, &[keyed("b", "x"), job("c"), NewJob { kind: "other".into(), ..job("d") }]).await?;
    mark_failed(db, "b", "boom", T0 + 2).await?;
    mark_failed(db, "c", "bad", T0 + 2).await?;
    mark_failed(db, "d", "boom", T0 + 2).await?;
    assert_eq!(jobs::retry_failed(db, Some("k"), Some("boom"), T0 + 10).await?, 1);
    assert_eq!((get(db, "a").await?.status, get(db, "b").await?.status), (JobStatus::Failed, JobStatus::Pending));
    // `a`'s key is held by `b` now: only `c` and `d` go.
    assert_eq!(jobs::retry_failed(db, None, None, T0 + 20).await?, 2);
    assert_eq!(get(db, "a").await?.status, JobStatus::Failed);
    assert_eq!(get(db, "d").await?.run_at, from_ms(T0 + 20));
    Ok(())
}

async fn cancel_cancels_pending_jobs_only(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b")]).await?;
    mark_completed(db, "b", T0 + 1).await?;
    assert!(jobs::cancel(db, "a", T0 + 5).await?);
    let a = get(db, "a").await?;
    assert_eq!((a.status, a.updated_at), (JobStatus::Cancelled, from_ms(T0 + 5)));
    assert!(!jobs::cancel(db, "a", T0 + 6).await?, "already cancelled");
    assert!(!jobs::cancel(db, "b", T0 + 6).await?, "completed");
    assert!(!jobs::cancel(db, "nope", T0 + 6).await?);
    Ok(())
}

async fn cancel_releases_a_held_sequence(db: &DatabaseConnection) -> Result<()> {
    add(db, &[sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    mark_failed(db, "s1", "boom", T0 + 1).await?;
    assert!(get(db, "s1").await?.holds_sequence);
    assert_eq!(get(db, "s2").await?.waiting_for.as_deref(), Some("s1"));
    assert!(jobs::cancel(db, "s1", T0 + 2).await?);
    let s1 = get(db, "s1").await?;
    assert_eq!((s1.status, s1.holds_sequence), (JobStatus::Cancelled, false));
    assert_eq!(get(db, "s2").await?.waiting_for, None);
    assert!(!jobs::cancel(db, "s1", T0 + 3).await?, "the hold is released already");
    Ok(())
}

async fn purge_deletes_old_finished_jobs(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d"), sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    mark_completed(db, "a", T0 + 1_000).await?;
    mark_failed(db, "b", "boom", T0 + 1_000).await?;
    mark_completed(db, "c", T0 + 9_000).await?;
    mark_failed(db, "s1", "boom", T0 + 1_000).await?;
    assert_eq!(jobs::purge(db, &[JobStatus::Pending], T0 + 5_000).await?, 0);
    let all = [JobStatus::Pending, JobStatus::Completed, JobStatus::Failed];
    assert_eq!(jobs::purge(db, &all, T0 + 5_000).await?, 2);
    let left = jobs::list(db, &JobFilter::default()).await?;
    assert_eq!(ids(&left), ["s2", "s1", "d", "c"], "the held `s1` stays");
    Ok(())
}

async fn delete_removes_one_finished_job(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    assert!(!jobs::delete(db, "a").await?, "pending");
    mark_completed(db, "a", T0 + 1).await?;
    assert!(jobs::delete(db, "a").await?);
    assert_eq!(jobs::get(db, "a").await?, None);
    assert!(!jobs::delete(db, "a").await?);
    mark_failed(db, "s1", "boom", T0 + 1).await?;
    assert!(!jobs::delete(db, "s1").await?, "it holds its sequence");
    Ok(())
}

async fn counts_by_kind_and_status(db: &DatabaseConnection) -> Result<()> {
    let other = NewJob { kind: "other".into(), created_at: T0 + 7, ..job("d") };
    add(db, &[job("a"), NewJob { created_at: T0 + 5, ..job("b") }, job("c"), other]).await?;
    mark_completed(db, "c", T0 + 9).await?;
    mark_failed(db, "d", "boom", T0 + 9).await?;
    let count =
        |kind: &str, status, count, oldest| StatusCount { kind: kind.into(), status, count, oldest: from_ms(oldest) };
    let expected = [
        count("k", JobStatus::Completed, 1, T0),
        count("k", JobStatus::Pending, 2, T0),
        count("other", JobStatus::Failed, 1, T0 + 7),
    ];
    assert_eq!(stats::counts(db).await?, expected);
    Ok(())
}

async fn finished_since_counts_recent_finished_jobs(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    mark_completed(db, "a", T0 + 1_000).await?;
    mark_failed(db, "b", "boom", T0 + 9_000).await?;
    mark_completed(db, "c", T0 + 9_000).await?;
    let since = stats::finished_since(db, T0 + 5_000).await?;
    let count = |status, count| StatusCount { kind: "k".into(), status, count, oldest: from_ms(T0) };
    assert_eq!(since, [count(JobStatus::Completed, 1), count(JobStatus::Failed, 1)]);
    Ok(())
}

async fn activity_counts_per_bucket(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d"), job("e")]).await?;
    mark_completed(db, "a", T0 + 1_000).await?;
    mark_failed(db, "b", "boom", T0 + 2_000).await?;
    set(db, "c", "status = 'cancelled', updated_at = {0}", &[T0 + 2_000]).await?;
    mark_completed(db, "d", T0 + 120_000).await?;
    mark_completed(db, "e", T0 - 600_000).await?;
    let bucket = |t: i64| t / 60_000 * 60_000;
    let expected = [(bucket(T0 + 1_000), 1, 1), (bucket(T0 + 120_000), 1, 0)];
    assert_eq!(stats::activity(db, T0, 60_000).await?, expected);
    Ok(())
}

async fn failure_groups_by_kind_and_error(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    mark_failed(db, "a", "boom", T0 + 1).await?;
    mark_failed(db, "b", "boom", T0 + 3).await?;
    mark_failed(db, "c", "bad", T0 + 2).await?;
    let group = |error: &str, count, at, id: &str| FailureGroup {
        kind: "k".into(),
        error: Some(error.into()),
        count,
        latest_at: from_ms(at),
        latest_id: id.into(),
    };
    assert_eq!(stats::failure_groups(db, 10).await?, [group("boom", 2, T0 + 3, "b"), group("bad", 1, T0 + 2, "c")]);
    assert_eq!(stats::failure_groups(db, 1).await?.len(), 1);
    Ok(())
}

async fn durations_of_completed_jobs(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c")]).await?;
    let done = "status = 'completed', attempts = 1, claimed_at = {0}, completed_at = {1}, updated_at = {1}";
    set(db, "a", done, &[T0 + 1_000, T0 + 1_100]).await?;
    set(db, "b", done, &[T0 + 3_000, T0 + 3_300]).await?;
    let expected =
        KindDurations { kind: "k".into(), completed: 2, avg_run_ms: 200.0, max_run_ms: 300, avg_wait_ms: 2_000.0 };
    assert_eq!(stats::durations(db, T0).await?, [expected]);
    assert!(stats::durations(db, T0 + 5_000).await?.is_empty());
    Ok(())
}

async fn duplicates_lists_repeated_keys(db: &DatabaseConnection) -> Result<()> {
    add(db, &[keyed("a", "x"), keyed("u", "unique")]).await?;
    mark_completed(db, "a", T0 + 1).await?;
    add(db, &[keyed("b", "x")]).await?;
    mark_completed(db, "b", T0 + 2).await?;
    add(db, &[keyed("c", "x")]).await?;
    let expected = DuplicateKey { kind: "k".into(), key: "x".into(), jobs: 3, active: 1, completed: 2 };
    assert_eq!(stats::duplicates(db, 10).await?, [expected]);
    Ok(())
}

async fn queues_count_every_state(db: &DatabaseConnection) -> Result<()> {
    let later = NewJob { run_at: T0 + 60_000, ..job("b") };
    add(db, &[job("a"), later, job("c"), job("d"), job("e"), job("f"), job("g")]).await?;
    add(db, &[sequenced("h", "s"), sequenced("i", "s"), NewJob { queue: "q2".into(), run_at: T0 + 1_000, ..job("j") }])
        .await?;
    mark_claimed(db, "c", T0, T0 + 20_000).await?;
    mark_claimed(db, "d", T0, T0 + 5_000).await?;
    mark_completed(db, "e", T0 + 1).await?;
    mark_failed(db, "f", "boom", T0 + 1).await?;
    assert!(jobs::cancel(db, "g", T0 + 1).await?);
    // Available, scheduled, waiting, claimed, stuck, completed, failed, cancelled; the oldest available.
    let counts = |queue: &str,
                  [available, scheduled, waiting, claimed, stuck, completed, failed, cancelled]: [u64; 8],
                  oldest| {
        let oldest_available = Some(from_ms(oldest));
        QueueCounts {
            queue: queue.into(),
            available,
            scheduled,
            waiting,
            claimed,
            stuck,
            completed,
            failed,
            cancelled,
            oldest_available,
        }
    };
    let (default, q2) =
        (counts("default", [2, 1, 1, 2, 1, 1, 1, 1], T0), counts("q2", [1, 0, 0, 0, 0, 0, 0, 0], T0 + 1_000));
    assert_eq!(stats::queues(db, T0 + 10_000).await?, [default, q2]);
    Ok(())
}

async fn blocked_lists_held_sequences(db: &DatabaseConnection) -> Result<()> {
    add(db, &[sequenced("s1", "s"), sequenced("s2", "s"), sequenced("s3", "s")]).await?;
    add(db, &[NewJob { hold: false, ..sequenced("t1", "t") }, sequenced("u1", "u"), sequenced("u2", "u")]).await?;
    mark_failed(db, "s1", "boom", T0 + 1).await?;
    mark_failed(db, "t1", "boom", T0 + 1).await?;
    add(db, &[sequenced("t2", "t")]).await?;
    let (count, heads) = stats::blocked(db, 10).await?;
    assert_eq!(count, 1);
    assert_eq!(heads.len(), 1);
    assert_eq!((heads[0].sequence_key.as_str(), heads[0].head.id.as_str(), heads[0].waiting), ("s", "s1", 2));
    assert!(heads[0].head.holds_sequence);
    assert_eq!(stats::blocked(db, 0).await?.0, 1);
    Ok(())
}

async fn history_lists_the_transitions(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a")]).await?;
    mark_claimed(db, "a", T0 + 10, T0 + 1_000).await?;
    mark_failed(db, "a", "boom", T0 + 20).await?;
    assert!(jobs::retry(db, "a", T0 + 30).await?);
    let history = events::history(db, "a").await?;
    let kinds: Vec<JobEventKind> = history.iter().map(|e| e.event).collect();
    use JobEventKind::{Claimed, Enqueued, Failed, RetriedByOperator};
    assert_eq!(kinds, [Enqueued, Claimed, Failed, RetriedByOperator]);
    let at: Vec<i64> = history.iter().map(|e| e.at.timestamp_millis()).collect();
    assert_eq!(at, [T0, T0 + 10, T0 + 20, T0 + 30]);
    assert_eq!((history[1].attempt, history[1].worker.as_deref()), (1, Some("w")));
    assert_eq!((history[2].attempt, history[2].error.as_deref()), (1, Some("boom")));
    Ok(())
}

async fn history_of_an_unknown_job_is_not_found(db: &DatabaseConnection) -> Result<()> {
    let err = events::history(db, "nope").await;
    assert!(matches!(&err, Err(Error::NotFound { id }) if id == "nope"), "{err:?}");
    Ok(())
}

/// The feed after `after`, read `limit` events a page, each page after the last event of the one before,
/// until `want` events came. On PostgreSQL an event shows once every transaction older than its own has ended
/// (of any test on the server), so an empty page is read again, for 30 s at most.
async fn feed_pages(db: &DatabaseConnection, after: &str, limit: u64, want: usize) -> Result<Vec<FeedEvent>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut position, mut events) = (after.to_owned(), Vec::new());
    while events.len() < want {
        assert!(Instant::now() < deadline, "the feed after `{after}` showed {events:?} of {want} events");
        let page = events::feed(db, &position, limit).await?;
        assert!(page.len() as u64 <= limit, "{} events in a page of {limit}", page.len());
        match page.last() {
            Some(last) => position = last.id.clone(),
            None => tokio::task::yield_now().await,
        }
        events.extend(page);
    }
    Ok(events)
}

async fn feed_pages_through_single_and_batch_rows(db: &DatabaseConnection) -> Result<()> {
    let head = events::feed_head(db).await?;
    assert_eq!(enqueue::insert_jobs(db, &[job("a"), job("b"), job("c")]).await?.len(), 3);
    assert_eq!(enqueue::insert_jobs(db, &[job("d")]).await?.len(), 1);
    let now = super::now_ms();
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 4);
    let one_by_one = feed_pages(db, &head, 1, 8).await?;
    assert_eq!(feed_pages(db, &head, 3, 8).await?, one_by_one, "pages of 3 read the same as pages of 1");
    assert_eq!(feed_pages(db, &head, 100, 8).await?, one_by_one);
    let seen: Vec<(&str, JobEventKind)> = one_by_one.iter().map(|e| (e.job_id.as_str(), e.event)).collect();
    use JobEventKind::Enqueued;
    assert_eq!(seen[..4], [("a", Enqueued), ("b", Enqueued), ("c", Enqueued), ("d", Enqueued)]);
    assert!(one_by_one[..4].iter().all(|e| (e.kind.as_str(), e.queue.as_str(), e.attempt) == ("k", "default", 0)));
    let mut claimed: Vec<&str> = seen[4..].iter().map(|(id, _)| *id).collect();
    claimed.sort_unstable();
    assert_eq!(claimed, ["a", "b", "c", "d"]);
    assert!(one_by_one[4..].iter().all(|e| e.event == JobEventKind::Claimed && e.worker.as_deref() == Some("r")));
    assert!(one_by_one[4..].iter().all(|e| (e.kind.as_str(), e.queue.as_str(), e.attempt) == ("k", "default", 1)));
    // A row of many events names each `<row>.<n>`; a row of one, by its row alone.
    let listed = |events: &[FeedEvent]| {
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        let row = ids[0].strip_suffix(".0").expect("a batch row's first event ends in .0").to_owned();
        assert_eq!(ids, (0..events.len()).map(|n| format!("{row}.{n}")).collect::<Vec<_>>());
    };
    listed(&one_by_one[4..]);
    // PostgreSQL records a statement's enqueued jobs in one row; SQLite's triggers write one per job.
    match Backend::of(db)? {
        #[cfg(feature = "postgres")]
        Backend::Postgres => listed(&one_by_one[..3]),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => assert!(one_by_one[..3].iter().all(|e| !e.id.contains('.'))),
    }
    assert!(!one_by_one[3].id.contains('.'), "a statement of one job keeps a row of its own");
    assert!(events::feed(db, &one_by_one[7].id, 10).await?.is_empty(), "nothing after the last event");
    Ok(())
}

async fn feed_after_the_head_shows_only_later_events(db: &DatabaseConnection) -> Result<()> {
    let start = events::feed_head(db).await?;
    add(db, &[job("before")]).await?;
    // Once `before` shows, every transaction up to its own has ended: a head read now is past it.
    assert_eq!(feed_pages(db, &start, 10, 1).await?[0].job_id, "before");
    let head = events::feed_head(db).await?;
    add(db, &[job("after")]).await?;
    let later = feed_pages(db, &head, 10, 1).await?;
    assert_eq!(
        later.iter().map(|e| (e.job_id.as_str(), e.event)).collect::<Vec<_>>(),
        [("after", JobEventKind::Enqueued)]
    );
    assert_eq!(events::feed(db, &head, 10).await?, later);
    Ok(())
}

async fn feed_refuses_an_invalid_id(db: &DatabaseConnection) -> Result<()> {
    for id in ["x.y", "nope", "-5", "1.x"] {
        let err = events::feed(db, id, 10).await;
        assert!(matches!(err, Err(Error::Invalid(_))), "`{id}`: {err:?}");
    }
    Ok(())
}

fn kind_row(name: &str) -> KindRow {
    KindRow {
        name: name.into(),
        schema: r#"{"type":"object"}"#.into(),
        schema_hash: "hash".into(),
        queue: "default".into(),
        priority: 1,
        max_attempts: 5,
        unique: true,
        key_fields: r#"["id"]"#.into(),
        sequence: Some("s:{id}".into()),
        on_sequence_failure: "hold",
        concurrency: Some(4),
    }
}

async fn kinds_are_recorded_and_listed(db: &DatabaseConnection) -> Result<()> {
    let b =
        KindRow { unique: false, sequence: None, on_sequence_failure: "continue", concurrency: None, ..kind_row("b") };
    kinds::record(db, &[b, kind_row("a")], "w1", T0).await?;
    let all = kinds::list(db, None).await?;
    assert_eq!(all.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    let a = &all[0];
    assert_eq!(
        (a.schema.clone(), a.key_fields.clone()),
        (serde_json::json!({"type": "object"}), vec!["id".to_owned()])
    );
    assert_eq!(
        (a.unique, a.sequence.as_deref(), a.concurrency, a.priority, a.max_attempts),
        (true, Some("s:{id}"), Some(4), 1, 5)
    );
    assert_eq!((a.recorded_by.as_deref(), a.first_seen_at, a.updated_at), (Some("w1"), from_ms(T0), from_ms(T0)));
    let b = kinds::list(db, Some("b")).await?;
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].unique, b[0].on_sequence_failure, b[0].concurrency),
        (false, crate::SequenceFailure::Continue, None)
    );
    assert!(kinds::list(db, Some("nope")).await?.is_empty());
    Ok(())
}

async fn kinds_refresh_keeps_first_seen(db: &DatabaseConnection) -> Result<()> {
    kinds::record(db, &[kind_row("a")], "w1", T0).await?;
    kinds::record(db, &[KindRow { queue: "other".into(), ..kind_row("a") }], "w2", T0 + 1_000).await?;
    let a = kinds::list(db, Some("a")).await?.pop().expect("kind `a`");
    assert_eq!((a.queue.as_str(), a.recorded_by.as_deref()), ("other", Some("w2")));
    assert_eq!((a.first_seen_at, a.updated_at), (from_ms(T0), from_ms(T0 + 1_000)));
    Ok(())
}

fn worker_row(id: &str, now: i64, expires_at: i64) -> WorkerRow {
    WorkerRow {
        id: id.into(),
        host: "host".into(),
        pid: Some(42),
        queues: Some(r#"["q"]"#.into()),
        kinds: r#"["k"]"#.into(),
        concurrency: Some(8),
        running: 2,
        remote: false,
        now,
        expires_at,
    }
}

async fn workers_upsert_list_and_remove(db: &DatabaseConnection) -> Result<()> {
    workers::upsert(db, &worker_row("w1", T0, T0 + 30_000)).await?;
    workers::upsert(db, &WorkerRow { queues: None, remote: true, ..worker_row("w2", T0, T0 + 5_000) }).await?;
    assert_eq!(workers::list(db, T0 + 1).await?.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), ["w1", "w2"]);
    let w = workers::list(db, T0 + 10_000).await?;
    assert_eq!(w.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), ["w1"], "`w2` expired");
    assert_eq!((w[0].queues.clone(), w[0].kinds.clone()), (Some(vec!["q".to_owned()]), vec!["k".to_owned()]));
    assert_eq!((w[0].pid, w[0].concurrency, w[0].running, w[0].remote), (Some(42), Some(8), 2, false));
    workers::upsert(db, &WorkerRow { running: 3, ..worker_row("w1", T0 + 20_000, T0 + 50_000) }).await?;
    let w = workers::list(db, T0 + 1).await?;
    assert_eq!(w.iter().map(|w| w.id.as_str()).collect::<Vec<_>>(), ["w1"], "the refresh forgot `w2`");
    assert_eq!((w[0].started_at, w[0].last_seen_at, w[0].running), (from_ms(T0), from_ms(T0 + 20_000), 3));
    workers::remove(db, "w1").await?;
    assert!(workers::list(db, T0 + 1).await?.is_empty());
    Ok(())
}

fn schedule(name: &str) -> ScheduleRow {
    ScheduleRow {
        name: name.into(),
        kind: "k".into(),
        spec: "every 1m".into(),
        time_zone: "UTC".into(),
        missed: "skip".into(),
    }
}

async fn schedules_register_returns_the_last_tick(db: &DatabaseConnection) -> Result<()> {
    assert_eq!(schedules::register(db, &schedule("s"), T0).await?, None);
    assert!(schedules::claim_tick(db, &schedule("s"), T0 + 60_000, T0 + 1).await?);
    let changed = ScheduleRow { spec: "every 2m".into(), ..schedule("s") };
    assert_eq!(schedules::register(db, &changed, T0 + 2).await?, Some(T0 + 60_000));
    let listed = schedules::list(db).await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].spec.as_str(), listed[0].last_tick, listed[0].updated_at),
        ("every 2m", Some(from_ms(T0 + 60_000)), from_ms(T0 + 2))
    );
    Ok(())
}

async fn schedules_claim_each_tick_once(db: &DatabaseConnection) -> Result<()> {
    let s = schedule("s");
    assert!(schedules::claim_tick(db, &s, T0 + 60_000, T0).await?, "an unregistered schedule's first tick");
    assert!(!schedules::claim_tick(db, &s, T0 + 60_000, T0).await?, "the same tick");
    assert!(!schedules::claim_tick(db, &s, T0, T0).await?, "an earlier tick");
    schedules::set_tick_job(db, "s", "job1").await?;
    let listed = schedules::list(db).await?;
    assert_eq!((listed[0].last_tick, listed[0].last_job_id.as_deref()), (Some(from_ms(T0 + 60_000)), Some("job1")));
    assert!(schedules::claim_tick(db, &s, T0 + 120_000, T0 + 1).await?);
    let listed = schedules::list(db).await?;
    assert_eq!((listed[0].last_tick, listed[0].last_job_id.as_deref()), (Some(from_ms(T0 + 120_000)), None));
    Ok(())
}

async fn locks_refuse_another_holder_until_expiry(db: &DatabaseConnection) -> Result<()> {
    assert!(locks::take(db, "retention", "a", T0, T0 + 1_000).await?);
    assert!(!locks::take(db, "retention", "b", T0 + 500, T0 + 1_500).await?);
    assert!(locks::take(db, "retention", "a", T0 + 900, T0 + 2_000).await?, "the holder renews");
    assert!(!locks::take(db, "retention", "b", T0 + 1_500, T0 + 2_500).await?, "renewed until T0 + 2000");
    assert!(locks::take(db, "other", "b", T0, T0 + 1_000).await?, "another name");
    assert!(locks::take(db, "retention", "b", T0 + 2_001, T0 + 3_000).await?, "expired");
    assert!(!locks::take(db, "retention", "a", T0 + 2_002, T0 + 3_000).await?);
    Ok(())
}

async fn locks_release_by_the_holder_only(db: &DatabaseConnection) -> Result<()> {
    assert!(locks::take(db, "retention", "a", T0, T0 + 1_000).await?);
    locks::release(db, "retention", "b").await?;
    assert!(!locks::take(db, "retention", "b", T0, T0 + 1_000).await?, "`b` released nothing");
    locks::release(db, "retention", "a").await?;
    assert!(locks::take(db, "retention", "b", T0, T0 + 1_000).await?);
    Ok(())
}

async fn locks_held_by_other_is_a_read(db: &DatabaseConnection) -> Result<()> {
    assert!(!locks::held_by_other(db, "retention", "a", T0).await?, "nobody holds it");
    assert!(locks::take(db, "retention", "a", T0, T0 + 1_000).await?);
    assert!(!locks::held_by_other(db, "retention", "a", T0 + 10).await?, "`a` holds it");
    assert!(locks::held_by_other(db, "retention", "b", T0 + 10).await?);
    assert!(locks::held_by_other(db, "retention", "b", T0 + 1_000).await?, "until its expiry");
    assert!(!locks::held_by_other(db, "retention", "b", T0 + 1_001).await?, "expired");
    assert!(!locks::held_by_other(db, "other", "b", T0 + 10).await?, "another name");
    Ok(())
}

async fn prune_keeps_the_latest_of_a_sequence(db: &DatabaseConnection) -> Result<()> {
    let slow = NewJob { kind: "slow".into(), ..job("e") };
    add(db, &[job("a"), job("b"), job("c"), slow, sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    for id in ["a", "e", "s1", "s2"] {
        mark_completed(db, id, T0 + 1_000).await?;
    }
    mark_completed(db, "b", T0 + 9_000).await?;
    mark_failed(db, "c", "boom", T0 + 1_000).await?;
    let rules =
        PruneRules { statuses: vec![(JobStatus::Completed, T0 + 5_000, vec![("slow".into(), T0)])], now: T0 + 10_000 };
    assert_eq!(retention::prune(db, &rules, 1).await?.jobs, 1, "one batch of one");
    assert_eq!(retention::prune(db, &rules, 100).await?.jobs, 1);
    let last = retention::prune(db, &rules, 100).await?;
    assert_eq!(last, retention::Pruned { jobs: 0, more: false }, "the kept jobs are not looked at again now");
    let left = jobs::list(db, &JobFilter::default()).await?;
    assert_eq!(ids(&left), ["s2", "e", "c", "b"], "`a` and `s1` went");
    // Two seconds on, `slow` keeps its jobs four seconds less than the others: `e` has come due.
    let later = PruneRules {
        statuses: vec![(JobStatus::Completed, T0 + 7_000, vec![("slow".into(), T0 + 3_000)])],
        now: T0 + 12_000,
    };
    assert_eq!(retention::prune(db, &later, 100).await?.jobs, 1, "`e` is due once its kind's age has passed");
    let left = jobs::list(db, &JobFilter::default()).await?;
    assert_eq!(ids(&left), ["s2", "c", "b"]);
    Ok(())
}

async fn prune_feed_deletes_old_worker_rows(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b")]).await?;
    let now = super::now_ms();
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 2);
    assert_eq!(retention::prune_feed(db, now - 60_000, 10).await?, 0, "the claim's row is newer");
    assert_eq!(retention::prune_feed(db, now + 60_000, 10).await?, 1, "one row for both claims; enqueues stay");
    assert_eq!(retention::prune_feed(db, now + 60_000, 10).await?, 0);
    assert_eq!(events::history(db, "a").await?[0].event, JobEventKind::Enqueued);
    Ok(())
}

async fn reconciliations_keep_the_latest_report(db: &DatabaseConnection) -> Result<()> {
    let report = |name: &str, at, n| ReconciliationRecord {
        reconciler: name.into(),
        at: from_ms(at),
        worker: Some("w".into()),
        report: serde_json::json!({ "checked": n }),
    };
    reconciliations::record(db, &report("fs", T0, 1)).await?;
    reconciliations::record(db, &ReconciliationRecord { worker: None, ..report("aws", T0, 2) }).await?;
    reconciliations::record(db, &report("fs", T0 + 5, 3)).await?;
    let expected = [ReconciliationRecord { worker: None, ..report("aws", T0, 2) }, report("fs", T0 + 5, 3)];
    assert_eq!(reconciliations::list(db).await?, expected);
    Ok(())
}

async fn path_scan_keeps_the_latest_completed_job_per_path(db: &DatabaseConnection) -> Result<()> {
    let write = |id: &str, path: &str| NewJob {
        kind: "fs.write".into(),
        payload: format!(r#"{{"path":"{path}"}}"#),
        ..job(id)
    };
    let other = NewJob { kind: "other".into(), ..write("e", "a") };
    add(db, &[write("a", "b"), write("b", "a"), write("c", "a"), write("d", "c"), other]).await?;
    for (id, at) in [("a", T0 + 1), ("b", T0 + 1), ("c", T0 + 5), ("e", T0 + 9)] {
        mark_completed(db, id, at).await?;
    }
    set(db, "c", r#"output = '{"etag":"x"}', updated_at = {0}"#, &[T0 + 5]).await?;
    let txn = super::begin_read(db).await?;
    assert_eq!(scans::open_path_scan(&txn, &[("fs.write", "$.path")]).await?, (3, 2));
    let first = scans::page(&txn, 0, 1).await?;
    assert_eq!(first.len(), 1);
    let (a, output) = (&first[0], Some(serde_json::json!({"etag": "x"})));
    assert_eq!((a.seq, a.path.as_deref(), a.job_id.as_str(), a.kind.as_str()), (1, Some("a"), "c", "fs.write"));
    assert_eq!((&a.output, a.completed_at, a.jobs), (&output, Some(T0 + 5), 2));
    let rest = scans::page(&txn, a.seq, 10).await?;
    assert_eq!(
        rest.iter().map(|r| (r.seq, r.path.as_deref(), r.job_id.as_str(), r.jobs)).collect::<Vec<_>>(),
        [(2, Some("b"), "a", 1)]
    );
    assert!(scans::page(&txn, 2, 10).await?.is_empty());
    txn.commit().await?;
    Ok(())
}

async fn key_scan_groups_by_values(db: &DatabaseConnection) -> Result<()> {
    let put = |id: &str, bucket: &str, n: i64| NewJob {
        kind: "aws.put".into(),
        payload: format!(r#"{{"bucket":"{bucket}","n":{n},"x":true}}"#),
        ..job(id)
    };
    add(db, &[put("a", "y", 2), put("b", "x", 1), put("c", "x", 1)]).await?;
    for id in ["a", "b", "c"] {
        mark_completed(db, id, T0 + 1).await?;
    }
    let txn = super::begin_read(db).await?;
    assert_eq!(scans::open_key_scan(&txn, "aws.put", &["$.bucket", "$.n"]).await?, (3, 2));
    let rows = scans::page(&txn, 0, 10).await?;
    let keys: Vec<(Option<&str>, &str, u64)> =
        rows.iter().map(|r| (r.path.as_deref(), r.job_id.as_str(), r.jobs)).collect();
    assert_eq!(keys, [(Some(r#"["x",1]"#), "c", 2), (Some(r#"["y",2]"#), "a", 1)]);
    txn.commit().await?;
    Ok(())
}

async fn remote_claim_takes_due_jobs_of_its_kinds_and_queues(db: &DatabaseConnection) -> Result<()> {
    let now = super::now_ms();
    let other = NewJob { kind: "other".into(), ..job("b") };
    let (later, urgent) =
        (NewJob { run_at: now + 3_600_000, ..job("c") }, NewJob { queue: "q2".into(), priority: 5, ..job("d") });
    add(db, &[job("a"), other, later, urgent, job("e")]).await?;
    let in_default = WorkerStoreOpts { queues: Some(vec!["default".into()]), ..opts("r", &["k"]) };
    let claimed = remote::claim(db, in_default, 1, now, now + 30_000).await?;
    assert_eq!(
        claimed.iter().map(|c| (c.id.as_str(), c.attempt, c.run, c.sequenced)).collect::<Vec<_>>(),
        [("a", 1, 1, false)]
    );
    assert_eq!((claimed[0].payload.replace(' ', ""), claimed[0].max_attempts), (r#"{"n":1}"#.to_owned(), 3));
    let a = get(db, "a").await?;
    assert_eq!(
        (a.status, a.locked_by.as_deref(), a.lease_expires_at),
        (JobStatus::Claimed, Some("r"), Some(from_ms(now + 30_000)))
    );
    let rest = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
    assert_eq!(rest.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["d", "e"], "by priority; `c` is not due");
    Ok(())
}

async fn remote_claim_honours_limits_and_sequences(db: &DatabaseConnection) -> Result<()> {
    let now = super::now_ms();
    add(db, &[job("a"), job("b"), sequenced("s1", "s"), sequenced("s2", "s")]).await?;
    let limited = WorkerStoreOpts { limits: vec![("k".into(), 1)], ..opts("r", &["k"]) };
    assert_eq!(remote::claim(db, limited.clone(), 10, now, now + 30_000).await?.len(), 1);
    assert!(remote::claim(db, limited, 10, now, now + 30_000).await?.is_empty(), "one is running");
    let claimed = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
    let mut got: Vec<(&str, bool)> = claimed.iter().map(|c| (c.id.as_str(), c.sequenced)).collect();
    got.sort_unstable();
    assert_eq!(got, [("b", false), ("s1", true)], "`s2` waits for `s1`");
    assert!(remote::finish(db, "r", finished("s1", 1, completed())).await?);
    let next = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
    assert_eq!(next.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["s2"]);
    Ok(())
}

async fn remote_finish_is_fenced(db: &DatabaseConnection) -> Result<()> {
    let now = super::now_ms();
    add(db, &[job("a"), job("b")]).await?;
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 2);
    assert!(!remote::finish(db, "other", finished("a", 1, completed())).await?, "another owner");
    assert!(!remote::finish(db, "r", finished("a", 2, completed())).await?, "another attempt");
    assert_eq!(get(db, "a").await?.status, JobStatus::Claimed);
    assert!(remote::finish(db, "r", finished("a", 1, completed())).await?);
    let a = get(db, "a").await?;
    assert_eq!(
        (a.status, a.output, a.lease_expires_at),
        (JobStatus::Completed, Some(serde_json::json!({"ok": true})), None)
    );
    assert!(a.completed_at.is_some());
    assert!(!remote::finish(db, "r", finished("a", 1, completed())).await?, "written already");
    let retry = Outcome::Retry { run_at: now + 60_000, error: "later".into() };
    assert!(remote::finish(db, "r", finished("b", 1, retry)).await?);
    let b = get(db, "b").await?;
    assert_eq!(
        (b.status, b.attempts, b.last_error.as_deref(), b.run_at),
        (JobStatus::Pending, 1, Some("later"), from_ms(now + 60_000))
    );
    Ok(())
}

/// A worker's batch of completions without output (each backend's plain statement) lands only for the claims it
/// holds: the right owner and the attempt claimed, once.
async fn a_batch_of_plain_completions_is_fenced(db: &DatabaseConnection) -> Result<()> {
    let now = super::now_ms();
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?.len(), 4);
    let plain = |id: &str, attempt: i32| finished(id, attempt, Outcome::Completed { output: None });
    let written = remote::finish_batch(db, "r", vec![plain("a", 1), plain("b", 2)]).await?;
    assert_eq!(written, [true, false], "`b` was claimed for its first attempt");
    let written = remote::finish_batch(db, "other", vec![plain("c", 1), plain("d", 1)]).await?;
    assert_eq!(written, [false, false], "`c` and `d` are claimed by `r`");
    for id in ["b", "c", "d"] {
        assert_eq!(get(db, id).await?.status, JobStatus::Claimed, "`{id}`");
    }
    let a = get(db, "a").await?;
    assert_eq!((a.status, a.output, a.lease_expires_at, a.attempts), (JobStatus::Completed, None, None, 1));
    assert!(a.completed_at.is_some());
    let written =
        remote::finish_batch(db, "r", vec![plain("b", 1), plain("c", 1), plain("d", 1), plain("a", 1)]).await?;
    assert_eq!(written, [true, true, true, false], "`a` was written already");
    for id in ["b", "c", "d"] {
        assert_eq!(get(db, id).await?.status, JobStatus::Completed, "`{id}`");
    }
    Ok(())
}

async fn remote_extend_is_fenced_and_never_shortens(db: &DatabaseConnection) -> Result<()> {
    let now = super::now_ms();
    add(db, &[job("a")]).await?;
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 1_000).await?.len(), 1);
    assert_eq!(remote::extend(db, "r", "a", 1, now + 60_000).await?, Some(now + 60_000));
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(from_ms(now + 60_000)));
    assert_eq!(remote::extend(db, "r", "a", 1, now + 10).await?, Some(now + 60_000), "the lease as stored");
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(from_ms(now + 60_000)), "never shortened");
    assert_eq!(remote::extend(db, "other", "a", 1, now + 90_000).await?, None);
    assert_eq!(remote::extend(db, "r", "a", 2, now + 90_000).await?, None);
    assert_eq!(remote::extend(db, "r", "nope", 1, now + 90_000).await?, None);
    Ok(())
}

async fn refuse_legacy_refuses_an_old_schema(db: &DatabaseConnection) -> Result<()> {
    super::schema::refuse_legacy(db).await?;
    let b = Backend::of(db)?;
    let legacy =
        "INSERT INTO outbox_migrations (version, applied_at) VALUES ('m20261122_000001_create_outbox_jobs', 0)";
    db.execute_raw(b.stmt(legacy, vec![])).await?;
    let err = super::schema::refuse_legacy(db).await;
    assert!(matches!(&err, Err(Error::Unsupported(m)) if m.contains("outbox migrate")), "{err:?}");
    Ok(())
}

async fn store_claims_and_finishes(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c")]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    let claimed = store.claim(2, now, now + 30_000).await?;
    assert_eq!(claimed.iter().map(|c| (c.id.as_str(), c.attempt)).collect::<Vec<_>>(), [("a", 1), ("b", 1)]);
    store.finish(finished("a", 1, completed()))?;
    store.finish(finished("b", 1, Outcome::Failed { error: "boom".into() }))?;
    store.flush().await?;
    let (a, b) = (get(db, "a").await?, get(db, "b").await?);
    assert_eq!(
        (a.status, a.output, a.locked_by.as_deref()),
        (JobStatus::Completed, Some(serde_json::json!({"ok": true})), Some("w1"))
    );
    assert_eq!((b.status, b.last_error.as_deref()), (JobStatus::Failed, Some("boom")));
    assert_eq!(get(db, "c").await?.status, JobStatus::Pending);
    let history: Vec<JobEventKind> = events::history(db, "a").await?.iter().map(|e| e.event).collect();
    assert_eq!(history, [JobEventKind::Enqueued, JobEventKind::Claimed, JobEventKind::Completed]);
    store.close().await;
    Ok(())
}

async fn store_extends_its_own_claims(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b")]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    assert_eq!(store.claim(1, now, now + 1_000).await?.len(), 1);
    assert_eq!(remote::claim(db, opts("w2", &["k"]), 1, now, now + 1_000).await?.len(), 1);
    let until = now + 90_000;
    assert_eq!(store.extend(vec!["a".into(), "b".into(), "nope".into()], until).await?, 1, "only its own");
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(from_ms(until)));
    assert_eq!(get(db, "b").await?.lease_expires_at, Some(from_ms(now + 1_000)));
    store.close().await;
    Ok(())
}

async fn store_rescues_expired_claims(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), NewJob { max_attempts: 1, ..job("b") }]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    assert_eq!(store.claim(10, now, now + 30_000).await?.len(), 2);
    assert!(store.rescue(now).await?.is_empty(), "the leases run for 30 s");
    let later = now + 3_600_000;
    let mut rescued = store.rescue(later).await?;
    rescued.sort_by(|x, y| x.id.cmp(&y.id));
    let got: Vec<_> =
        rescued.iter().map(|r| (r.id.as_str(), r.status.as_str(), r.attempt, r.previous_owner.as_deref())).collect();
    assert_eq!(got, [("a", "pending", 1, Some("w1")), ("b", "failed", 1, Some("w1"))]);
    let (a, b) = (get(db, "a").await?, get(db, "b").await?);
    assert_eq!((a.status, a.lease_expires_at, a.run_at), (JobStatus::Pending, None, from_ms(later)));
    assert_eq!(a.last_error.as_deref(), Some("lease expired while claimed by w1"));
    assert_eq!(b.last_error.as_deref(), Some("lease expired while claimed by w1; no attempts left"));
    assert_eq!(events::history(db, "a").await?.last().map(|e| e.event), Some(JobEventKind::Rescued));
    assert_eq!(events::history(db, "b").await?.last().map(|e| e.event), Some(JobEventKind::RescuedFailed));
    assert!(store.rescue(later).await?.is_empty());
    // The rescued attempt's outcome meets the fence.
    store.finish(finished("a", 1, completed()))?;
    store.flush().await?;
    assert_eq!(get(db, "a").await?.status, JobStatus::Pending);
    store.close().await;
    Ok(())
}

/// Whether job `id` waits off the ready indexes for its time.
async fn is_scheduled(db: &DatabaseConnection, id: &str) -> Result<bool> {
    let b = Backend::of(db)?;
    let row = db.query_one_raw(b.stmt("SELECT scheduled FROM outbox_jobs WHERE id = $1", vec![id.into()])).await?;
    Ok(row.unwrap_or_else(|| panic!("no job `{id}`")).try_get_by_index::<bool>(0)?)
}

async fn store_claim_lets_in_scheduled_jobs_once_due(db: &DatabaseConnection) -> Result<()> {
    let now = super::now_ms();
    let later = now + 60_000;
    // Due later, at a higher priority: never read by a claim before it is due.
    add(db, &[NewJob { run_at: later, scheduled: true, priority: 5, ..job("later") }, job("now")]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let claimed = store.claim(10, now, now + 30_000).await?;
    assert_eq!(claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["now"]);
    assert!(is_scheduled(db, "later").await?);
    // A retry's backoff schedules the job again.
    store.finish(finished("now", 1, Outcome::Retry { run_at: later + 5, error: "boom".into() }))?;
    store.flush().await?;
    assert!(is_scheduled(db, "now").await?, "backing off");
    assert!(store.claim(10, now + 1, now + 30_000).await?.is_empty());
    let mut claimed = store.claim(10, later + 5, later + 30_000).await?;
    claimed.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(claimed.iter().map(|c| (c.id.as_str(), c.attempt)).collect::<Vec<_>>(), [("later", 1), ("now", 2)]);
    assert!(!is_scheduled(db, "later").await? && !is_scheduled(db, "now").await?);
    // A snooze waits off the ready indexes too.
    store.finish(finished("later", 1, Outcome::Snoozed { run_at: later + 5 }))?;
    store.flush().await?;
    let snoozed = get(db, "later").await?;
    assert_eq!((snoozed.status, snoozed.attempts), (JobStatus::Pending, 0), "snoozed");
    assert!(is_scheduled(db, "later").await?, "snoozed until a later time");
    store.close().await;
    Ok(())
}

async fn store_claim_reads_only_served_kinds_and_queues(db: &DatabaseConnection) -> Result<()> {
    let other = |id: &str| NewJob { kind: "other".into(), priority: 9, ..job(id) };
    add(db, &[other("o1"), job("k1"), NewJob { kind: "k2".into(), priority: 1, ..job("k2") }, other("o2")]).await?;
    add(db, &[NewJob { queue: "q".into(), priority: 3, ..job("q1") }]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k", "k2"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    let mut claimed: Vec<String> = store.claim(2, now, now + 30_000).await?.into_iter().map(|c| c.id).collect();
    claimed.sort_unstable();
    assert_eq!(claimed, ["k2", "q1"], "the heads of both kinds' ranges, merged by priority");
    store.close().await;
    let queued = WorkerStoreOpts { queues: Some(vec!["default".into()]), ..opts("w2", &["k", "k2", "other"]) };
    let claimed = remote::claim(db, queued, 10, now, now + 30_000).await?;
    let mut got: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
    got.sort_unstable();
    assert_eq!(got, ["k1", "o1", "o2"]);
    assert_eq!(get(db, "k1").await?.status, JobStatus::Claimed);
    Ok(())
}

/// A claim that reads on from where the last one ended and finds fewer jobs than it asked for starts them at
/// once; the next claim reads the head, where a job enqueued meanwhile ahead of them sorts.
async fn store_claims_a_job_ahead_of_a_short_read_by_the_next_claim(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d")]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    let first: Vec<String> = store.claim(2, now, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    assert_eq!(first, ["a", "b"]);
    add(db, &[NewJob { priority: 9, ..job("hi") }]).await?;
    let mut short: Vec<String> = store.claim(10, now + 10, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    short.sort_unstable();
    assert!(short.starts_with(&["c".to_owned(), "d".to_owned()]), "{short:?}");
    let next: Vec<String> = store.claim(10, now + 20, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    let mut seen: Vec<String> = first.into_iter().chain(short).chain(next).collect();
    seen.sort_unstable();
    assert_eq!(seen, ["a", "b", "c", "d", "hi"], "every job once, the later one by the claim after the short one");
    let empty = store.claim(10, now + 30, now + 60_000).await?;
    assert!(empty.is_empty(), "{empty:?}");
    store.close().await;
    Ok(())
}

async fn store_claims_each_job_once_and_a_later_higher_priority_within_a_second(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b"), job("c"), job("d"), job("e")]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    let mut seen: Vec<String> = store.claim(2, now, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    assert_eq!(seen, ["a", "b"]);
    // Enqueued after the claim, ahead of everything left: a worker reading on from where its last claim ended
    // may take others first, but not for longer than a second.
    add(db, &[NewJob { priority: 9, ..job("hi") }]).await?;
    let next: Vec<String> = store.claim(1, now + 10, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    assert_eq!(next.len(), 1, "{next:?}");
    seen.extend(next);
    let later: Vec<String> = store.claim(1, now + 1_100, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    seen.extend(later);
    assert!(seen.iter().any(|id| id == "hi"), "the higher priority waited over a second: {seen:?}");
    let rest: Vec<String> = store.claim(10, now + 1_200, now + 60_000).await?.into_iter().map(|c| c.id).collect();
    seen.extend(rest);
    seen.sort_unstable();
    assert_eq!(seen, ["a", "b", "c", "d", "e", "hi"], "every job once");
    store.close().await;
    Ok(())
}

/// The claimed jobs no rescue can see: on PostgreSQL, those no claim row lists at or before their own lease; on
/// SQLite, those without a lease. Every claimed job must be rescuable, or a worker that dies with it strands it.
pub(super) async fn unrescuable(db: &DatabaseConnection) -> Result<Vec<String>> {
    let sql = match Backend::of(db)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            "SELECT id FROM outbox_jobs WHERE status = 'claimed' AND lease_expires_at IS NULL ORDER BY id"
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            "SELECT j.id FROM outbox_jobs j WHERE j.status = 'claimed' AND NOT EXISTS (SELECT 1 FROM outbox_claims c \
             WHERE j.id = ANY(c.jobs) AND c.lease_expires_at <= COALESCE(j.lease_expires_at, TIMESTAMPTZ 'epoch')) \
             ORDER BY 1"
        }
    };
    let rows = db.query_all_raw(Backend::of(db)?.stmt(sql, vec![])).await?;
    Ok(rows.iter().map(|r| r.try_get_by_index::<String>(0)).collect::<std::result::Result<_, _>>()?)
}

/// A worker whose claim ran out claims the job again; the first run's late outcome is refused and leaves the
/// second claim as the rescuers see it.
async fn store_stale_outcome_leaves_the_newer_claim_rescuable(db: &DatabaseConnection) -> Result<()> {
    add(db, &[NewJob { max_attempts: 5, ..job("a") }]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    let first = store.claim(1, now, now + 1_000).await?;
    assert_eq!(first.iter().map(|c| (c.id.as_str(), c.run)).collect::<Vec<_>>(), [("a", 1)]);
    assert_eq!(store.rescue(now + 2_000).await?.len(), 1, "the first claim ran out");
    let second = store.claim(1, now + 2_000, now + 3_000).await?;
    assert_eq!(second.iter().map(|c| (c.id.as_str(), c.run)).collect::<Vec<_>>(), [("a", 2)]);
    store.finish(finished("a", first[0].run, completed()))?;
    store.flush().await?;
    assert_eq!(get(db, "a").await?.status, JobStatus::Claimed, "the stale outcome is refused");
    assert_eq!(unrescuable(db).await?, Vec::<String>::new(), "the second claim is still rescuable");
    let rescued = store.rescue(now + 4_000).await?;
    assert_eq!(rescued.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["a"], "the second claim is rescued");
    store.close().await;
    Ok(())
}

/// A batch holding the outcome of a job's earlier run beside that of its current run writes the current one,
/// in whichever order they come.
async fn a_batch_with_a_stale_and_a_fresh_outcome_writes_the_fresh_one(db: &DatabaseConnection) -> Result<()> {
    add(db, &[NewJob { max_attempts: 5, ..job("a") }, NewJob { max_attempts: 5, ..job("b") }]).await?;
    let now = super::now_ms();
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 1_000).await?.len(), 2);
    set(db, "a", "lease_expires_at = {0}", &[now - 1]).await?;
    set(db, "b", "lease_expires_at = {0}", &[now - 1]).await?;
    let store = super::open_worker_store(db, opts("r", &["k"]), &tokio::runtime::Handle::current()).await?;
    assert_eq!(store.rescue(now).await?.len(), 2);
    assert_eq!(remote::claim(db, opts("r", &["k"]), 10, now, now + 60_000).await?.len(), 2);
    let done =
        |id: &str, run: i32| finished(id, run, Outcome::Completed { output: Some(format!("{{\"run\":{run}}}")) });
    let written = remote::finish_batch(db, "r", vec![done("a", 2), done("a", 1), done("b", 1), done("b", 2)]).await?;
    assert_eq!(written, [true, false, false, true], "the current runs' outcomes, whatever their place");
    for id in ["a", "b"] {
        let j = get(db, id).await?;
        assert_eq!((j.status, j.output), (JobStatus::Completed, Some(serde_json::json!({"run": 2}))), "`{id}`");
    }
    store.close().await;
    Ok(())
}

/// An operator's retry starts a job's attempts over, not its runs: the outcome of a run before the retry never
/// lands on a claim after it, even by the same worker and with the same attempt number.
async fn an_operator_retry_fences_out_the_earlier_run(db: &DatabaseConnection) -> Result<()> {
    add(db, &[NewJob { max_attempts: 1, ..job("a") }, NewJob { max_attempts: 1, ..job("b") }]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    let first = store.claim(10, now, now + 1_000).await?;
    assert_eq!(first.iter().map(|c| (c.attempt, c.run)).collect::<Vec<_>>(), [(1, 1), (1, 1)]);
    let rescued = store.rescue(now + 2_000).await?;
    assert!(rescued.iter().all(|r| r.status == "failed"), "no attempts left: {rescued:?}");
    for id in ["a", "b"] {
        assert!(jobs::retry(db, id, now + 2_000).await?, "`{id}` retried");
    }
    let second = store.claim(10, now + 2_000, now + 60_000).await?;
    assert_eq!(second.iter().map(|c| (c.attempt, c.run)).collect::<Vec<_>>(), [(1, 2), (1, 2)]);
    // The first run of `a` ends late, through the worker; that of `b` through the remote calls.
    store.finish(finished("a", first[0].run, Outcome::Failed { error: "stale".into() }))?;
    store.flush().await?;
    assert!(!remote::finish(db, "w1", finished("b", first[1].run, Outcome::Failed { error: "stale".into() })).await?);
    assert_eq!(remote::extend(db, "w1", "b", first[1].run, now + 90_000).await?, None, "a stale renewal is refused");
    for id in ["a", "b"] {
        let j = get(db, id).await?;
        assert_eq!(
            (j.status, j.last_error.as_deref()),
            (JobStatus::Claimed, Some("lease expired while claimed by w1; no attempts left")),
            "`{id}`"
        );
    }
    store.finish(finished("a", second[0].run, completed()))?;
    store.flush().await?;
    assert!(remote::finish(db, "w1", finished("b", second[1].run, completed())).await?);
    for id in ["a", "b"] {
        assert_eq!(get(db, id).await?.status, JobStatus::Completed, "`{id}`");
    }
    assert_eq!(unrescuable(db).await?, Vec::<String>::new());
    store.close().await;
    Ok(())
}

/// A heartbeat never shortens a lease, and answers the lease as it stands: a shorter renewal after a longer one
/// answers the longer one.
async fn a_remote_heartbeat_answers_the_lease_it_stored(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a")]).await?;
    let now = super::now_ms();
    let claimed = remote::claim(db, opts("r", &["k"]), 1, now, now + 1_000).await?;
    let run = claimed[0].run;
    let long = crate::remote::heartbeat(db, "r", "a", run, Duration::from_secs(300)).await?;
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(long));
    let short = crate::remote::heartbeat(db, "r", "a", run, Duration::from_secs(1)).await?;
    assert_eq!(get(db, "a").await?.lease_expires_at, Some(long), "never shortened");
    assert_eq!(short, long, "the answer is the lease as stored, not the one asked for");
    Ok(())
}

/// A batch cut short by a duplicate key reads back which of its rows went in; a row that went in and was
/// claimed, completed and deleted (its kind keeps nothing) before that read-back still counts as written, or
/// the enqueue would write it again under the same id and it would run twice.
async fn insert_jobs_counts_a_row_finished_before_its_read_back(db: &DatabaseConnection) -> Result<()> {
    let other = |id: &str| NewJob { kind: "other".into(), key: Some("taken".into()), ..job(id) };
    add(db, &[other("holder")]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let (reached, at_read_back) = tokio::sync::oneshot::channel();
    let (resume, resumed) = tokio::sync::oneshot::channel();
    let pause = std::cell::RefCell::new(Some((reached, resumed)));
    let batch = [job("x"), other("duplicate")];
    let insert = enqueue::read_back::PAUSE.scope(pause, enqueue::insert_jobs(db, &batch));
    let meanwhile = async {
        at_read_back.await.expect("the insert was cut short by the duplicate and reads back");
        let now = super::now_ms();
        let claimed = store.claim(10, now, now + 60_000).await?;
        assert_eq!(claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["x"]);
        let done =
            Finished { keep: Keep::Nothing, ..finished("x", claimed[0].run, Outcome::Completed { output: None }) };
        store.finish(done)?;
        store.flush().await?;
        assert_eq!(jobs::get(db, "x").await?, None, "completed and deleted");
        let _ = resume.send(());
        Ok::<_, Error>(())
    };
    let (written, done) = tokio::join!(insert, meanwhile);
    done?;
    assert_eq!(written?, ["x"], "`x` was written, and ran, once");
    store.close().await;
    Ok(())
}

/// An outcome written alone (a remote worker's, or one of a batch the database refused, written job by job)
/// deletes a completed job of a kind that keeps nothing, as a batch does.
async fn a_completion_written_alone_deletes_a_job_kept_nowhere(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a")]).await?;
    let now = super::now_ms();
    let claimed = remote::claim(db, opts("r", &["k"]), 1, now, now + 60_000).await?;
    let done = Finished { keep: Keep::Nothing, ..finished("a", claimed[0].run, Outcome::Completed { output: None }) };
    assert!(remote::finish(db, "r", done).await?);
    assert_eq!(jobs::get(db, "a").await?, None, "deleted as it completed");
    assert!(events::outlived(db, "a").await?, "its events tell it completed");
    Ok(())
}

/// `purge` of completed jobs also takes the events of jobs deleted as they completed, with the feed rows that
/// recorded those completions; nothing is left that no retention would find.
async fn purge_takes_the_events_of_jobs_deleted_as_they_completed(db: &DatabaseConnection) -> Result<()> {
    add(db, &[job("a"), job("b")]).await?;
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let now = super::now_ms();
    let claimed = store.claim(10, now, now + 60_000).await?;
    assert_eq!(claimed.len(), 2);
    for c in &claimed {
        let keep = if c.id == "a" { Keep::Nothing } else { Keep::Row };
        store.finish(Finished { keep, ..finished(&c.id, c.run, Outcome::Completed { output: None }) })?;
    }
    store.flush().await?;
    store.close().await;
    assert!(events::outlived(db, "a").await?);
    jobs::purge(db, &[JobStatus::Completed], now + 3_600_000).await?;
    let b = Backend::of(db)?;
    let left = db.query_all_raw(b.stmt("SELECT job_id, event FROM outbox_job_events ORDER BY id", vec![])).await?;
    let left: Vec<(String, String)> = left
        .iter()
        .map(|r| Ok((r.try_get_by_index(0)?, r.try_get_by_index(1)?)))
        .collect::<std::result::Result<_, sea_orm::DbErr>>()?;
    assert_eq!(left, Vec::<(String, String)>::new(), "events left behind by the purge");
    Ok(())
}

/// PostgreSQL alone: transactions of one snapshot (`REPEATABLE READ`, `SERIALIZABLE`) enqueuing beside others,
/// which SQLite, one writer at a time, does not have.
#[cfg(feature = "postgres")]
mod postgres_only {
    use crate::storage::Backend;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_enqueued_under_an_older_snapshot_waits_for_the_job_ahead() {
        let name = "postgres::a_job_enqueued_under_an_older_snapshot_waits_for_the_job_ahead";
        super::run(Backend::Postgres, name, super::a_job_enqueued_under_an_older_snapshot_waits_for_the_job_ahead)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_enqueued_under_a_snapshot_is_let_go_after_its_commit() {
        let name = "postgres::a_job_enqueued_under_a_snapshot_is_let_go_after_its_commit";
        super::run(Backend::Postgres, name, super::a_job_enqueued_under_a_snapshot_is_let_go_after_its_commit).await;
    }
}

/// The ids of `jobs`, in order.
#[cfg(feature = "postgres")]
fn claimed_ids(jobs: &[super::ClaimedJob]) -> Vec<&str> {
    jobs.iter().map(|c| c.id.as_str()).collect()
}

/// A transaction of one snapshot takes it before the first job of a sequence is enqueued and committed (by a
/// `READ COMMITTED` writer), then enqueues the second: the second waits for the first, is not claimed beside it,
/// and goes once the first completes. The insert trigger read the jobs ahead through that snapshot, which does
/// not hold the first job, and put the second in free to run.
#[cfg(feature = "postgres")]
async fn a_job_enqueued_under_an_older_snapshot_waits_for_the_job_ahead(db: &DatabaseConnection) -> Result<()> {
    use sea_orm::{IsolationLevel, TransactionTrait};
    for (isolation, s) in [(IsolationLevel::RepeatableRead, "rr"), (IsolationLevel::Serializable, "ser")] {
        let (first, second) = (format!("{s}1"), format!("{s}2"));
        let late = db.begin_with_config(Some(isolation), None).await?;
        let of_s = Backend::Postgres.stmt("SELECT id FROM outbox_jobs WHERE sequence_key = $1", vec![s.into()]);
        assert!(late.query_all_raw(of_s).await?.is_empty(), "{isolation}: the snapshot, taken before `{first}`");
        add(db, &[sequenced(&first, s)]).await?;
        assert!(enqueue::insert_job(&late, &sequenced(&second, s)).await?, "{isolation}: `{second}` written");
        late.commit().await?;
        assert_eq!(get(db, &second).await?.waiting_for.as_deref(), Some(first.as_str()), "{isolation}");
        let now = super::now_ms();
        let claimed = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
        assert_eq!(claimed_ids(&claimed), [first.as_str()], "{isolation}: `{second}` waits for `{first}`");
        assert!(remote::finish(db, "r", finished(&first, 1, completed())).await?);
        let next = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
        assert_eq!(claimed_ids(&next), [second.as_str()], "{isolation}");
        assert!(remote::finish(db, "r", finished(&second, 1, completed())).await?);
    }
    Ok(())
}

/// A job enqueued under a snapshot waits whatever the snapshot showed, and is let go after its transaction
/// commits: by the release of its sequence that the commit asks the workers' listeners for, or by the rescuers'
/// sweep. In `a` the job ahead completed after the snapshot was taken; `b` has nothing ahead; `c` is a pair of
/// `SERIALIZABLE` enqueuers, which both commit (the trigger reads nothing they could conflict on) and go in order.
#[cfg(feature = "postgres")]
async fn a_job_enqueued_under_a_snapshot_is_let_go_after_its_commit(db: &DatabaseConnection) -> Result<()> {
    use sea_orm::sqlx::postgres::PgListener;
    use sea_orm::{IsolationLevel, TransactionTrait};
    let row = db.query_one_raw(Backend::Postgres.stmt("SELECT current_schema()::text", vec![])).await?;
    let schema: String = row.expect("a row").try_get_by_index(0)?;
    let mut heard =
        PgListener::connect_with(db.get_postgres_connection_pool()).await.map_err(Error::db("listening"))?;
    heard.listen("outbox_jobs").await.map_err(Error::db("listening"))?;

    let late = db.begin_with_config(Some(IsolationLevel::RepeatableRead), None).await?;
    late.execute_unprepared("SELECT 1").await?;
    add(db, &[sequenced("a1", "a")]).await?;
    mark_completed(db, "a1", T0 + 1).await?;
    assert!(enqueue::insert_job(&late, &sequenced("a2", "a")).await?);
    late.commit().await?;
    let a2 = get(db, "a2").await?;
    assert_eq!((a2.status, a2.waiting_for), (JobStatus::Pending, None), "nothing ahead of it holds it");
    assert_eq!(ids_where(db, "waiting").await?, ["a2"], "but it went in waiting");
    let asked = format!("{schema}\u{1e}a");
    let hear = async {
        while heard.recv().await?.payload() != asked {}
        Ok::<(), sea_orm::sqlx::Error>(())
    };
    tokio::time::timeout(Duration::from_secs(30), hear)
        .await
        .expect("the commit asks for `a` to be let go")
        .map_err(Error::db("hearing"))?;
    // Another transaction holds the sequence's lock (an enqueue onto it): nothing is let go, and the listener is
    // told to try again.
    let holder = db.begin().await?;
    let lock = "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ' outbox sequence ' || 'a', 0))";
    holder.execute_unprepared(lock).await?;
    assert_eq!(super::postgres::release_sequences(db, &["a".to_owned()]).await?, (0, vec!["a".to_owned()]), "held");
    holder.rollback().await?;
    assert_eq!(super::postgres::release_sequences(db, &["a".to_owned()]).await?, (1, vec![]), "what the listener runs");
    assert_eq!(ids_where(db, "waiting").await?, Vec::<String>::new());
    assert_eq!(super::postgres::release_sequences(db, &["a".to_owned()]).await?, (0, vec![]), "once");

    let late = db.begin_with_config(Some(IsolationLevel::RepeatableRead), None).await?;
    assert!(enqueue::insert_job(&late, &sequenced("b1", "b")).await?);
    late.commit().await?;
    assert_eq!(ids_where(db, "waiting").await?, ["b1"]);
    let store = super::open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    store.rescue(super::now_ms()).await?;
    store.close().await;
    assert_eq!(ids_where(db, "waiting").await?, Vec::<String>::new(), "the sweep lets it go too");

    let early = db.begin_with_config(Some(IsolationLevel::Serializable), None).await?;
    let late = db.begin_with_config(Some(IsolationLevel::Serializable), None).await?;
    late.execute_unprepared("SELECT 1").await?;
    assert!(enqueue::insert_job(&early, &sequenced("c1", "c")).await?);
    early.commit().await?;
    assert!(enqueue::insert_job(&late, &sequenced("c2", "c")).await?, "no serialization failure");
    late.commit().await?;
    assert_eq!(ids_where(db, "waiting").await?, ["c1", "c2"]);
    assert_eq!(super::postgres::release_sequences(db, &["c".to_owned()]).await?, (1, vec![]));
    assert_eq!(get(db, "c2").await?.waiting_for.as_deref(), Some("c1"));
    let now = super::now_ms();
    let claimed = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
    let mut ids = claimed_ids(&claimed);
    ids.sort_unstable();
    assert_eq!(ids, ["a2", "b1", "c1"], "`c2` waits for `c1`");
    assert!(remote::finish(db, "r", finished("c1", 1, completed())).await?);
    let next = remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await?;
    assert_eq!(claimed_ids(&next), ["c2"]);
    drop(heard);
    Ok(())
}
