//! The parsers of single option values: a string, a function path, a duration, a sequence-failure policy, a
//! boolean and an `i32`, each checked for type and range.

use syn::{Error, Expr, ExprLit, ExprUnary, Lit, LitInt, Result, UnOp};

/// Looks through the invisible groups a `macro_rules!` `$value:expr` leaves around an expression.
fn ungroup(mut expr: &Expr) -> &Expr {
    while let Expr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}

/// A string literal value.
pub(crate) fn string(expr: &Expr, _name: &str, usage: &str) -> Result<String> {
    match ungroup(expr) {
        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => Ok(lit.value()),
        _ => Err(Error::new_spanned(expr, format!("expected a string literal: #[job({usage})]"))),
    }
}

/// A path to a function: written bare (`Self::check`) or, as serde does, in a string literal (`"check"`).
pub(crate) fn fn_path(expr: &Expr, _name: &str, usage: &str) -> Result<syn::ExprPath> {
    let wrong = || Error::new_spanned(expr, format!("expected a path to a function: #[job({usage})]"));
    match ungroup(expr) {
        Expr::Path(path) => Ok(path.clone()),
        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => lit.parse::<syn::ExprPath>().map_err(|_| wrong()),
        _ => Err(wrong()),
    }
}

/// A type, written as a path (`Extracted`) or in a string (`"Vec<Extracted>"`).
pub(crate) fn type_of(expr: &Expr, _name: &str, usage: &str) -> Result<syn::Type> {
    let wrong = || Error::new_spanned(expr, format!("expected a type: #[job({usage})]"));
    match ungroup(expr) {
        Expr::Path(path) if path.qself.is_none() => {
            Ok(syn::Type::Path(syn::TypePath { qself: None, path: path.path.clone() }))
        }
        Expr::Lit(ExprLit { lit: Lit::Str(lit), .. }) => lit.parse::<syn::Type>().map_err(|_| wrong()),
        _ => Err(wrong()),
    }
}

/// A duration in a string, `"500ms"`, `"30s"`, `"5m"` or `"2h"`, as whole milliseconds of at least one.
pub(crate) fn duration(expr: &Expr, name: &str, usage: &str) -> Result<u64> {
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
pub(crate) fn sequence_failure(expr: &Expr, name: &str, usage: &str) -> Result<bool> {
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
pub(crate) fn boolean(expr: &Expr, _name: &str, usage: &str) -> Result<bool> {
    match ungroup(expr) {
        Expr::Lit(ExprLit { lit: Lit::Bool(lit), .. }) => Ok(lit.value),
        _ => Err(Error::new_spanned(expr, format!("expected `true` or `false`: #[job({usage})]"))),
    }
}

/// An integer literal value, possibly negated, that fits an `i32`.
pub(crate) fn int(expr: &Expr, name: &str, usage: &str) -> Result<i32> {
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

/// What one job costs: a whole number, or the payload field that holds it.
pub(crate) enum Cost {
    Fixed(u32),
    Field(String),
}

/// A cost: an integer literal from 0 to `u32::MAX`, or a string `"{field}"`.
pub(crate) fn cost(expr: &Expr, name: &str, usage: &str) -> Result<Cost> {
    if let Expr::Unary(ExprUnary { op: UnOp::Neg(_), .. }) = ungroup(expr) {
        return Err(Error::new_spanned(expr, format!("`{name}` cannot be negative: a job costs 0 or more")));
    }
    if let Expr::Lit(ExprLit { lit: Lit::Int(lit), .. }) = ungroup(expr) {
        return lit.base10_parse::<u32>().map(Cost::Fixed).map_err(|_| {
            Error::new_spanned(
                expr,
                format!("`{name}` is a whole number from 0 to {}, or a field: #[job({usage})]", u32::MAX),
            )
        });
    }
    let text = string(expr, name, usage)
        .map_err(|_| Error::new_spanned(expr, format!("`{name}` is a whole number or a field: #[job({usage})]")))?;
    match text.strip_prefix('{').and_then(|f| f.strip_suffix('}')) {
        Some(field) if !field.is_empty() && !field.contains(['{', '}', ':']) => Ok(Cost::Field(field.to_owned())),
        _ => Err(Error::new_spanned(
            expr,
            format!("`{name}` names one payload field as \"{{field}}\", or is a whole number, not {text:?}"),
        )),
    }
}

/// A rate, `"50/1m"`, `"20/s"`, `"40000/1m burst 10000"` (units `ms`, `s`, `m`, `h`, `d`): its amount, window in
/// milliseconds, and burst; the same rules as `outbox::flow::Rate`'s parser, checked at compile time.
pub(crate) fn rate(expr: &Expr, name: &str, usage: &str) -> Result<(u64, u64, Option<u64>)> {
    let text = string(expr, name, usage)?;
    let fail = |reason: &str| Error::new_spanned(expr, format!("`{name}` {text:?}: {reason}"));
    let whole = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
    };
    let (rate, burst) = match text.split_once(" burst ") {
        Some((r, b)) => (r.trim(), Some(b.trim())),
        None => (text.trim(), None),
    };
    let (amount, window) =
        rate.split_once('/').ok_or_else(|| fail("write it as AMOUNT/WINDOW, like \"50/1m\" or \"20/s burst 5\""))?;
    let amount = whole(amount.trim()).ok_or_else(|| fail("the amount is not a whole number"))?;
    if amount == 0 {
        return Err(fail("the amount must be at least 1"));
    }
    let window = window.trim();
    let digits = window.find(|c: char| !c.is_ascii_digit()).unwrap_or(window.len());
    let (count, unit) = window.split_at(digits);
    let count =
        if count.is_empty() { 1 } else { whole(count).ok_or_else(|| fail("the window is not a whole number"))? };
    let size: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(fail("the window needs a unit: ms, s, m, h or d")),
    };
    let window_ms = count.checked_mul(size).filter(|ms| *ms <= 366 * 86_400_000);
    let window_ms = window_ms.ok_or_else(|| fail("the window is longer than 366 days"))?;
    if window_ms == 0 {
        return Err(fail("the window must be longer than zero"));
    }
    let burst = match burst {
        None => None,
        Some(b) => match whole(b) {
            Some(0) => return Err(fail("the burst must be at least 1")),
            Some(n) => Some(n),
            None => return Err(fail("the burst is not a whole number")),
        },
    };
    Ok((amount, window_ms, burst))
}
