//! A time column of the outbox's tables, read from either backend.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{ArrayType, ColumnType, Nullable, ValueType, ValueTypeErr};
use sea_orm::{ColIdx, ConnectionTrait, QueryResult, TryGetError, TryGetable, Value};

/// A time of the outbox's tables: integer milliseconds since the Unix epoch on SQLite, `timestamptz` on PostgreSQL,
/// read as a UTC time from either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Timestamp(pub DateTime<Utc>);

impl From<DateTime<Utc>> for Timestamp {
    fn from(t: DateTime<Utc>) -> Self {
        Timestamp(t)
    }
}

impl From<Timestamp> for DateTime<Utc> {
    fn from(t: Timestamp) -> Self {
        t.0
    }
}

/// `t` bound as the time columns of `conn`'s backend store it: a value to compare a time column with
/// (`job::Column::CreatedAt.gte(at(db, t))`). A bare `DateTime` would be bound as text on SQLite, which compares
/// with the stored integers as no time does.
pub fn at<C: ConnectionTrait + ?Sized>(conn: &C, t: DateTime<Utc>) -> Value {
    crate::storage::Dialect::of(conn).map_or(Value::ChronoDateTimeUtc(Some(t)), |d| d.time_value(t))
}

impl TryGetable for Timestamp {
    fn try_get_by<I: ColIdx>(res: &QueryResult, index: I) -> Result<Self, TryGetError> {
        // SQLite's integer milliseconds first; PostgreSQL refuses that type for a `timestamptz`, whose time follows.
        match i64::try_get_by(res, index) {
            Ok(ms) => DateTime::from_timestamp_millis(ms).map(Timestamp).ok_or_else(|| {
                TryGetError::DbErr(sea_orm::DbErr::Type(format!("{ms} ms is out of the range of times")))
            }),
            Err(TryGetError::Null(column)) => Err(TryGetError::Null(column)),
            Err(TryGetError::DbErr(_)) => DateTime::<Utc>::try_get_by(res, index).map(Timestamp),
        }
    }
}

impl From<Timestamp> for Value {
    fn from(t: Timestamp) -> Self {
        Value::ChronoDateTimeUtc(Some(t.0))
    }
}

impl ValueType for Timestamp {
    fn try_from(v: Value) -> Result<Self, ValueTypeErr> {
        match v {
            Value::ChronoDateTimeUtc(Some(t)) => Ok(Timestamp(t)),
            Value::BigInt(Some(ms)) => DateTime::from_timestamp_millis(ms).map(Timestamp).ok_or(ValueTypeErr),
            _ => Err(ValueTypeErr),
        }
    }

    fn type_name() -> String {
        "Timestamp".to_owned()
    }

    fn array_type() -> ArrayType {
        ArrayType::ChronoDateTimeUtc
    }

    fn column_type() -> ColumnType {
        ColumnType::TimestampWithTimeZone
    }
}

impl Nullable for Timestamp {
    fn null() -> Value {
        Value::ChronoDateTimeUtc(None)
    }
}
