//! MySQL alone: how its sequences keep their promises without a trigger that writes other jobs. Every sequenced job
//! goes in waiting and is let go by a store that looks at its sequence (`storage/mysql/sequences.rs`); enqueuers of
//! one sequence take turns on its row until they commit.

#[cfg(feature = "mysql")]
mod mysql_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_open_enqueue_onto_a_sequence_stalls_no_completion_and_its_job_goes_after_its_commit() {
        let name = "mysql::an_open_enqueue_onto_a_sequence_stalls_no_completion_and_its_job_goes_after_its_commit";
        super::super::run(crate::storage::Dialect::MySql, name, super::open_enqueue).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_enqueuers_of_a_sequence_commit_in_the_order_of_their_places() {
        let name = "mysql::two_enqueuers_of_a_sequence_commit_in_the_order_of_their_places";
        super::super::run(crate::storage::Dialect::MySql, name, super::two_enqueuers).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_put_back_rejoins_its_sequence_behind_the_one_running() {
        let name = "mysql::a_job_put_back_rejoins_its_sequence_behind_the_one_running";
        super::super::run(crate::storage::Dialect::MySql, name, super::rejoin).await;
    }
}

#[cfg(feature = "mysql")]
use {
    super::{T0, add, completed, finished, get, opts, sequenced},
    crate::error::Result,
    crate::storage::{ClaimedJob, Dialect, Outcome, enqueue, enqueue::NewJob, jobs, now_ms, remote},
    sea_orm::{ConnectionTrait, DatabaseConnection, TransactionTrait},
};

#[cfg(feature = "mysql")]
fn claimed_ids(jobs: &[ClaimedJob]) -> Vec<&str> {
    jobs.iter().map(|c| c.id.as_str()).collect()
}

/// A claim of `k` by `r` now, with a lease of 30 s.
#[cfg(feature = "mysql")]
async fn claim(db: &DatabaseConnection) -> Result<Vec<ClaimedJob>> {
    let now = now_ms();
    remote::claim(db, opts("r", &["k"]), 10, now, now + 30_000).await
}

/// An application transaction enqueued `s2` behind `s1` and is still open: the completion of `s1` takes no lock it
/// holds (a look for the job ahead in the insert trigger would have kept a shared lock on `s1`, and the completion
/// would have waited for it), and `s2` goes once it commits.
#[cfg(feature = "mysql")]
async fn open_enqueue(db: &DatabaseConnection) -> Result<()> {
    add(db, &[sequenced("s1", "s")]).await?;
    assert_eq!(get(db, "s1").await?.waiting_for, None);
    assert_eq!(claimed_ids(&claim(db).await?), ["s1"], "let go by the claim that looked at its sequence");
    let open = db.begin().await?;
    assert!(enqueue::insert_job(&open, &sequenced("s2", "s")).await?);
    assert!(remote::finish(db, "r", finished("s1", 1, completed())).await?, "completed while `s2`'s enqueue is open");
    assert!(claim(db).await?.is_empty(), "`s2` is not committed");
    open.commit().await?;
    assert_eq!(get(db, "s2").await?.waiting_for, None, "nothing ahead holds it");
    assert_eq!(claimed_ids(&claim(db).await?), ["s2"]);
    Ok(())
}

/// The second enqueuer of a sequence waits for the first one's commit (seen as its insert in the server's process
/// list), so places are taken in commit order; the first one's job runs first.
#[cfg(feature = "mysql")]
async fn two_enqueuers(db: &DatabaseConnection) -> Result<()> {
    let first = db.begin().await?;
    assert!(enqueue::insert_job(&first, &sequenced("a", "s")).await?);
    let second = tokio::spawn({
        let db = db.clone();
        async move {
            let txn = db.begin().await?;
            assert!(enqueue::insert_job(&txn, &sequenced("b", "s")).await?);
            txn.commit().await?;
            Ok::<_, crate::error::Error>(())
        }
    });
    // The statement running is the insert trigger's, at the sequence's row.
    let waits = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() \
                 AND (INFO LIKE 'INSERT INTO outbox_jobs%' OR INFO LIKE 'INSERT INTO outbox_sequences%') \
                 AND ID <> CONNECTION_ID()";
    loop {
        let row = db.query_one_raw(Dialect::MySql.stmt(waits, vec![])).await?.expect("a count");
        if row.try_get_by_index::<i64>(0)? == 1 {
            break;
        }
        if second.is_finished() {
            panic!("the second enqueue did not wait for the first: {:?}", second.await);
        }
        tokio::task::yield_now().await;
    }
    first.commit().await?;
    second.await.expect("the second enqueue")?;
    let (a, b) = (get(db, "a").await?, get(db, "b").await?);
    assert!(a.sequence_no < b.sequence_no, "{:?} < {:?}", a.sequence_no, b.sequence_no);
    assert_eq!(b.waiting_for.as_deref(), Some("a"));
    assert_eq!(claimed_ids(&claim(db).await?), ["a"]);
    assert!(remote::finish(db, "r", finished("a", 1, completed())).await?);
    assert_eq!(claimed_ids(&claim(db).await?), ["b"]);
    Ok(())
}

/// A job that failed under the continue policy, put back by an operator while the next one runs, waits behind it,
/// then runs; the one after waits for it.
#[cfg(feature = "mysql")]
async fn rejoin(db: &DatabaseConnection) -> Result<()> {
    let lets_go = NewJob { hold: false, max_attempts: 1, ..sequenced("s1", "s") };
    add(db, &[lets_go, sequenced("s2", "s"), sequenced("s3", "s")]).await?;
    assert_eq!(claimed_ids(&claim(db).await?), ["s1"]);
    let failed = Outcome::Failed { error: "boom".into() };
    assert!(remote::finish(db, "r", finished("s1", 1, failed)).await?);
    assert_eq!(claimed_ids(&claim(db).await?), ["s2"]);
    assert!(jobs::retry(db, "s1", T0 + 1).await?, "put back while `s2` runs");
    assert_eq!(get(db, "s1").await?.waiting_for.as_deref(), Some("s2"));
    assert!(claim(db).await?.is_empty(), "`s1` waits for the running `s2`");
    assert!(remote::finish(db, "r", finished("s2", 1, completed())).await?);
    assert_eq!(claimed_ids(&claim(db).await?), ["s1"], "first of its sequence still to run");
    assert!(remote::finish(db, "r", finished("s1", 2, completed())).await?);
    assert_eq!(claimed_ids(&claim(db).await?), ["s3"]);
    Ok(())
}
