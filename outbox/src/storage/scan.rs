//! Scans of completed jobs for the reconcilers: the latest completed job of every path (or key) materialized
//! into a scratch table of the scan's transaction, read in pages in path order.

use sea_orm::{ConnectionTrait, QueryResult, Value};

use super::dialect::Params;
use super::{Dialect, decode, limit_value};
use crate::error::{Error, Result};

/// One entry of an open path scan.
#[derive(Debug, Clone)]
pub(crate) struct ScanRow {
    /// Its number in path order; pages continue after the last one read.
    pub(crate) seq: i64,
    pub(crate) path: Option<String>,
    pub(crate) job_id: String,
    pub(crate) kind: String,
    pub(crate) output: Option<serde_json::Value>,
    pub(crate) completed_at: Option<i64>,
    pub(crate) jobs: u64,
}

/// Materializes the latest completed job per path into the transaction's scratch table and returns
/// (completed jobs, distinct paths). `fields` are (kind, JSON path of its path field); each kind's field is
/// picked by a CASE, so adding kinds adds no scan. Must run inside a transaction: the pages read the table on
/// the same connection, and it goes with the transaction.
pub(crate) async fn open_path_scan<C: ConnectionTrait + ?Sized>(
    conn: &C,
    fields: &[(&str, &str)],
) -> Result<(u64, u64)> {
    let b = Dialect::of(conn)?;
    let mut p = Params::default();
    let mut case = String::from("CASE kind");
    for (kind, json_path) in fields {
        let kind = p.push(*kind);
        let value = b.payload_at(&mut p, json_path, true)?;
        case.push_str(&format!(" WHEN {kind} THEN {value}"));
    }
    case.push_str(" END");
    let kinds: Vec<&str> = fields.iter().map(|(kind, _)| *kind).collect();
    open_scan(conn, b, p, &kinds, &case).await
}

/// Same, keyed by the JSON array of the values at `json_paths` of jobs of `kind` (written as SQLite's
/// `json_array` writes it: no spaces).
pub(crate) async fn open_key_scan<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kind: &str,
    json_paths: &[&str],
) -> Result<(u64, u64)> {
    let b = Dialect::of(conn)?;
    let mut p = Params::default();
    let parts = json_paths.iter().map(|path| b.payload_at(&mut p, path, false)).collect::<Result<Vec<_>>>()?;
    let key = b.json_array_text(&parts);
    open_scan(conn, b, p, &[kind], &key).await
}

/// Fills the scratch table with the latest completed job (by place in its sequence, then completion time, then
/// id; a job without a place comes before those with one) of every value of `key_sql` among completed jobs
/// of `kinds`, in one pass over the jobs, numbered in key order (bytewise, no key first).
async fn open_scan<C: ConnectionTrait + ?Sized>(
    conn: &C,
    b: Dialect,
    mut p: Params,
    kinds: &[&str],
    key_sql: &str,
) -> Result<(u64, u64)> {
    let ctx = || Error::db("building the latest completed job per path");
    // An integer that is SQLite's rowid, a table gone with its transaction, bytewise order.
    let (tmp, (int, create, bytewise)) = (b.scratch_table("outbox_path_scan"), b.scratch_spelling());
    let drop = format!("DROP TABLE IF EXISTS {tmp}");
    conn.execute_raw(b.stmt(drop, vec![])).await.map_err(ctx())?;
    let table = format!(
        "CREATE TEMPORARY TABLE outbox_path_scan (seq {int} PRIMARY KEY, path TEXT, job_id TEXT NOT NULL, \
         kind TEXT NOT NULL, output TEXT, completed_at {int}, jobs {int} NOT NULL){create}"
    );
    conn.execute_raw(b.stmt(table, vec![])).await.map_err(ctx())?;
    let marks: Vec<String> = kinds.iter().map(|k| p.push(*k)).collect();
    let sql = format!(
        "INSERT INTO {tmp} (seq, path, job_id, kind, output, completed_at, jobs) \
         SELECT ROW_NUMBER() OVER (ORDER BY (path IS NULL) DESC, path{bytewise}), path, id, kind, output, \
         completed_at, jobs \
         FROM (SELECT path, id, kind, {output} AS output, {completed} AS completed_at, \
                 ROW_NUMBER() OVER (PARTITION BY path \
                     ORDER BY (sequence_no IS NULL), sequence_no DESC, completed_at DESC, id DESC) AS rn, \
                 COUNT(*) OVER (PARTITION BY path) AS jobs \
             FROM (SELECT id, kind, output, completed_at, sequence_no, {key_sql} AS path \
                   FROM outbox_jobs WHERE status = 'completed' AND kind IN ({})) s) r WHERE rn = 1",
        marks.join(", "),
        output = b.text("output"),
        completed = b.ms("completed_at"),
    );
    conn.execute_raw(b.stmt(sql, p.0)).await.map_err(ctx())?;
    let count = format!("SELECT {}, COUNT(*) FROM {tmp}", b.integer("COALESCE(SUM(jobs), 0)"));
    let row = conn
        .query_one_raw(b.stmt(count, vec![]))
        .await
        .map_err(ctx())?
        .ok_or_else(|| Error::Internal("counting the path scan returned no row".into()))?;
    let n = |i| row.try_get_by_index::<i64>(i).map(|v| v.max(0).unsigned_abs()).map_err(ctx());
    Ok((n(0)?, n(1)?))
}

/// The scratch table's entries numbered after `after`, at most `limit`.
pub(crate) async fn page<C: ConnectionTrait + ?Sized>(conn: &C, after: i64, limit: u64) -> Result<Vec<ScanRow>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT seq, path, job_id, kind, output, completed_at, jobs FROM {} \
         WHERE seq > $1 ORDER BY seq LIMIT $2",
        b.scratch_table("outbox_path_scan")
    );
    let rows = conn
        .query_all_raw(b.stmt(sql, vec![Value::from(after), limit_value(limit)]))
        .await
        .map_err(Error::db("reading a page of the path scan"))?;
    decode_page(&rows)
}

fn decode_page(rows: &[QueryResult]) -> Result<Vec<ScanRow>> {
    let ctx = || Error::db("reading a page of the path scan");
    rows.iter()
        .map(|row| {
            Ok(ScanRow {
                seq: row.try_get_by_index(0).map_err(ctx())?,
                path: row.try_get_by_index(1).map_err(ctx())?,
                job_id: row.try_get_by_index(2).map_err(ctx())?,
                kind: row.try_get_by_index(3).map_err(ctx())?,
                output: row.try_get_by_index::<Option<String>>(4).map_err(ctx())?.map(decode::json),
                completed_at: row.try_get_by_index::<Option<i64>>(5).map_err(ctx())?,
                jobs: decode::count(row, 6).map_err(ctx())?,
            })
        })
        .collect()
}
