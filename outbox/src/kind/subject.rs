//! Subjects: the domain row a job is about (`order:42`), from an enqueue's option or the kind's template.

use serde_json::Value;

use super::sequence::Template;
use crate::job::Violation;

/// The longest subject: it is indexed on every backend, and names a row, not a document.
pub const MAX_SUBJECT_BYTES: usize = 256;

/// Parses a kind's subject template, whose fields must be properties of the payload schema.
pub(super) fn parse(text: &str, is_property: &dyn Fn(&str) -> bool) -> Result<Template, String> {
    let t = Template::parse(text).map_err(|e| e.replace("sequence template", "subject template"))?;
    if let Some(field) = t.fields().find(|f| !is_property(f)) {
        return Err(format!(
            "the subject template `{text}` reads `{field}`, which is not a property of the payload schema"
        ));
    }
    Ok(t)
}

/// What is wrong with `subject` as a stored subject, if anything.
pub(crate) fn check(subject: &str) -> Result<(), String> {
    if subject.is_empty() {
        return Err("the subject is empty".into());
    }
    if subject.contains('\0') {
        return Err(format!("the subject {subject:?} contains the NUL character"));
    }
    if subject.len() > MAX_SUBJECT_BYTES {
        return Err(format!("the subject is {} bytes, over the limit of {MAX_SUBJECT_BYTES}", subject.len()));
    }
    Ok(())
}

/// The subject `payload` gives under `template`, checked.
pub(super) fn render(template: &Template, payload: &Value) -> Result<String, Violation> {
    let subject = template.render_whole(payload).map_err(|mut v| {
        v.message = v.message.replace("sequence key", "subject");
        v
    })?;
    check(&subject).map_err(|reason| Violation {
        path: template.fields().next().map(|f| format!("/{}", crate::error::pointer_token(f))).unwrap_or_default(),
        message: format!("gives a subject under `{}` that is refused: {reason}", template.as_str()),
    })?;
    Ok(subject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subjects_are_rendered_and_checked() {
        let t = parse("order:{orderId}", &|f| f == "orderId").expect("parses");
        assert_eq!(render(&t, &json!({"orderId": 42})).expect("subject"), "order:42");
        let v = render(&t, &json!({})).expect_err("missing");
        assert_eq!(v.path, "/orderId");
        assert!(v.message.contains("the subject `order:{orderId}` needs it"), "{}", v.message);
        let v = render(&t, &json!({"orderId": "x".repeat(300)})).expect_err("long");
        assert!(v.message.contains("over the limit of 256"), "{}", v.message);
        let t = parse("{name}", &|_| true).expect("parses");
        assert!(render(&t, &json!({"name": ""})).expect_err("empty").message.contains("the subject is empty"));
        let err = parse("order:{id}", &|_| false).expect_err("unknown field");
        assert!(err.contains("reads `id`, which is not a property"), "{err}");
        assert!(parse("a{b", &|_| true).expect_err("bad").contains("subject template"));
    }
}
