//! The dialects of the engines: everything their SQL differs in that a statement written once has to spell. Such
//! a statement asks its connection's [`Dialect`] for each of these and nothing else (never which engine it runs on:
//! what an engine does its own way is an entry of `engine.rs`):
//!
//! - placeholders are written `$1`, `$2`, ... everywhere ([`Dialect::stmt`] makes them plain `?` on SQLite and
//!   MySQL);
//! - times are integer milliseconds on SQLite and MySQL and `timestamptz` on PostgreSQL: [`Dialect::ts`] turns a
//!   parameter of milliseconds into the column's type, [`Dialect::ms`] a column or interval back;
//! - JSON is text on SQLite and MariaDB (MySQL 8 parses it) and `jsonb` on PostgreSQL: [`Dialect::json`] in,
//!   [`Dialect::text`] out;
//! - the larger of two values is `MAX(a, b)` on SQLite and `GREATEST(a, b)` elsewhere ([`Dialect::greatest`]).
//!
//! Conditions on the boolean `waiting` read the same on every engine (`NOT waiting`,
//! `COUNT(CASE WHEN ... THEN 1 END)`).

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
compile_error!("outbox needs one backend at least: enable the `sqlite`, `postgres` or `mysql` feature");

use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use crate::error::{Error, Result};

/// The SQL dialects of the engines outbox runs on, each behind its Cargo feature. Adding an engine is a variant
/// here with an arm in each method below, a folder beside `sqlite/` and `postgres/` implementing `Engine`, and an
/// arm in `on_engine!` (`storage/mod.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    #[cfg(feature = "sqlite")]
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
    /// MariaDB (10.6 and later) and the MySQL family: shared statements keep to what MariaDB and MySQL 8 both
    /// accept; which of the two a server is, its engine reads (`storage/mysql/`).
    #[cfg(feature = "mysql")]
    MySql,
}

impl Dialect {
    /// The backend of a connection, when this build supports it.
    pub(crate) fn of<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Dialect> {
        match conn.get_database_backend() {
            #[cfg(feature = "sqlite")]
            DbBackend::Sqlite => Ok(Dialect::Sqlite),
            #[cfg(feature = "postgres")]
            DbBackend::Postgres => Ok(Dialect::Postgres),
            #[cfg(feature = "mysql")]
            DbBackend::MySql => Ok(Dialect::MySql),
            other => Err(Error::Unsupported(format!(
                "{other:?} is not supported by this build of outbox; it runs on {}",
                Dialect::names()
            ))),
        }
    }

    /// The backend a connection URL names.
    pub(crate) fn of_url(url: &str) -> Result<Dialect> {
        let scheme = url.split_once(':').map_or("", |(s, _)| s);
        match scheme {
            #[cfg(feature = "sqlite")]
            "sqlite" => Ok(Dialect::Sqlite),
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            #[cfg(feature = "mysql")]
            "mysql" => Ok(Dialect::MySql),
            _ => Err(Error::Unsupported(format!(
                "the database URL scheme `{scheme}:` is not supported by this build of outbox; it runs on {}",
                Dialect::names()
            ))),
        }
    }

    /// The backends this build runs on, for errors.
    fn names() -> String {
        let names = [
            (cfg!(feature = "sqlite"), "SQLite (`sqlite:`)"),
            (cfg!(feature = "postgres"), "PostgreSQL (`postgres:`)"),
            (cfg!(feature = "mysql"), "MariaDB and MySQL (`mysql:`)"),
        ];
        let on: Vec<&str> = names.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
        let on = match on.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => on.join(""),
        };
        format!("{on} (its `sqlite`, `postgres` and `mysql` features choose)")
    }

    fn db(self) -> DbBackend {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => DbBackend::Sqlite,
            #[cfg(feature = "postgres")]
            Dialect::Postgres => DbBackend::Postgres,
            #[cfg(feature = "mysql")]
            Dialect::MySql => DbBackend::MySql,
        }
    }

    /// A statement of this backend. Placeholders are written `$1`, `$2`, ...; on SQLite and MySQL they become `?`
    /// with the values in the order they appear ([`positional`]).
    pub(crate) fn stmt(self, sql: impl Into<String>, values: Vec<Value>) -> Statement {
        let (sql, values) = match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => positional(sql.into(), values),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => (sql.into(), values),
            #[cfg(feature = "mysql")]
            Dialect::MySql => positional(sql.into(), values),
        };
        Statement::from_sql_and_values(self.db(), sql, values)
    }

    /// The SQL expression `p` (integer milliseconds since the epoch) in the type of a time column.
    pub(crate) fn ts(self, p: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => p.to_owned(),
            // Exact, unlike `to_timestamp`.
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("(TIMESTAMPTZ 'epoch' + ({p})::int8 * INTERVAL '1 millisecond')"),
            // BIGINT milliseconds: a DATETIME difference is digit arithmetic, and its conversions read the
            // session's time zone, which the caller's connection owns.
            #[cfg(feature = "mysql")]
            Dialect::MySql => p.to_owned(),
        }
    }

    /// `t` as a value compared with a time column as it is (no placeholder of [`Dialect::ts`] around it).
    pub(crate) fn time_value(self, t: chrono::DateTime<chrono::Utc>) -> sea_orm::Value {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => sea_orm::Value::BigInt(Some(t.timestamp_millis())),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => sea_orm::Value::ChronoDateTimeUtc(Some(t)),
            #[cfg(feature = "mysql")]
            Dialect::MySql => sea_orm::Value::BigInt(Some(t.timestamp_millis())),
        }
    }

    /// The time column (or the difference of two) `expr` as integer milliseconds since the epoch.
    pub(crate) fn ms(self, expr: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => expr.to_owned(),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("(EXTRACT(EPOCH FROM {expr}) * 1000)::int8"),
            #[cfg(feature = "mysql")]
            Dialect::MySql => expr.to_owned(),
        }
    }

    /// The text parameter `p` in the type of a JSON column.
    pub(crate) fn json(self, p: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => p.to_owned(),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("{p}::jsonb"),
            // A JSON column takes text (MariaDB keeps it as written, MySQL 8 parses it).
            #[cfg(feature = "mysql")]
            Dialect::MySql => p.to_owned(),
        }
    }

    /// The JSON column `col` as text.
    pub(crate) fn text(self, col: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => col.to_owned(),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("{col}::text"),
            #[cfg(feature = "mysql")]
            Dialect::MySql => col.to_owned(),
        }
    }

    /// Whether placeholders are numbered (`$1`) rather than bare `?` bound in the order they appear.
    pub(crate) fn numbered(self) -> bool {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => false,
            #[cfg(feature = "postgres")]
            Dialect::Postgres => true,
            #[cfg(feature = "mysql")]
            Dialect::MySql => false,
        }
    }

    /// The set of the elements of the JSON array `array`, named `alias` (for a `FROM` list); [`Dialect::element`]
    /// reads one.
    pub(crate) fn elements(self, array: &str, alias: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!("json_each({array}) AS {alias}"),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("json_array_elements({array}) AS {alias}"),
            // A JSON column of JSON_TABLE returns arrays and objects as their text (a LONGTEXT one, NULL).
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("JSON_TABLE({array}, '$[*]' COLUMNS (value JSON PATH '$')) AS {alias}"),
        }
    }

    /// The element of [`Dialect::elements`] named `alias`, as JSON.
    pub(crate) fn element(self, alias: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!("{alias}.value"),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => alias.to_owned(),
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("{alias}.value"),
        }
    }

    /// The payload value at the JSON path `$.a.b` (object keys only), as a JSON value or, with `text`, as text (a
    /// string without its quotes); its placeholder pushed to `p`.
    pub(crate) fn payload_at(self, p: &mut Params, json_path: &str, text: bool) -> Result<String> {
        Ok(match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite if text => format!("CAST(json_extract(payload, {}) AS TEXT)", p.push(json_path)),
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!("json_extract(payload, {})", p.push(json_path)),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let op = if text { "#>>" } else { "#>" };
                format!("(payload {op} string_to_array({}, '.'))", p.push(path_keys(json_path)?))
            }
            #[cfg(feature = "mysql")]
            Dialect::MySql if text => format!("JSON_UNQUOTE(JSON_EXTRACT(payload, {}))", p.push(json_path)),
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("JSON_EXTRACT(payload, {})", p.push(json_path)),
        })
    }

    /// The JSON array of the JSON values `parts`, as text written as SQLite's `json_array` writes it (no spaces).
    pub(crate) fn json_array_text(self, parts: &[String]) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!("json_array({})", parts.join(", ")),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let parts: Vec<String> = parts.iter().map(|v| format!("COALESCE({v}::text, 'null')")).collect();
                format!("('[' || concat_ws(',', {}) || ']')", parts.join(", "))
            }
            // JSON_ARRAY and JSON_EXTRACT write spaces after commas and colons: each part is compacted.
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                let parts: Vec<String> = parts.iter().map(|v| format!("COALESCE(JSON_COMPACT({v}), 'null')")).collect();
                format!("CONCAT('[', CONCAT_WS(',', {}), ']')", parts.join(", "))
            }
        }
    }

    /// The scratch (temporary) table `name` as statements name it: in the connection's temp schema where there
    /// is one; MySQL has none, a temporary table hides a table of the same name.
    pub(crate) fn scratch_table(self, name: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!("temp.{name}"),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("pg_temp.{name}"),
            #[cfg(feature = "mysql")]
            Dialect::MySql => name.to_owned(),
        }
    }

    /// How a scratch table is spelled: an integer that is SQLite's rowid, what makes the table go with its
    /// transaction, and a collation that orders text bytewise.
    pub(crate) fn scratch_spelling(self) -> (&'static str, &'static str, &'static str) {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => ("INTEGER", "", ""),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => ("BIGINT", " ON COMMIT DROP", " COLLATE \"C\""),
            // A temporary table outlives the commit: the scan drops it first. Its text is utf8mb4 whatever the
            // database's default.
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                ("BIGINT", " DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin", " COLLATE utf8mb4_nopad_bin")
            }
        }
    }

    /// `expr` as a 64-bit integer (`BIGINT`; MySQL casts to `SIGNED`).
    pub(crate) fn integer(self, expr: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("CAST({expr} AS SIGNED)"),
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            _ => format!("CAST({expr} AS BIGINT)"),
        }
    }

    /// `expr` as a double (`DOUBLE PRECISION`; MySQL's `AVG` of integers is a decimal, which this reads as one).
    pub(crate) fn double(self, expr: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("CAST({expr} AS DOUBLE)"),
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            _ => format!("CAST({expr} AS DOUBLE PRECISION)"),
        }
    }

    /// The integer quotient of the integers `a` and `b` (MySQL's `/` gives a decimal).
    pub(crate) fn quotient(self, a: &str, b: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("({a} DIV {b})"),
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            _ => format!("({a} / {b})"),
        }
    }

    /// What ends an INSERT so that a row whose conflict target `keys` (its primary key) exists already is updated
    /// instead, `columns` taking the values the INSERT gave them.
    pub(crate) fn upsert(self, keys: &str, columns: &[&str]) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                // `ON DUPLICATE KEY` names no key: any unique key of the row's table counts.
                let _ = keys;
                let set: Vec<String> = columns.iter().map(|c| format!("{c} = VALUES({c})")).collect();
                format!(" ON DUPLICATE KEY UPDATE {}", set.join(", "))
            }
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            _ => {
                let set: Vec<String> = columns.iter().map(|c| format!("{c} = excluded.{c}")).collect();
                format!(" ON CONFLICT ({keys}) DO UPDATE SET {}", set.join(", "))
            }
        }
    }

    /// An UPDATE of `table` from the rows `rows` (each its expressions, placeholders mostly) named `v` with the
    /// columns `columns`, joined where `on`, each `(column, expression)` of `set` assigned (expressions read `v`).
    pub(crate) fn update_from_values(
        self,
        table: &str,
        (columns, rows): (&[&str], &[Vec<String>]),
        on: &str,
        set: &[(&str, &str)],
    ) -> String {
        match self {
            // No `WITH` before an `UPDATE` (before MariaDB 12.3), and no `FROM`: a join, its targets named by table.
            // The rows are a `UNION ALL`, whose columns take a type wide enough for every row (those of a `VALUES`
            // list take the first row's: a longer value in a later row was refused, 1406).
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                let rows: Vec<String> = rows
                    .iter()
                    .enumerate()
                    .map(|(n, row)| {
                        let named: Vec<String> = row
                            .iter()
                            .zip(columns)
                            .map(|(e, c)| if n == 0 { format!("{e} AS {c}") } else { e.clone() })
                            .collect();
                        format!("SELECT {}", named.join(", "))
                    })
                    .collect();
                let set: Vec<String> = set.iter().map(|(c, e)| format!("{table}.{c} = {e}")).collect();
                format!("UPDATE {table} JOIN ({}) v ON {on} SET {}", rows.join(" UNION ALL "), set.join(", "))
            }
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            _ => {
                let rows: Vec<String> = rows.iter().map(|row| format!("({})", row.join(", "))).collect();
                let set: Vec<String> = set.iter().map(|(c, e)| format!("{c} = {e}")).collect();
                format!(
                    "WITH v ({}) AS (VALUES {}) UPDATE {table} SET {} FROM v WHERE {on}",
                    columns.join(", "),
                    rows.join(", "),
                    set.join(", ")
                )
            }
        }
    }

    /// The column `name` quoted, for the names an engine reserves (`schema` and `key` on MySQL).
    pub(crate) fn quoted(self, name: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("`{name}`"),
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            _ => format!("\"{name}\""),
        }
    }

    /// The column `col` in a condition that no index is to serve (the row is found by its id): PostgreSQL would
    /// otherwise read a partial index of claimed rows. MySQL's `||` is `OR` unless the session says otherwise.
    pub(crate) fn unindexed(self, col: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => col.to_owned(),
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            _ => format!("({col} || '')"),
        }
    }

    /// The function that returns the larger of its arguments.
    pub(crate) fn greatest(self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => "MAX",
            #[cfg(feature = "postgres")]
            Dialect::Postgres => "GREATEST",
            #[cfg(feature = "mysql")]
            Dialect::MySql => "GREATEST",
        }
    }
}

/// The keys of a JSON path of the form `$.a.b`, joined by dots, for PostgreSQL's path operators.
#[cfg(feature = "postgres")]
fn path_keys(json_path: &str) -> Result<String> {
    let keys = json_path.strip_prefix("$.").unwrap_or_default();
    let valid = !keys.is_empty()
        && keys.split('.').all(|k| !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-'));
    if !valid {
        return Err(Error::Invalid(format!(
            "unsupported JSON path `{json_path}` on PostgreSQL: use `$.field` or `$.field.nested` (object keys only)"
        )));
    }
    Ok(keys.to_owned())
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
#[cfg(any(feature = "sqlite", feature = "mysql"))]
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
