//! Sequence keys: the template a kind declares (`"fs:{path:path}"`) and the key it gives each payload.

use serde_json::Value;

use super::MAX_KEY_BYTES;
use super::key::{canonical_json, sha256_hex};
use crate::error::pointer_token;
use crate::job::Violation;

/// A parsed sequence-key template: literal text and `{field}` / `{field:path}` placeholders (`{{` and `}}`
/// stand for braces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    /// A top-level payload field; `path` normalizes its value as a relative path.
    Field {
        name: String,
        path: bool,
    },
}

impl Template {
    /// Parses `text`, or says what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Template, String> {
        if text.is_empty() {
            return Err("the sequence template is empty".into());
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(format!("sequence template {text:?} has a `}}` that closes nothing (write `}}}}`)")),
                '{' => {
                    let mut inner = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => inner.push(c),
                            None => return Err(format!("sequence template {text:?} has an unclosed `{{`")),
                        }
                    }
                    let (name, filter) = match inner.split_once(':') {
                        Some((name, filter)) => (name, Some(filter)),
                        None => (inner.as_str(), None),
                    };
                    if name.is_empty() {
                        return Err(format!("sequence template {text:?} has a placeholder without a field name"));
                    }
                    let path = match filter {
                        None => false,
                        Some("path") => true,
                        Some(other) => {
                            return Err(format!(
                                "sequence template {text:?}: unknown filter `{other}` on `{name}` (the only one is \
                                 `path`)"
                            ));
                        }
                    };
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Field { name: name.to_owned(), path });
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template { text: text.to_owned(), parts })
    }

    /// The template as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// The payload fields the template reads.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Field { name, .. } => Some(name.as_str()),
            Part::Text(_) => None,
        })
    }

    /// The sequence key of `payload`, or what keeps the payload from having one.
    pub(crate) fn render(&self, payload: &Value) -> Result<String, Violation> {
        self.render_whole(payload).map(fit)
    }

    /// The text `payload` gives under the template, however long.
    pub(crate) fn render_whole(&self, payload: &Value) -> Result<String, Violation> {
        let mut key = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => key.push_str(text),
                Part::Field { name, path } => {
                    let at = || format!("/{}", pointer_token(name));
                    match (payload.get(name), path) {
                        (None | Some(Value::Null), _) => {
                            return Err(Violation {
                                path: at(),
                                message: format!("is missing, and the sequence key `{}` needs it", self.text),
                            });
                        }
                        (Some(Value::String(s)), true) => key.push_str(&normalize_path(s)),
                        (Some(_), true) => {
                            return Err(Violation {
                                path: at(),
                                message: format!("must be a string to form the sequence key `{}`", self.text),
                            });
                        }
                        (Some(Value::String(s)), false) => key.push_str(s),
                        (Some(other), false) => key.push_str(&canonical_json(other)),
                    }
                }
            }
        }
        Ok(key)
    }
}

/// A key too long for an index entry on every backend becomes `sha256:<hex>` of itself: equal keys stay
/// equal.
pub(crate) fn fit(key: String) -> String {
    if key.len() > MAX_KEY_BYTES { format!("sha256:{}", sha256_hex(key.as_bytes())) } else { key }
}

/// A relative path with empty and `.` segments dropped, so `notes/./a.txt`, `notes//a.txt` and
/// `notes/a.txt` share one sequence. `..` segments stay (the file handlers refuse them anyway).
pub(crate) fn normalize_path(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty() && *s != ".").collect();
    segments.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_fields_and_paths() {
        let t = Template::parse("fs:{path:path}").expect("parses");
        assert_eq!(t.render(&json!({"path": "notes/./a.txt"})).expect("key"), "fs:notes/a.txt");
        assert_eq!(t.render(&json!({"path": "notes//a.txt/"})).expect("key"), "fs:notes/a.txt");
        let t = Template::parse("aws:{resourceType}/{resourceId}").expect("parses");
        assert_eq!(t.fields().collect::<Vec<_>>(), ["resourceType", "resourceId"]);
        assert_eq!(t.render(&json!({"resourceType": "s3_bucket", "resourceId": 7})).expect("key"), "aws:s3_bucket/7");
        let t = Template::parse("{{literal}} {a}").expect("parses");
        assert_eq!(t.render(&json!({"a": "x"})).expect("key"), "{literal} x");
        let long = t.render(&json!({"a": "y".repeat(600)})).expect("key");
        assert!(long.starts_with("sha256:") && long.len() == 71, "{long}");
    }

    #[test]
    fn missing_fields_and_bad_templates_are_named() {
        let t = Template::parse("fs:{path:path}").expect("parses");
        let v = t.render(&json!({"path": null})).expect_err("missing");
        assert_eq!(v.path, "/path");
        assert!(v.message.contains("fs:{path:path}"), "{}", v.message);
        assert!(t.render(&json!({"path": 3})).expect_err("not a string").message.contains("must be a string"));
        for (bad, needle) in [
            ("", "empty"),
            ("a{b", "unclosed"),
            ("a}b", "closes nothing"),
            ("{}", "without a field name"),
            ("{a:upper}", "unknown filter `upper`"),
        ] {
            let err = Template::parse(bad).expect_err(bad);
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }
}
