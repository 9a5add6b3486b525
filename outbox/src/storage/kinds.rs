//! The kinds table: each registered kind's JSON Schema and options, for tools without the Rust types.

use sea_orm::{ConnectionTrait, Value};

use super::{Dialect, decode, execute_write};
use crate::error::{Error, Result};
use crate::record::KindRecord;

/// A kind as the kinds table stores it.
#[derive(Debug, Clone)]
pub(crate) struct KindRow {
    pub(crate) name: String,
    /// The JSON Schema as text.
    pub(crate) schema: String,
    pub(crate) schema_hash: String,
    pub(crate) queue: String,
    pub(crate) priority: i32,
    pub(crate) max_attempts: i32,
    pub(crate) unique: bool,
    /// The key fields as a JSON array.
    pub(crate) key_fields: String,
    /// The sequence template.
    pub(crate) sequence: Option<String>,
    /// `hold` or `continue`.
    pub(crate) on_sequence_failure: &'static str,
    /// The fleet-wide limit on running jobs.
    pub(crate) concurrency: Option<i64>,
    /// Flow control as written: rate, rate key template, fairness template, cost.
    pub(crate) flow: [Option<String>; 4],
    /// The template of its jobs' subjects.
    pub(crate) subject: Option<String>,
}

/// Records (or refreshes) each kind's schema and options; `first_seen_at` stays.
pub(crate) async fn record<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kinds: &[KindRow],
    worker: &str,
    now: i64,
) -> Result<()> {
    let b = Dialect::of(conn)?;
    let schema = b.quoted("schema");
    let sql = format!(
        "INSERT INTO outbox_kinds (name, {schema}, schema_hash, queue, priority, max_attempts, is_unique, \
         key_fields, recorded_by, first_seen_at, updated_at, sequence, on_sequence_failure, concurrency, rate, \
         rate_key, fair, cost, subject) VALUES ($1, {}, $3, $4, $5, $6, $7, {}, $9, {now}, {now}, $11, $12, $13, $14, \
         $15, $16, $17, $18){}",
        b.json("$2"),
        b.json("$8"),
        b.upsert(
            "name",
            &[
                schema.as_str(),
                "schema_hash",
                "queue",
                "priority",
                "max_attempts",
                "is_unique",
                "key_fields",
                "recorded_by",
                "updated_at",
                "sequence",
                "on_sequence_failure",
                "concurrency",
                "rate",
                "rate_key",
                "fair",
                "cost",
                "subject",
            ]
        ),
        now = b.ts("$10"),
    );
    for k in kinds {
        let values: Vec<Value> = vec![
            k.name.clone().into(),
            k.schema.clone().into(),
            k.schema_hash.clone().into(),
            k.queue.clone().into(),
            k.priority.into(),
            k.max_attempts.into(),
            k.unique.into(),
            k.key_fields.clone().into(),
            worker.into(),
            now.into(),
            k.sequence.clone().into(),
            k.on_sequence_failure.into(),
            k.concurrency.into(),
        ];
        let mut values = values;
        values.extend(k.flow.iter().map(|v| Value::from(v.clone())));
        values.push(Value::from(k.subject.clone()));
        execute_write(conn, b.stmt(sql.clone(), values), || format!("recording kind `{}`", k.name)).await?;
    }
    Ok(())
}

/// The recorded kinds, by name; only `name` when given.
pub(crate) async fn list<C: ConnectionTrait + ?Sized>(conn: &C, name: Option<&str>) -> Result<Vec<KindRecord>> {
    let b = Dialect::of(conn)?;
    let filter = if name.is_some() { " WHERE name = $1" } else { "" };
    let sql = format!(
        "SELECT name, {}, schema_hash, queue, priority, max_attempts, is_unique, {}, recorded_by, {}, {}, sequence, \
         on_sequence_failure, concurrency, rate, rate_key, fair, cost, subject FROM outbox_kinds{filter} ORDER BY name",
        b.text(&b.quoted("schema")),
        b.text("key_fields"),
        b.ms("first_seen_at"),
        b.ms("updated_at"),
    );
    let values = name.map(Value::from).into_iter().collect();
    let rows = conn.query_all_raw(b.stmt(sql, values)).await.map_err(Error::db("reading the kinds table"))?;
    decode::kinds(&rows)
}
