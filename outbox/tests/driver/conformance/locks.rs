//! Conformance of `storage/locks.rs`: named locks taken, renewed, released and read.

use sea_orm::DatabaseConnection;

use super::T0;
use crate::error::Result;
use crate::storage::locks;

driver_tests!(
    locks_refuse_another_holder_until_expiry,
    locks_release_by_the_holder_only,
    locks_held_by_other_is_a_read;
    mysql: locks_refuse_another_holder_until_expiry, locks_release_by_the_holder_only, locks_held_by_other_is_a_read,
);

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
