//! The list of backends, and everything their SQL differs in that a shared statement has to spell. A
//! statement written once asks its connection's [`Backend`] for each of these and nothing else:
//!
//! - placeholders are written `$1`, `$2`, ... everywhere ([`Backend::stmt`] makes them plain `?` on SQLite);
//! - times are integer milliseconds on SQLite and `timestamptz` on PostgreSQL: [`Backend::ts`] turns a
//!   parameter of milliseconds into the column's type, [`Backend::ms`] a column or interval back;
//! - JSON is text on SQLite and `jsonb` on PostgreSQL: [`Backend::json`] in, [`Backend::text`] out;
//! - the larger of two values is `MAX(a, b)` on SQLite and `GREATEST(a, b)` on PostgreSQL
//!   ([`Backend::greatest`]).
//!
//! Conditions on the boolean `waiting` read the same on both (`NOT waiting`, `COUNT(*) FILTER (WHERE ...)`).

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!("outbox-core needs one backend at least: enable the `sqlite` or `postgres` feature");

use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use crate::error::{Error, Result};

/// The database engines outbox runs on, each behind its Cargo feature. Adding one is a variant here, an arm
/// in each method below, and a folder beside `sqlite/` and `postgres/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

impl Backend {
    /// The backend of a connection, when this build supports it.
    pub(crate) fn of<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Backend> {
        match conn.get_database_backend() {
            #[cfg(feature = "sqlite")]
            DbBackend::Sqlite => Ok(Backend::Sqlite),
            #[cfg(feature = "postgres")]
            DbBackend::Postgres => Ok(Backend::Postgres),
            other => Err(Error::Unsupported(format!(
                "{other:?} is not supported by this build of outbox; it runs on {}",
                Backend::names()
            ))),
        }
    }

    /// The backend a connection URL names.
    pub(crate) fn of_url(url: &str) -> Result<Backend> {
        let scheme = url.split_once(':').map_or("", |(s, _)| s);
        match scheme {
            #[cfg(feature = "sqlite")]
            "sqlite" => Ok(Backend::Sqlite),
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => Ok(Backend::Postgres),
            _ => Err(Error::Unsupported(format!(
                "the database URL scheme `{scheme}:` is not supported by this build of outbox; it runs on {}",
                Backend::names()
            ))),
        }
    }

    /// The backends this build runs on, for errors.
    fn names() -> String {
        let names = [
            (cfg!(feature = "sqlite"), "SQLite (`sqlite:`)"),
            (cfg!(feature = "postgres"), "PostgreSQL (`postgres:`)"),
        ];
        let on: Vec<&str> = names.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
        format!("{} (its `sqlite` and `postgres` features choose)", on.join(" and "))
    }

    fn db(self) -> DbBackend {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => DbBackend::Sqlite,
            #[cfg(feature = "postgres")]
            Backend::Postgres => DbBackend::Postgres,
        }
    }

    /// A statement of this backend. Placeholders are written `$1`, `$2`, ...; on SQLite they become `?` with
    /// the values in the order they appear ([`positional`]).
    pub(crate) fn stmt(self, sql: impl Into<String>, values: Vec<Value>) -> Statement {
        let (sql, values) = match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => positional(sql.into(), values),
            #[cfg(feature = "postgres")]
            Backend::Postgres => (sql.into(), values),
        };
        Statement::from_sql_and_values(self.db(), sql, values)
    }

    /// The SQL expression `p` (integer milliseconds since the epoch) in the type of a time column.
    pub(crate) fn ts(self, p: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => p.to_owned(),
            // Exact, unlike `to_timestamp`.
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("(TIMESTAMPTZ 'epoch' + ({p})::int8 * INTERVAL '1 millisecond')"),
        }
    }

    /// The time column (or the difference of two) `expr` as integer milliseconds since the epoch.
    pub(crate) fn ms(self, expr: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => expr.to_owned(),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("(EXTRACT(EPOCH FROM {expr}) * 1000)::int8"),
        }
    }

    /// The text parameter `p` in the type of a JSON column.
    pub(crate) fn json(self, p: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => p.to_owned(),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("{p}::jsonb"),
        }
    }

    /// The JSON column `col` as text.
    pub(crate) fn text(self, col: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => col.to_owned(),
            #[cfg(feature = "postgres")]
            Backend::Postgres => format!("{col}::text"),
        }
    }

    /// The function that returns the larger of its arguments.
    pub(crate) fn greatest(self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => "MAX",
            #[cfg(feature = "postgres")]
            Backend::Postgres => "GREATEST",
        }
    }
}

/// Numbered placeholders for values pushed one at a time: `Params::push` returns the placeholder of the
/// value it took.
#[derive(Default)]
pub(crate) struct Params(pub(crate) Vec<Value>);

impl Params {
    pub(crate) fn push(&mut self, value: impl Into<Value>) -> String {
        self.0.push(value.into());
        format!("${}", self.0.len())
    }
}

/// `sql` with each placeholder `$N` written `?`, and the values in the order the placeholders appear (a value
/// used twice is bound twice). SQLite keeps a list of the names of numbered and named placeholders, which sqlx
/// searches once per value it binds: a batch insert of 32,000 values ran eight times slower with them
/// (measured); plain `?` have no names. Only placeholders have a `$` before a digit in the statements of this
/// crate (JSON paths are values, never text).
#[cfg(feature = "sqlite")]
fn positional(sql: String, values: Vec<Value>) -> (String, Vec<Value>) {
    if !sql.contains('$') {
        return (sql, values);
    }
    let mut out = String::with_capacity(sql.len());
    let mut order: Vec<usize> = Vec::with_capacity(values.len());
    let mut rest = sql.as_str();
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits = rest[at + 1..].bytes().take_while(u8::is_ascii_digit).count();
        match rest[at + 1..at + 1 + digits].parse::<usize>() {
            Ok(n) if n >= 1 => {
                out.push('?');
                order.push(n - 1);
            }
            _ => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
    if order.iter().enumerate().all(|(i, n)| i == *n) && order.len() == values.len() {
        return (out, values);
    }
    // A placeholder past the values binds NULL, as SQLite does for an unbound one.
    let values = order.iter().map(|n| values.get(*n).cloned().unwrap_or(Value::String(None))).collect();
    (out, values)
}
