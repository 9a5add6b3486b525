//! Parsing of the `#[job(...)]` attributes, and of the few serde attributes that decide a field's JSON name.
//!
//! Parsing never stops at the first mistake: every problem goes into [`Errors`] and parsing carries on, so
//! the user sees all of them in one build.

mod value;

use crate::ctxt::Errors;
use crate::rename::RenameRule;
use proc_macro2::{Group, TokenStream};
use quote::quote;
use std::collections::BTreeSet;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Error, Expr, LitStr, Result, Token, token};
pub(crate) use value::Cost;
use value::{boolean, cost, duration, fn_path, int, rate, sequence_failure, string, type_of};

/// The options accepted in the container attribute, as listed in error messages.
const CONTAINER_OPTIONS: &str = "`kind`, `queue`, `priority`, `max_attempts`, `unique`, `validate`, `sequence`, \
     `on_sequence_failure`, `concurrency`, `timeout`, `rate`, `rate_key`, `fair`, `cost`, `subject`, `output`";

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
    /// Vec<outbox::Violation>>` with the rules the schema cannot express.
    pub(crate) validate: Option<Setting<syn::ExprPath>>,
    /// `#[job(sequence = "fs:{path:path}")]`: the template of the kind's sequence keys.
    pub(crate) sequence: Option<Setting<String>>,
    /// `#[job(on_sequence_failure = "continue")]`: `true` for continue, `false` for hold.
    pub(crate) on_sequence_failure: Option<Setting<bool>>,
    /// `#[job(concurrency = 2)]`: the most jobs of the kind running at once across every worker.
    pub(crate) concurrency: Option<Setting<i32>>,
    /// `#[job(timeout = "30s")]`: how long a handler may run, in milliseconds.
    pub(crate) timeout: Option<Setting<u64>>,
    /// `#[job(rate = "50/1m")]`, `#[job(rate = "20/s burst 5")]`: amount, window (ms) and burst of a fleet-wide rate.
    pub(crate) rate: Option<Setting<(u64, u64, Option<u64>)>>,
    /// `#[job(rate_key = "{tenant}")]`: the template of the key each job is rate limited under.
    pub(crate) rate_key: Option<Setting<String>>,
    /// `#[job(fair = "{tenant}")]`: the template of the key claims share out by.
    pub(crate) fair: Option<Setting<String>>,
    /// `#[job(cost = 10)]`, `#[job(cost = "{estimatedTokens}")]`: what one job counts against the rate.
    pub(crate) cost: Option<Setting<Cost>>,
    /// `#[job(subject = "order:{orderId}")]`: the template of the domain row each job is about.
    pub(crate) subject: Option<Setting<String>>,
    /// `#[job(output = Extracted)]`: the type the handler completes with, whose JSON Schema every output must fit.
    pub(crate) output: Option<Setting<syn::Type>>,
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
                // #[job(rate = "50/1m")], #[job(rate = "20/s burst 5")]
                "rate" => setting(&mut out.rate, &mut out.written, &meta, errors, "rate = \"50/1m\"", rate),
                // #[job(rate_key = "{tenant}")]
                "rate_key" => {
                    setting(&mut out.rate_key, &mut out.written, &meta, errors, "rate_key = \"{tenant}\"", string)
                }
                // #[job(fair = "{tenant}")]
                "fair" => setting(&mut out.fair, &mut out.written, &meta, errors, "fair = \"{tenant}\"", string),
                // #[job(cost = 10)], #[job(cost = "{estimatedTokens}")]
                "cost" => setting(&mut out.cost, &mut out.written, &meta, errors, "cost = \"{tokens}\"", cost),
                // #[job(subject = "order:{orderId}")]
                "subject" => {
                    setting(&mut out.subject, &mut out.written, &meta, errors, "subject = \"order:{orderId}\"", string)
                }
                // #[job(output = Extracted)], #[job(output = "Vec<Extracted>")]
                "output" => setting(&mut out.output, &mut out.written, &meta, errors, "output = Extracted", type_of),
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
                    | "rate"
                    | "rate_key"
                    | "fair"
                    | "cost"
                    | "subject"
                    | "output"
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

#[cfg(test)]
mod tests;
