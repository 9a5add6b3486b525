//! Workflows under real worker processes: 1,000 diamonds (A → B, C → D) drained by four processes, one SIGKILLed and
//! restarted every 300 ms; and a batch of 10,000 jobs whose callback runs once, after the last member. Every check
//! reads the handlers' own begin and end lines (monotonic clock, one `write` each) and the outputs they completed
//! with.

#[allow(dead_code)]
mod fleet;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use fleet::{Run, Spawn, runs};
use outbox::{Batch, JobEventKind, ParentFailure, Workflow};
use outbox_tests::{ChildProcess, Node, NodeOutput, TestDb, conformance, scalar};

const DIAMONDS: u32 = 1_000;

fn node(wf: u32, step: u32) -> Node {
    Node { wf, step, sleep_ms: u64::from((wf * 7 + step * 13) % 11) }
}

fn diamond(wf: u32) -> Workflow {
    let mut w = Workflow::new(format!("diamond {wf}"));
    w.step("a", &node(wf, 0));
    w.step("b", &node(wf, 1)).after(["a"]);
    w.step("c", &node(wf, 2)).after(["a"]);
    w.step("d", &node(wf, 3)).after(["b", "c"]).on_parent_failure(ParentFailure::Cancel);
    w
}

fn spawn(t: &TestDb, log: &std::path::Path) -> ChildProcess {
    Spawn { url: &t.url, log, mode: "serve", lease_ms: 2_000, concurrency: 8, stderr: None }.start()
}

/// The latest moment any of `runs` was seen running (its end, or its begin when it never ended).
fn last_seen(runs: &[&Run]) -> u64 {
    runs.iter().map(|r| r.end.unwrap_or(r.begin)).max().unwrap_or(0)
}

conformance!(diamonds_hold_their_order_while_workers_are_killed_every_300_ms, mysql);
async fn diamonds_hold_their_order_while_workers_are_killed_every_300_ms(t: TestDb) {
    for first in (0..DIAMONDS).step_by(50) {
        let txn = outbox::begin(&t.db).await.expect("begin");
        for wf in first..first + 50 {
            outbox::enqueue_workflow(&txn, &diamond(wf)).await.expect("enqueue");
        }
        txn.commit().await.expect("commit");
    }
    let log = t.dir.path().join("nodes.log");
    let processes = 4;
    let mut children: Vec<ChildProcess> = (0..processes).map(|_| spawn(&t, &log)).collect();
    let total = i64::from(DIAMONDS * 4);
    let kills =
        fleet::kill_every_300_ms(&t.db, &mut children, total, Duration::from_secs(240), || spawn(&t, &log)).await;
    for status in fleet::wait_all(&mut children, Duration::from_secs(120)).await {
        assert!(status.success(), "a worker process failed: {status}");
    }

    // 0 lost: every step completed, none failed or was cancelled.
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, total);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, total);
    let runs = runs(&log);
    let mut by_wf: BTreeMap<u64, BTreeMap<u32, Vec<&Run>>> = BTreeMap::new();
    for run in &runs {
        by_wf.entry(run.key).or_default().entry(run.seq).or_default().push(run);
    }
    assert_eq!(by_wf.len(), DIAMONDS as usize);
    for (wf, steps) in &by_wf {
        let first_begin = |s: u32| steps[&s].iter().map(|r| r.begin).min().expect("a run");
        // A step begins only after every run of its parents was over: a parent's last run ended before its
        // completion committed, and a completed parent never runs again.
        for (child, parents) in [(1, &[0][..]), (2, &[0]), (3, &[1, 2])] {
            for parent in parents {
                assert!(
                    last_seen(&steps[parent]) < first_begin(child),
                    "workflow {wf}: step {child} began before step {parent} was over: {:?} then {:?}",
                    steps[parent],
                    steps[&child]
                );
            }
        }
    }
    // Every D read B's and C's outputs, of its own workflow.
    let ds =
        outbox::ops::list(&t.db, &outbox::JobFilter { kind: Some("node".into()), limit: 10_000, ..Default::default() })
            .await
            .expect("list");
    let mut read_d = 0;
    for job in &ds {
        let out: NodeOutput = serde_json::from_value(job.output.clone().expect("an output")).expect("node output");
        if out.step == 3 {
            assert_eq!(out.read, [1, 2], "{out:?}");
            read_d += 1;
        }
    }
    assert_eq!(read_d, DIAMONDS);
    // 0 completed twice beyond what a kill explains: a step whose handler ran to its end twice lost its first
    // outcome with a killed process, and its history says it was rescued.
    let killed_at: HashMap<u32, u64> = kills.iter().copied().collect();
    let mut ended: HashMap<&str, Vec<&Run>> = HashMap::new();
    for run in runs.iter().filter(|r| r.end.is_some()) {
        ended.entry(run.job.as_str()).or_default().push(run);
    }
    let mut twice = 0;
    for (id, ends) in ended.iter().filter(|(_, e)| e.len() > 1) {
        twice += 1;
        assert!(ends[..ends.len() - 1].iter().all(|r| killed_at.contains_key(&r.pid)), "{id}: {ends:?}");
        let history = outbox::ops::history(&t.db, id).await.expect("history");
        assert!(history.iter().any(|e| e.event == JobEventKind::Rescued), "job {id} ended twice: {history:?}");
    }
    eprintln!(
        "{processes} processes, {} kills, {} runs for {total} steps, {twice} steps ended twice after a kill",
        kills.len(),
        runs.len()
    );
}

conformance!(a_batch_of_10000_runs_its_callback_once_after_the_last_member, mysql);
async fn a_batch_of_10000_runs_its_callback_once_after_the_last_member(t: TestDb) {
    let mut batch = Batch::new("ten thousand");
    for _ in 0..10_000 {
        batch.add(&Node { wf: 0, step: 0, sleep_ms: 0 });
    }
    batch.on_finished(&Node { wf: 0, step: 9, sleep_ms: 0 });
    let txn = outbox::begin(&t.db).await.expect("begin");
    let enqueued = outbox::enqueue_workflow(&txn, &Workflow::from(batch)).await.expect("enqueue");
    txn.commit().await.expect("commit");
    let log = t.dir.path().join("batch.log");
    let mut children: Vec<ChildProcess> = (0..4).map(|_| spawn(&t, &log)).collect();
    for status in fleet::wait_all(&mut children, Duration::from_secs(240)).await {
        assert!(status.success(), "a worker process failed: {status}");
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 10_001);
    let runs = runs(&log);
    let callback: Vec<&Run> = runs.iter().filter(|r| r.seq == 9).collect();
    assert_eq!(callback.len(), 1, "the callback ran {} times", callback.len());
    let members: Vec<&Run> = runs.iter().filter(|r| r.seq == 0).collect();
    assert!(members.len() >= 10_000);
    assert!(last_seen(&members) < callback[0].begin, "the callback began before the last member ended");
    let pids: std::collections::HashSet<u32> = members.iter().map(|r| r.pid).collect();
    let id = enqueued.step("finished").expect("callback");
    let out: NodeOutput =
        serde_json::from_value(outbox::ops::get(&t.db, id).await.expect("get").output.expect("output"))
            .expect("output");
    assert_eq!(out.summary, [10_000, 0, 0, 0], "the callback's summary of its batch");
    eprintln!("10,000 members completed by {} processes; the callback ran once", pids.len());
}
