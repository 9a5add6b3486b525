//! Workflows on every backend: steps that wait for their parents and read their outputs, written in the caller's
//! transaction or not at all; a parent's failure cancelling what depends on it, or not; an operator's retry letting
//! the rest go on; batches whose callbacks run once; and bad workflows refused before anything is written.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox::prelude::*;
use outbox::{Batch, JobStatus, ParentFailure, StepState, Workflow, ops};
use outbox_tests::{TestDb, conformance, scalar, wait_status};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A step: adds its parents' outputs to its own number, or fails when told to.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Job)]
#[job(kind = "test.wf_step", max_attempts = 1)]
struct WfStep {
    name: String,
    n: i64,
}

/// What a step completes with, and what its children read.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Sum {
    n: i64,
}

/// What the handlers saw: (step name, "start" or "end").
type Log = Arc<Mutex<Vec<(String, &'static str)>>>;

/// A worker whose handler fails the steps named in `failing` and logs every start and end.
async fn worker(t: &TestDb, log: &Log, failing: &Arc<Mutex<Vec<String>>>) -> outbox::WorkerHandle {
    let (log, failing) = (Arc::clone(log), Arc::clone(failing));
    outbox::Worker::builder(&t.db)
        .poll_interval(Duration::from_millis(20))
        .register(move |job: WfStep, ctx: JobContext| {
            let (log, failing) = (Arc::clone(&log), Arc::clone(&failing));
            async move {
                log.lock().expect("lock").push((job.name.clone(), "start"));
                let parents = ctx.parents().await.map_err(JobError::retry)?;
                let mut n = job.n;
                for p in parents.iter().filter(|p| p.status == Some(JobStatus::Completed)) {
                    n += parents.output::<Sum>(&p.step).map_err(JobError::permanent)?.n;
                }
                let fail = failing.lock().expect("lock").contains(&job.name);
                log.lock().expect("lock").push((job.name.clone(), "end"));
                if fail {
                    return Err(JobError::permanent(format!("step {} was told to fail", job.name)));
                }
                Ok(json!({ "n": n }))
            }
        })
        .build()
        .await
        .expect("build")
        .start()
}

fn step(name: &str, n: i64) -> WfStep {
    WfStep { name: name.into(), n }
}

/// A → B, C → D.
fn diamond(policy: ParentFailure) -> Workflow {
    let mut wf = Workflow::new("diamond");
    wf.step("a", &step("a", 1));
    wf.step("b", &step("b", 10)).after(["a"]);
    wf.step("c", &step("c", 100)).after(["a"]);
    wf.step("d", &step("d", 1000)).after(["b", "c"]).on_parent_failure(policy);
    wf
}

async fn enqueue(t: &TestDb, wf: &Workflow) -> outbox::EnqueuedWorkflow {
    let txn = outbox::begin(&t.db).await.expect("begin");
    let enqueued = outbox::enqueue_workflow(&txn, wf).await.expect("enqueue workflow");
    txn.commit().await.expect("commit");
    enqueued
}

async fn output(t: &TestDb, id: &str) -> serde_json::Value {
    ops::get(&t.db, id).await.expect("get").output.expect("an output")
}

fn position(log: &Log, name: &str, what: &str) -> usize {
    log.lock()
        .expect("lock")
        .iter()
        .position(|(n, w)| n == name && *w == what)
        .unwrap_or_else(|| panic!("no {what} of {name}"))
}

async fn rows(t: &TestDb) -> (i64, i64, i64) {
    (
        scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await,
        scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_deps").await,
        scalar(&t.db, "SELECT COUNT(*) FROM outbox_workflows").await,
    )
}

const WAIT: Duration = Duration::from_secs(20);

conformance!(a_diamond_runs_its_join_after_both_branches_with_their_outputs, mysql);
/// D starts only after B and C ended, and reads both outputs (each of which read A's).
async fn a_diamond_runs_its_join_after_both_branches_with_their_outputs(t: TestDb) {
    let log: Log = Arc::default();
    let wf = enqueue(&t, &diamond(ParentFailure::Cancel)).await;
    let d = wf.step("d").expect("d");
    let graph = ops::workflow(&t.db, wf.id()).await.expect("graph");
    assert_eq!(graph.state, "running");
    let state = |name: &str| graph.steps.iter().find(|s| s.step == name).expect("step").state;
    assert_eq!((state("a"), state("b"), state("d")), (StepState::Pending, StepState::Waiting, StepState::Waiting));
    let w = worker(&t, &log, &Arc::default()).await;
    assert!(wait_status(&t.db, d, JobStatus::Completed, WAIT).await, "d did not complete");
    w.shutdown().await.expect("shutdown");
    assert!(position(&log, "d", "start") > position(&log, "b", "end"));
    assert!(position(&log, "d", "start") > position(&log, "c", "end"));
    assert!(position(&log, "b", "start") > position(&log, "a", "end"));
    // d = 1000 + (10 + 1) + (100 + 1)
    assert_eq!(output(&t, d).await, json!({ "n": 1112 }));
    let links = ops::links(&t.db, wf.step("b").expect("b")).await.expect("links");
    assert_eq!((links.workflow.as_deref(), links.step.as_deref()), (Some(wf.id()), Some("b")));
    assert_eq!(links.parents.iter().map(|p| p.step.as_str()).collect::<Vec<_>>(), ["a"]);
    assert_eq!(links.children.iter().map(|p| p.step.as_str()).collect::<Vec<_>>(), ["d"]);
    assert_eq!(ops::workflow(&t.db, wf.id()).await.expect("graph").state, "completed");
    // D's history says when its last parent let it go: after it was enqueued, before it was claimed.
    let events: Vec<outbox::JobEventKind> =
        ops::history(&t.db, d).await.expect("history").iter().map(|e| e.event).collect();
    use outbox::JobEventKind::{Claimed, Completed, Enqueued, Ready};
    assert_eq!(events, [Enqueued, Ready, Claimed, Completed], "{events:?}");
}

conformance!(a_workflow_whose_transaction_rolls_back_leaves_no_row, mysql);
async fn a_workflow_whose_transaction_rolls_back_leaves_no_row(t: TestDb) {
    let txn = outbox::begin(&t.db).await.expect("begin");
    outbox::enqueue_workflow(&txn, &diamond(ParentFailure::Cancel)).await.expect("enqueue");
    txn.rollback().await.expect("rollback");
    assert_eq!(rows(&t).await, (0, 0, 0));
    let wf = enqueue(&t, &diamond(ParentFailure::Cancel)).await;
    assert_eq!(rows(&t).await, (4, 4, 1), "{wf:?}");
}

conformance!(a_failed_branch_cancels_the_join_by_default_and_a_retry_lets_it_go_on, mysql);
/// B fails for good: D, and E below it, are cancelled (not started); an operator's retry of B brings them back, and
/// once B completes they run.
async fn a_failed_branch_cancels_the_join_by_default_and_a_retry_lets_it_go_on(t: TestDb) {
    let log: Log = Arc::default();
    let failing: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec!["b".into()]));
    let mut wf = diamond(ParentFailure::Cancel);
    wf.step("e", &step("e", 0)).after(["d"]);
    let wf = enqueue(&t, &wf).await;
    let id = |name: &str| wf.step(name).expect("step").to_owned();
    let w = worker(&t, &log, &failing).await;
    assert!(wait_status(&t.db, &id("e"), JobStatus::Cancelled, WAIT).await, "e was not cancelled");
    assert!(wait_status(&t.db, &id("c"), JobStatus::Completed, WAIT).await);
    let d = ops::get(&t.db, &id("d")).await.expect("get");
    assert_eq!(d.status, JobStatus::Cancelled);
    assert_eq!(d.attempts, 0, "d never started");
    assert!(d.last_error.as_deref().is_some_and(|e| e.contains(&id("b"))), "{d:?}");
    assert_eq!(ops::workflow(&t.db, wf.id()).await.expect("graph").state, "failed");
    failing.lock().expect("lock").clear();
    ops::retry(&t.db, &id("b")).await.expect("retry b");
    assert!(wait_status(&t.db, &id("e"), JobStatus::Completed, WAIT).await, "e did not run after the retry");
    w.shutdown().await.expect("shutdown");
    assert_eq!(output(&t, &id("d")).await, json!({ "n": 1112 }));
    assert_eq!(log.lock().expect("lock").iter().filter(|(n, w)| n == "d" && *w == "start").count(), 1);
}

conformance!(a_join_that_runs_on_parent_failure_reads_what_completed, mysql);
async fn a_join_that_runs_on_parent_failure_reads_what_completed(t: TestDb) {
    let log: Log = Arc::default();
    let failing: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec!["b".into()]));
    let wf = enqueue(&t, &diamond(ParentFailure::Run)).await;
    let w = worker(&t, &log, &failing).await;
    let d = wf.step("d").expect("d");
    assert!(wait_status(&t.db, d, JobStatus::Completed, WAIT).await, "d did not run");
    w.shutdown().await.expect("shutdown");
    assert_eq!(ops::get(&t.db, wf.step("b").expect("b")).await.expect("get").status, JobStatus::Failed);
    // d = 1000 + c's (100 + 1); b failed and has no output.
    assert_eq!(output(&t, d).await, json!({ "n": 1101 }));
    assert!(position(&log, "d", "start") > position(&log, "b", "end"));
}

conformance!(a_batch_runs_each_callback_once_with_its_summary, mysql);
/// 40 members, one failing: the `finished` callback runs once after the last member and sees the summary; the
/// `succeeded` one is cancelled; the `failed` one runs once.
async fn a_batch_runs_each_callback_once_with_its_summary(t: TestDb) {
    let log: Log = Arc::default();
    let failing: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec!["m7".into()]));
    let mut batch = Batch::new("forty");
    for i in 0..40 {
        batch.add(&step(&format!("m{i}"), 1));
    }
    batch.on_finished(&step("finished", 0));
    batch.on_success(&step("succeeded", 0));
    batch.on_failure(&step("failed", 0));
    let wf = enqueue(&t, &Workflow::from(batch)).await;
    let w = worker(&t, &log, &failing).await;
    let finished = wf.step("finished").expect("finished");
    assert!(wait_status(&t.db, finished, JobStatus::Completed, WAIT).await, "finished did not run");
    assert!(wait_status(&t.db, wf.step("failed").expect("failed"), JobStatus::Completed, WAIT).await);
    assert!(wait_status(&t.db, wf.step("succeeded").expect("s"), JobStatus::Cancelled, WAIT).await);
    w.shutdown().await.expect("shutdown");
    // 39 members completed with 1 each.
    assert_eq!(output(&t, finished).await, json!({ "n": 39 }));
    let parents = outbox::ops::links(&t.db, finished).await.expect("links").parents;
    assert_eq!(parents.len(), 40);
    let log = log.lock().expect("lock");
    let starts = |name: &str| log.iter().filter(|(n, w)| n == name && *w == "start").count();
    assert_eq!((starts("finished"), starts("failed"), starts("succeeded")), (1, 1, 0));
    let last_member_end = log.iter().rposition(|(n, w)| n.starts_with('m') && *w == "end").expect("members ran");
    assert!(log.iter().position(|(n, w)| n == "finished" && *w == "start").expect("start") > last_member_end);
}

conformance!(cancelling_a_workflow_cancels_every_step_not_started, mysql);
async fn cancelling_a_workflow_cancels_every_step_not_started(t: TestDb) {
    let wf = enqueue(&t, &diamond(ParentFailure::Run)).await;
    assert_eq!(ops::cancel_workflow(&t.db, wf.id()).await.expect("cancel"), 4);
    for (name, _) in wf.steps() {
        let job = ops::get(&t.db, wf.step(name).expect("step")).await.expect("get");
        assert_eq!(job.status, JobStatus::Cancelled, "{name}");
    }
    assert_eq!(ops::workflow(&t.db, wf.id()).await.expect("graph").state, "cancelled");
    let missing = ops::cancel_workflow(&t.db, "nope").await.expect_err("unknown workflow");
    assert!(missing.to_string().contains("nope"), "{missing}");
}

conformance!(bad_workflows_are_refused_with_every_problem_named_and_write_nothing, mysql);
async fn bad_workflows_are_refused_with_every_problem_named_and_write_nothing(t: TestDb) {
    let refused = |wf: Workflow| {
        let db = t.db.clone();
        async move {
            let txn = outbox::begin(&db).await.expect("begin");
            let err = outbox::enqueue_workflow(&txn, &wf).await.expect_err("refused").to_string();
            // Nothing of ours failed in the transaction: it still commits.
            txn.commit().await.expect("commit");
            err
        }
    };
    let mut cycle = Workflow::new("cycle");
    cycle.step("a", &step("a", 1)).after(["c"]);
    cycle.step("b", &step("b", 1)).after(["a"]);
    cycle.step("c", &step("c", 1)).after(["b"]);
    let e = refused(cycle).await;
    assert!(e.contains("invalid workflow `cycle`") && e.contains("cycle: a, b, c"), "{e}");
    let mut names = Workflow::new("names");
    names.step("a", &step("a", 1));
    names.step("a", &step("a", 1));
    names.step("b", &step("b", 1)).after(["x"]);
    let e = refused(names).await;
    assert!(e.contains("step `a` is named twice") && e.contains("waits for `x`, which is no step"), "{e}");
    let mut payload = Workflow::new("payload");
    payload.step_raw("a", &outbox::Kind::of::<WfStep>().expect("kind"), json!({ "name": "a", "n": "many" }));
    let e = refused(payload).await;
    assert!(e.contains("step `a`") && e.contains("/n"), "{e}");
    let mut unknown = Workflow::new("unknown");
    unknown.step("a", &step("a", 1)).after_job("no-such-job");
    let e = refused(unknown).await;
    assert!(e.contains("job `no-such-job`, which does not exist"), "{e}");
    let mut alarm = Workflow::new("alarm");
    alarm.step("alarm", &step("alarm", 1)).on_parent_failure(ParentFailure::RunOnFirstFailure);
    let e = refused(alarm).await;
    assert!(e.contains("runs on its first parent's failure but waits for no parent"), "{e}");
    let done = enqueue(&t, &{
        let mut w = Workflow::new("done");
        w.step("x", &step("x", 1));
        w
    })
    .await;
    let x = done.step("x").expect("x").to_owned();
    ops::cancel(&t.db, &x).await.expect("cancel");
    let before = rows(&t).await;
    let mut finished = Workflow::new("finished");
    finished.step("a", &step("a", 1)).after_job(&x);
    let e = refused(finished).await;
    assert!(e.contains(&format!("job `{x}`, which has already finished (cancelled)")), "{e}");
    assert_eq!(rows(&t).await, before, "a refused workflow wrote something");
}

conformance!(a_step_can_wait_for_a_step_of_another_workflow, mysql);
async fn a_step_can_wait_for_a_step_of_another_workflow(t: TestDb) {
    let log: Log = Arc::default();
    let first = enqueue(&t, &diamond(ParentFailure::Cancel)).await;
    let mut second = Workflow::new("after the diamond");
    second.step("z", &step("z", 5)).after_job(first.step("d").expect("d"));
    let second = enqueue(&t, &second).await;
    let w = worker(&t, &log, &Arc::default()).await;
    let z = second.step("z").expect("z");
    assert!(wait_status(&t.db, z, JobStatus::Completed, WAIT).await);
    w.shutdown().await.expect("shutdown");
    assert_eq!(output(&t, z).await, json!({ "n": 1117 }));
    let parents = ops::links(&t.db, z).await.expect("links").parents;
    assert_eq!(parents[0].step, "d", "an outside parent is known by its own step name");
}

conformance!(a_cancelled_branch_reaches_down_the_graph_and_runs_what_runs_anyway, mysql);
/// B fails; C waits for B and is cancelled; D waits for A and C and runs anyway: it counts C's cancellation, which
/// only a trigger reaching down the graph can tell it. A first-failure step of a workflow that never failed is
/// cancelled once its parents completed.
async fn a_cancelled_branch_reaches_down_the_graph_and_runs_what_runs_anyway(t: TestDb) {
    let log: Log = Arc::default();
    let failing: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec!["b".into()]));
    let mut wf = Workflow::new("down the graph");
    wf.step("a", &step("a", 1));
    wf.step("b", &step("b", 10)).after(["a"]);
    wf.step("c", &step("c", 100)).after(["b"]);
    wf.step("d", &step("d", 1000)).after(["a", "c"]).on_parent_failure(ParentFailure::Run);
    wf.step("e", &step("e", 0)).after(["d"]);
    wf.step("alarm", &step("alarm", 0)).after(["a"]).on_parent_failure(ParentFailure::RunOnFirstFailure);
    let wf = enqueue(&t, &wf).await;
    let id = |name: &str| wf.step(name).expect("step").to_owned();
    let w = worker(&t, &log, &failing).await;
    assert!(wait_status(&t.db, &id("e"), JobStatus::Completed, WAIT).await, "e did not run");
    assert!(wait_status(&t.db, &id("alarm"), JobStatus::Cancelled, WAIT).await, "alarm was not cancelled");
    w.shutdown().await.expect("shutdown");
    let c = ops::get(&t.db, &id("c")).await.expect("get");
    assert_eq!((c.status, c.attempts), (JobStatus::Cancelled, 0));
    // d = 1000 + a's 1; c was cancelled.
    assert_eq!(output(&t, &id("d")).await, json!({ "n": 1001 }));
    let alarm = ops::get(&t.db, &id("alarm")).await.expect("get");
    assert_eq!(alarm.last_error.as_deref(), Some("not run: every parent completed"));
    assert_eq!(log.lock().expect("lock").iter().filter(|(n, _)| n == "alarm").count(), 0);
}

/// A step whose output has a schema: `{"n": integer}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Job)]
#[job(kind = "test.wf_typed", max_attempts = 3, output = Sum)]
struct Typed {
    /// Completes with `{"n": "not a number"}` when set.
    wrong: bool,
}

conformance!(an_output_that_breaks_its_schema_fails_the_step_and_its_children_follow_policy, mysql);
async fn an_output_that_breaks_its_schema_fails_the_step_and_its_children_follow_policy(t: TestDb) {
    let log: Log = Arc::default();
    let mut wf = Workflow::new("typed");
    wf.step("good", &Typed { wrong: false });
    wf.step("bad", &Typed { wrong: true });
    wf.step("after_bad", &step("after_bad", 0)).after(["bad"]);
    wf.step("after_both", &step("after_both", 0)).after(["good", "bad"]).on_parent_failure(ParentFailure::Run);
    let wf = enqueue(&t, &wf).await;
    let id = |name: &str| wf.step(name).expect("step").to_owned();
    let (log2, failing) = (Arc::clone(&log), Arc::new(Mutex::new(Vec::new())));
    let typed = outbox::Worker::builder(&t.db)
        .poll_interval(Duration::from_millis(20))
        .register(|job: Typed, _: JobContext| async move {
            Ok::<_, JobError>(if job.wrong { json!({ "n": "not a number" }) } else { json!({ "n": 7 }) })
        })
        .build()
        .await
        .expect("build")
        .start();
    let w = worker(&t, &log2, &failing).await;
    assert!(wait_status(&t.db, &id("after_both"), JobStatus::Completed, WAIT).await);
    assert!(wait_status(&t.db, &id("after_bad"), JobStatus::Cancelled, WAIT).await);
    w.shutdown().await.expect("shutdown");
    typed.shutdown().await.expect("shutdown");
    let bad = ops::get(&t.db, &id("bad")).await.expect("get");
    assert_eq!((bad.status, bad.attempts), (JobStatus::Failed, 1), "an invalid output fails for good: {bad:?}");
    let error = bad.last_error.expect("an error");
    assert!(error.contains("invalid output for kind `test.wf_typed`") && error.contains("/n"), "{error}");
    assert!(bad.output.is_none(), "the invalid output was not written");
    // after_both = 0 + good's 7; bad failed.
    assert_eq!(output(&t, &id("after_both")).await, json!({ "n": 7 }));
}

conformance!(a_cancelled_step_retried_after_its_parent_completed_runs, mysql);
/// A step cancelled while it waited, whose parent then completed, runs when an operator retries it (it was left
/// waiting with no parent to let it go).
async fn a_cancelled_step_retried_after_its_parent_completed_runs(t: TestDb) {
    let log: Log = Arc::default();
    let mut wf = Workflow::new("a then b");
    wf.step("a", &step("a", 1));
    wf.step("b", &step("b", 10)).after(["a"]);
    let wf = enqueue(&t, &wf).await;
    let id = |name: &str| wf.step(name).expect("step").to_owned();
    ops::cancel(&t.db, &id("b")).await.expect("cancel b");
    let w = worker(&t, &log, &Arc::default()).await;
    assert!(wait_status(&t.db, &id("a"), JobStatus::Completed, WAIT).await);
    ops::retry(&t.db, &id("b")).await.expect("retry b");
    assert!(wait_status(&t.db, &id("b"), JobStatus::Completed, WAIT).await, "the retried step never ran");
    w.shutdown().await.expect("shutdown");
    assert_eq!(output(&t, &id("b")).await, json!({ "n": 11 }));
}

conformance!(a_retry_of_one_failed_parent_leaves_a_step_another_failed_parent_holds, mysql);
/// `ship` waits for `charge` and `stock`; both fail. Retrying `charge` alone does not bring `ship` back (`stock`
/// still failed); retrying `stock` then does, and `ship` runs once both completed.
async fn a_retry_of_one_failed_parent_leaves_a_step_another_failed_parent_holds(t: TestDb) {
    let log: Log = Arc::default();
    let failing: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec!["charge".into(), "stock".into()]));
    let mut wf = Workflow::new("order");
    wf.step("charge", &step("charge", 1));
    wf.step("stock", &step("stock", 10));
    wf.step("ship", &step("ship", 100)).after(["charge", "stock"]);
    let wf = enqueue(&t, &wf).await;
    let id = |name: &str| wf.step(name).expect("step").to_owned();
    let w = worker(&t, &log, &failing).await;
    assert!(wait_status(&t.db, &id("charge"), JobStatus::Failed, WAIT).await);
    assert!(wait_status(&t.db, &id("stock"), JobStatus::Failed, WAIT).await);
    assert!(wait_status(&t.db, &id("ship"), JobStatus::Cancelled, WAIT).await);
    failing.lock().expect("lock").clear();
    ops::retry(&t.db, &id("charge")).await.expect("retry charge");
    assert!(wait_status(&t.db, &id("charge"), JobStatus::Completed, WAIT).await);
    let ship = ops::get(&t.db, &id("ship")).await.expect("get");
    assert_eq!(ship.status, JobStatus::Cancelled, "stock still failed: ship stays cancelled");
    ops::retry(&t.db, &id("stock")).await.expect("retry stock");
    assert!(wait_status(&t.db, &id("ship"), JobStatus::Completed, WAIT).await, "ship did not run");
    w.shutdown().await.expect("shutdown");
    assert_eq!(output(&t, &id("ship")).await, json!({ "n": 111 }));
}

conformance!(a_chain_of_a_thousand_steps_is_cancelled_and_brought_back_whole, mysql);
/// The head of a chain of 1,000 steps fails: the 999 below are cancelled by the one statement that failed it, however
/// deep the graph; the head's retry brings them all back, and the chain then runs to its end.
async fn a_chain_of_a_thousand_steps_is_cancelled_and_brought_back_whole(t: TestDb) {
    let log: Log = Arc::default();
    let failing: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec!["s0".into()]));
    let mut wf = Workflow::new("chain");
    wf.step("s0", &step("s0", 1));
    for i in 1..1_000 {
        wf.step(format!("s{i}"), &step(&format!("s{i}"), 1)).after([format!("s{}", i - 1)]);
    }
    let wf = enqueue(&t, &wf).await;
    let id = |name: &str| wf.step(name).expect("step").to_owned();
    let w = worker(&t, &log, &failing).await;
    assert!(wait_status(&t.db, &id("s0"), JobStatus::Failed, WAIT).await);
    let cancelled = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'cancelled' AND attempts = 0";
    assert_eq!(scalar(&t.db, cancelled).await, 999, "every step below the failed head is cancelled");
    failing.lock().expect("lock").clear();
    ops::retry(&t.db, &id("s0")).await.expect("retry the head");
    assert!(wait_status(&t.db, &id("s999"), JobStatus::Completed, Duration::from_secs(120)).await, "the chain stopped");
    w.shutdown().await.expect("shutdown");
    assert_eq!(output(&t, &id("s999")).await, json!({ "n": 1000 }));
}
