//! The kinds table: each worker records its kinds' schemas and options when it is built, so tools without
//! the Rust types (the `outbox` command, other languages) can validate and show their jobs.

use sea_orm::ConnectionTrait;

use super::Kind;
use crate::error::{Error, Result};
use crate::record::KindRecord;
use crate::storage::kinds::KindRow;
use crate::storage::{self, now_ms};

/// Records each kind's JSON Schema and options (workers do this when they are built), with `rates` in place of
/// the kinds' own (a worker's `WorkerBuilder::rate`), so that remote workers' claims apply them too.
pub(crate) async fn record<C: ConnectionTrait>(
    conn: &C,
    kinds: &[&Kind],
    recorded_by: &str,
    rates: &std::collections::HashMap<String, crate::flow::Rate>,
) -> Result<()> {
    let mut rows = kinds.iter().map(|kind| row(kind)).collect::<Result<Vec<_>>>()?;
    for row in &mut rows {
        if let Some(rate) = rates.get(&row.name) {
            row.flow[0] = Some(rate.to_string());
        }
    }
    storage::kinds::record(conn, &rows, recorded_by, now_ms()).await
}

fn row(kind: &Kind) -> Result<KindRow> {
    let key_fields = serde_json::to_string(kind.key_fields())
        .map_err(|e| Error::Internal(format!("encoding the key fields of kind `{}`: {e}", kind.name())))?;
    Ok(KindRow {
        name: kind.name().to_owned(),
        schema: kind.schema().to_string(),
        schema_hash: kind.schema_hash().to_owned(),
        queue: kind.queue().to_owned(),
        priority: kind.priority(),
        max_attempts: kind.max_attempts(),
        unique: kind.is_unique(),
        key_fields,
        sequence: kind.sequence().map(str::to_owned),
        on_sequence_failure: kind.on_sequence_failure().as_str(),
        concurrency: kind.concurrency().map(i64::from),
        flow: kind.flow_written(),
        subject: kind.subject().map(str::to_owned),
    })
}

/// Every kind a worker has recorded, by name.
pub async fn kinds<C: ConnectionTrait>(conn: &C) -> Result<Vec<KindRecord>> {
    storage::kinds::list(conn, None).await
}

/// The recorded kind `name`, if a worker has recorded it.
pub async fn kind<C: ConnectionTrait>(conn: &C, name: &str) -> Result<Option<KindRecord>> {
    Ok(storage::kinds::list(conn, Some(name)).await?.pop())
}
