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
