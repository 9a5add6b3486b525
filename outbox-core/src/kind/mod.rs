//! The runtime description of a job kind: its options, JSON Schema, schema hash and compiled validator.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result, pointer_token};
use crate::job::Violation;
use crate::job::{Job, KindOpts, SequenceFailure};

pub(crate) mod registry;
pub(crate) mod sequence;

use sequence::Template;

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
    schema: Value,
    schema_hash: String,
    validator: jsonschema::Validator,
    /// The typed kind's own rules ([`Job::validate`]), run on payloads the schema accepts.
    rules: Option<fn(&Value) -> Vec<Violation>>,
}

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
            .field("schema_hash", &self.schema_hash)
            .finish_non_exhaustive()
    }
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
        let kind = Arc::new(Kind { rules: Some(typed_rules::<J>), ..Kind::from_schema(J::KIND, schema, J::OPTS)? });
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
            },
        )
    }

    fn build(name: &str, schema: Value, spec: Spec) -> Result<Kind> {
        let Spec { queue, priority, max_attempts, unique, key_fields, sequence, on_sequence_failure, concurrency } =
            spec;
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
        // Formats (`email`, `uuid`, `date-time`, ...) are asserted: a schema that names one means it.
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .map_err(|e| invalid(format!("its json schema does not compile: {e}")))?;
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
            schema,
            schema_hash,
            validator,
            rules: None,
        })
    }

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

    /// The sequence key of `payload` under the kind's template; `Ok(None)` when the kind has none.
    pub(crate) fn sequence_key(&self, payload: &Value) -> Result<Option<String>> {
        let Some(template) = &self.sequence else { return Ok(None) };
        template
            .render(payload)
            .map(Some)
            .map_err(|violation| Error::InvalidPayload { kind: self.name.clone(), violations: vec![violation] })
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
        self.validator
            .iter_errors(payload)
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

    /// Validates a payload, naming every violation.
    pub fn validate(&self, payload: &Value) -> Result<()> {
        let violations = self.violations(payload);
        if violations.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidPayload { kind: self.name.clone(), violations })
    }

    /// The idempotency key the kind derives for `payload`: the key fields as canonical JSON, or the sha256 of
    /// kind and canonical payload; `None` when the kind is not unique.
    pub(crate) fn derive_key(&self, payload: &Value) -> Option<String> {
        if !self.unique {
            return None;
        }
        if self.key_fields.is_empty() {
            let mut hasher = Sha256::new();
            hasher.update(self.name.as_bytes());
            hasher.update([0]);
            hasher.update(canonical_json(payload).as_bytes());
            return Some(hex_lower(&hasher.finalize()));
        }
        let picked: serde_json::Map<String, Value> =
            self.key_fields.iter().map(|f| (f.clone(), payload.get(f).cloned().unwrap_or(Value::Null))).collect();
        let key = canonical_json(&Value::Object(picked));
        // A long key would not fit an index entry on every backend; its hash dedupes just as well.
        if key.len() > MAX_KEY_BYTES {
            return Some(format!("sha256:{}", sha256_hex(key.as_bytes())));
        }
        Some(key)
    }
}

/// JSON with object keys sorted at every level, so equal values always give equal text.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push('{');
            // Without serde_json's `preserve_order` the map iterates sorted already (it is computed once per
            // enqueued job, so the sort's allocation showed).
            if map.keys().is_sorted() {
                for (i, (key, item)) in map.iter().enumerate() {
                    write_member(i, key, item, out);
                }
            } else {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for (i, key) in keys.into_iter().enumerate() {
                    write_member(i, key, &map[key], out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Number(n) => write_number(n, out),
        Value::String(text) => write_string(text, out),
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The `i`-th member of an object, `"key":value`.
fn write_member(i: usize, key: &str, item: &Value, out: &mut String) {
    if i > 0 {
        out.push(',');
    }
    write_string(key, out);
    out.push(':');
    write_canonical(item, out);
}

/// `text` as a JSON string, escaped as serde_json escapes it.
fn write_string(text: &str, out: &mut String) {
    // serde_json escapes only `"`, `\` and control characters: text without them is written as it is.
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        out.push_str(&Value::from(text).to_string());
    }
}

/// `-0.0` is written as `0.0`: the two are equal JSON values (and `f64`s), so one intent has one key.
fn write_number(n: &serde_json::Number, out: &mut String) {
    use std::fmt::Write;
    if n.is_f64() && n.as_f64() == Some(0.0) {
        out.push_str("0.0");
    } else {
        let _ = write!(out, "{n}");
    }
}

/// sha256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex_lower(&Sha256::digest(bytes))
}

/// `bytes` in lowercase hex, as `hex::encode` writes them, into one allocation: a key is derived once per
/// enqueued job, and `hex::encode`'s collecting of an iterator of chars was 8 % of a batch enqueue's own
/// work (`perf`, `outbox-bench --case enqueue_batch`).
pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// Hex digits of a schema hash ([`Kind::schema_hash`]).
const SCHEMA_HASH_DIGITS: usize = 16;

fn schema_hash_of(schema: &Value) -> String {
    let digest = Sha256::digest(canonical_json(schema).as_bytes());
    hex::encode(&digest[..SCHEMA_HASH_DIGITS / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(opts: KindOpts) -> Kind {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"]
        });
        Kind::from_schema("k", schema, opts).expect("kind compiles")
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let v = json!({"b": 1, "a": {"y": [2, {"d": 1, "c": 2}], "x": null}});
        assert_eq!(canonical_json(&v), r#"{"a":{"x":null,"y":[2,{"c":2,"d":1}]},"b":1}"#);
    }

    #[test]
    fn canonical_json_escapes_strings_as_serde_json_does() {
        for text in
            ["", "plain", "quote \" in", "back\\slash", "tab\tnewline\n", "\u{1}\u{1f}", "del \u{7f}", "é ü 漢 🦀"]
        {
            let mut out = String::new();
            write_string(text, &mut out);
            assert_eq!(out, serde_json::to_string(text).expect("a string serializes"), "{text:?}");
            let object = json!({ text: text });
            assert_eq!(canonical_json(&object), serde_json::to_string(&object).expect("an object serializes"));
        }
    }

    #[test]
    fn hex_is_lowercase_and_two_digits_a_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_lower(&bytes), hex::encode(&bytes));
        assert_eq!(hex_lower(&[]), "");
    }

    #[test]
    fn canonical_json_writes_both_zeros_alike() {
        assert_eq!(canonical_json(&json!([0.0, -0.0])), "[0.0,0.0]");
        assert_eq!(canonical_json(&json!([0, 1.5, -2.5])), "[0,1.5,-2.5]");
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

    #[test]
    fn key_from_fields_and_default_hash() {
        let k = kind(KindOpts { key_fields: &["a"], ..KindOpts::DEFAULT });
        assert_eq!(k.derive_key(&json!({"a": 1, "b": "x"})).as_deref(), Some(r#"{"a":1}"#));
        let k = kind(KindOpts::DEFAULT);
        let one = k.derive_key(&json!({"a": 1, "b": "x"}));
        assert_eq!(one, k.derive_key(&json!({"b": "x", "a": 1})));
        assert_ne!(one, k.derive_key(&json!({"a": 2, "b": "x"})));
        let k = kind(KindOpts { unique: false, ..KindOpts::DEFAULT });
        assert_eq!(k.derive_key(&json!({"a": 1})), None);
        // A key too long to store as is becomes its hash, the same for the same fields.
        let k = kind(KindOpts { key_fields: &["b"], ..KindOpts::DEFAULT });
        let long = json!({"a": 1, "b": "x".repeat(600)});
        let key = k.derive_key(&long).expect("key");
        assert!(key.starts_with("sha256:") && key.len() == 71, "{key}");
        assert_eq!(k.derive_key(&long), Some(key));
    }

    #[test]
    fn schema_hash_is_16_hex_digits_and_matches_the_whole_digest_too() {
        let k = kind(KindOpts::DEFAULT);
        let hash = k.schema_hash();
        assert_eq!(hash.len(), 16, "{hash}");
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{hash}");
        // The whole digest, as stored before the short hash, is the same schema.
        let whole = sha256_hex(canonical_json(k.schema()).as_bytes());
        assert!(whole.starts_with(hash), "{whole} {hash}");
        assert!(k.matches_schema_hash(hash) && k.matches_schema_hash(&whole));
        assert!(k.matches_schema_hash(&whole.to_ascii_uppercase()));
        // Another schema, a shorter string, and an empty one are not.
        let other = Kind::from_schema("k", json!({"type": "object"}), KindOpts::DEFAULT).expect("kind compiles");
        assert!(!k.matches_schema_hash(other.schema_hash()));
        assert!(!k.matches_schema_hash(&hash[..15]));
        assert!(!k.matches_schema_hash(""));
    }

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
