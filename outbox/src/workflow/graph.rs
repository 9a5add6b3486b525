//! Reading workflows: a step's parents (with their outputs, for its handler), a job's links, a workflow's graph and
//! state; and cancelling a workflow.

use sea_orm::ConnectionTrait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::record::JobStatus;
use crate::storage::workflows::{self, Linked};

/// A parent of a step: the step name its child knows it by, its job, and how it ended.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Parent {
    /// The parent's step name (its job id when it belongs to no workflow).
    pub step: String,
    /// The parent's job id.
    pub id: String,
    /// Its kind; `None` once the job is gone.
    pub kind: Option<String>,
    /// Its status; `None` once the job is gone (deleted, or completed by a kind that keeps nothing).
    pub status: Option<JobStatus>,
    /// The output it completed with.
    pub output: Option<Value>,
    /// Its last error.
    pub last_error: Option<String>,
    /// Whether its outcome was counted by the child (false while it runs, and for a failure the child was cancelled
    /// by).
    pub counted: bool,
}

fn parent(l: Linked) -> Result<Parent> {
    let status = l
        .status
        .as_deref()
        .map(str::parse::<JobStatus>)
        .transpose()
        .map_err(|e| Error::CorruptRow { id: l.id.clone(), reason: e })?;
    let output = match l.output {
        Some(text) => Some(
            serde_json::from_str(&text)
                .map_err(|e| Error::CorruptRow { id: l.id.clone(), reason: format!("its output is not JSON: {e}") })?,
        ),
        None => None,
    };
    Ok(Parent {
        step: l.step.unwrap_or_else(|| l.id.clone()),
        id: l.id,
        kind: l.kind,
        status,
        output,
        last_error: l.last_error,
        counted: l.done,
    })
}

/// A step's parents, as its handler reads them ([`JobContext::parents`](crate::JobContext::parents)).
#[derive(Debug, Clone)]
pub struct Parents {
    child: String,
    list: Vec<Parent>,
}

/// How the parents of a step (the members of a batch, for its callback) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct BatchSummary {
    /// Parents in all.
    pub total: usize,
    /// Completed (including those whose kind keeps nothing, whose rows are gone).
    pub completed: usize,
    /// Failed for good.
    pub failed: usize,
    /// Cancelled.
    pub cancelled: usize,
    /// Not finished yet (a first-failure callback runs before the others end).
    pub unfinished: usize,
}

impl Parents {
    /// Every parent, by step name.
    pub fn iter(&self) -> impl Iterator<Item = &Parent> {
        self.list.iter()
    }

    /// The parent step `step`.
    pub fn get(&self, step: &str) -> Option<&Parent> {
        self.list.iter().find(|p| p.step == step)
    }

    /// The output of the parent step `step`, read as `T`. Errors name the step, the job and, for an output that does
    /// not fit `T`, the JSON path.
    pub fn output<T: DeserializeOwned>(&self, step: &str) -> Result<T> {
        let Some(p) = self.get(step) else {
            let known: Vec<&str> = self.list.iter().map(|p| p.step.as_str()).collect();
            return Err(Error::Invalid(format!(
                "job `{}` has no parent step `{step}` (its parents: {})",
                self.child,
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            )));
        };
        let Some(output) = &p.output else {
            let status = p.status.map_or_else(|| "gone".to_owned(), |s| s.to_string());
            return Err(Error::Invalid(format!(
                "parent step `{step}` (job `{}`) of job `{}` has no output: its status is {status}",
                p.id, self.child
            )));
        };
        serde_path_to_error::deserialize(output).map_err(|e| {
            Error::Invalid(format!(
                "the output of parent step `{step}` (job `{}`) does not fit {}: at {}: {}",
                p.id,
                std::any::type_name::<T>(),
                e.path(),
                e.inner()
            ))
        })
    }

    /// How the parents ended: a batch callback's summary of its batch. A parent whose row is gone counts as
    /// completed: a kind that keeps nothing removes its row as it completes (a parent deleted by an operator or by
    /// retention after it ended is counted so too).
    pub fn summary(&self) -> BatchSummary {
        let mut s = BatchSummary { total: self.list.len(), ..BatchSummary::default() };
        for p in &self.list {
            match p.status {
                Some(JobStatus::Completed) | None => s.completed += 1,
                Some(JobStatus::Failed) => s.failed += 1,
                Some(JobStatus::Cancelled) => s.cancelled += 1,
                Some(_) => s.unfinished += 1,
            }
        }
        s
    }
}

/// The parents of job `child`.
pub(crate) async fn parents_of<C: ConnectionTrait + ?Sized>(conn: &C, child: &str) -> Result<Parents> {
    let list = workflows::parents(conn, child).await?.into_iter().map(parent).collect::<Result<_>>()?;
    Ok(Parents { child: child.to_owned(), list })
}

/// Where a job stands in a workflow: the workflow and step it is, the jobs it waits for, the steps that wait for it.
#[derive(Debug, Clone, Default, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Links {
    /// Its workflow's id; `None` for a job in no workflow.
    pub workflow: Option<String>,
    /// Its step name.
    pub step: Option<String>,
    /// The jobs it waits for, by the step name it knows each by.
    pub parents: Vec<Parent>,
    /// The steps that wait for it.
    pub children: Vec<Parent>,
}

/// A job's workflow, step, parents and children (`outbox get`, `GET /api/jobs/{id}`).
pub(crate) async fn links<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<Links> {
    let (workflow, step) = workflows::step_of(conn, id).await?.unzip();
    let parents = workflows::parents(conn, id).await?.into_iter().map(parent).collect::<Result<_>>()?;
    let children = workflows::children(conn, id).await?.into_iter().map(parent).collect::<Result<_>>()?;
    Ok(Links { workflow, step, parents, children })
}

/// Where a step stands, as a workflow's graph shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepState {
    /// Waiting for parents.
    Waiting,
    /// Claimable (or waiting behind its sequence or its run time).
    Pending,
    /// Running.
    Claimed,
    /// Completed.
    Completed,
    /// Failed for good.
    Failed,
    /// Cancelled (by an operator, its workflow, or a parent's failure).
    Cancelled,
}

/// One step of a workflow's graph.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowStep {
    /// The step's name.
    pub step: String,
    /// Its job id.
    pub id: String,
    /// Its kind.
    pub kind: String,
    /// Where it stands.
    pub state: StepState,
    /// Parents still to finish.
    pub parents_left: i32,
    /// The job ids it waits for (of its own workflow or not).
    pub parents: Vec<String>,
    /// Its last error (what cancelled it, for a step a parent's failure cancelled).
    pub last_error: Option<String>,
}

/// A workflow's steps, edges and overall state.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowGraph {
    /// The workflow's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// When it was enqueued (milliseconds since the Unix epoch).
    pub created_at: i64,
    /// `running` while a step may still run, else `completed` (every step completed), `failed` (a step failed
    /// for good) or `cancelled`.
    pub state: String,
    /// Its steps still in the jobs table (a completed step of a kind that keeps nothing is gone), in enqueue order.
    pub steps: Vec<WorkflowStep>,
}

/// The graph of workflow `id`.
pub(crate) async fn workflow_graph<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<WorkflowGraph> {
    let Some((name, created_at)) = workflows::workflow(conn, id).await? else {
        return Err(Error::NotFound { id: id.to_owned() });
    };
    let rows = workflows::steps(conn, id).await?;
    let edges = workflows::edges(conn, id).await?;
    let steps: Vec<WorkflowStep> = rows
        .into_iter()
        .map(|r| {
            let state = match r.status.as_str() {
                "pending" if r.parents_left > 0 && r.waiting => StepState::Waiting,
                "pending" => StepState::Pending,
                "claimed" => StepState::Claimed,
                "completed" => StepState::Completed,
                "failed" => StepState::Failed,
                _ => StepState::Cancelled,
            };
            let parents = edges.iter().filter(|(_, c, _)| *c == r.id).map(|(p, _, _)| p.clone()).collect();
            WorkflowStep {
                step: r.step,
                id: r.id,
                kind: r.kind,
                state,
                parents_left: r.parents_left,
                parents,
                last_error: r.last_error,
            }
        })
        .collect();
    let open = steps.iter().any(|s| matches!(s.state, StepState::Waiting | StepState::Pending | StepState::Claimed));
    let state = if open {
        "running"
    } else if steps.iter().any(|s| s.state == StepState::Failed) {
        "failed"
    } else if steps.iter().any(|s| s.state == StepState::Cancelled) {
        "cancelled"
    } else {
        "completed"
    };
    Ok(WorkflowGraph { id: id.to_owned(), name, created_at, state: state.to_owned(), steps })
}

/// Cancels every step of workflow `id` not yet started; the number cancelled.
pub(crate) async fn cancel_workflow<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) -> Result<u64> {
    if workflows::workflow(conn, id).await?.is_none() {
        return Err(Error::NotFound { id: id.to_owned() });
    }
    let cancelled = workflows::cancel(conn, id, crate::storage::now_ms()).await?;
    tracing::info!(workflow_id = %id, cancelled, "workflow cancelled");
    Ok(cancelled)
}
