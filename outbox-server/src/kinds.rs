//! Which kinds a producer without the Rust types knows: those built into its binary (with their own rules)
//! and those any application's workers recorded in the database. The server and the `outbox` command both
//! resolve kind names here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use outbox::Kind;
use outbox::KindRecord;
use outbox::ops;
use sea_orm::ConnectionTrait;

use crate::error::{Error, Result};

/// Where a kind's definition came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KindSource {
    /// Built into the binary (and recorded with the same schema, if at all): its full rules apply.
    BuiltIn,
    /// Recorded by a worker: its JSON Schema applies; the worker checks the kind's own rules before running
    /// a job.
    Recorded,
}

/// A kind, where it came from, and what a worker recorded of it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KnownKind {
    /// The kind, ready to validate and enqueue payloads.
    pub kind: Arc<Kind>,
    /// Where its definition came from.
    pub source: KindSource,
    /// What a worker recorded, if any worker did.
    pub recorded: Option<KindRecord>,
}

/// The kinds built into a binary, and a cache of the recorded kinds compiled so far.
///
/// A kind recorded in the database wins over the built-in kind of the same name when their schemas differ:
/// it is what the workers run.
#[derive(Clone, Default)]
pub struct KnownKinds {
    built_in: Arc<[Arc<Kind>]>,
    /// Recorded kinds by name, with the record they were compiled from: compiling a JSON Schema costs more
    /// than reading the record, which every resolve does to see a redeployed worker's new definition.
    compiled: Arc<Mutex<HashMap<String, Compiled>>>,
}

/// A recorded kind and the record it was compiled from.
type Compiled = (KindRecord, Arc<Kind>);

impl std::fmt::Debug for KnownKinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.built_in.iter().map(|k| k.name()).collect();
        f.debug_struct("KnownKinds").field("built_in", &names).finish_non_exhaustive()
    }
}

impl KnownKinds {
    /// Knows `built_in` (the kinds of the binary, such as [`Kind::of`] gives) and whatever workers record.
    pub fn new(built_in: Vec<Arc<Kind>>) -> Self {
        KnownKinds { built_in: built_in.into(), compiled: Arc::default() }
    }

    /// The built-in kinds.
    pub fn built_in(&self) -> &[Arc<Kind>] {
        &self.built_in
    }

    /// The kind `name`: the built-in one when the database records none or the same schema, else the
    /// recorded one, else [`Error::UnknownKind`] naming every known kind.
    pub async fn resolve<C: ConnectionTrait>(&self, conn: &C, name: &str) -> Result<KnownKind> {
        if let Some(known) = self.resolve_with(ops::kind(conn, name).await?, name)? {
            return Ok(known);
        }
        let known: Vec<String> = self.all(conn).await?.into_keys().collect();
        Err(Error::UnknownKind { name: name.to_owned(), known })
    }

    /// Every known kind by name. A recorded kind whose definition does not compile is left out with a
    /// warning, so one bad record does not hide the others.
    pub async fn all<C: ConnectionTrait>(&self, conn: &C) -> Result<BTreeMap<String, KnownKind>> {
        let mut out = BTreeMap::new();
        for record in ops::kinds(conn).await? {
            let name = record.name.clone();
            match self.resolve_with(Some(record), &name) {
                Ok(Some(known)) => {
                    out.insert(name, known);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(kind = %name, error = %e, "recorded kind left out"),
            }
        }
        for kind in self.built_in.iter() {
            if !out.contains_key(kind.name())
                && let Some(known) = self.resolve_with(None, kind.name())?
            {
                out.insert(kind.name().to_owned(), known);
            }
        }
        Ok(out)
    }

    /// The kind `name` from its built-in definition and its recorded one; `None` when it has neither.
    fn resolve_with(&self, recorded: Option<KindRecord>, name: &str) -> Result<Option<KnownKind>> {
        let built_in = self.built_in.iter().find(|k| k.name() == name);
        let known = match (built_in, recorded) {
            // A recorded schema that differs from the built-in one is what the workers run: it wins.
            (Some(kind), Some(rec)) if !kind.matches_schema_hash(&rec.schema_hash) => self.recorded(rec)?,
            (Some(kind), rec) => KnownKind { kind: Arc::clone(kind), source: KindSource::BuiltIn, recorded: rec },
            (None, Some(rec)) => self.recorded(rec)?,
            (None, None) => return Ok(None),
        };
        Ok(Some(known))
    }

    fn recorded(&self, record: KindRecord) -> Result<KnownKind> {
        let cached = {
            let compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
            compiled.get(&record.name).filter(|(seen, _)| same_definition(seen, &record)).map(|(_, k)| Arc::clone(k))
        };
        let kind = match cached {
            Some(kind) => kind,
            None => {
                let kind = Arc::new(Kind::from_record(&record)?);
                let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
                compiled.insert(record.name.clone(), (record.clone(), Arc::clone(&kind)));
                kind
            }
        };
        Ok(KnownKind { kind, source: KindSource::Recorded, recorded: Some(record) })
    }
}

/// Whether two records of one kind compile to the same kind: everything but who recorded it and when.
fn same_definition(a: &KindRecord, b: &KindRecord) -> bool {
    a.name == b.name
        && a.schema_hash == b.schema_hash
        && a.queue == b.queue
        && a.priority == b.priority
        && a.max_attempts == b.max_attempts
        && a.unique == b.unique
        && a.key_fields == b.key_fields
        && a.sequence == b.sequence
        && a.on_sequence_failure == b.on_sequence_failure
        && a.concurrency == b.concurrency
}
