//! Conformance of `storage/kinds.rs`: the kinds workers record, listed and refreshed.

use sea_orm::DatabaseConnection;

use super::T0;
use crate::error::Result;
use crate::storage::kinds::{self, KindRow};
use crate::time::from_ms;

driver_tests!(
    kinds_are_recorded_and_listed,
    kinds_refresh_keeps_first_seen;
    mysql: kinds_are_recorded_and_listed, kinds_refresh_keeps_first_seen,
);

pub(super) fn kind_row(name: &str) -> KindRow {
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
        flow: Default::default(),
        subject: Some("order:{id}".into()),
    }
}

async fn kinds_are_recorded_and_listed(db: &DatabaseConnection) -> Result<()> {
    let b = KindRow {
        unique: false,
        sequence: None,
        on_sequence_failure: "continue",
        concurrency: None,
        subject: None,
        ..kind_row("b")
    };
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
    assert_eq!((a.subject.as_deref(), all[1].subject.as_deref()), (Some("order:{id}"), None));
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
