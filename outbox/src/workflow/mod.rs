//! Workflows: jobs that run only after other jobs, written in the caller's transaction, and batches with callbacks.
//!
//! A [`Workflow`] names its steps and the steps each one waits for; [`enqueue_workflow`] writes all of it in one
//! transaction, or nothing. A step becomes claimable in the statement that finishes its last parent (a trigger of
//! the schema, whatever process or tool wrote that outcome), so no worker polls or scans waiting steps, and a waiting
//! step is in no index a claim reads. A handler reads its parents' outputs by step name
//! ([`JobContext::parents`](crate::JobContext::parents)).
//!
//! ```
//! # use outbox::{Job, Workflow, ParentFailure};
//! # use schemars::JsonSchema;
//! # use serde::{Deserialize, Serialize};
//! #[derive(Job, Serialize, Deserialize, JsonSchema)]
//! #[job(kind = "fetch")]
//! struct Fetch { url: String }
//! #[derive(Job, Serialize, Deserialize, JsonSchema)]
//! #[job(kind = "merge")]
//! struct Merge {}
//!
//! # async fn run(db: outbox::sea_orm::DatabaseConnection) -> outbox::Result<()> {
//! let mut wf = Workflow::new("merge pages");
//! wf.step("a", &Fetch { url: "https://example.com/a".into() });
//! wf.step("b", &Fetch { url: "https://example.com/b".into() });
//! wf.step("merge", &Merge {}).after(["a", "b"]).on_parent_failure(ParentFailure::Run);
//! let txn = outbox::begin(&db).await?;
//! let enqueued = outbox::enqueue_workflow(&txn, &wf).await?;
//! txn.commit().await?;
//! println!("workflow {} waits in step {:?}", enqueued.id(), enqueued.step("merge"));
//! # Ok(()) }
//! ```

mod enqueue;
mod graph;

use std::sync::Arc;

use serde_json::Value;

use crate::enqueue::EnqueueOpts;
use crate::error::Error;
use crate::job::Job;
use crate::kind::Kind;

pub use enqueue::{EnqueuedWorkflow, enqueue_workflow};
pub use graph::{BatchSummary, Links, Parent, Parents, StepState, WorkflowGraph, WorkflowStep};
pub(crate) use graph::{cancel_workflow, links, parents_of, workflow_graph};

/// What a step does when a parent fails for good or is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ParentFailure {
    /// The step is cancelled, and so are the steps below it that would be (the default). An operator's retry of
    /// the failed parent brings them back.
    #[default]
    Cancel,
    /// The step runs once every parent has finished, whatever the outcome; it reads each parent's status.
    Run,
    /// The step runs on the first parent that fails for good or is cancelled, and is cancelled once every parent
    /// completed (a batch's failure callback).
    RunOnFirstFailure,
}

impl ParentFailure {
    pub(crate) fn stored(self) -> i16 {
        match self {
            ParentFailure::Cancel => 0,
            ParentFailure::Run => 1,
            ParentFailure::RunOnFirstFailure => 2,
        }
    }

    /// The name the CLI and the HTTP API use: `cancel`, `run`, `run_on_first_failure`.
    pub fn as_str(self) -> &'static str {
        match self {
            ParentFailure::Cancel => "cancel",
            ParentFailure::Run => "run",
            ParentFailure::RunOnFirstFailure => "run_on_first_failure",
        }
    }
}

impl std::str::FromStr for ParentFailure {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        [ParentFailure::Cancel, ParentFailure::Run, ParentFailure::RunOnFirstFailure]
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!("unknown parent failure policy `{s}` (expected cancel, run or run_on_first_failure)")
            })
    }
}

/// One step of a [`Workflow`], as [`Workflow::step`] returns it to say what it waits for.
#[derive(Debug)]
pub struct Step {
    pub(crate) name: String,
    pub(crate) kind: std::result::Result<Arc<Kind>, String>,
    pub(crate) payload: std::result::Result<Value, String>,
    pub(crate) opts: EnqueueOpts,
    pub(crate) after: Vec<String>,
    pub(crate) after_jobs: Vec<String>,
    pub(crate) on_parent_failure: ParentFailure,
}

impl Step {
    /// Waits for the steps named `steps` of this workflow.
    pub fn after<I, S>(&mut self, steps: I) -> &mut Step
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.after.extend(steps.into_iter().map(Into::into));
        self
    }

    /// Waits for the job `id`, already enqueued (a step of another workflow, say): it must exist and not have
    /// finished.
    pub fn after_job(&mut self, id: impl Into<String>) -> &mut Step {
        self.after_jobs.push(id.into());
        self
    }

    /// What the step does when a parent fails for good or is cancelled.
    pub fn on_parent_failure(&mut self, policy: ParentFailure) -> &mut Step {
        self.on_parent_failure = policy;
        self
    }

    /// Options of the step's job, as for [`enqueue`](crate::enqueue). An idempotency key does not apply: a step is
    /// never collapsed onto another job.
    pub fn opts(&mut self, opts: EnqueueOpts) -> &mut Step {
        self.opts = opts;
        self
    }
}

/// Steps and what each waits for, enqueued together by [`enqueue_workflow`].
#[derive(Debug)]
pub struct Workflow {
    pub(crate) name: String,
    pub(crate) steps: Vec<Step>,
}

impl Workflow {
    /// An empty workflow named `name` (for people: names need not be unique).
    pub fn new(name: impl Into<String>) -> Workflow {
        Workflow { name: name.into(), steps: Vec::new() }
    }

    /// Adds the step `name` running `job`. Problems (a payload its kind refuses, a name taken twice) are reported
    /// by [`enqueue_workflow`], all at once.
    pub fn step<J: Job>(&mut self, name: impl Into<String>, job: &J) -> &mut Step {
        let kind = Kind::of::<J>().map_err(|e| e.to_string());
        let payload = serde_json::to_value(job).map_err(|e| format!("the payload is not JSON: {e}"));
        self.push(name.into(), kind, payload)
    }

    /// Adds the step `name` running a job of `kind` with a JSON payload (a kind known by its schema).
    pub fn step_raw(&mut self, name: impl Into<String>, kind: &Arc<Kind>, payload: Value) -> &mut Step {
        self.push(name.into(), Ok(Arc::clone(kind)), Ok(payload))
    }

    fn push(
        &mut self,
        name: String,
        kind: std::result::Result<Arc<Kind>, String>,
        payload: std::result::Result<Value, String>,
    ) -> &mut Step {
        self.steps.push(Step {
            name,
            kind,
            payload,
            opts: EnqueueOpts::default(),
            after: Vec::new(),
            after_jobs: Vec::new(),
            on_parent_failure: ParentFailure::Cancel,
        });
        let last = self.steps.len() - 1;
        &mut self.steps[last]
    }

    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether it has no step yet.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// A set of jobs with callbacks that run once: when all finished, when all succeeded, or on the first failure. A
/// batch is a workflow whose members are steps `0`, `1`, ... and whose callbacks wait for every member; a callback
/// reads the batch's outcome through [`Parents::summary`].
#[derive(Debug)]
pub struct Batch {
    workflow: Workflow,
    members: Vec<String>,
    callbacks: Vec<(String, ParentFailure)>,
}

impl Batch {
    /// An empty batch named `name`.
    pub fn new(name: impl Into<String>) -> Batch {
        Batch { workflow: Workflow::new(name), members: Vec::new(), callbacks: Vec::new() }
    }

    /// Adds a member job.
    pub fn add<J: Job>(&mut self, job: &J) -> &mut Step {
        let name = self.members.len().to_string();
        self.members.push(name.clone());
        self.workflow.step(name, job)
    }

    /// Adds a member job of `kind` with a JSON payload.
    pub fn add_raw(&mut self, kind: &Arc<Kind>, payload: Value) -> &mut Step {
        let name = self.members.len().to_string();
        self.members.push(name.clone());
        self.workflow.step_raw(name, kind, payload)
    }

    /// Runs `job` once every member has finished, whatever the outcomes (step `finished`).
    pub fn on_finished<J: Job>(&mut self, job: &J) -> &mut Step {
        self.callback("finished", job, ParentFailure::Run)
    }

    /// Runs `job` once every member completed (step `succeeded`); it is cancelled when one fails for good or is
    /// cancelled.
    pub fn on_success<J: Job>(&mut self, job: &J) -> &mut Step {
        self.callback("succeeded", job, ParentFailure::Cancel)
    }

    /// Runs `job` on the first member that fails for good or is cancelled (step `failed`); it is cancelled once
    /// every member completed.
    pub fn on_failure<J: Job>(&mut self, job: &J) -> &mut Step {
        self.callback("failed", job, ParentFailure::RunOnFirstFailure)
    }

    fn callback<J: Job>(&mut self, name: &str, job: &J, policy: ParentFailure) -> &mut Step {
        self.callbacks.push((name.to_owned(), policy));
        let step = self.workflow.step(name, job);
        step.on_parent_failure(policy);
        step
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no member yet.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

impl From<Batch> for Workflow {
    fn from(batch: Batch) -> Workflow {
        let Batch { mut workflow, members, callbacks } = batch;
        for step in &mut workflow.steps {
            if callbacks.iter().any(|(name, _)| *name == step.name) {
                step.after.extend(members.iter().cloned());
            }
        }
        workflow
    }
}

/// The error of a workflow that cannot be enqueued.
pub(crate) fn invalid(workflow: &str, reason: impl Into<String>) -> Error {
    Error::InvalidWorkflow { workflow: workflow.to_owned(), reason: reason.into() }
}
