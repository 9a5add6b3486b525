//! The list of backends, and everything their SQL differs in that a shared statement has to spell. A
//! statement written once asks its connection's [`Backend`] for each of these and nothing else:
//!
//! - placeholders are `$1`, `$2`, ... everywhere (sqlx binds them by number on SQLite too);
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

    fn names() -> &'static str {
        match (cfg!(feature = "sqlite"), cfg!(feature = "postgres")) {
            (true, true) => "SQLite (`sqlite:`) and PostgreSQL (`postgres:`)",
            (true, false) => "SQLite (`sqlite:`) only: enable the `postgres` feature for PostgreSQL",
            _ => "PostgreSQL (`postgres:`) only: enable the `sqlite` feature for SQLite",
        }
    }

    fn db(self) -> DbBackend {
        match self {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => DbBackend::Sqlite,
            #[cfg(feature = "postgres")]
            Backend::Postgres => DbBackend::Postgres,
        }
    }

    /// A statement of this backend.
    pub(crate) fn stmt(self, sql: impl Into<String>, values: Vec<Value>) -> Statement {
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
