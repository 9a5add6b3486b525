//! The keys and hashes a kind derives: a payload's idempotency key, the canonical JSON it (and a sequence key)
//! is written in, and the schema hash.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Kind, MAX_KEY_BYTES};

impl Kind {
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
pub(super) const SCHEMA_HASH_DIGITS: usize = 16;

pub(super) fn schema_hash_of(schema: &Value) -> String {
    let digest = Sha256::digest(canonical_json(schema).as_bytes());
    hex::encode(&digest[..SCHEMA_HASH_DIGITS / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::KindOpts;
    use crate::kind::tests::kind;
    use serde_json::json;

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
}
