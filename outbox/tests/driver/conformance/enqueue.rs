//! Conformance of `storage/enqueue.rs`: jobs written one at a time and in batches, the keys active jobs hold,
//! and places in sequences, with (on PostgreSQL) enqueues under an older snapshot.

use sea_orm::{ConnectionTrait, DatabaseConnection};

use super::{T0, add, finished, get, job, keyed, mark_claimed, mark_completed, mark_failed, opts, sequenced};
use crate::error::{Error, Result};
use crate::record::JobStatus;
use crate::storage::enqueue::{self, NewJob, Twin};
use crate::storage::{Dialect, Finished, Keep, Outcome, jobs, now_ms, open_worker_store};
use crate::time::from_ms;

#[cfg(feature = "postgres")]
use super::completed;
#[cfg(feature = "postgres")]
use crate::storage::postgres::release_sequences;
#[cfg(feature = "postgres")]
use crate::storage::remote;
#[cfg(feature = "postgres")]
use std::time::Duration;

driver_tests!(
    insert_job_writes_a_pending_job,
    insert_job_skips_an_active_key,
    insert_job_takes_a_key_its_holder_left,
    find_twin_is_behind_a_later_job_of_its_sequence,
    insert_jobs_returns_the_ids_written,
    insert_jobs_writes_each_row_as_given,
    insert_jobs_puts_the_second_of_a_sequence_waiting,
    insert_job_waits_only_behind_a_blocking_job,
    insert_jobs_counts_a_row_finished_before_its_read_back;
    mysql: insert_jobs_counts_a_row_finished_before_its_read_back,
    insert_job_writes_a_pending_job,
    insert_job_skips_an_active_key,
    insert_job_takes_a_key_its_holder_left,
    find_twin_is_behind_a_later_job_of_its_sequence,
    insert_jobs_returns_the_ids_written,
    insert_jobs_writes_each_row_as_given,
    insert_jobs_puts_the_second_of_a_sequence_waiting,
    insert_job_waits_only_behind_a_blocking_job,
);

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
    let b = Dialect::of(db)?;
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

/// A batch cut short by a duplicate key reads back which of its rows went in; a row that went in and was
/// claimed, completed and deleted (its kind keeps nothing) before that read-back still counts as written, or
/// the enqueue would write it again under the same id and it would run twice.
async fn insert_jobs_counts_a_row_finished_before_its_read_back(db: &DatabaseConnection) -> Result<()> {
    let other = |id: &str| NewJob { kind: "other".into(), key: Some("taken".into()), ..job(id) };
    add(db, &[other("holder")]).await?;
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    let (reached, at_read_back) = tokio::sync::oneshot::channel();
    let (resume, resumed) = tokio::sync::oneshot::channel();
    let pause = std::cell::RefCell::new(Some((reached, resumed)));
    let batch = [job("x"), other("duplicate")];
    let insert = enqueue::read_back::PAUSE.scope(pause, enqueue::insert_jobs(db, &batch));
    let meanwhile = async {
        at_read_back.await.expect("the insert was cut short by the duplicate and reads back");
        let now = now_ms();
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

/// PostgreSQL alone: transactions of one snapshot (`REPEATABLE READ`, `SERIALIZABLE`) enqueuing beside others,
/// which SQLite, one writer at a time, does not have.
#[cfg(feature = "postgres")]
mod postgres_only {
    use crate::storage::Dialect;
    use crate::storage::conformance::run;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_enqueued_under_an_older_snapshot_waits_for_the_job_ahead() {
        let name = "postgres::a_job_enqueued_under_an_older_snapshot_waits_for_the_job_ahead";
        run(Dialect::Postgres, name, super::a_job_enqueued_under_an_older_snapshot_waits_for_the_job_ahead).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_enqueued_under_a_snapshot_is_let_go_after_its_commit() {
        let name = "postgres::a_job_enqueued_under_a_snapshot_is_let_go_after_its_commit";
        run(Dialect::Postgres, name, super::a_job_enqueued_under_a_snapshot_is_let_go_after_its_commit).await;
    }
}

/// The ids of `jobs`, in order.
#[cfg(feature = "postgres")]
fn claimed_ids(jobs: &[crate::storage::ClaimedJob]) -> Vec<&str> {
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
        let of_s = Dialect::Postgres.stmt("SELECT id FROM outbox_jobs WHERE sequence_key = $1", vec![s.into()]);
        assert!(late.query_all_raw(of_s).await?.is_empty(), "{isolation}: the snapshot, taken before `{first}`");
        add(db, &[sequenced(&first, s)]).await?;
        assert!(enqueue::insert_job(&late, &sequenced(&second, s)).await?, "{isolation}: `{second}` written");
        late.commit().await?;
        assert_eq!(get(db, &second).await?.waiting_for.as_deref(), Some(first.as_str()), "{isolation}");
        let now = now_ms();
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
    let row = db.query_one_raw(Dialect::Postgres.stmt("SELECT current_schema()::text", vec![])).await?;
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
    assert_eq!(release_sequences(db, &["a".to_owned()]).await?, (0, vec!["a".to_owned()]), "held");
    holder.rollback().await?;
    assert_eq!(release_sequences(db, &["a".to_owned()]).await?, (1, vec![]), "what the listener runs");
    assert_eq!(ids_where(db, "waiting").await?, Vec::<String>::new());
    assert_eq!(release_sequences(db, &["a".to_owned()]).await?, (0, vec![]), "once");

    let late = db.begin_with_config(Some(IsolationLevel::RepeatableRead), None).await?;
    assert!(enqueue::insert_job(&late, &sequenced("b1", "b")).await?);
    late.commit().await?;
    assert_eq!(ids_where(db, "waiting").await?, ["b1"]);
    let store = open_worker_store(db, opts("w1", &["k"]), &tokio::runtime::Handle::current()).await?;
    store.rescue(now_ms()).await?;
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
    assert_eq!(release_sequences(db, &["c".to_owned()]).await?, (1, vec![]));
    assert_eq!(get(db, "c2").await?.waiting_for.as_deref(), Some("c1"));
    let now = now_ms();
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
