//! Periodic jobs across real processes: four worker processes share one every-second schedule and the
//! database lets exactly one of them enqueue each tick; after all of them stop while five ticks pass, the
//! missed-tick policy decides what the gap gets (skip: nothing; catch up: one job).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use outbox_tests::{ChildProcess, Signal, TestDb, conformance};
use sea_orm::{ConnectionTrait, Statement};

const PROCESSES: usize = 4;

/// Four `outbox-test-worker schedule` processes, each killed with its process group when the fleet is dropped
/// (a failed test leaves none running).
struct Fleet {
    children: Vec<ChildProcess>,
    stderrs: Vec<PathBuf>,
    ready: Vec<PathBuf>,
}

impl Fleet {
    fn start(t: &TestDb, run: &str, catch_up: bool) -> Fleet {
        let mut fleet = Fleet { children: Vec::new(), stderrs: Vec::new(), ready: Vec::new() };
        for i in 0..PROCESSES {
            let log = t.dir.path().join(format!("{run}-{i}.log"));
            let stderr = t.dir.path().join(format!("{run}-{i}.stderr"));
            let child = ChildProcess::spawn(
                Command::new(env!("CARGO_BIN_EXE_outbox-test-worker"))
                    .args([t.url.as_str(), log.to_str().expect("utf-8 path"), "schedule", "30000", "4"])
                    .env("OUTBOX_LOG", "info")
                    .env("OUTBOX_TEST_CATCH_UP", if catch_up { "1" } else { "0" })
                    .stderr(Stdio::from(std::fs::File::create(&stderr).expect("stderr file"))),
            );
            fleet.children.push(child);
            fleet.stderrs.push(stderr);
            fleet.ready.push(PathBuf::from(format!("{}.ready", log.display())));
        }
        fleet
    }

    /// Waits until every process built its worker; the earliest start (ms since the epoch).
    async fn started(&self) -> i64 {
        let ready =
            outbox_tests::eventually(Duration::from_secs(60), || async { self.ready.iter().all(|p| p.exists()) }).await;
        assert!(ready, "the workers did not start:\n{}", self.logs());
        self.ready
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p).expect("ready file");
                text.split_whitespace().nth(1).and_then(|ms| ms.parse().ok()).expect("start time")
            })
            .min()
            .expect("processes")
    }

    /// SIGTERM to all, then waits for each to exit cleanly.
    async fn stop(mut self) -> Vec<String> {
        for child in &self.children {
            child.signal(Signal::TERM);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for child in &mut self.children {
            loop {
                if let Some(status) = child.try_wait().expect("wait") {
                    assert!(status.success(), "a worker exited with {status}");
                    break;
                }
                assert!(tokio::time::Instant::now() < deadline, "a worker did not stop");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.stderrs.iter().map(|p| std::fs::read_to_string(p).unwrap_or_default()).collect()
    }

    fn logs(&self) -> String {
        self.stderrs.iter().map(|p| std::fs::read_to_string(p).unwrap_or_default()).collect::<Vec<_>>().join("\n")
    }
}

/// The ticks of the `ticked` jobs, ascending, with duplicates kept.
async fn ticks(t: &TestDb) -> Vec<i64> {
    let sql = format!("SELECT {} FROM outbox_jobs WHERE kind = 'ticked'", tick_expr(t));
    let rows = t.db.query_all_raw(Statement::from_string(t.db.get_database_backend(), sql)).await.expect("ticks");
    let mut ticks: Vec<i64> = rows.iter().map(|r| r.try_get_by_index(0).expect("tick")).collect();
    ticks.sort_unstable();
    ticks
}

fn tick_expr(t: &TestDb) -> &'static str {
    match t.backend {
        outbox_tests::Backend::Sqlite => "CAST(json_extract(payload, '$.tick_ms') AS INTEGER)",
        outbox_tests::Backend::Postgres => "(payload ->> 'tick_ms')::int8",
        outbox_tests::Backend::MySql => "CAST(JSON_EXTRACT(payload, '$.tick_ms') AS SIGNED)",
    }
}

/// Every tick once, and no tick missing between the first and the last.
fn assert_one_per_tick(ticks: &[i64], what: &str) {
    for pair in ticks.windows(2) {
        assert_ne!(pair[0], pair[1], "{what}: tick {} was enqueued twice: {ticks:?}", pair[0]);
        assert_eq!(pair[1] - pair[0], 1_000, "{what}: ticks missing between {} and {}: {ticks:?}", pair[0], pair[1]);
    }
}

/// The job ids the processes logged as enqueued for the latest of several due ticks (a catch-up).
fn catch_ups(stderrs: &[String]) -> Vec<String> {
    stderrs
        .iter()
        .flat_map(|s| s.lines())
        .filter(|l| l.contains("periodic job enqueued") && !l.contains("skipped_ticks=0"))
        .map(|l| {
            let at = l.find("job_id=").expect("job_id field") + "job_id=".len();
            l[at..].split_whitespace().next().expect("id").trim_matches('"').to_owned()
        })
        .collect()
}

/// Waits until at least `n` `ticked` jobs exist for ticks after `after`.
async fn wait_ticks(t: &TestDb, fleet: &Fleet, after: i64, n: usize) {
    let later = || async { ticks(t).await.into_iter().filter(|tick| *tick > after).collect::<Vec<_>>() };
    let enough = outbox_tests::eventually(Duration::from_secs(60), || async { later().await.len() >= n }).await;
    assert!(enough, "fewer than {n} ticks after {after}: {:?}\n{}", later().await, fleet.logs());
}

/// Waits, while no process runs, until the schedule has let `n` ticks after `last` pass: its next tick is
/// more than `n` periods after `last`.
async fn wait_missed(t: &TestDb, last: i64, n: i64) {
    let next = || async {
        let schedules = outbox::ops::schedules(&t.db).await.expect("schedules");
        schedules.first().and_then(|s| s.next_tick).map(|tick| tick.timestamp_millis())
    };
    let passed = outbox_tests::eventually(Duration::from_secs(60), || async {
        next().await.is_some_and(|next| next - last > n * 1_000)
    })
    .await;
    assert!(passed, "{n} ticks after {last} did not pass: the next tick is {:?}", next().await);
}

conformance!(four_processes_enqueue_one_job_per_tick_and_honour_the_missed_tick_policy, mysql);
async fn four_processes_enqueue_one_job_per_tick_and_honour_the_missed_tick_policy(t: TestDb) {
    // Four processes sharing the schedule for ten ticks.
    let fleet = Fleet::start(&t, "run1", false);
    fleet.started().await;
    wait_ticks(&t, &fleet, 0, 10).await;
    let logs = fleet.stop().await;
    let first = ticks(&t).await;
    assert_one_per_tick(&first, "four processes for ten ticks");
    assert!(catch_ups(&logs).is_empty(), "a first start has nothing to catch up");
    let last = *first.last().expect("ticks");

    // All stopped while five ticks pass, then restarted with missed ticks skipped: the gap gets nothing.
    wait_missed(&t, last, 5).await;
    let fleet = Fleet::start(&t, "run2", false);
    let restarted = fleet.started().await;
    wait_ticks(&t, &fleet, last, 3).await;
    let logs = fleet.stop().await;
    let second: Vec<i64> = ticks(&t).await.into_iter().filter(|tick| *tick > last).collect();
    assert_one_per_tick(&second, "after a restart that skips missed ticks");
    assert!(
        second[0] > restarted,
        "a missed tick got a job although they are skipped: {second:?} (restart at {restarted})"
    );
    assert!(second[0] - last >= 5_000, "the stop left no gap: {last} then {second:?}");
    assert!(catch_ups(&logs).is_empty());
    let last = *second.last().expect("ticks");

    // Stopped while five ticks pass again, restarted catching up: exactly one job for all the missed ticks.
    wait_missed(&t, last, 5).await;
    let fleet = Fleet::start(&t, "run3", true);
    fleet.started().await;
    wait_ticks(&t, &fleet, last, 3).await;
    let logs = fleet.stop().await;
    let third: Vec<i64> = ticks(&t).await.into_iter().filter(|tick| *tick > last).collect();
    assert_one_per_tick(&third, "after a restart that catches up");
    let caught = catch_ups(&logs);
    assert_eq!(caught.len(), 1, "one catch-up job across the four processes: {caught:?}");
    let job = outbox::ops::get(&t.db, &caught[0]).await.expect("the catch-up job");
    let tick = job.payload["tick_ms"].as_i64().expect("tick");
    assert_eq!(tick, third[0], "the catch-up job is the first after the gap: {third:?}");
    assert!(tick - last >= 5_000, "the catch-up job is for a missed tick: {last} then {tick}");
    let schedules = outbox::ops::schedules(&t.db).await.expect("schedules");
    assert_eq!(schedules.len(), 1);
    assert_eq!(schedules[0].missed, "catch_up");
    assert_eq!(schedules[0].last_tick.map(|t| t.timestamp_millis()), third.last().copied());
    assert!(schedules[0].next_tick.is_some());
}
