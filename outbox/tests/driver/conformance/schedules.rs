//! Conformance of `storage/schedules.rs`: schedules registered, and each tick claimed once.

use sea_orm::DatabaseConnection;

use super::T0;
use crate::error::Result;
use crate::storage::schedules::{self, ScheduleRow};
use crate::time::from_ms;

driver_tests!(schedules_register_returns_the_last_tick, schedules_claim_each_tick_once);

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
