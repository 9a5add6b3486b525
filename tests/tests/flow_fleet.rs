//! Flow control across real worker processes: rates that hold fleet-wide in every one-second window and are used
//! to at least 95 %, per kind, per key and counted in cost; a queue paused while four processes drain it. Every
//! check reads the handlers' own begin lines (monotonic clock, `O_APPEND`).

#[allow(dead_code)]
mod fleet;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use fleet::Spawn;
use outbox::EnqueueOpts;
use outbox::flow::{self, Target};
use outbox_tests::{ChildProcess, FairWork, Metered, MeteredPerTenant, Paced, TestDb, Weighted, conformance, scalar};
use sea_orm::ConnectionTrait;

/// One handler start: its job, the number the log line carries (job number, tenant or cost), the kind's tag, its
/// process and when (ns).
#[derive(Debug, Clone)]
struct Start {
    value: u64,
    tag: u32,
    pid: u32,
    at: u64,
}

fn starts(log: &Path) -> Vec<Start> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out: Vec<Start> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [what, _id, value, tag, pid, at] = f.as_slice() else { panic!("malformed run line {line:?}") };
            (*what == "B").then(|| Start {
                value: value.parse().expect("value"),
                tag: tag.parse().expect("tag"),
                pid: pid.parse().expect("pid"),
                at: at.parse().expect("time"),
            })
        })
        .collect();
    out.sort_by_key(|s| s.at);
    out
}

/// The most units (`weight` of each start) that began in any one-second window, and the mean rate (units a second)
/// past the burst, from the first start to the last.
fn window_and_mean(starts: &[Start], weight: impl Fn(&Start) -> u64, burst: u64) -> (u64, f64) {
    let mut most = 0;
    for (i, s) in starts.iter().enumerate() {
        let sum: u64 = starts[i..].iter().take_while(|t| t.at < s.at + 1_000_000_000).map(&weight).sum();
        most = most.max(sum);
    }
    let total: u64 = starts.iter().map(&weight).sum();
    let span = (starts.last().map_or(0, |s| s.at) - starts.first().map_or(0, |s| s.at)) as f64 / 1e9;
    (most, (total - burst) as f64 / span)
}

fn spawn_fleet(url: &str, log: &Path, n: usize) -> Vec<ChildProcess> {
    (0..n)
        .map(|_| Spawn { url, log, mode: "drain+flow", lease_ms: 30_000, concurrency: 8, stderr: None }.start())
        .collect()
}

conformance!(rates_hold_fleet_wide_in_every_second_and_are_used_to_95_percent, mysql);
async fn rates_hold_fleet_wide_in_every_second_and_are_used_to_95_percent(t: TestDb) {
    // About 30 seconds of work at each rate: 20 jobs a second (burst 10), 20 a second for each of two tenants, and
    // 1,000 units a second (burst 200) of jobs costing 1 to 100.
    let metered: Vec<Metered> = (0..610).map(|n| Metered { n }).collect();
    let tenants: Vec<MeteredPerTenant> = (0..620).map(|n| MeteredPerTenant { tenant: n % 2 }).collect();
    let weighted: Vec<Weighted> = (0..600u64).map(|n| Weighted { cost: 1 + (n * 37) % 100 }).collect();
    outbox::enqueue_batch(&t.db, &metered, EnqueueOpts::new()).await.expect("enqueue");
    outbox::enqueue_batch(&t.db, &tenants, EnqueueOpts::new()).await.expect("enqueue");
    outbox::enqueue_batch(&t.db, &weighted, EnqueueOpts::new()).await.expect("enqueue");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("runs.log");
    let mut children = spawn_fleet(&t.url, &log, 4);
    for status in fleet::wait_all(&mut children, Duration::from_secs(240)).await {
        assert!(status.success(), "a worker process failed: {status}");
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status <> 'completed'").await, 0);
    // What the database enforces: the claims, at the time each claim drew from the bucket (its `claimed_at`).
    let (claimed_ms, integer) = match t.backend {
        outbox_tests::Backend::Sqlite => ("claimed_at", "BIGINT"),
        outbox_tests::Backend::MySql => ("claimed_at", "SIGNED"),
        outbox_tests::Backend::Postgres => ("(EXTRACT(EPOCH FROM claimed_at) * 1000)::int8", "BIGINT"),
    };
    let rows =
        t.db.query_all_raw(sea_orm::Statement::from_string(
            t.db.get_database_backend(),
            format!(
                "SELECT kind, COALESCE(flow_key, ''), CAST(COALESCE(cost, 1) AS {integer}), {claimed_ms} FROM outbox_jobs"
            ),
        ))
        .await
        .expect("claims");
    let mut claims: HashMap<(String, String), Vec<Start>> = HashMap::new();
    for r in rows {
        let (kind, key): (String, String) = (r.try_get_by_index(0).expect("kind"), r.try_get_by_index(1).expect("key"));
        let (cost, at): (i64, i64) = (r.try_get_by_index(2).expect("cost"), r.try_get_by_index(3).expect("at"));
        let start = Start { value: cost.unsigned_abs(), tag: 0, pid: 0, at: at.unsigned_abs() * 1_000_000 };
        claims.entry((kind, key)).or_default().push(start);
    }
    for ((kind, key), c) in &mut claims {
        c.sort_by_key(|s| s.at);
        let (rate, burst) = if kind == "weighted" { (1_000, 200) } else { (20, 10) };
        let (most, mean) = window_and_mean(c, |s| s.value, burst);
        eprintln!("claims of {kind} {key}: at most {most} units in a second, {mean:.2}/s");
        assert!(
            most <= rate + burst,
            "{kind} {key}: claims of at most {rate} + {burst} units in any second, not {most}"
        );
        assert!(mean >= 0.95 * rate as f64, "{kind} {key}: the rate is used to 95 % at least: {mean:.2}/s");
    }
    assert_eq!(claims.len(), 4, "one rate, one per tenant, one weighted: {:?}", claims.keys());
    // The handlers' starts follow their claims by a few milliseconds, more on a loaded machine (a second of starts
    // held 32 jobs under a full test run while its claims held 29): shown, and checked for what does not depend
    // on that delay.
    let all = starts(&log);
    let of = |tag: u32| -> Vec<Start> { all.iter().filter(|s| s.tag == tag).cloned().collect() };
    let pids = |s: &[Start]| s.iter().map(|s| s.pid).collect::<std::collections::HashSet<_>>().len();
    let m = of(1);
    assert_eq!(m.len(), 610, "every job ran once");
    let (most, mean) = window_and_mean(&m, |_| 1, 10);
    eprintln!("metered starts: {} jobs over {} processes, at most {most} in a second, {mean:.2}/s", m.len(), pids(&m));
    assert!(pids(&m) > 1, "the fleet shared the work");
    let per: HashMap<u64, Vec<Start>> = of(2).into_iter().fold(HashMap::new(), |mut acc, s| {
        acc.entry(s.value).or_default().push(s);
        acc
    });
    assert_eq!(per.values().map(Vec::len).collect::<Vec<_>>(), [310, 310], "every job of each tenant ran once");
    let w = of(3);
    assert_eq!(w.len(), 600, "every weighted job ran once");
    let (most, mean) = window_and_mean(&w, |s| s.value, 200);
    eprintln!("weighted starts: at most {most} units in a second, {mean:.0} units/s");
}

conformance!(a_paused_queue_stops_a_draining_fleet_and_survives_its_restart, mysql);
async fn a_paused_queue_stops_a_draining_fleet_and_survives_its_restart(t: TestDb) {
    // Jobs that each take 50 ms, 4 processes of 4 slots: about 6 seconds of work for the fleet, so the pause lands
    // mid-drain even when the test's own process is slow to see the first 200 done (with 20 ms jobs, a run beside
    // the other fleet tests once finished all 2,000 before the pause).
    let jobs: Vec<Paced> = (0..2_000).map(|n| Paced { n, sleep_ms: 50 }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("runs.log");
    let serve =
        |log: &Path| Spawn { url: &t.url, log, mode: "serve", lease_ms: 30_000, concurrency: 4, stderr: None }.start();
    let mut children: Vec<ChildProcess> = (0..4).map(|_| serve(&log)).collect();
    let done = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'";
    assert!(outbox_tests::wait_scalar_at_least(&t.db, done, 200, Duration::from_secs(60)).await, "the fleet started");
    flow::pause(&t.db, &Target::queue("bulk"), Some("test")).await.expect("pause");
    let paused_at = outbox_tests::monotonic_ns();
    // Running jobs finish; nothing starts after the claims in flight when the pause landed.
    let running = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed'";
    assert!(outbox_tests::wait_scalar(&t.db, running, 0, Duration::from_secs(30)).await, "running jobs finished");
    // A claim already running when the pause committed may still start its jobs; nothing later does.
    let after: Vec<Start> = starts(&log).into_iter().filter(|s| s.tag == 4 && s.at > paused_at + 500_000_000).collect();
    assert!(after.is_empty(), "jobs of the paused queue started after the pause: {after:?}");
    let completed = scalar(&t.db, done).await;
    assert!(completed < 2_000, "the pause stopped the drain ({completed} of 2,000 done)");
    // Every worker restarts; the pause holds.
    for mut child in children.drain(..) {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut children: Vec<ChildProcess> = (0..4).map(|_| serve(&log)).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(scalar(&t.db, done).await, completed, "the pause survived the restart of every worker");
    let resumed_at = std::time::Instant::now();
    assert!(flow::resume(&t.db, &Target::queue("bulk")).await.expect("resume"));
    assert!(outbox_tests::wait_scalar_at_least(&t.db, done, completed + 1, Duration::from_secs(30)).await);
    eprintln!("the first job after the resume completed {:?} after it", resumed_at.elapsed());
    for status in fleet::wait_all(&mut children, Duration::from_secs(120)).await {
        assert!(status.success(), "a worker process failed: {status}");
    }
    assert_eq!(scalar(&t.db, done).await, 2_000);
}

conformance!(a_late_tenant_is_served_at_once_in_proportion_to_its_weight, mysql);
async fn a_late_tenant_is_served_at_once_in_proportion_to_its_weight(t: TestDb) {
    // Tenant 0 enqueues 10,000 jobs and four processes drain them; tenant 1 then enqueues 100. With equal weights its
    // 100 finish within the time about 200 jobs take; at weight 3, about 133.
    for (weight, most) in [(1u32, 240usize), (3, 175)] {
        outbox_tests::exec(&t.db, "DELETE FROM outbox_jobs", vec![]).await;
        outbox::flow::set_weight(&t.db, "fair_work", "1", weight).await.expect("weight");
        let a: Vec<FairWork> = (0..10_000).map(|n| FairWork { tenant: 0, n }).collect();
        outbox::enqueue_batch(&t.db, &a, EnqueueOpts::new()).await.expect("enqueue a");
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("runs.log");
        let mut children = spawn_fleet(&t.url, &log, 4);
        let done = "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'";
        assert!(outbox_tests::wait_scalar_at_least(&t.db, done, 1_000, Duration::from_secs(60)).await, "a started");
        let b: Vec<FairWork> = (0..100).map(|n| FairWork { tenant: 1, n }).collect();
        outbox::enqueue_batch(&t.db, &b, EnqueueOpts::new()).await.expect("enqueue b");
        // B arrives when its jobs commit: on SQLite the enqueue may first wait its turn behind the fleet's writes.
        let arrived = outbox_tests::monotonic_ns();
        for status in fleet::wait_all(&mut children, Duration::from_secs(240)).await {
            assert!(status.success(), "a worker process failed: {status}");
        }
        let starts: Vec<Start> = starts(&log).into_iter().filter(|s| s.tag == 5).collect();
        assert_eq!(starts.len(), 10_100, "every job ran once");
        let last_b = starts.iter().filter(|s| s.value == 1).map(|s| s.at).max().expect("b ran");
        let between = starts.iter().filter(|s| s.at >= arrived && s.at <= last_b).count();
        let of_a = starts.iter().filter(|s| s.value == 0 && s.at >= arrived && s.at <= last_b).count();
        eprintln!("weight {weight}: b's 100 jobs ran within {between} starts ({of_a} of a's)");
        assert!(between <= most, "weight {weight}: b's 100 jobs took {between} starts, over {most}");
    }
}
