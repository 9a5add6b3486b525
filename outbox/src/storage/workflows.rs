//! Workflows: the rows that tie jobs into a graph (`outbox_workflows`, the step columns of `outbox_jobs`, the edges
//! of `outbox_job_deps`) and the reads of it. What happens when a parent finishes is the schema's triggers
//! (`outbox_jobs_workflow_*` in each engine's `schema.sql`), so every writer of an outcome (worker, remote worker,
//! operator, rescue) lets the children go in the statement that writes it.

use sea_orm::{ConnectionTrait, Value};

use super::dialect::Params;
use super::{Dialect, write_failed};
use crate::error::{Error, Result};

/// Steps and edges per statement: five values a step and three an edge, far under either engine's limit.
const ROWS_PER_STATEMENT: usize = 1_000;

/// One step's place in its workflow, written after its job row in the same transaction.
pub(crate) struct Attach<'a> {
    pub(crate) id: &'a str,
    pub(crate) step: &'a str,
    pub(crate) parents: i32,
    pub(crate) on_parent_failure: i16,
    pub(crate) has_children: bool,
}

/// An edge: `child` waits for `parent`, which it calls `parent_step`.
pub(crate) struct Edge<'a> {
    pub(crate) parent: &'a str,
    pub(crate) child: &'a str,
    pub(crate) parent_step: &'a str,
}

/// A job outside the workflow that a step waits for, as it stands.
pub(crate) struct Outside {
    pub(crate) id: String,
    pub(crate) status: String,
    pub(crate) step: Option<String>,
}

async fn exec<C: ConnectionTrait + ?Sized>(conn: &C, d: Dialect, sql: String, p: Params, what: &str) -> Result<u64> {
    let started = std::time::Instant::now();
    match conn.execute_raw(d.stmt(sql, p.0)).await {
        Ok(res) => Ok(res.rows_affected()),
        Err(e) => Err(write_failed(conn, what.to_owned(), e, started).await),
    }
}

/// Records the workflow `id` named `name`.
pub(crate) async fn insert_workflow<C: ConnectionTrait + ?Sized>(
    conn: &C,
    id: &str,
    name: &str,
    now: i64,
) -> Result<()> {
    let d = Dialect::of(conn)?;
    let mut p = Params::default();
    let sql = format!(
        "INSERT INTO outbox_workflows (id, name, created_at) VALUES ({}, {}, {})",
        p.push(id),
        p.push(name),
        d.ts(&p.push(now))
    );
    exec(conn, d, sql, p, &format!("recording workflow `{name}`")).await?;
    Ok(())
}

/// Gives the just-inserted jobs their places: workflow, step name, parents left (a step with any waits), policy, and
/// whether they have children.
pub(crate) async fn attach<C: ConnectionTrait + ?Sized>(conn: &C, workflow: &str, steps: &[Attach<'_>]) -> Result<()> {
    let d = Dialect::of(conn)?;
    for chunk in steps.chunks(ROWS_PER_STATEMENT) {
        let mut p = Params::default();
        let w = p.push(workflow);
        let rows: Vec<Vec<String>> = chunk
            .iter()
            .map(|s| {
                vec![
                    p.push(s.id),
                    p.push(s.step),
                    p.push(s.parents),
                    p.push(s.on_parent_failure),
                    p.push(s.has_children),
                ]
            })
            .collect();
        let waiting = "(waiting OR v.parents > 0)";
        let sql = d.update_from_values(
            "outbox_jobs",
            (&["id", "step", "parents", "policy", "children"], &rows),
            "outbox_jobs.id = v.id",
            &[
                ("workflow_id", &w),
                ("step", "v.step"),
                ("parents_left", "v.parents"),
                ("on_parent_failure", "v.policy"),
                ("has_children", "v.children"),
                ("waiting", waiting),
            ],
        );
        exec(conn, d, sql, p, &format!("placing the steps of workflow `{workflow}`")).await?;
    }
    Ok(())
}

/// Writes the edges.
pub(crate) async fn insert_edges<C: ConnectionTrait + ?Sized>(conn: &C, edges: &[Edge<'_>]) -> Result<()> {
    let d = Dialect::of(conn)?;
    for chunk in edges.chunks(ROWS_PER_STATEMENT) {
        let mut p = Params::default();
        let rows: Vec<String> = chunk
            .iter()
            .map(|e| format!("({}, {}, {})", p.push(e.parent), p.push(e.child), p.push(e.parent_step)))
            .collect();
        let sql = format!("INSERT INTO outbox_job_deps (parent_id, child_id, parent_step) VALUES {}", rows.join(", "));
        exec(conn, d, sql, p, "writing the edges of a workflow").await?;
    }
    Ok(())
}

/// The jobs `ids` as they stand (those that exist).
pub(crate) async fn outside<C: ConnectionTrait + ?Sized>(conn: &C, ids: &[&str]) -> Result<Vec<Outside>> {
    let d = Dialect::of(conn)?;
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(ROWS_PER_STATEMENT) {
        let mut p = Params::default();
        let marks: Vec<String> = chunk.iter().map(|id| p.push(*id)).collect();
        let sql = format!("SELECT id, status, step FROM outbox_jobs WHERE id IN ({})", marks.join(", "));
        let rows =
            conn.query_all_raw(d.stmt(sql, p.0)).await.map_err(Error::db("reading the parents of a workflow"))?;
        for row in rows {
            let read = || Error::db("reading the parents of a workflow");
            out.push(Outside {
                id: row.try_get_by_index(0).map_err(read())?,
                status: row.try_get_by_index(1).map_err(read())?,
                step: row.try_get_by_index(2).map_err(read())?,
            });
        }
    }
    Ok(out)
}

/// Marks the jobs `ids` as having children, while they have not finished; the count of those it marked. A row lock
/// on PostgreSQL: a completion of one of them in flight is waited for, and then not marked.
pub(crate) async fn mark_parents<C: ConnectionTrait + ?Sized>(conn: &C, ids: &[&str]) -> Result<u64> {
    let d = Dialect::of(conn)?;
    let mut marked = 0;
    for chunk in ids.chunks(ROWS_PER_STATEMENT) {
        let mut p = Params::default();
        let marks: Vec<String> = chunk.iter().map(|id| p.push(*id)).collect();
        let sql = format!(
            "UPDATE outbox_jobs SET has_children = TRUE WHERE id IN ({}) AND status IN ('pending', 'claimed')",
            marks.join(", ")
        );
        marked += exec(conn, d, sql, p, "marking the parents of a workflow").await?;
    }
    Ok(marked)
}

/// A job a step waits for, or a step that waits for a job, with what a reader needs of it.
#[derive(Debug, Clone)]
pub(crate) struct Linked {
    pub(crate) id: String,
    pub(crate) step: Option<String>,
    pub(crate) kind: Option<String>,
    /// `None` when the job is gone (deleted, or completed by a kind that keeps nothing).
    pub(crate) status: Option<String>,
    pub(crate) output: Option<String>,
    pub(crate) last_error: Option<String>,
    /// Whether the edge's parent outcome was counted.
    pub(crate) done: bool,
}

fn linked(row: &sea_orm::QueryResult, d: Dialect) -> Result<Linked> {
    let read = || Error::db("reading the edges of a workflow");
    let _ = d;
    Ok(Linked {
        id: row.try_get_by_index(0).map_err(read())?,
        step: row.try_get_by_index(1).map_err(read())?,
        kind: row.try_get_by_index(2).map_err(read())?,
        status: row.try_get_by_index(3).map_err(read())?,
        output: row.try_get_by_index(4).map_err(read())?,
        last_error: row.try_get_by_index(5).map_err(read())?,
        done: row.try_get_by_index(6).map_err(read())?,
    })
}

/// The parents of `child`, by the name it knows each by, with their status and output (read from the archive when
/// a parent's kind keeps its completed jobs there).
pub(crate) async fn parents<C: ConnectionTrait + ?Sized>(conn: &C, child: &str) -> Result<Vec<Linked>> {
    let d = Dialect::of(conn)?;
    let sql = format!(
        "SELECT e.parent_id, e.parent_step, COALESCE(j.kind, a.kind), COALESCE(j.status, a.status), \
         COALESCE({}, {}), j.last_error, e.done FROM outbox_job_deps e \
         LEFT JOIN outbox_jobs j ON j.id = e.parent_id LEFT JOIN outbox_jobs_archive a ON a.id = e.parent_id \
         WHERE e.child_id = $1 ORDER BY e.parent_step, e.parent_id",
        d.text("j.output"),
        d.text("a.output")
    );
    let rows = conn
        .query_all_raw(d.stmt(sql, vec![Value::from(child)]))
        .await
        .map_err(Error::db(format!("reading the parents of job `{child}`")))?;
    rows.iter().map(|r| linked(r, d)).collect()
}

/// The children of `parent`, with their step names and status.
pub(crate) async fn children<C: ConnectionTrait + ?Sized>(conn: &C, parent: &str) -> Result<Vec<Linked>> {
    let d = Dialect::of(conn)?;
    let sql = "SELECT e.child_id, j.step, j.kind, j.status, NULL, j.last_error, e.done FROM outbox_job_deps e \
         LEFT JOIN outbox_jobs j ON j.id = e.child_id WHERE e.parent_id = $1 ORDER BY j.step, e.child_id";
    let rows = conn
        .query_all_raw(d.stmt(sql, vec![Value::from(parent)]))
        .await
        .map_err(Error::db(format!("reading the children of job `{parent}`")))?;
    rows.iter().map(|r| linked(r, d)).collect()
}

/// The workflow and step name of the job `id`, when it is a step.
pub(crate) async fn step_of<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Option<(String, String)>> {
    let d = Dialect::of(conn)?;
    let sql = "SELECT workflow_id, step FROM outbox_jobs WHERE id = $1 AND workflow_id IS NOT NULL";
    let row = conn
        .query_one_raw(d.stmt(sql, vec![Value::from(id)]))
        .await
        .map_err(Error::db(format!("reading the workflow of job `{id}`")))?;
    let Some(row) = row else { return Ok(None) };
    let read = || Error::db(format!("reading the workflow of job `{id}`"));
    let step: Option<String> = row.try_get_by_index(1).map_err(read())?;
    Ok(Some((row.try_get_by_index(0).map_err(read())?, step.unwrap_or_default())))
}

/// A workflow's record: its name and when it was made.
pub(crate) async fn workflow<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Option<(String, i64)>> {
    let d = Dialect::of(conn)?;
    let sql = format!("SELECT name, {} FROM outbox_workflows WHERE id = $1", d.ms("created_at"));
    let row = conn
        .query_one_raw(d.stmt(sql, vec![Value::from(id)]))
        .await
        .map_err(Error::db(format!("reading workflow `{id}`")))?;
    let Some(row) = row else { return Ok(None) };
    let read = || Error::db(format!("reading workflow `{id}`"));
    Ok(Some((row.try_get_by_index(0).map_err(read())?, row.try_get_by_index(1).map_err(read())?)))
}

/// One step of a workflow as it stands.
#[derive(Debug, Clone)]
pub(crate) struct StepRow {
    pub(crate) id: String,
    pub(crate) step: String,
    pub(crate) kind: String,
    pub(crate) status: String,
    pub(crate) parents_left: i32,
    pub(crate) waiting: bool,
    pub(crate) last_error: Option<String>,
}

/// The steps of workflow `id` still in the jobs table, in the order they were enqueued.
pub(crate) async fn steps<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Vec<StepRow>> {
    let d = Dialect::of(conn)?;
    let sql = "SELECT id, step, kind, status, parents_left, waiting, last_error FROM outbox_jobs \
         WHERE workflow_id = $1 ORDER BY id";
    let rows = conn
        .query_all_raw(d.stmt(sql, vec![Value::from(id)]))
        .await
        .map_err(Error::db(format!("reading the steps of workflow `{id}`")))?;
    let read = || Error::db(format!("reading the steps of workflow `{id}`"));
    rows.iter()
        .map(|r| {
            Ok(StepRow {
                id: r.try_get_by_index(0).map_err(read())?,
                step: r.try_get_by_index::<Option<String>>(1).map_err(read())?.unwrap_or_default(),
                kind: r.try_get_by_index(2).map_err(read())?,
                status: r.try_get_by_index(3).map_err(read())?,
                parents_left: r.try_get_by_index(4).map_err(read())?,
                waiting: r.try_get_by_index(5).map_err(read())?,
                last_error: r.try_get_by_index(6).map_err(read())?,
            })
        })
        .collect()
}

/// The edges among the steps of workflow `id` (and from jobs outside it), as (parent, child) ids.
pub(crate) async fn edges<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Vec<(String, String, bool)>> {
    let d = Dialect::of(conn)?;
    let sql = "SELECT e.parent_id, e.child_id, e.done FROM outbox_job_deps e JOIN outbox_jobs j ON j.id = e.child_id \
         WHERE j.workflow_id = $1 ORDER BY e.child_id, e.parent_id";
    let rows = conn
        .query_all_raw(d.stmt(sql, vec![Value::from(id)]))
        .await
        .map_err(Error::db(format!("reading the edges of workflow `{id}`")))?;
    let read = || Error::db(format!("reading the edges of workflow `{id}`"));
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get_by_index(0).map_err(read())?,
                r.try_get_by_index(1).map_err(read())?,
                r.try_get_by_index(2).map_err(read())?,
            ))
        })
        .collect()
}

/// Cancels every step of workflow `id` not yet started; the count cancelled. Steps below a cancelled one are cancelled
/// by the triggers too, whatever their policy says, as this cancels them all.
pub(crate) async fn cancel<C: ConnectionTrait + ?Sized>(conn: &C, id: &str, now: i64) -> Result<u64> {
    let d = Dialect::of(conn)?;
    let mut p = Params::default();
    let w = p.push(id);
    let at = d.ts(&p.push(now));
    let sql = format!(
        "UPDATE outbox_jobs SET status = 'cancelled', last_error = 'cancelled with its workflow', updated_at = {at} \
         WHERE workflow_id = {w} AND status = 'pending'"
    );
    exec(conn, d, sql, p, &format!("cancelling workflow `{id}`")).await
}
