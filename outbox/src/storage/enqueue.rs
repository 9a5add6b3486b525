//! The enqueue INSERT: one job or a batch, skipping any whose key an active job holds.

use sea_orm::{ConnectionTrait, Value};

use super::dialect::Params;
use super::engine::Engine;
pub(crate) use super::engine::NewJob;
use super::{Dialect, on_engine, write_failed};
use crate::error::{Error, Result};

/// The columns enqueue writes on every engine; SQLite adds the sequence's (`sqlite/enqueue.rs`).
pub(crate) const INSERT_COLUMNS: &str = "INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, \
     max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, \
     cost, subject, trace, scheduled";
/// Rows per batch statement: SQLite's binds at most 18 values a row (or 17 shared), at most 32,400 values, under
/// its parameter limit (32,766); PostgreSQL's batch binds one value (`insert_recordset`) and keeps the same size.
const ROWS_PER_INSERT: usize = 1_800;
/// Payload bytes per batch statement at most (a statement holds one job at least): a server takes a statement's
/// values in one message of at most 1 GB, which 2,000 payloads of a raised size cap could pass.
const BYTES_PER_INSERT: usize = 64 << 20;

/// `jobs` cut into statements of at most `rows` jobs and `bytes` bytes of payload, in order.
fn statements<'a, 'j>(jobs: &'a [&'j NewJob], rows: usize, bytes: usize) -> Vec<&'a [&'j NewJob]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, job) in jobs.iter().enumerate() {
        if i > start && (i - start == rows || size + job.payload.len() > bytes) {
            out.push(&jobs[start..i]);
            (start, size) = (i, 0);
        }
        size += job.payload.len();
    }
    if start < jobs.len() {
        out.push(&jobs[start..]);
    }
    out
}

/// The INSERT of `jobs`, skipping any whose key an active job holds. A statement with no keyed job is a plain
/// INSERT: nothing can conflict (ids are new, and only keyed jobs enter the unique key index), and on
/// PostgreSQL `ON CONFLICT` makes every row a speculative insertion, 47 more WAL bytes and twice the time per
/// row (measured on a table with one partial unique index).
fn insert_statement(d: Dialect, jobs: &[&NewJob]) -> Result<sea_orm::Statement> {
    let (mut sql, values) = on_engine!(d, E => E::insert(jobs))?;
    if keyed(jobs) {
        sql.push_str(on_engine!(d, E => E::SKIP_HELD_KEYS));
    }
    Ok(d.stmt(sql, values))
}

fn keyed(jobs: &[&NewJob]) -> bool {
    jobs.iter().any(|j| j.key.is_some())
}

/// Whether an INSERT of `jobs` that counted `n` rows wrote them all, or the rows written are to be read back:
/// fewer were counted, or the engine's count takes in the rows its conflict clause skipped.
fn all_counted(d: Dialect, jobs: &[&NewJob], n: u64) -> bool {
    usize::try_from(n).is_ok_and(|n| n == jobs.len()) && !(keyed(jobs) && on_engine!(d, E => E::COUNTS_SKIPPED))
}

/// One bound column's value in a job row, borrowed, to compare rows before anything is bound.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Cell<'a> {
    Text(&'a str),
    MaybeText(Option<&'a str>),
    MaybeI64(Option<i64>),
    I16(i16),
    I32(i32),
    I64(i64),
}

impl Cell<'_> {
    pub(crate) fn value(self) -> Value {
        match self {
            Cell::Text(s) => Value::from(s),
            Cell::MaybeText(s) => Value::from(s.map(str::to_owned)),
            Cell::MaybeI64(n) => Value::from(n),
            Cell::I16(n) => Value::from(n),
            Cell::I32(n) => Value::from(n),
            Cell::I64(n) => Value::from(n),
        }
    }
}

/// How a bound column's placeholder is written on PostgreSQL (SQLite takes every value as it is).
#[derive(Clone, Copy)]
enum Wrap {
    Plain,
    Json,
    Ts,
}

/// The bound columns of [`INSERT_COLUMNS`] in order (`status` and `attempts` are literals after `payload` and
/// `priority`, `scheduled` one at the end) and how each placeholder is written.
pub(crate) const BOUND: usize = 17;
const WRAPS: [Wrap; BOUND] = [
    Wrap::Plain,
    Wrap::Plain,
    Wrap::Plain,
    Wrap::Json,
    Wrap::Plain,
    Wrap::Plain,
    Wrap::Ts,
    Wrap::Plain,
    Wrap::Plain,
    Wrap::Ts,
    Wrap::Ts,
    Wrap::Plain,
    Wrap::Plain,
    Wrap::Plain,
    Wrap::Plain,
    Wrap::Plain,
    Wrap::Plain,
];

/// What a row writes after bound column `i`: the literal `status` after `payload`, the literal `attempts` after
/// `priority`, then the separator.
pub(crate) fn after_column(i: usize) -> &'static str {
    match i {
        3 => ", 'pending', ",
        4 => ", 0, ",
        _ => ", ",
    }
}

/// The bound values of `job`'s row, in the order of [`WRAPS`].
pub(crate) fn cells(job: &NewJob) -> [Cell<'_>; BOUND] {
    [
        Cell::Text(&job.id),
        Cell::Text(&job.kind),
        Cell::Text(&job.queue),
        Cell::Text(&job.payload),
        Cell::I32(job.priority),
        Cell::I32(job.max_attempts),
        Cell::I64(job.run_at),
        Cell::MaybeText(job.key.as_deref()),
        Cell::Text(&job.schema_hash),
        Cell::I64(job.created_at),
        Cell::I64(job.created_at),
        Cell::MaybeText(job.sequence_key.as_deref()),
        Cell::I16(i16::from(job.hold)),
        Cell::MaybeText(job.flow_key.as_deref()),
        Cell::MaybeI64(job.cost.map(i64::from)),
        Cell::MaybeText(job.subject.as_deref()),
        Cell::MaybeText(job.trace.as_deref()),
    ]
}

/// Writes the placeholder of value number `n` (from 1), wrapped as its column needs: a bare `?` where the dialect
/// numbers placeholders in the order they appear (a numbered `?N` costs SQLite a scan of the statement's
/// parameters each time it is read or bound).
fn mark(d: Dialect, sql: &mut String, n: usize, wrap: Wrap) {
    if !d.numbered() {
        sql.push('?');
        return;
    }
    let p = format!("${n}");
    sql.push_str(&match wrap {
        Wrap::Plain => p,
        Wrap::Json => d.json(&p),
        Wrap::Ts => d.ts(&p),
    });
}

/// Columns an engine writes after the shared ones in a `VALUES` row: their names (`, a, b`), and what each row
/// writes for them (after a `, `... of its own), its values pushed.
pub(crate) struct Extra<'a> {
    pub(crate) columns: &'a str,
    pub(crate) row: fn(&NewJob, &mut String, &mut Vec<Value>),
}

/// The INSERT of `jobs` as a `VALUES` list, and its values. A sequenced job takes the next place in its
/// sequence and waits when a job of the sequence holds it back: on SQLite here (one writer at a time, so places
/// are taken in commit order), on PostgreSQL in the insert trigger, under the sequence's advisory lock.
pub(crate) fn insert_values(d: Dialect, jobs: &[&NewJob], extra: Option<&Extra<'_>>) -> (String, Vec<Value>) {
    let mut sql = String::with_capacity(INSERT_COLUMNS.len() + jobs.len() * 112 + 96);
    sql.push_str(INSERT_COLUMNS);
    if let Some(extra) = extra {
        sql.push_str(extra.columns);
    }
    sql.push_str(") VALUES ");
    let mut values = Vec::with_capacity(jobs.len() * (BOUND + 2));
    for (row, job) in jobs.iter().enumerate() {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for (i, cell) in cells(job).into_iter().enumerate() {
            values.push(cell.value());
            mark(d, &mut sql, values.len(), WRAPS[i]);
            sql.push_str(after_column(i));
        }
        sql.push_str(if job.scheduled { "TRUE" } else { "FALSE" });
        if let Some(extra) = extra {
            (extra.row)(job, &mut sql, &mut values);
        }
        sql.push(')');
    }
    (sql, values)
}

/// Inserts one job unless an active job of its kind holds its key. True when the row was written.
pub(crate) async fn insert_job<C: ConnectionTrait + ?Sized>(conn: &C, job: &NewJob) -> Result<bool> {
    let d = Dialect::of(conn)?;
    let started = std::time::Instant::now();
    let res = match conn.execute_raw(insert_statement(d, &[job])?).await {
        Ok(res) => res,
        Err(e) => return Err(write_failed(conn, format!("enqueuing a job of kind `{}`", job.kind), e, started).await),
    };
    let written = if all_counted(d, &[job], res.rows_affected()) || res.rows_affected() == 0 {
        res.rows_affected() == 1
    } else {
        !present(conn, d, &[job]).await?.is_empty()
    };
    if written {
        on_engine!(d, E => E::announce(conn, &job.id).await);
    }
    Ok(written)
}

/// Inserts many jobs in as few statements as the parameter limit allows; returns the ids written. Sequenced
/// jobs go in order of their keys, so that two batches never wait for each other's sequences in opposite
/// orders. On SQLite a statement's subqueries may read the table before any of its rows is written, so
/// sequenced jobs take their places one statement each.
pub(crate) async fn insert_jobs<C: ConnectionTrait + ?Sized>(conn: &C, jobs: &[NewJob]) -> Result<Vec<String>> {
    let b = Dialect::of(conn)?;
    let mut order: Vec<&NewJob> = jobs.iter().collect();
    order.sort_by(|a, b| a.sequence_key.cmp(&b.sequence_key));
    let per_row = |j: &NewJob| on_engine!(b, E => E::alone(j));
    let (single, batched): (Vec<&NewJob>, Vec<&NewJob>) = order.into_iter().partition(|j| per_row(j));
    let mut written = Vec::with_capacity(jobs.len());
    for chunk in statements(&batched, ROWS_PER_INSERT, BYTES_PER_INSERT).into_iter().chain(single.chunks(1)) {
        let started = std::time::Instant::now();
        // The count tells whether every row went in, as it nearly always does; only a chunk a duplicate key
        // cut short reads back which. Returning every id instead cost SQLite's batch enqueue a twentieth of its
        // rate: sqlx hands each returned row across threads on its own.
        let inserted = match conn.execute_raw(insert_statement(b, chunk)?).await {
            Ok(res) => res.rows_affected(),
            Err(e) => return Err(write_failed(conn, "enqueuing a batch of jobs".into(), e, started).await),
        };
        let before = written.len();
        if all_counted(b, chunk, inserted) {
            written.extend(chunk.iter().map(|j| j.id.clone()));
        } else {
            #[cfg(test)]
            read_back::pause().await;
            written.extend(present(conn, b, chunk).await?);
        }
        if let Some(first) = written.get(before) {
            on_engine!(b, E => E::announce(conn, first).await);
        }
    }
    Ok(written)
}

/// Which of `jobs` (new ids, so found means just written) went in. Outside a transaction a row may have been
/// claimed, completed and deleted before this reads it (a kind that keeps nothing, or keeps in the archive): such
/// a job is found in the archive, or by an event of its own that its deletion leaves (its `enqueued` row on
/// SQLite, the completion's own row on PostgreSQL; see the `outbox_jobs_purged` trigger of `schema.sql`). Missing it would have the caller write it
/// again under the same id, and run it twice.
async fn present<C: ConnectionTrait + ?Sized>(conn: &C, b: Dialect, jobs: &[&NewJob]) -> Result<Vec<String>> {
    let mut p = Params::default();
    let marks: Vec<String> = jobs.iter().map(|j| p.push(j.id.as_str())).collect();
    let ids = marks.join(", ");
    let sql = format!(
        "SELECT id FROM outbox_jobs WHERE id IN ({ids}) UNION SELECT id FROM outbox_jobs_done WHERE id IN ({ids}) \
         UNION SELECT job_id FROM outbox_job_events WHERE job_id IN ({ids})"
    );
    let rows = conn.query_all_raw(b.stmt(sql, p.0)).await.map_err(Error::db("reading enqueued job ids"))?;
    rows.iter().map(|row| row.try_get_by_index::<String>(0).map_err(Error::db("reading enqueued job ids"))).collect()
}

/// The condition that the job `j` holds the key `key` (an SQL expression): it is active (pending or claimed) and
/// was not superseded, which is what the unique index of keys reads, spelled so that the index serves the
/// lookup.
pub(crate) fn holds_key(d: Dialect, j: &str, key: &str) -> String {
    on_engine!(d, E => E::holds_key(j, key))
}

/// The active (pending or claimed) job of `kind` holding `key`, that a duplicate would collapse onto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Twin {
    pub(crate) id: String,
    /// A later job of `sequence` (the duplicate's) was enqueued after it: a duplicate collapsing onto it
    /// would run before an intent enqueued ahead of it.
    pub(crate) behind: bool,
}

/// The active job of `kind` holding `key`, and whether a duplicate in `sequence` is behind it.
pub(crate) async fn find_twin<C: ConnectionTrait + ?Sized>(
    conn: &C,
    kind: &str,
    key: &str,
    sequence: Option<&str>,
) -> Result<Option<Twin>> {
    let b = Dialect::of(conn)?;
    let sql = format!(
        "SELECT t.id, COALESCE(t.sequence_key = $3 AND EXISTS (SELECT 1 FROM outbox_jobs l \
         WHERE l.sequence_key = t.sequence_key AND l.sequence_no > t.sequence_no), FALSE) \
         FROM outbox_jobs t WHERE t.kind = $1 AND {} LIMIT 1",
        holds_key(b, "t", "$2")
    );
    let row = conn
        .query_one_raw(b.stmt(sql, vec![Value::from(kind), Value::from(key), Value::from(sequence)]))
        .await
        .map_err(Error::db(format!("looking up the active job of kind `{kind}` by key")))?;
    let Some(row) = row else { return Ok(None) };
    let read = || Error::db(format!("reading the active job of kind `{kind}` holding a key"));
    Ok(Some(Twin {
        id: row.try_get_by_index::<String>(0).map_err(read())?,
        behind: row.try_get_by_index::<bool>(1).map_err(read())?,
    }))
}

/// Lets the active job `id` no longer take duplicates of its key: a later job of its sequence was enqueued,
/// so the next duplicate goes to the tail of the sequence as a job of its own.
pub(crate) async fn supersede<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<()> {
    let b = Dialect::of(conn)?;
    let sql = "UPDATE outbox_jobs SET superseded = TRUE WHERE id = $1 AND status IN ('pending', 'claimed') \
         AND NOT superseded";
    let started = std::time::Instant::now();
    if let Err(e) = conn.execute_raw(b.stmt(sql, vec![Value::from(id)])).await {
        return Err(write_failed(conn, format!("letting job `{id}` go of its idempotency key"), e, started).await);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{NewJob, statements};

    fn job(n: usize, bytes: usize) -> NewJob {
        NewJob {
            id: n.to_string(),
            kind: "k".into(),
            queue: "default".into(),
            payload: "x".repeat(bytes),
            priority: 0,
            max_attempts: 1,
            run_at: 0,
            scheduled: false,
            key: None,
            schema_hash: String::new(),
            created_at: 0,
            sequence_key: None,
            hold: false,
            flow_key: None,
            cost: None,
            subject: None,
            trace: None,
        }
    }

    /// The ids of each statement.
    fn cut(sizes: &[usize], rows: usize, bytes: usize) -> Vec<Vec<String>> {
        let jobs: Vec<NewJob> = sizes.iter().enumerate().map(|(n, b)| job(n, *b)).collect();
        let refs: Vec<&NewJob> = jobs.iter().collect();
        statements(&refs, rows, bytes).iter().map(|s| s.iter().map(|j| j.id.clone()).collect()).collect()
    }

    #[test]
    fn statements_hold_at_most_their_rows_and_bytes_and_one_job_at_least() {
        let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(cut(&[1; 5], 2, 100), vec![ids(&["0", "1"]), ids(&["2", "3"]), ids(&["4"])]);
        assert_eq!(cut(&[4, 4, 4, 1], 10, 8), vec![ids(&["0", "1"]), ids(&["2", "3"])]);
        // A payload larger than the bound goes alone.
        assert_eq!(cut(&[1, 20, 1], 10, 8), vec![ids(&["0"]), ids(&["1"]), ids(&["2"])]);
        assert!(cut(&[], 10, 8).is_empty());
    }
}

/// A pause between a batch INSERT cut short and its read-back of the ids it wrote, for the conformance suite: a
/// test runs `insert_jobs` inside [`read_back::PAUSE`]'s scope and acts while it waits.
#[cfg(test)]
pub(crate) mod read_back {
    use tokio::sync::oneshot;

    /// Told when the insert reached its read-back; the read-back waits for the second.
    pub(crate) type Pause = std::cell::RefCell<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>;

    tokio::task_local! {
        pub(crate) static PAUSE: Pause;
    }

    pub(super) async fn pause() {
        let Ok(Some((reached, resume))) = PAUSE.try_with(|p| p.borrow_mut().take()) else { return };
        let _ = reached.send(());
        let _ = resume.await;
    }
}
