//! Checks on the parsed input that go beyond one attribute.

use crate::ast::{Input, Shape, Style};
use crate::ctxt::Errors;
use quote::quote;
use syn::{Error, Ident};

/// The error for a job type without `#[job(kind = "...")]`.
pub(crate) fn missing_kind(ident: &Ident) -> Error {
    Error::new_spanned(ident, "missing #[job(kind = \"...\")]: every job kind needs a stable name")
}

/// The characters allowed in a kind name besides ASCII letters and digits.
const KIND_PUNCTUATION: &[char] = &['_', '.', ':', '/', '-'];

impl Input<'_> {
    /// Reports what is wrong with the input as a whole: its shape, generics, a missing or malformed kind,
    /// and options that contradict each other.
    pub(crate) fn validate(&self, errors: &mut Errors) {
        let node = self.original;
        let ident = &node.ident;
        let is_struct = match &self.shape {
            Shape::Struct { .. } => true,
            Shape::Enum(data) => {
                let keyword = data.enum_token;
                errors.push(Error::new_spanned(
                    quote!(#keyword #ident),
                    "#[derive(Job)] does not support enums: a job payload is a struct",
                ));
                false
            }
            Shape::Union(data) => {
                let keyword = data.union_token;
                errors.push(Error::new_spanned(
                    quote!(#keyword #ident),
                    "#[derive(Job)] does not support unions: a job payload is a struct",
                ));
                false
            }
        };

        if !node.generics.params.is_empty() {
            let what = if node.generics.type_params().next().is_some() || node.generics.const_params().next().is_some()
            {
                "one kind name must stand for one concrete payload type"
            } else {
                "payloads are deserialized into owned, 'static data"
            };
            errors.push(Error::new_spanned(&node.generics, format!("job kinds cannot be generic: {what}")));
        }

        match &self.attrs.kind {
            Some(kind) => {
                if let Err(message) = check_kind(&kind.value) {
                    errors.push(Error::new_spanned(&kind.value_tokens, message));
                }
            }
            // A mistyped `kind` was reported where it was parsed; an enum or union is reported above.
            None if is_struct && !self.attrs.written.contains("kind") => errors.push(missing_kind(&node.ident)),
            None => {}
        }

        if let Some(max_attempts) = &self.attrs.max_attempts
            && max_attempts.value < 1
        {
            errors.push(Error::new_spanned(
                &max_attempts.value_tokens,
                format!("max_attempts must be at least 1, not {}", max_attempts.value),
            ));
        }

        if let Some(concurrency) = &self.attrs.concurrency
            && concurrency.value < 1
        {
            errors.push(Error::new_spanned(
                &concurrency.value_tokens,
                format!("concurrency must be at least 1, not {}; leave it out for no limit", concurrency.value),
            ));
        }

        if let (Some(sequence), Shape::Struct { fields, .. }) = (&self.attrs.sequence, &self.shape) {
            let names: Vec<&str> = fields.iter().filter_map(|f| f.serialized_name.as_deref()).collect();
            if let Err(message) = check_sequence(&sequence.value, &names) {
                errors.push(Error::new_spanned(&sequence.value_tokens, message));
            }
        }

        if let Shape::Struct { fields, .. } = &self.shape {
            let names: Vec<&str> = fields.iter().filter_map(|f| f.serialized_name.as_deref()).collect();
            for (setting, what) in [
                (&self.attrs.rate_key, "rate key"),
                (&self.attrs.fair, "fairness key"),
                (&self.attrs.subject, "subject"),
            ] {
                if let Some(setting) = setting
                    && let Err(message) = check_template(what, &setting.value, &names)
                {
                    errors.push(Error::new_spanned(&setting.value_tokens, message));
                }
            }
            if let (Some(r), Some(f)) = (&self.attrs.rate_key, &self.attrs.fair)
                && r.value != f.value
            {
                errors.push(Error::new_spanned(
                    &f.tokens,
                    "`rate_key` and `fair` differ: a job has one flow key, so they must be the same template",
                ));
            }
            if let (Some(r), false) = (&self.attrs.rate_key, self.attrs.written.contains("rate")) {
                errors.push(Error::new_spanned(&r.tokens, "`rate_key` needs a `rate`: #[job(rate = \"50/1m\")]"));
            }
            if let Some(cost) = &self.attrs.cost
                && let crate::attr::Cost::Field(field) = &cost.value
                && !names.contains(&field.as_str())
            {
                errors.push(Error::new_spanned(
                    &cost.value_tokens,
                    format!(
                        "the cost reads `{field}`, which is not a serialized field of this payload (fields: {})",
                        names.join(", ")
                    ),
                ));
            }
        }

        if let Shape::Struct { style, fields } = &self.shape {
            let keys: Vec<_> = fields.iter().filter_map(|field| field.attrs.key.map(|attr| (field, attr))).collect();
            if *style != Style::Named {
                for (_, attr) in &keys {
                    errors.push(Error::new_spanned(
                        attr,
                        "#[job(key)] needs a named field: key fields are found by their JSON name, and fields of a \
                         tuple struct have none",
                    ));
                }
            } else if let (Some(unique), Some((first, _))) = (&self.attrs.unique, keys.first())
                && !unique.value
            {
                let name = first.serialized_name.as_deref().unwrap_or_default();
                errors.push(Error::new_spanned(
                    &unique.tokens,
                    format!(
                        "`unique = false` contradicts #[job(key)] on `{name}`: key fields only matter for unique \
                         kinds; remove one or the other"
                    ),
                ));
            }
        }
    }
}

/// Checks a sequence template: every `{field}` or `{field:path}` names a serialized field, braces pair up
/// (`{{` and `}}` stand for braces).
pub(crate) fn check_sequence(template: &str, fields: &[&str]) -> Result<(), String> {
    check_template("sequence", template, fields)
}

/// Checks a key template (`what`: `sequence`, `rate key`, `fairness key`) as [`check_sequence`] describes.
pub(crate) fn check_template(what: &str, template: &str, fields: &[&str]) -> Result<(), String> {
    let t = |m: String| {
        m.replace("sequence template", &format!("{what} template"))
            .replace("sequence filter", &format!("{what} filter"))
    };
    check_template_text(template, fields).map_err(t)
}

fn check_template_text(template: &str, fields: &[&str]) -> Result<(), String> {
    if template.is_empty() {
        return Err("the sequence template is empty: write it like \"agent:{agentId}\"".to_owned());
    }
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
            }
            '}' => return Err(format!("sequence template {template:?} has a `}}` that closes nothing")),
            '{' => {
                let mut inner = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    inner.push(c);
                }
                if !closed {
                    return Err(format!("sequence template {template:?} has an unclosed `{{`"));
                }
                let (name, filter) = match inner.split_once(':') {
                    Some((name, filter)) => (name, Some(filter)),
                    None => (inner.as_str(), None),
                };
                let filter = filter.unwrap_or("path");
                if filter != "path" {
                    return Err(format!("unknown sequence filter `{filter}` on `{name}`: the only one is `path`"));
                }
                if !fields.contains(&name) {
                    return Err(format!(
                        "the sequence template {template:?} reads `{name}`, which is not a serialized field of \
                         this payload (fields: {})",
                        fields.join(", ")
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks a kind name, returning the message to show if it is not acceptable.
pub(crate) fn check_kind(kind: &str) -> Result<(), String> {
    const ALLOWED: &str = "use only ASCII letters, digits and `_` `.` `:` `/` `-`";
    if kind.is_empty() {
        return Err("job kind is empty: give it a stable name like \"send_email\"".to_owned());
    }
    if kind.chars().any(char::is_whitespace) {
        return Err(format!("job kind {kind:?} contains whitespace: {ALLOWED}"));
    }
    if let Some(bad) = kind.chars().find(|c| !c.is_ascii_alphanumeric() && !KIND_PUNCTUATION.contains(c)) {
        return Err(format!("job kind {kind:?} contains {bad:?}: {ALLOWED}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_kind, check_sequence};

    #[test]
    fn kind_names() {
        for good in ["send_welcome", "mail.send", "billing:charge/v2", "A-9", "x"] {
            assert_eq!(check_kind(good), Ok(()), "{good}");
        }
        assert_eq!(check_kind(""), Err("job kind is empty: give it a stable name like \"send_email\"".to_owned()));
        assert_eq!(
            check_kind("send welcome"),
            Err("job kind \"send welcome\" contains whitespace: use only ASCII letters, digits and `_` `.` `:` `/` \
                 `-`"
            .to_owned())
        );
        assert!(check_kind("tab\there").is_err());
        assert_eq!(
            check_kind("send!"),
            Err("job kind \"send!\" contains '!': use only ASCII letters, digits and `_` `.` `:` `/` `-`".to_owned())
        );
        assert!(check_kind("café").is_err());
    }

    #[test]
    fn sequence_templates() {
        let fields = ["path", "agentId"];
        for good in ["fs:{path:path}", "agent:{agentId}", "{{literal}}:{agentId}", "constant"] {
            assert_eq!(check_sequence(good, &fields), Ok(()), "{good}");
        }
        for (bad, needle) in [
            ("", "empty"),
            ("a{path", "unclosed"),
            ("a}b", "closes nothing"),
            ("{path:}", "unknown sequence filter ``"),
            ("{path:upper}", "unknown sequence filter `upper`"),
            ("{agent_id}", "reads `agent_id`"),
        ] {
            let err = check_sequence(bad, &fields).expect_err(bad);
            assert!(err.contains(needle), "{bad}: {err}");
        }
    }
}
