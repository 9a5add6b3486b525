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
    let recorded = ops::kind(db, name).await?;
    if recorded.is_none() && built_in(name).is_none() {
        let known: Vec<String> = all(db).await?.into_keys().collect();
        return Err(Failure::invalid(format!("unknown kind `{name}`; known kinds: {}", known.join(", ")))
            .hint("kinds of your application are recorded when one of its workers starts against this database"));
    }
    resolve_with(recorded, name)
}

/// Whether the recorded kind is not the built-in kind of that name (or there is none).
fn built_differs(name: &str, rec: &ops::KindRecord) -> Result<bool> {
    Ok(built_in(name).transpose()?.is_none_or(|k| k.schema_hash() != rec.schema_hash))
}

/// Every known kind by name.
pub(crate) async fn all(db: &DatabaseConnection) -> Result<BTreeMap<String, Known>> {
    let mut out = BTreeMap::new();
    for rec in ops::kinds(db).await? {
        let name = rec.name.clone();
        out.insert(name.clone(), resolve_with(Some(rec), &name)?);
    }
    for name in BUILT_IN {
        if !out.contains_key(name) {
            out.insert(name.to_owned(), resolve_with(None, name)?);
        }
    }
    Ok(out)
}

fn resolve_with(recorded: Option<ops::KindRecord>, name: &str) -> Result<Known> {
    let built = built_in(name).transpose()?;
    match (built, recorded) {
        // A recorded schema that differs from the built-in one is what the workers run: it wins.
        (_, Some(rec)) if built_differs(name, &rec)? => {
            Ok(Known { kind: Arc::new(Kind::from_record(&rec)?), source: Source::Recorded, recorded: Some(rec) })
        }
        (Some(kind), rec) => Ok(Known { kind, source: Source::BuiltIn, recorded: rec }),
        (None, _) => Err(Failure::invalid(format!("unknown kind `{name}`"))),
    }
}
