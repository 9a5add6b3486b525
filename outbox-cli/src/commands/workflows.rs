//! `outbox workflow`: create a workflow from JSON, show one, cancel one.

use outbox::{WorkflowGraph, ops};
use outbox_server::WorkflowSpec;
use sea_orm::DatabaseConnection;
use serde_json::json;

use crate::cli::WorkflowCommand;
use crate::fail::{Failure, Result, code};
use crate::kinds;
use crate::render::{self, Format};

pub(super) async fn run(db: &DatabaseConnection, command: WorkflowCommand, format: Format) -> Result<u8> {
    match command {
        WorkflowCommand::Create { spec } => create(db, &spec, format).await,
        WorkflowCommand::Show { id } => show(db, &id, format).await,
        WorkflowCommand::Cancel { id } => {
            let cancelled = ops::cancel_workflow(db, &id).await?;
            if format == Format::Json {
                render::json(&json!({ "cancelled": cancelled }))?;
            } else {
                println!("cancelled {cancelled} steps of workflow {id}");
            }
            Ok(code::OK)
        }
    }
}

async fn create(db: &DatabaseConnection, arg: &str, format: Format) -> Result<u8> {
    let value = crate::payload::read_as(arg, "the workflow")?;
    let spec: WorkflowSpec = serde_path_to_error::deserialize(value).map_err(|e| {
        Failure::invalid(format!("the workflow does not read as one: at {}: {}", e.path(), e.inner()))
            .hint("`outbox workflow create --help` lists its fields")
    })?;
    let wf = spec.build(db, &kinds::known()?, outbox::DEFAULT_MAX_PAYLOAD_BYTES).await?;
    let txn = outbox::begin(db).await?;
    let enqueued = outbox::enqueue_workflow(&txn, &wf).await?;
    txn.commit().await.map_err(outbox::Error::from)?;
    if format == Format::Json {
        let steps: serde_json::Map<String, serde_json::Value> =
            enqueued.steps().iter().map(|(name, id)| (name.clone(), json!(id))).collect();
        render::json(&json!({ "id": enqueued.id(), "steps": steps }))?;
    } else {
        println!("workflow {}", enqueued.id());
        let rows: Vec<Vec<String>> = enqueued.steps().iter().map(|(n, id)| vec![n.clone(), id.clone()]).collect();
        print!("{}", render::table(&["STEP", "JOB"], &rows));
    }
    Ok(code::OK)
}

async fn show(db: &DatabaseConnection, id: &str, format: Format) -> Result<u8> {
    let graph: WorkflowGraph = ops::workflow(db, id).await?;
    if format == Format::Json {
        render::json(&graph)?;
        return Ok(code::OK);
    }
    println!("workflow {} ({}): {}", graph.id, graph.name, graph.state);
    let step_of =
        |job: &str| graph.steps.iter().find(|s| s.id == job).map_or_else(|| job.to_owned(), |s| s.step.clone());
    let rows: Vec<Vec<String>> = graph
        .steps
        .iter()
        .map(|s| {
            let waits = s.parents.iter().map(|p| step_of(p)).collect::<Vec<_>>().join(", ");
            vec![
                s.step.clone(),
                s.kind.clone(),
                serde_json::to_value(s.state).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                if waits.is_empty() { "-".into() } else { waits },
                s.id.clone(),
                render::short(s.last_error.as_deref().unwrap_or("-"), 60),
            ]
        })
        .collect();
    print!("{}", render::table(&["STEP", "KIND", "STATE", "AFTER", "JOB", "LAST ERROR"], &rows));
    Ok(code::OK)
}
