//! Conformance of `storage/schedules.rs`: schedules registered, and each tick claimed once.

use sea_orm::DatabaseConnection;

use super::T0;
use crate::error::Result;
use crate::storage::schedules::{self, ScheduleRow};
use crate::time::from_ms;

driver_tests!(
    schedules_register_returns_the_last_tick,
    schedules_claim_each_tick_once;
    mysql: schedules_register_returns_the_last_tick, schedules_claim_each_tick_once,
);

pub(super) fn schedule(name: &str) -> ScheduleRow {
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

/// MySQL alone: a new schedule's first tick claimed by two transactions at once goes to one. The second's update
/// waits for the row the first inserted; once the first commits, it finds the tick moved, and its insert meets the
/// row's key (a statement error that leaves the transaction going); when the first rolls back, its insert goes in.
#[cfg(feature = "mysql")]
mod mysql_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_schedule_s_first_tick_claimed_by_two_at_once_goes_to_one() {
        let name = "mysql::a_new_schedule_s_first_tick_claimed_by_two_at_once_goes_to_one";
        super::super::run(crate::storage::Dialect::MySql, name, super::claimed_by_two).await;
    }
}

#[cfg(feature = "mysql")]
async fn claimed_by_two(db: &DatabaseConnection) -> Result<()> {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let d = crate::storage::Dialect::MySql;
    for first_commits in [true, false] {
        let s = schedule(if first_commits { "committed" } else { "rolled back" });
        let first = db.begin().await?;
        assert!(schedules::claim_tick(&first, &s, T0, T0).await?, "the first claim");
        let second = tokio::spawn({
            let (db, s) = (db.clone(), s.clone());
            async move {
                let txn = db.begin().await?;
                let won = schedules::claim_tick(&txn, &s, T0, T0).await?;
                txn.commit().await?;
                Ok::<_, crate::error::Error>(won)
            }
        });
        // The second waits for the first's row (its update meets the row the first inserted): seen as its statement
        // running in this test's database (the server's process list, read afresh each time).
        let waits = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() \
                     AND (INFO LIKE 'UPDATE outbox_schedules%' OR INFO LIKE 'INSERT INTO outbox_schedules%') \
                     AND ID <> CONNECTION_ID()";
        loop {
            let row = db.query_one_raw(d.stmt(waits, vec![])).await?.expect("a count");
            if row.try_get_by_index::<i64>(0)? == 1 {
                break;
            }
            assert!(!second.is_finished(), "the second claim did not wait for the first");
            tokio::task::yield_now().await;
        }
        if first_commits {
            first.commit().await?;
        } else {
            first.rollback().await?;
        }
        let won = second.await.expect("the second claim")?;
        assert_eq!(won, !first_commits, "the second claim wins only when the first rolled back");
        let listed = schedules::list(db).await?;
        assert_eq!(listed.iter().filter(|l| l.name == s.name).count(), 1);
    }
    Ok(())
}
