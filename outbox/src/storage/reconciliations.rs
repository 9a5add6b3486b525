//! The latest report of each reconciler.

use sea_orm::{ConnectionTrait, Value};

use super::{Dialect, decode, execute_write};
use crate::error::{Error, Result};
use crate::record::ReconciliationRecord;

/// Replaces the latest report of one reconciler.
pub(crate) async fn record<C: ConnectionTrait + ?Sized>(conn: &C, rec: &ReconciliationRecord) -> Result<()> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "INSERT INTO outbox_reconciliations (reconciler, at, worker, report) VALUES ($1, {}, $3, {}){}",
        b.ts("$2"),
        b.json("$4"),
        b.upsert("reconciler", &["at", "worker", "report"]),
    );
    let values: Vec<Value> = vec![
        rec.reconciler.clone().into(),
        rec.at.timestamp_millis().into(),
        rec.worker.clone().into(),
        rec.report.to_string().into(),
    ];
    execute_write(conn, b.stmt(sql, values), || format!("recording the report of reconciler `{}`", rec.reconciler))
        .await?;
    Ok(())
}

/// The latest report of every reconciler, by name.
pub(crate) async fn list<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<Vec<ReconciliationRecord>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT reconciler, {}, worker, {} FROM outbox_reconciliations ORDER BY reconciler",
        b.ms("at"),
        b.text("report")
    );
    let rows = conn.query_all_raw(b.stmt(sql, vec![])).await.map_err(Error::db("reading the reconcilers' reports"))?;
    decode::reconciliations(&rows)
}
