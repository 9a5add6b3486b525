//! The runtime description of a job kind: its options, JSON Schema, schema hash and compiled validator.

use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result, pointer_token};
use crate::job::{SequenceFailure, Violation};

mod build;
mod flow;
mod key;
pub(crate) mod registry;
pub(crate) mod sequence;
pub(crate) mod subject;

use key::SCHEMA_HASH_DIGITS;
use sequence::Template;
pub use subject::MAX_SUBJECT_BYTES;

/// The longest idempotency key stored as is: an explicit key must fit, and a longer key derived from key
/// fields is stored as `sha256:<hex>` of itself (index entries are limited to about 2.7 KB on some backends).
pub const MAX_KEY_BYTES: usize = 512;

/// The longest kind or queue name.
pub const MAX_NAME_BYTES: usize = 255;

/// Default cap on a serialized payload at enqueue: 256 KiB ([`crate::EnqueueOpts::max_payload_bytes`] sets
/// another).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// A job kind at run time: what enqueue and the worker need to validate and store its jobs.
///
/// Typed kinds come from [`Kind::of`]; producers without the Rust type (a CLI, another service) build one
/// from a JSON Schema with [`Kind::from_schema`].
pub struct Kind {
    name: String,
    queue: String,
    priority: i32,
    max_attempts: i32,
    unique: bool,
    key_fields: Vec<String>,
    sequence: Option<Template>,
    on_sequence_failure: SequenceFailure,
    concurrency: Option<u32>,
    flow: flow::KindFlow,
    subject: Option<Template>,
    schema: Value,
    schema_hash: String,
    validator: jsonschema::Validator,
    /// The schema of what its handler completes with (`#[job(output = T)]`), checked before the output is written.
    output: Option<Arc<(Value, jsonschema::Validator)>>,
    /// The typed kind's own rules ([`Job::validate`]), run on payloads the schema accepts.
    rules: Option<fn(&Value) -> Vec<Violation>>,
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kind")
            .field("name", &self.name)
            .field("queue", &self.queue)
            .field("priority", &self.priority)
            .field("max_attempts", &self.max_attempts)
            .field("unique", &self.unique)
            .field("key_fields", &self.key_fields)
            .field("sequence", &self.sequence.as_ref().map(Template::as_str))
            .field("on_sequence_failure", &self.on_sequence_failure)
            .field("concurrency", &self.concurrency)
            .field("rate", &self.flow.rate)
            .field("flow_key", &self.flow.key.as_ref().map(Template::as_str))
            .field("fair", &self.flow.fair)
            .field("subject", &self.subject.as_ref().map(Template::as_str))
            .field("schema_hash", &self.schema_hash)
            .finish_non_exhaustive()
    }
}

impl Kind {
    /// The template of the kind's sequence keys, as written (`fs:{path:path}`).
    pub fn sequence(&self) -> Option<&str> {
        self.sequence.as_ref().map(Template::as_str)
    }

    /// What a failed or cancelled job of this kind does to the jobs behind it in its sequence.
    pub fn on_sequence_failure(&self) -> SequenceFailure {
        self.on_sequence_failure
    }

    /// The most jobs of this kind that may run at once across every worker.
    pub fn concurrency(&self) -> Option<u32> {
        self.concurrency
    }

    /// The kind's fleet-wide rate limit.
    pub fn rate(&self) -> Option<crate::flow::Rate> {
        self.flow.rate
    }

    /// The template of the key of the kind's per-key rate and fair share, as written (`{tenant}`).
    pub fn flow_key_template(&self) -> Option<&str> {
        self.flow.key.as_ref().map(Template::as_str)
    }

    /// Whether the kind's rate applies to each key apart.
    pub fn rate_per_key(&self) -> bool {
        self.flow.rate_per_key
    }

    /// Whether claims share out between the kind's keys by weight.
    pub fn fair(&self) -> bool {
        self.flow.fair
    }

    /// The sequence key of `payload` under the kind's template; `Ok(None)` when the kind has none.
    pub(crate) fn sequence_key(&self, payload: &Value) -> Result<Option<String>> {
        let Some(template) = &self.sequence else { return Ok(None) };
        template
            .render(payload)
            .map(Some)
            .map_err(|violation| Error::InvalidPayload { kind: self.name.clone(), violations: vec![violation] })
    }

    /// The template of the kind's subjects, as written (`order:{orderId}`).
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_ref().map(Template::as_str)
    }

    /// The subject of `payload` under the kind's template; `Ok(None)` when the kind has none.
    pub(crate) fn subject_of(&self, payload: &Value) -> Result<Option<String>> {
        let Some(template) = &self.subject else { return Ok(None) };
        subject::render(template, payload)
            .map(Some)
            .map_err(|violation| Error::InvalidPayload { kind: self.name.clone(), violations: vec![violation] })
    }

    /// The flow key and cost of `payload` under the kind's templates (`None`: no key; the default cost of 1).
    pub(crate) fn flow_of(&self, payload: &Value) -> Result<(Option<String>, Option<u32>)> {
        let invalid = |v: Violation| Error::InvalidPayload { kind: self.name.clone(), violations: vec![v] };
        Ok((self.flow.key(payload).map_err(invalid)?, self.flow.cost(payload).map_err(invalid)?))
    }

    /// The kind's flow options as written: rate, rate key template, fairness template, cost.
    pub(crate) fn flow_written(&self) -> [Option<String>; 4] {
        let w = &self.flow.written;
        [w.rate.clone(), w.rate_key.clone(), w.fair.clone(), w.cost.clone()]
    }

    /// Whether duplicate intents collapse onto one active job.
    pub fn is_unique(&self) -> bool {
        self.unique
    }

    /// The payload fields whose values form the idempotency key (empty: a hash of the whole payload).
    pub fn key_fields(&self) -> &[String] {
        &self.key_fields
    }

    /// The stable kind name stored with each job.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind's default queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The kind's default priority.
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// The kind's default attempt limit.
    pub fn max_attempts(&self) -> i32 {
        self.max_attempts
    }

    /// The kind's JSON Schema.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The first 64 bits of the sha256 of the kind's canonical JSON Schema, as 16 lowercase hex digits. Every job
    /// row stores the hash its payload was validated against, so its length is paid once per job: the whole
    /// digest made a fifth of a PostgreSQL job row and of the WAL its insert writes. Compare hashes with
    /// [`Kind::matches_schema_hash`], which also accepts the 64-digit hashes earlier versions stored.
    pub fn schema_hash(&self) -> &str {
        &self.schema_hash
    }

    /// Whether `hash` (a job's or a recorded kind's) names this kind's schema: equal to [`Kind::schema_hash`] in its
    /// first 16 hex digits, so a hash of the whole digest, as versions before the short hash stored it, matches
    /// too.
    pub fn matches_schema_hash(&self, hash: &str) -> bool {
        hash.get(..SCHEMA_HASH_DIGITS).unwrap_or(hash).eq_ignore_ascii_case(&self.schema_hash)
    }

    /// Every violation of the schema by `payload`, each with its JSON path, then those of the kind's own
    /// rules when the schema holds.
    pub fn violations(&self, payload: &Value) -> Vec<Violation> {
        if self.validator.is_valid(payload) {
            return self.rules.map(|rules| rules(payload)).unwrap_or_default();
        }
        violations_of(&self.validator, payload)
    }

    /// The JSON Schema of the kind's outputs, when it declares one (`#[job(output = T)]`).
    pub fn output_schema(&self) -> Option<&Value> {
        self.output.as_deref().map(|(schema, _)| schema)
    }

    /// Every violation of the kind's output schema by `output` (none without a schema), each with its JSON path.
    pub fn output_violations(&self, output: &Value) -> Vec<Violation> {
        match self.output.as_deref() {
            Some((_, validator)) if !validator.is_valid(output) => violations_of(validator, output),
            _ => Vec::new(),
        }
    }

    /// The kind with `schema` as the schema of its outputs.
    pub(crate) fn with_output(mut self, schema: Value) -> Result<Kind> {
        let validator = compile(&schema).map_err(|e| Error::InvalidKind {
            kind: self.name.clone(),
            reason: format!("its output schema does not compile: {e}"),
        })?;
        self.output = Some(Arc::new((schema, validator)));
        Ok(self)
    }

    /// Validates a payload, naming every violation.
    pub fn validate(&self, payload: &Value) -> Result<()> {
        let violations = self.violations(payload);
        if violations.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidPayload { kind: self.name.clone(), violations })
    }
}

/// Every violation of `validator` by `value`, each at its JSON path.
fn violations_of(validator: &jsonschema::Validator, value: &Value) -> Vec<Violation> {
    validator
        .iter_errors(value)
        .map(|e| {
            let mut path = e.instance_path().to_string();
            // A missing property is reported at its parent; name the property itself.
            if let jsonschema::error::ValidationErrorKind::Required { property: Value::String(name) } = e.kind() {
                path = format!("{path}/{}", pointer_token(name));
            }
            Violation { path, message: e.to_string() }
        })
        .collect()
}

/// A JSON Schema compiled; formats (`email`, `uuid`, `date-time`, ...) are asserted: a schema that names one means it.
pub(crate) fn compile(
    schema: &Value,
) -> std::result::Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    jsonschema::options().should_validate_formats(true).build(schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::KindOpts;
    use serde_json::json;

    pub(super) fn kind(opts: KindOpts) -> Kind {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"]
        });
        Kind::from_schema("k", schema, opts).expect("kind compiles")
    }

    #[test]
    fn violations_carry_json_paths() {
        let k = kind(KindOpts::DEFAULT);
        let err = k.validate(&json!({"a": "x", "b": 3})).expect_err("invalid");
        let text = err.to_string();
        assert!(text.contains("at /a:"), "{text}");
        assert!(text.contains("at /b:"), "{text}");
        assert!(text.contains("kind `k`"), "{text}");
    }
}
