//! Tests of the attribute parsing: every option, every problem reported at once, and serde's renames.

use super::*;
use syn::{DeriveInput, parse_quote};

fn messages(errors: Errors) -> Vec<String> {
    match errors.finish() {
        Ok(()) => Vec::new(),
        Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
    }
}

fn parse_container(input: &DeriveInput) -> (ContainerAttrs, Vec<String>) {
    let mut errors = Errors::default();
    let attrs = container(&input.attrs, &mut errors);
    (attrs, messages(errors))
}

#[test]
fn parses_every_option() {
    let input: DeriveInput = parse_quote! {
        #[derive(Job)]
        #[job(kind = "mail.send", queue = "mail")]
        #[job(priority = -5, max_attempts = 10, unique = false)]
        struct S {}
    };
    let (attrs, errors) = parse_container(&input);
    assert_eq!(errors, Vec::<String>::new());
    assert_eq!(attrs.kind.map(|s| s.value).as_deref(), Some("mail.send"));
    assert_eq!(attrs.queue.map(|s| s.value).as_deref(), Some("mail"));
    assert_eq!(attrs.priority.map(|s| s.value), Some(-5));
    assert_eq!(attrs.max_attempts.map(|s| s.value), Some(10));
    assert_eq!(attrs.unique.map(|s| s.value), Some(false));
}

#[test]
fn options_not_given_stay_unset() {
    let input: DeriveInput = parse_quote! {
        #[job(kind = "k")]
        #[serde(deny_unknown_fields)]
        struct S {}
    };
    let (attrs, errors) = parse_container(&input);
    assert!(errors.is_empty());
    assert!(attrs.queue.is_none() && attrs.priority.is_none());
    assert!(attrs.max_attempts.is_none() && attrs.unique.is_none());
}

#[test]
fn integer_edges() {
    let input: DeriveInput = parse_quote! {
        #[job(priority = -2147483648, max_attempts = 2147483647i32)]
        struct S {}
    };
    let (attrs, errors) = parse_container(&input);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(attrs.priority.map(|s| s.value), Some(i32::MIN));
    assert_eq!(attrs.max_attempts.map(|s| s.value), Some(i32::MAX));
}

#[test]
fn reports_every_problem_at_once() {
    let input: DeriveInput = parse_quote! {
        #[job(kind = 5, queue = "q", priority = "high", colour = "red")]
        #[job(queue = "again", max_attempts = 2147483648, unique = 1, key, priority = 1u8, unique)]
        struct S {}
    };
    let (attrs, errors) = parse_container(&input);
    assert_eq!(
        errors,
        [
            "expected a string literal: #[job(kind = \"send_email\")]",
            "expected an integer literal: #[job(priority = 10)]",
            "unknown job option `colour`: expected one of `kind`, `queue`, `priority`, `max_attempts`, `unique`, \
             `validate`, `sequence`, `on_sequence_failure`, `concurrency`, `timeout`, `rate`, `rate_key`, `fair`, `cost`, `subject`, `output`",
            "duplicate job option `queue`",
            "`max_attempts` must fit in an i32 (-2147483648..=2147483647)",
            "expected `true` or `false`: #[job(unique = false)]",
            "#[job(key)] goes on a field, not on the type; the type takes `kind`, `queue`, `priority`, \
             `max_attempts`, `unique`, `validate`, `sequence`, `on_sequence_failure`, `concurrency`, `timeout`, `rate`, \
             `rate_key`, `fair`, `cost`, `subject`, `output`",
            "duplicate job option `priority`",
            "`priority` is an i32: drop the `u8` suffix",
            "duplicate job option `unique`",
            "`unique` needs a value: #[job(unique = false)]",
        ]
    );
    // The first valid value is kept; a mistyped `kind` still counts as written.
    assert_eq!(attrs.queue.map(|s| s.value).as_deref(), Some("q"));
    assert!(attrs.kind.is_none());
    assert!(attrs.written.contains("kind"));
}

#[test]
fn syntax_error_is_reported() {
    let input: DeriveInput = parse_quote! {
        #[job(kind "x")]
        struct S {}
    };
    let (_, errors) = parse_container(&input);
    assert_eq!(errors, ["`kind` needs a value: #[job(kind = \"send_email\")]"]);
}

#[test]
fn field_key() {
    let field: syn::Field = parse_quote! {
        #[serde(default)]
        #[job(key)]
        user_id: i64
    };
    let mut errors = Errors::default();
    let attrs = super::field(&field.attrs, &mut errors);
    assert!(messages(errors).is_empty());
    assert!(attrs.key.is_some());
}

#[test]
fn field_errors() {
    let field: syn::Field = parse_quote! {
        #[job(key, foo, kind = "x")]
        #[job(key)]
        #[job(key = true)]
        user_id: i64
    };
    let mut errors = Errors::default();
    let attrs = super::field(&field.attrs, &mut errors);
    assert!(attrs.key.is_some());
    assert_eq!(
        messages(errors),
        [
            "unknown job field option `foo`: the only field option is #[job(key)]",
            "`kind` goes on the type, not on a field; the only field option is #[job(key)]",
            "duplicate #[job(key)] on this field",
            "#[job(key)] takes no value",
        ]
    );
}

#[test]
fn serde_renames() {
    let input: DeriveInput = parse_quote! {
        #[serde(deny_unknown_fields, bound(serialize = "T: X"), rename_all = "camelCase")]
        struct S {}
    };
    assert_eq!(serde_container(&input.attrs).rename_all, Some(RenameRule::CamelCase));

    let input: DeriveInput = parse_quote! {
        #[serde(rename_all(deserialize = "snake_case", serialize = "kebab-case"))]
        struct S {}
    };
    assert_eq!(serde_container(&input.attrs).rename_all, Some(RenameRule::KebabCase));

    let input: DeriveInput = parse_quote! {
        #[serde(rename = "Other", crate = "serde")]
        struct S {}
    };
    assert_eq!(serde_container(&input.attrs).rename_all, None);

    let field: syn::Field = parse_quote! {
        #[serde(default = "path::to", rename = "userId", skip_serializing_if = "Option::is_none")]
        user_id: i64
    };
    assert_eq!(serde_field(&field.attrs).rename.as_deref(), Some("userId"));

    let field: syn::Field = parse_quote! {
        #[serde(rename(serialize = "ser", deserialize = "de"))]
        user_id: i64
    };
    assert_eq!(serde_field(&field.attrs).rename.as_deref(), Some("ser"));

    let field: syn::Field = parse_quote! {
        #[serde(rename(deserialize = "de"), alias = "x")]
        user_id: i64
    };
    assert_eq!(serde_field(&field.attrs).rename, None);
}
