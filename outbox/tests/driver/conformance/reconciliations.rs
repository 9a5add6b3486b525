//! Conformance of `storage/reconciliations.rs`: the latest report of each reconciler.

use sea_orm::DatabaseConnection;

use super::T0;
use crate::error::Result;
use crate::record::ReconciliationRecord;
use crate::storage::reconciliations;
use crate::time::from_ms;

driver_tests!(
    reconciliations_keep_the_latest_report;
    mysql: reconciliations_keep_the_latest_report,
);

/// A report of `reconciler` at `at` that checked `n` things.
pub(super) fn report(reconciler: &str, at: i64, n: u64) -> ReconciliationRecord {
    ReconciliationRecord {
        reconciler: reconciler.into(),
        at: from_ms(at),
        worker: Some("w".into()),
        report: serde_json::json!({ "checked": n }),
    }
}

async fn reconciliations_keep_the_latest_report(db: &DatabaseConnection) -> Result<()> {
    reconciliations::record(db, &report("fs", T0, 1)).await?;
    reconciliations::record(db, &ReconciliationRecord { worker: None, ..report("aws", T0, 2) }).await?;
    reconciliations::record(db, &report("fs", T0 + 5, 3)).await?;
    let expected = [ReconciliationRecord { worker: None, ..report("aws", T0, 2) }, report("fs", T0 + 5, 3)];
    assert_eq!(reconciliations::list(db).await?, expected);
    Ok(())
}
