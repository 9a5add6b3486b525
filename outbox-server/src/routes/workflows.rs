//! The workflow routes: create a workflow (or batch) of jobs of known kinds, read its graph and state, cancel it.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use outbox::{EnqueueOpts, ParentFailure, Workflow, WorkflowGraph, ops};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::doc::ErrorBody;
use super::{AppState, Reply};
use crate::api_error::ApiError;
use crate::duration;
use crate::extract::{Json, Path};

/// A workflow id in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read by the document only; handlers take the id as a string
pub(crate) struct WorkflowPath {
    /// The workflow's id (a 26-character ULID).
    id: String,
}

/// One step of `POST /api/workflows`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewStep {
    /// The step's name, unique in the workflow; its children name it in `after`.
    name: String,
    /// A kind built into the server or recorded by a worker.
    kind: String,
    /// Validated against the kind's JSON Schema.
    payload: Value,
    /// The steps of this workflow it waits for.
    #[serde(default)]
    after: Vec<String>,
    /// Jobs already enqueued it waits for (steps of other workflows): each must exist and not have finished.
    #[serde(default)]
    after_jobs: Vec<String>,
    /// What it does when a parent fails for good or is cancelled: `cancel` (the default), `run`, or
    /// `run_on_first_failure`.
    on_parent_failure: Option<String>,
    /// The kind's queue unless given.
    queue: Option<String>,
    /// Higher runs first; the kind's unless given.
    priority: Option<i32>,
    /// Attempts before the step fails for good; the kind's unless given.
    max_attempts: Option<i32>,
    /// Run no earlier than this long after it may (`30s`).
    delay: Option<String>,
    /// The domain row the step is about (`order:42`).
    subject: Option<String>,
}

/// `POST /api/workflows`: steps and what each waits for, written in one transaction or not at all.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewWorkflow {
    /// For people; need not be unique.
    name: String,
    /// At least one.
    steps: Vec<NewStep>,
}

/// The workflow written: its id and each step's job id by name.
#[derive(Serialize, ToSchema)]
pub(crate) struct CreatedWorkflow {
    id: String,
    steps: HashMap<String, String>,
}

/// Create a workflow: every step checked (names, edges, cycles, payloads) before anything is written.
#[utoipa::path(post, path = "/api/workflows", tag = "workflows", request_body = NewWorkflow, security(("token" = [])),
    responses((status = 201, description = "The workflow was written", body = CreatedWorkflow),
        (status = 400, description = "A field is invalid: the message names it", body = ErrorBody),
        (status = 404, description = "`unknown_kind`: a step's kind is neither built in nor recorded", body = ErrorBody),
        (status = 422, description = "`invalid_workflow`: every problem found (a cycle, a duplicate or unknown step, a payload its kind refuses with its JSON path, a job waited for that is unknown or finished)", body = ErrorBody)))]
pub(super) async fn create(State(state): State<AppState>, Json(new): Json<NewWorkflow>) -> Reply {
    let mut wf = Workflow::new(new.name);
    for (i, s) in new.steps.into_iter().enumerate() {
        let field = |name: &str, message: &str| ApiError::invalid(format!("field `steps[{i}].{name}`: {message}"));
        let known = state.kinds.resolve(&state.db, &s.kind).await?;
        let mut opts = EnqueueOpts::new().max_payload_bytes(state.max_payload_bytes);
        opts.queue = s.queue;
        opts.priority = s.priority;
        opts.max_attempts = s.max_attempts;
        opts.subject = s.subject;
        if let Some(delay) = s.delay {
            opts.delay = Some(duration::forward(&delay).map_err(|e| field("delay", &e))?);
        }
        let policy = match s.on_parent_failure {
            Some(text) => text.parse::<ParentFailure>().map_err(|e| field("on_parent_failure", &e))?,
            None => ParentFailure::default(),
        };
        let step = wf.step_raw(s.name, &known.kind, s.payload);
        step.after(s.after).on_parent_failure(policy).opts(opts);
        for id in s.after_jobs {
            step.after_job(id);
        }
    }
    let txn = outbox::begin(&state.db).await?;
    let enqueued = outbox::enqueue_workflow(&txn, &wf).await?;
    txn.commit().await.map_err(outbox::Error::from)?;
    let body = CreatedWorkflow { id: enqueued.id().to_owned(), steps: enqueued.steps().iter().cloned().collect() };
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// A workflow's steps, what each waits for, and where it stands.
#[utoipa::path(get, path = "/api/workflows/{id}", tag = "workflows", params(WorkflowPath), security(("token" = [])),
    responses((status = 200, description = "Success", body = WorkflowGraph), (status = 404, description = "No workflow has this id", body = ErrorBody)))]
pub(super) async fn get(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    let graph = ops::workflow(&state.db, &id).await?;
    Ok(axum::Json(graph).into_response())
}

/// How many steps were cancelled.
#[derive(Serialize, ToSchema)]
pub(crate) struct CancelledSteps {
    cancelled: u64,
}

/// Cancel every step of a workflow not yet started; running steps finish.
#[utoipa::path(post, path = "/api/workflows/{id}/cancel", tag = "workflows", params(WorkflowPath), security(("token" = [])),
    responses((status = 200, description = "Success", body = CancelledSteps), (status = 404, description = "No workflow has this id", body = ErrorBody)))]
pub(super) async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    let cancelled = ops::cancel_workflow(&state.db, &id).await?;
    Ok(axum::Json(CancelledSteps { cancelled }).into_response())
}
