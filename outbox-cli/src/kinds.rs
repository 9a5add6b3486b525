//! Which kinds the command knows: those built into this binary (with their own rules) and those any
//! application's workers recorded in the database.

use std::collections::BTreeMap;
use std::sync::Arc;

use outbox_aws::SyncAws;
use outbox_core::{Kind, ops};
use outbox_fs::{ClaudeExtraction, CreateFile, DeleteFile};
use sea_orm::DatabaseConnection;
use serde::Serialize;

use crate::fail::{Failure, Result};

const BUILT_IN: [&str; 4] = ["create_file", "delete_file", "claude_extraction", "sync_aws"];

fn built_in(name: &str) -> Option<outbox_core::Result<Arc<Kind>>> {
    Some(match name {
        "create_file" => Kind::of::<CreateFile>(),
        "delete_file" => Kind::of::<DeleteFile>(),
        "claude_extraction" => Kind::of::<ClaudeExtraction>(),
        "sync_aws" => Kind::of::<SyncAws>(),
        _ => return None,
    })
}

/// Where a kind's definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Source {
    /// Built into `outbox` (and recorded with the same schema, if at all): full rules.
    BuiltIn,
    /// Recorded by a worker: the JSON Schema; the worker checks its own rules before running.
    Recorded,
}

/// A kind and where it came from.
pub(crate) struct Known {
    pub(crate) kind: Arc<Kind>,
    pub(crate) source: Source,
    pub(crate) recorded: Option<ops::KindRecord>,
}

/// The kind `name`: the built-in one when the database records none or the same schema, else the recorded
/// one (what the workers run), else an error listing every known kind.
pub(crate) async fn resolve(db: &DatabaseConnection, name: &str) -> Result<Known> {
    if let Some(known) = resolve_with(ops::kind(db, name).await?, name)? {
        return Ok(known);
    }
    let known: Vec<String> = all(db).await?.into_keys().collect();
    Err(Failure::invalid(format!("unknown kind `{name}`; known kinds: {}", known.join(", ")))
        .hint("kinds of your application are recorded when one of its workers starts against this database"))
}

/// Every known kind by name.
pub(crate) async fn all(db: &DatabaseConnection) -> Result<BTreeMap<String, Known>> {
    let mut out = BTreeMap::new();
    for rec in ops::kinds(db).await? {
        let name = rec.name.clone();
        if let Some(known) = resolve_with(Some(rec), &name)? {
            out.insert(name, known);
        }
    }
    for name in BUILT_IN {
        if !out.contains_key(name)
            && let Some(known) = resolve_with(None, name)?
        {
            out.insert(name.to_owned(), known);
        }
    }
    Ok(out)
}

/// The kind `name` from its built-in definition and its recorded one; `None` when it has neither.
fn resolve_with(recorded: Option<ops::KindRecord>, name: &str) -> Result<Option<Known>> {
    let recorded_kind = |rec: ops::KindRecord| -> Result<Option<Known>> {
        let kind = Arc::new(Kind::from_record(&rec)?);
        Ok(Some(Known { kind, source: Source::Recorded, recorded: Some(rec) }))
    };
    match (built_in(name).transpose()?, recorded) {
        // A recorded schema that differs from the built-in one is what the workers run: it wins.
        (Some(kind), Some(rec)) if rec.schema_hash != kind.schema_hash() => recorded_kind(rec),
        (Some(kind), rec) => Ok(Some(Known { kind, source: Source::BuiltIn, recorded: rec })),
        (None, Some(rec)) => recorded_kind(rec),
        (None, None) => Ok(None),
    }
}
