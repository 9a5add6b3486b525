//! Conformance of `storage/workers.rs`: the worker registry's entries, refreshed, expired and removed.

use sea_orm::DatabaseConnection;

use super::T0;
use crate::error::Result;
use crate::storage::workers::{self, WorkerRow};
use crate::time::from_ms;

driver_tests!(
    workers_upsert_list_and_remove;
    mysql: workers_upsert_list_and_remove,
);

pub(super) fn worker_row(id: &str, now: i64, expires_at: i64) -> WorkerRow {
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
