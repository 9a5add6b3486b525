//! The workflow routes: create a workflow (or batch) of jobs of known kinds, read its graph and state, cancel it.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use outbox::{WorkflowGraph, ops};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

use super::doc::ErrorBody;
use super::{AppState, Reply};
use crate::extract::{Json, Path};
use crate::workflow_spec::WorkflowSpec;

/// A workflow id in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read by the document only; handlers take the id as a string
pub(crate) struct WorkflowPath {
    /// The workflow's id (a 26-character ULID).
    id: String,
}

/// The workflow written: its id and each step's job id by name.
#[derive(Serialize, ToSchema)]
pub(crate) struct CreatedWorkflow {
    id: String,
    steps: HashMap<String, String>,
}

/// Create a workflow: every step checked (names, edges, cycles, payloads) before anything is written.
#[utoipa::path(post, path = "/api/workflows", operation_id = "create_workflow", tag = "workflows", request_body = WorkflowSpec, security(("token" = [])),
    responses((status = 201, description = "The workflow was written", body = CreatedWorkflow),
        (status = 400, description = "A field is invalid: the message names it", body = ErrorBody),
        (status = 404, description = "`unknown_kind`: a step's kind is neither built in nor recorded", body = ErrorBody),
        (status = 422, description = "`invalid_workflow`: every problem found (a cycle, a duplicate or unknown step, a payload its kind refuses with its JSON path, a job waited for that is unknown or finished)", body = ErrorBody)))]
pub(super) async fn create(State(state): State<AppState>, Json(spec): Json<WorkflowSpec>) -> Reply {
    let wf = spec.build(&state.db, &state.kinds, state.max_payload_bytes).await?;
    let txn = outbox::begin(&state.db).await?;
    let enqueued = outbox::enqueue_workflow(&txn, &wf).await?;
    txn.commit().await.map_err(outbox::Error::from)?;
    let body = CreatedWorkflow { id: enqueued.id().to_owned(), steps: enqueued.steps().iter().cloned().collect() };
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// A workflow's steps, what each waits for, and where it stands.
#[utoipa::path(get, path = "/api/workflows/{id}", operation_id = "get_workflow", tag = "workflows", params(WorkflowPath), security(("token" = [])),
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
#[utoipa::path(post, path = "/api/workflows/{id}/cancel", operation_id = "cancel_workflow", tag = "workflows", params(WorkflowPath), security(("token" = [])),
    responses((status = 200, description = "Success", body = CancelledSteps), (status = 404, description = "No workflow has this id", body = ErrorBody)))]
pub(super) async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> Reply {
    let cancelled = ops::cancel_workflow(&state.db, &id).await?;
    Ok(axum::Json(CancelledSteps { cancelled }).into_response())
}
