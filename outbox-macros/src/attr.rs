//! Parsing of the `#[job(...)]` attributes, and of the few serde attributes that decide a field's JSON name.
//!
//! Parsing never stops at the first mistake: every problem goes into [`Errors`] and parsing carries on, so
//! the user sees all of them in one build.

use crate::ctxt::Errors;
use crate::rename::RenameRule;
use proc_macro2::{Group, TokenStream};
use quote::quote;
use std::collections::BTreeSet;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Error, Expr, ExprLit, ExprUnary, Lit, LitInt, LitStr, Result, Token, UnOp, token};

/// The options accepted in the container attribute, as listed in error messages.
const CONTAINER_OPTIONS: &str = "`kind`, `queue`, `priority`, `max_attempts`, `unique`, `validate`, `sequence`, \
     `on_sequence_failure`, `concurrency`, `timeout`";

/// One option of the container attribute: its parsed value and where it was written.
pub(crate) struct Setting<T> {
    /// The value, checked for type and range.
    pub(crate) value: T,
    /// `name = value` as written, for errors about the option as a whole.
    pub(crate) tokens: TokenStream,
    /// The value as written, for errors about the value.
    pub(crate) value_tokens: TokenStream,
}

/// The options of the `#[job(...)]` attributes on the payload type.
#[derive(Default)]
pub(crate) struct ContainerAttrs {
    /// `#[job(kind = "send_welcome")]`: the stable kind name (required).
    pub(crate) kind: Option<Setting<String>>,
    /// `#[job(queue = "mail")]`: the default queue.
    pub(crate) queue: Option<Setting<String>>,
    /// `#[job(priority = 5)]` or `#[job(priority = -1)]`: the default priority, an `i32`.
    pub(crate) priority: Option<Setting<i32>>,
    /// `#[job(max_attempts = 10)]`: the default attempt limit, an `i32` of at least 1.
    pub(crate) max_attempts: Option<Setting<i32>>,
    /// `#[job(unique = false)]`: whether enqueues collapse onto an active job with the same key.
    pub(crate) unique: Option<Setting<bool>>,
    /// `#[job(validate = Self::check)]` or `#[job(validate = "check")]`: a `fn(&Self) -> Result<(),
    /// Vec<outbox_core::Violation>>` with the rules the schema cannot express.
    pub(crate) validate: Option<Setting<syn::ExprPath>>,
    /// `#[job(sequence = "fs:{path:path}")]`: the template of the kind's sequence keys.
    pub(crate) sequence: Option<Setting<String>>,
    /// `#[job(on_sequence_failure = "continue")]`: `true` for continue, `false` for hold.
    pub(crate) on_sequence_failure: Option<Setting<bool>>,
    /// `#[job(concurrency = 2)]`: the most jobs of the kind running at once across every worker.
    pub(crate) concurrency: Option<Setting<i32>>,
    /// `#[job(timeout = "30s")]`: how long a handler may run, in milliseconds.
    pub(crate) timeout: Option<Setting<u64>>,
    /// Every option name written, valid or not, to tell duplicates and a mistyped `kind` from a missing one.
    pub(crate) written: BTreeSet<String>,
}

/// The options of the `#[job(...)]` attributes on one field.
#[derive(Default)]
pub(crate) struct FieldAttrs<'a> {
    /// `#[job(key)]`: the field is part of the idempotency key. Holds the attribute that said so.
    pub(crate) key: Option<&'a Attribute>,
}

/// What serde's container attributes say about field names.
#[derive(Default)]
pub(crate) struct SerdeContainer {
    /// `#[serde(rename_all = "camelCase")]` or `#[serde(rename_all(serialize = "camelCase"))]`.
    pub(crate) rename_all: Option<RenameRule>,
}

/// What serde's field attributes say about the field's name.
#[derive(Default)]
pub(crate) struct SerdeField {
    /// `#[serde(rename = "userId")]` or `#[serde(rename(serialize = "userId"))]`.
    pub(crate) rename: Option<String>,
}

/// Parses the `#[job(...)]` attributes of the derive input.
pub(crate) fn container(attrs: &[Attribute], errors: &mut Errors) -> ContainerAttrs {
    let mut out = ContainerAttrs::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("job")) {
        let parsed = attr.parse_nested_meta(|meta| {
            let name = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
            match name.as_str() {
                // #[job(kind = "send_welcome")]
                "kind" => setting(&mut out.kind, &mut out.written, &meta, errors, "kind = \"send_email\"", string),
                // #[job(queue = "mail")]
                "queue" => setting(&mut out.queue, &mut out.written, &meta, errors, "queue = \"mail\"", string),
                // #[job(priority = 5)], #[job(priority = -1)]
                "priority" => setting(&mut out.priority, &mut out.written, &meta, errors, "priority = 10", int),
                // #[job(max_attempts = 10)]
                "max_attempts" => {
                    setting(&mut out.max_attempts, &mut out.written, &meta, errors, "max_attempts = 5", int)
                }
                // #[job(unique = false)]
                "unique" => setting(&mut out.unique, &mut out.written, &meta, errors, "unique = false", boolean),
                // #[job(sequence = "fs:{path:path}")]
                "sequence" => setting(
                    &mut out.sequence,
                    &mut out.written,
                    &meta,
                    errors,
                    "sequence = \"agent:{agentId}\"",
                    string,
                ),
                // #[job(on_sequence_failure = "continue")]
                "on_sequence_failure" => setting(
                    &mut out.on_sequence_failure,
                    &mut out.written,
                    &meta,
                    errors,
                    "on_sequence_failure = \"continue\"",
                    sequence_failure,
                ),
                // #[job(concurrency = 2)]
                "concurrency" => setting(&mut out.concurrency, &mut out.written, &meta, errors, "concurrency = 2", int),
                // #[job(timeout = "30s")]
                "timeout" => setting(&mut out.timeout, &mut out.written, &meta, errors, "timeout = \"30s\"", duration),
                // #[job(validate = Self::check)], #[job(validate = "check")]
                "validate" => {
                    setting(&mut out.validate, &mut out.written, &meta, errors, "validate = Self::check", fn_path)
                }
                _ => {
                    skip_value(&meta)?;
                    let message = if name == "key" {
                        format!("#[job(key)] goes on a field, not on the type; the type takes {CONTAINER_OPTIONS}")
                    } else {
                        let path = &meta.path;
                        format!("unknown job option `{}`: expected one of {CONTAINER_OPTIONS}", quote!(#path))
                    };
                    errors.push(Error::new_spanned(&meta.path, message));
                    Ok(())
                }
            }
        });
        if let Err(error) = parsed {
            errors.push(error);
        }
    }
    out
}

/// Parses the `#[job(...)]` attributes of one field.
pub(crate) fn field<'a>(attrs: &'a [Attribute], errors: &mut Errors) -> FieldAttrs<'a> {
    let mut out = FieldAttrs::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("job")) {
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("key") {
                // #[job(key)]
                if meta.input.peek(Token![=]) || meta.input.peek(token::Paren) {
                    skip_value(&meta)?;
                    errors.push(meta.error("#[job(key)] takes no value"));
                } else if out.key.is_some() {
                    errors.push(Error::new_spanned(&meta.path, "duplicate #[job(key)] on this field"));
                } else {
                    out.key = Some(attr);
                }
                return Ok(());
            }
            skip_value(&meta)?;
            let path = &meta.path;
            let name = quote!(#path).to_string();
            let message = if matches!(
                name.as_str(),
                "kind"
                    | "queue"
                    | "priority"
                    | "max_attempts"
                    | "unique"
                    | "validate"
                    | "sequence"
                    | "on_sequence_failure"
                    | "concurrency"
                    | "timeout"
            ) {
                format!("`{name}` goes on the type, not on a field; the only field option is #[job(key)]")
            } else {
                format!("unknown job field option `{name}`: the only field option is #[job(key)]")
            };
            errors.push(Error::new_spanned(path, message));
            Ok(())
        });
        if let Err(error) = parsed {
            errors.push(error);
        }
    }
    out
}

/// Reads `rename_all` from the serde attributes of the derive input. Malformed serde attributes are left to
/// serde's own derive to report.
pub(crate) fn serde_container(attrs: &[Attribute]) -> SerdeContainer {
    let mut out = SerdeContainer::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename_all") {
                if let Some(rule) = serialize_name(&meta)? {
                    out.rename_all = RenameRule::from_name(&rule);
                }
                Ok(())
            } else {
                skip_value(&meta)
            }
        });
    }
    out
}

/// Reads `rename` from the serde attributes of one field. Malformed serde attributes are left to serde's own
/// derive to report.
pub(crate) fn serde_field(attrs: &[Attribute]) -> SerdeField {
    let mut out = SerdeField::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                if let Some(name) = serialize_name(&meta)? {
                    out.rename = Some(name);
                }
                Ok(())
            } else {
                skip_value(&meta)
            }
        });
    }
    out
}

/// The serialize-side value of a serde `name = "value"` or `name(serialize = "value", deserialize = "...")`.
fn serialize_name(meta: &ParseNestedMeta) -> Result<Option<String>> {
    if meta.input.peek(Token![=]) {
        let lit: LitStr = meta.value()?.parse()?;
        return Ok(Some(lit.value()));
    }
    let mut name = None;
    meta.parse_nested_meta(|inner| {
        if inner.path.is_ident("serialize") {
            let lit: LitStr = inner.value()?.parse()?;
            name = Some(lit.value());
            Ok(())
        } else {
            skip_value(&inner)
        }
    })?;
    Ok(name)
}

/// Consumes whatever follows an option name: `= expr`, `(...)` or nothing.
fn skip_value(meta: &ParseNestedMeta) -> Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(token::Paren) {
        meta.input.parse::<Group>()?;
    }
    Ok(())
}

/// Parses `name = value` into `slot` with `parse`, reporting a missing value, a duplicate or a bad value.
/// `usage` shows the option written correctly.
fn setting<T>(
    slot: &mut Option<Setting<T>>,
    written: &mut BTreeSet<String>,
    meta: &ParseNestedMeta,
    errors: &mut Errors,
    usage: &str,
    parse: fn(&Expr, &str, &str) -> Result<T>,
) -> Result<()> {
    let path = &meta.path;
    let name = quote!(#path).to_string();
    if !written.insert(name.clone()) {
        errors.push(Error::new_spanned(path, format!("duplicate job option `{name}`")));
    }
    if !meta.input.peek(Token![=]) {
        let missing = || meta.error(format!("`{name}` needs a value: #[job({usage})]"));
        if meta.input.peek(token::Paren) {
            // `kind("x")`: the rest of the attribute still parses.
            skip_value(meta)?;
        } else if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
            // `kind "x"`: the rest of the attribute does not parse; give up on it with this one error.
            return Err(missing());
        }
        errors.push(missing());
        return Ok(());
    }
    let expr: Expr = meta.value()?.parse()?;
    match parse(&expr, &name, usage) {
        Ok(value) if slot.is_none() => {
            *slot = Some(Setting { value, tokens: quote!(#path = #expr), value_tokens: quote!(#expr) });
        }
        Ok(_) => {}
        Err(error) => errors.push(error),
    }
    Ok(())
}

/// Looks through the invisible groups a `macro_rules!` `$value:expr` leaves around an expression.
fn ungroup(mut expr: &Expr) -> &Expr {
    while let Expr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}

/// A string literal value.
fn string(expr: &Expr, _name: &str, usage: &str) -> Result<String> {
    match ungroup(expr) {
        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => Ok(lit.value()),
        _ => Err(Error::new_spanned(expr, format!("expected a string literal: #[job({usage})]"))),
    }
}

/// A path to a function: written bare (`Self::check`) or, as serde does, in a string literal (`"check"`).
fn fn_path(expr: &Expr, _name: &str, usage: &str) -> Result<syn::ExprPath> {
    let wrong = || Error::new_spanned(expr, format!("expected a path to a function: #[job({usage})]"));
    match ungroup(expr) {
        Expr::Path(path) => Ok(path.clone()),
        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => lit.parse::<syn::ExprPath>().map_err(|_| wrong()),
        _ => Err(wrong()),
    }
}

/// A duration in a string, `"500ms"`, `"30s"`, `"5m"` or `"2h"`, as whole milliseconds of at least one.
fn duration(expr: &Expr, name: &str, usage: &str) -> Result<u64> {
    let text = string(expr, name, usage)?;
    let wrong = || {
        Error::new_spanned(
            expr,
            format!("`{name}` is a duration such as \"500ms\", \"30s\", \"5m\" or \"2h\", not {text:?}"),
        )
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().map_err(|_| wrong())?;
    let per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(wrong()),
    };
    match n.checked_mul(per) {
        Some(0) => Err(Error::new_spanned(expr, format!("`{name}` must be longer than zero"))),
        Some(ms) => Ok(ms),
        None => Err(wrong()),
    }
}

/// `"hold"` (false) or `"continue"` (true).
fn sequence_failure(expr: &Expr, name: &str, usage: &str) -> Result<bool> {
    match string(expr, name, usage)?.as_str() {
        "hold" => Ok(false),
        "continue" => Ok(true),
        other => Err(Error::new_spanned(
            expr,
            format!("`{name}` is \"hold\" (the default: later jobs wait) or \"continue\", not {other:?}"),
        )),
    }
}

/// A `true` or `false` literal value.
fn boolean(expr: &Expr, _name: &str, usage: &str) -> Result<bool> {
    match ungroup(expr) {
        Expr::Lit(ExprLit { lit: Lit::Bool(lit), .. }) => Ok(lit.value),
        _ => Err(Error::new_spanned(expr, format!("expected `true` or `false`: #[job({usage})]"))),
    }
}

/// An integer literal value, possibly negated, that fits an `i32`.
fn int(expr: &Expr, name: &str, usage: &str) -> Result<i32> {
    let wrong_type = || Error::new_spanned(expr, format!("expected an integer literal: #[job({usage})]"));
    let int_lit = |expr: &Expr| match ungroup(expr) {
        Expr::Lit(ExprLit { lit: Lit::Int(lit), .. }) => Some(lit.clone()),
        _ => None,
    };
    let (negative, lit): (bool, LitInt) = match ungroup(expr) {
        Expr::Unary(ExprUnary { op: UnOp::Neg(_), expr: inner, .. }) => (true, int_lit(inner).ok_or_else(wrong_type)?),
        other => (false, int_lit(other).ok_or_else(wrong_type)?),
    };
    if !matches!(lit.suffix(), "" | "i32") {
        return Err(Error::new_spanned(&lit, format!("`{name}` is an i32: drop the `{}` suffix", lit.suffix())));
    }
    let out_of_range =
        || Error::new_spanned(expr, format!("`{name}` must fit in an i32 ({}..={})", i32::MIN, i32::MAX));
    let magnitude: i128 = lit.base10_parse().map_err(|_| out_of_range())?;
    let value = if negative { -magnitude } else { magnitude };
    i32::try_from(value).map_err(|_| out_of_range())
}

#[cfg(test)]
mod tests {
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
                 `validate`, `sequence`, `on_sequence_failure`, `concurrency`, `timeout`",
                "duplicate job option `queue`",
                "`max_attempts` must fit in an i32 (-2147483648..=2147483647)",
                "expected `true` or `false`: #[job(unique = false)]",
                "#[job(key)] goes on a field, not on the type; the type takes `kind`, `queue`, `priority`, \
                 `max_attempts`, `unique`, `validate`, `sequence`, `on_sequence_failure`, `concurrency`, `timeout`",
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
}
