//! Enqueuing a workflow: everything checked before the first write, then its jobs, their places and their edges in
//! the caller's transaction.

use std::collections::{HashMap, HashSet};

use sea_orm::DatabaseTransaction;
use tracing::Instrument;

use super::{Workflow, invalid};
use crate::error::{Error, Result};
use crate::kind::MAX_NAME_BYTES;
use crate::storage::workflows::{Attach, Edge};
use crate::storage::{self, Dialect, now_ms};

/// What [`enqueue_workflow`] wrote: the workflow's id and each step's job id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuedWorkflow {
    id: String,
    steps: Vec<(String, String)>,
}

impl EnqueuedWorkflow {
    /// The workflow's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The job id of the step `name`.
    pub fn step(&self, name: &str) -> Option<&str> {
        self.steps.iter().find(|(n, _)| n == name).map(|(_, id)| id.as_str())
    }

    /// Every step as (name, job id), in the order they were added.
    pub fn steps(&self) -> &[(String, String)] {
        &self.steps
    }
}

/// The first problem with a name (of the workflow or a step), if any.
fn bad_name(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("it is empty".into())
    } else if name.contains('\0') {
        Some("it contains the NUL character".into())
    } else if name.len() > MAX_NAME_BYTES {
        Some(format!("it is {} bytes, over the limit of {MAX_NAME_BYTES}", name.len()))
    } else {
        None
    }
}

/// The steps in an order where each comes after its parents, or the steps of a cycle.
fn order(wf: &Workflow, index: &HashMap<&str, usize>) -> std::result::Result<Vec<usize>, Vec<String>> {
    let n = wf.steps.len();
    let mut left: Vec<usize> = vec![0; n];
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, step) in wf.steps.iter().enumerate() {
        let parents: HashSet<usize> = step.after.iter().filter_map(|p| index.get(p.as_str()).copied()).collect();
        left[i] = parents.len();
        for p in parents {
            children[p].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| left[i] == 0).rev().collect();
    let mut out = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        out.push(i);
        for &c in children[i].iter().rev() {
            left[c] -= 1;
            if left[c] == 0 {
                ready.push(c);
            }
        }
    }
    if out.len() == n {
        return Ok(out);
    }
    Err(wf.steps.iter().enumerate().filter(|(i, _)| left[*i] > 0).map(|(_, s)| s.name.clone()).collect())
}

/// Checks the workflow's names and edges: every problem at once, or the steps in the order to write them.
fn check(wf: &Workflow) -> Result<Vec<usize>> {
    let mut problems = Vec::new();
    if let Some(why) = bad_name(&wf.name) {
        problems.push(format!("its name is not usable: {why}"));
    }
    if wf.steps.is_empty() {
        problems.push("it has no step".into());
    }
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(wf.steps.len());
    for (i, step) in wf.steps.iter().enumerate() {
        if let Some(why) = bad_name(&step.name) {
            problems.push(format!("step name {:?} is not usable: {why}", step.name));
        }
        if index.insert(step.name.as_str(), i).is_some() {
            problems.push(format!("step `{}` is named twice", step.name));
        }
    }
    for step in &wf.steps {
        for parent in &step.after {
            if parent == &step.name {
                problems.push(format!("step `{}` waits for itself", step.name));
            } else if !index.contains_key(parent.as_str()) {
                problems.push(format!("step `{}` waits for `{parent}`, which is no step of the workflow", step.name));
            }
        }
        if step.on_parent_failure == super::ParentFailure::RunOnFirstFailure
            && step.after.is_empty()
            && step.after_jobs.is_empty()
        {
            problems.push(format!("step `{}` runs on its first parent's failure but waits for no parent", step.name));
        }
        for id in &step.after_jobs {
            if id.is_empty() || id.contains('\0') || id.len() > MAX_NAME_BYTES {
                problems.push(format!("step `{}` waits for job {id:?}, which is no job id", step.name));
            }
        }
    }
    if !problems.is_empty() {
        return Err(invalid(&wf.name, problems.join("; ")));
    }
    order(wf, &index)
        .map_err(|cycle| invalid(&wf.name, format!("its steps wait for each other in a cycle: {}", cycle.join(", "))))
}

/// Enqueues every step of `wf` in the caller's transaction `txn`: if it rolls back, no step, edge or record of the
/// workflow remains. Everything is checked before the first write, and every problem named: a cycle, a duplicate or
/// unknown step name, a payload its kind refuses (with its JSON path), a job waited for that is unknown or has
/// finished. A step with no parent may be claimed once `txn` commits; the others wait.
pub async fn enqueue_workflow(txn: &DatabaseTransaction, wf: &Workflow) -> Result<EnqueuedWorkflow> {
    let span = crate::trace::enqueue_span("workflow", wf.steps.len());
    let trace = crate::trace::context_of(&span, None);
    write(txn, wf, trace).instrument(span).await
}

async fn write(txn: &DatabaseTransaction, wf: &Workflow, trace: Option<String>) -> Result<EnqueuedWorkflow> {
    let order = check(wf)?;
    let dialect = Dialect::of(txn)?;
    let now = now_ms();
    let mut jobs = Vec::with_capacity(wf.steps.len());
    let mut problems = Vec::new();
    for &i in &order {
        let step = &wf.steps[i];
        let prepared = match (&step.kind, &step.payload) {
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
            (Ok(kind), Ok(payload)) => crate::enqueue::prepare(
                dialect,
                kind,
                payload,
                &step.opts,
                (now, &step.opts.trace.clone().or(trace.clone())),
            )
            .map_err(|e| e.to_string()),
        };
        match prepared {
            Ok(mut job) => {
                // A step is never collapsed onto another job: the workflow is what was asked for.
                job.key = None;
                jobs.push(job);
            }
            Err(e) => problems.push(format!("step `{}`: {e}", step.name)),
        }
    }
    if !problems.is_empty() {
        return Err(invalid(&wf.name, problems.join("; ")));
    }
    let outside_ids: Vec<&str> = {
        let mut seen = HashSet::new();
        wf.steps.iter().flat_map(|s| s.after_jobs.iter()).map(String::as_str).filter(|id| seen.insert(*id)).collect()
    };
    let outside = storage::workflows::outside(txn, &outside_ids).await?;
    let mut outside_steps: HashMap<&str, String> = HashMap::new();
    for id in &outside_ids {
        match outside.iter().find(|o| o.id == *id) {
            None => problems.push(format!("it waits for job `{id}`, which does not exist")),
            Some(o) if o.status != "pending" && o.status != "claimed" => {
                problems.push(format!("it waits for job `{id}`, which has already finished ({})", o.status));
            }
            Some(o) => {
                outside_steps.insert(id, o.step.clone().unwrap_or_else(|| (*id).to_owned()));
            }
        }
    }
    if !problems.is_empty() {
        return Err(invalid(&wf.name, problems.join("; ")));
    }
    // The first write: a parent that finishes after the read above is not marked, and the workflow is refused.
    if !outside_ids.is_empty() {
        let marked = storage::workflows::mark_parents(txn, &outside_ids).await?;
        if marked != outside_ids.len() as u64 {
            return Err(invalid(
                &wf.name,
                "a job it waits for finished while it was enqueued; roll back and try again",
            ));
        }
    }
    let id = crate::id::new_job_id();
    storage::workflows::insert_workflow(txn, &id, &wf.name, now).await?;
    let written = storage::enqueue::insert_jobs(txn, &jobs).await?;
    if written.len() != jobs.len() {
        return Err(Error::Internal(format!(
            "workflow `{}`: {} of {} steps were written",
            wf.name,
            written.len(),
            jobs.len()
        )));
    }
    let job_of: HashMap<&str, &str> =
        order.iter().zip(&jobs).map(|(&i, job)| (wf.steps[i].name.as_str(), job.id.as_str())).collect();
    let mut has_children: HashSet<&str> = HashSet::new();
    let mut edges = Vec::new();
    let mut parents: Vec<i32> = vec![0; wf.steps.len()];
    for (i, step) in wf.steps.iter().enumerate() {
        let child = job_of[step.name.as_str()];
        let mut seen = HashSet::new();
        for parent in step.after.iter().filter(|p| seen.insert(p.as_str())) {
            has_children.insert(parent.as_str());
            edges.push(Edge { parent: job_of[parent.as_str()], child, parent_step: parent.as_str() });
        }
        for parent in step.after_jobs.iter().filter(|p| seen.insert(p.as_str())) {
            edges.push(Edge { parent: parent.as_str(), child, parent_step: outside_steps[parent.as_str()].as_str() });
        }
        parents[i] = i32::try_from(seen.len()).unwrap_or(i32::MAX);
    }
    let attach: Vec<Attach<'_>> = wf
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| Attach {
            id: job_of[step.name.as_str()],
            step: step.name.as_str(),
            parents: parents[i],
            on_parent_failure: step.on_parent_failure.stored(),
            has_children: has_children.contains(step.name.as_str()),
        })
        .collect();
    storage::workflows::attach(txn, &id, &attach).await?;
    storage::workflows::insert_edges(txn, &edges).await?;
    tracing::debug!(workflow_id = %id, name = %wf.name, steps = jobs.len(), edges = edges.len(), "workflow enqueued");
    crate::wake::wake();
    let steps = wf.steps.iter().map(|s| (s.name.clone(), job_of[s.name.as_str()].to_owned())).collect();
    Ok(EnqueuedWorkflow { id, steps })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::Workflow;

    fn wf(edges: &[(&str, &[&str])]) -> Workflow {
        let kind = std::sync::Arc::new(
            crate::Kind::from_schema("k", serde_json::json!({}), crate::KindOpts::DEFAULT).expect("kind"),
        );
        let mut wf = Workflow::new("w");
        for (name, after) in edges {
            wf.step_raw(*name, &kind, serde_json::json!({})).after(after.iter().copied());
        }
        wf
    }

    #[test]
    fn steps_are_written_parents_first() {
        let w = wf(&[("d", &["b", "c"]), ("b", &["a"]), ("c", &["a"]), ("a", &[])]);
        let order = check(&w).expect("checked");
        let names: Vec<&str> = order.iter().map(|&i| w.steps[i].name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
    }

    #[test]
    fn cycles_duplicates_and_unknown_steps_are_named() {
        let e =
            check(&wf(&[("a", &["c"]), ("b", &["a"]), ("c", &["b"]), ("x", &[])])).expect_err("refused").to_string();
        assert!(e.contains("cycle: a, b, c"), "{e}");
        let e = check(&wf(&[("a", &[]), ("a", &["zz"]), ("", &["a"])])).expect_err("refused").to_string();
        assert!(e.contains("step `a` is named twice"), "{e}");
        assert!(e.contains("waits for `zz`, which is no step"), "{e}");
        assert!(e.contains("step name \"\" is not usable: it is empty"), "{e}");
        let e = check(&wf(&[("a", &["a"])])).expect_err("refused").to_string();
        assert!(e.contains("step `a` waits for itself"), "{e}");
        let e = check(&Workflow::new("")).expect_err("refused").to_string();
        assert!(e.contains("invalid workflow ``: its name is not usable: it is empty; it has no step"), "{e}");
    }
}
