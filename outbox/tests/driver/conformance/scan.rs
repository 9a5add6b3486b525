//! Conformance of `storage/scan.rs`: the paged scans of completed jobs, by path and by key values.

use sea_orm::DatabaseConnection;

use super::{T0, add, job, mark_completed, set};
use crate::error::Result;
use crate::storage::enqueue::NewJob;
use crate::storage::{begin_read, scan};

driver_tests!(
    path_scan_keeps_the_latest_completed_job_per_path,
    key_scan_groups_by_values;
    mysql: path_scan_keeps_the_latest_completed_job_per_path, key_scan_groups_by_values,
);

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
    let txn = begin_read(db).await?;
    assert_eq!(scan::open_path_scan(&txn, &[("fs.write", "$.path")]).await?, (3, 2));
    let first = scan::page(&txn, 0, 1).await?;
    assert_eq!(first.len(), 1);
    let (a, output) = (&first[0], Some(serde_json::json!({"etag": "x"})));
    assert_eq!((a.seq, a.path.as_deref(), a.job_id.as_str(), a.kind.as_str()), (1, Some("a"), "c", "fs.write"));
    assert_eq!((&a.output, a.completed_at, a.jobs), (&output, Some(T0 + 5), 2));
    let rest = scan::page(&txn, a.seq, 10).await?;
    assert_eq!(
        rest.iter().map(|r| (r.seq, r.path.as_deref(), r.job_id.as_str(), r.jobs)).collect::<Vec<_>>(),
        [(2, Some("b"), "a", 1)]
    );
    assert!(scan::page(&txn, 2, 10).await?.is_empty());
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
    let txn = begin_read(db).await?;
    assert_eq!(scan::open_key_scan(&txn, "aws.put", &["$.bucket", "$.n"]).await?, (3, 2));
    let rows = scan::page(&txn, 0, 10).await?;
    let keys: Vec<(Option<&str>, &str, u64)> =
        rows.iter().map(|r| (r.path.as_deref(), r.job_id.as_str(), r.jobs)).collect();
    assert_eq!(keys, [(Some(r#"["x",1]"#), "c", 2), (Some(r#"["y",2]"#), "a", 1)]);
    txn.commit().await?;
    Ok(())
}
