//! How a kind is built: from a job type, from a JSON Schema and options, or from a recorded kind, each checked
//! and its schema compiled; a job type's kind is built once per process.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use serde_json::Value;

use super::flow::{FlowSpec, KindFlow};
use super::key::schema_hash_of;
use super::sequence::Template;
use super::{Kind, MAX_NAME_BYTES};
use crate::error::{Error, Result};
use crate::job::{Job, KindOpts, SequenceFailure, Violation};

/// A kind's options, owned: from a typed kind's [`KindOpts`] or from a recorded kind.
struct Spec {
    queue: String,
    priority: i32,
    max_attempts: i32,
    unique: bool,
    key_fields: Vec<String>,
    sequence: Option<String>,
    on_sequence_failure: SequenceFailure,
    concurrency: Option<u32>,
    flow: FlowSpec,
    subject: Option<String>,
}

/// [`Job::validate`] of `J` on a JSON payload.
fn typed_rules<J: Job>(payload: &Value) -> Vec<Violation> {
    match serde_path_to_error::deserialize::<_, J>(payload) {
        Ok(job) => job.validate().err().unwrap_or_default(),
        // What the schema lets through and the type refuses (`1.0` or `1e300` for an integer) is placed at
        // the field, like a schema violation.
        Err(e) => vec![Violation { path: pointer(e.path()), message: e.inner().to_string() }],
    }
}

/// A deserializer's path as a JSON pointer.
fn pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Seq { index } => Some(index.to_string()),
            Segment::Map { key } => Some(crate::error::pointer_token(key)),
            Segment::Enum { variant } => Some(crate::error::pointer_token(variant)),
            Segment::Unknown => None,
        })
        .map(|token| format!("/{token}"))
        .collect()
}

fn typed_kinds() -> &'static RwLock<HashMap<TypeId, Arc<Kind>>> {
    static KINDS: OnceLock<RwLock<HashMap<TypeId, Arc<Kind>>>> = OnceLock::new();
    KINDS.get_or_init(Default::default)
}

impl Kind {
    /// The kind of the job type `J`, its schema compiled once per process.
    pub fn of<J: Job>() -> Result<Arc<Kind>> {
        let id = TypeId::of::<J>();
        if let Some(kind) = typed_kinds().read().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(Arc::clone(kind));
        }
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<J>().to_value();
        let mut kind = Kind { rules: Some(typed_rules::<J>), ..Kind::from_schema(J::KIND, schema, J::OPTS)? };
        if let Some(output) = J::output_schema() {
            kind = kind.with_output(output)?;
        }
        let kind = Arc::new(kind);
        typed_kinds().write().unwrap_or_else(|e| e.into_inner()).insert(id, Arc::clone(&kind));
        Ok(kind)
    }

    /// A kind described by name, JSON Schema and options.
    pub fn from_schema(name: &str, schema: Value, opts: KindOpts) -> Result<Kind> {
        Kind::build(
            name,
            schema,
            Spec {
                queue: opts.queue.to_owned(),
                priority: opts.priority,
                max_attempts: opts.max_attempts,
                unique: opts.unique,
                key_fields: opts.key_fields.iter().map(|f| (*f).to_owned()).collect(),
                sequence: opts.sequence.map(str::to_owned),
                on_sequence_failure: opts.on_sequence_failure,
                concurrency: opts.concurrency,
                flow: FlowSpec {
                    rate: opts.rate.map(|r| r.to_string()),
                    rate_key: opts.rate_key.map(str::to_owned),
                    fair: opts.fair.map(str::to_owned),
                    cost: opts.cost.map(str::to_owned),
                },
                subject: opts.subject.map(str::to_owned),
            },
        )
    }

    /// A kind defined at run time rather than by a Rust type (`outbox define-kind`, for a worker written in
    /// another language): its name, payload JSON Schema, default queue, priority and attempts, and fleet-wide
    /// limit. Duplicate intents collapse on a hash of the whole payload; it has no sequence template.
    pub fn untyped(
        name: &str,
        schema: Value,
        queue: &str,
        priority: i32,
        max_attempts: i32,
        concurrency: Option<u32>,
    ) -> Result<Kind> {
        let spec = Spec {
            queue: queue.to_owned(),
            priority,
            max_attempts,
            unique: true,
            key_fields: Vec::new(),
            sequence: None,
            on_sequence_failure: crate::job::SequenceFailure::default(),
            concurrency,
            flow: FlowSpec::default(),
            subject: None,
        };
        Kind::build(name, schema, spec)
    }

    /// The kind a worker recorded in the database ([`crate::ops::kinds`]): its schema and options, without
    /// the typed kind's own rules ([`Job::validate`]), which the worker still checks before running a job.
    pub fn from_record(record: &crate::record::KindRecord) -> Result<Kind> {
        Kind::build(
            &record.name,
            record.schema.clone(),
            Spec {
                queue: record.queue.clone(),
                priority: record.priority,
                max_attempts: record.max_attempts,
                unique: record.unique,
                key_fields: record.key_fields.clone(),
                sequence: record.sequence.clone(),
                on_sequence_failure: record.on_sequence_failure,
                concurrency: record.concurrency,
                flow: FlowSpec {
                    rate: record.rate.clone(),
                    rate_key: record.rate_key.clone(),
                    fair: record.fair.clone(),
                    cost: record.cost.clone(),
                },
                subject: record.subject.clone(),
            },
        )
    }

    fn build(name: &str, schema: Value, spec: Spec) -> Result<Kind> {
        let Spec {
            queue,
            priority,
            max_attempts,
            unique,
            key_fields,
            sequence,
            on_sequence_failure,
            concurrency,
            flow,
            subject,
        } = spec;
        let invalid = |reason: String| Error::InvalidKind { kind: name.to_owned(), reason };
        if name.is_empty() {
            return Err(invalid("the kind name is empty".into()));
        }
        if name.contains('\0') || queue.contains('\0') {
            return Err(invalid("the kind name or its queue contains the NUL character".into()));
        }
        if name.len() > MAX_NAME_BYTES || queue.len() > MAX_NAME_BYTES {
            return Err(invalid(format!("the kind name or its queue is longer than {MAX_NAME_BYTES} bytes")));
        }
        if max_attempts < 1 {
            return Err(invalid(format!("max_attempts is {max_attempts}, it must be at least 1")));
        }
        if !unique && !key_fields.is_empty() {
            return Err(invalid("key fields are set but unique is false".into()));
        }
        if concurrency == Some(0) {
            return Err(invalid(
                "concurrency is 0: no job of the kind could ever run; leave it unset for no limit".into(),
            ));
        }
        let validator =
            super::compile(&schema).map_err(|e| invalid(format!("its json schema does not compile: {e}")))?;
        let is_property = |field: &str| schema.get("properties").and_then(|p| p.get(field)).is_some();
        for field in &key_fields {
            if !is_property(field) {
                return Err(invalid(format!("key field `{field}` is not a property of the payload schema")));
            }
        }
        let sequence = sequence.map(|text| Template::parse(&text)).transpose().map_err(invalid)?;
        if let Some(template) = &sequence
            && let Some(field) = template.fields().find(|f| !is_property(f))
        {
            return Err(invalid(format!(
                "the sequence template `{}` reads `{field}`, which is not a property of the payload schema",
                template.as_str()
            )));
        }
        let flow = KindFlow::build(flow, &is_property).map_err(invalid)?;
        let subject = subject.map(|text| super::subject::parse(&text, &is_property)).transpose().map_err(invalid)?;
        let schema_hash = schema_hash_of(&schema);
        Ok(Kind {
            name: name.to_owned(),
            queue,
            priority,
            max_attempts,
            unique,
            key_fields,
            sequence,
            on_sequence_failure,
            concurrency,
            flow,
            subject,
            schema,
            schema_hash,
            validator,
            output: None,
            rules: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn misconfigured_kinds_are_named() {
        let schema = json!({"type": "object", "properties": {"a": {}}});
        let err = Kind::from_schema("k", schema.clone(), KindOpts { key_fields: &["zz"], ..KindOpts::DEFAULT })
            .expect_err("unknown key field");
        assert!(err.to_string().contains("key field `zz`"), "{err}");
        let err = Kind::from_schema("k", schema, KindOpts { max_attempts: 0, ..KindOpts::DEFAULT })
            .expect_err("zero attempts");
        assert!(err.to_string().contains("max_attempts"), "{err}");
    }
}
