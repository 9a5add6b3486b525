//! `GET /api/events` against a real server on a loopback port, on every backend: every event of every job
//! once, in order; a client that reconnects with `Last-Event-ID` gets exactly what it missed; events
//! written by a worker in another process arrive.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use outbox::{EnqueueOpts, JobError, Worker, ops};
use outbox_server::ServerOpts;
use outbox_tests::{GroupGuard, Probe, Race, Served, SseEvent, SseReader, TestDb, conformance};

// 3 events a job: more than one page of the feed (500) in each test that reads them all.
const JOBS: u64 = 300;
/// What the reconnecting client reads before it hangs up: part of the first half's events.
const FIRST: usize = 3 * JOBS as usize / 4;
const WAIT: Duration = Duration::from_secs(30);

fn opts() -> ServerOpts {
    ServerOpts::new().events_poll(Duration::from_millis(50))
}

async fn enqueue_probes(t: &TestDb, from: u64, n: u64) {
    let jobs: Vec<Probe> = (from..from + n).map(|n| Probe { n }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
}

async fn drain(t: &TestDb) {
    Worker::builder(&t.db)
        .concurrency(16)
        .poll_interval(Duration::from_millis(20))
        .register(|_: Probe, _| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .drain()
        .await
        .expect("drain");
}

/// Reads events until `n` have arrived (or the wait runs out).
async fn read(reader: &mut SseReader, n: usize) -> Vec<SseEvent> {
    let mut events = Vec::with_capacity(n);
    while events.len() < n {
        match reader.next(WAIT).await {
            Some(e) => events.push(e),
            None => break,
        }
    }
    events
}

/// Every job's events in order, each once: enqueued, claimed, completed.
fn check_lifecycles(events: &[SseEvent], jobs: usize) {
    let ids: HashSet<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), events.len(), "no event twice");
    let mut by_job: HashMap<String, Vec<String>> = HashMap::new();
    for e in events {
        let data = e.json();
        assert_eq!(data["id"].as_str(), Some(e.id.as_str()), "the data carries the event id");
        assert_eq!(data["event"].as_str(), Some(e.event.as_str()));
        by_job.entry(data["job_id"].as_str().expect("job id").to_owned()).or_default().push(e.event.clone());
    }
    assert_eq!(by_job.len(), jobs, "every job");
    for (job, seen) in by_job {
        assert_eq!(seen, ["enqueued", "claimed", "completed"], "job {job}");
    }
}

conformance!(a_client_receives_every_event_of_a_thousand_jobs_once, mysql);
async fn a_client_receives_every_event_of_a_thousand_jobs_once(t: TestDb) {
    let served = Served::start(&t.db, opts()).await;
    let mut reader = SseReader::open(&served.url("/api/events"), &[]).await;
    enqueue_probes(&t, 1, JOBS).await;
    drain(&t).await;
    let events = read(&mut reader, 3 * JOBS as usize).await;
    assert_eq!(events.len(), 3 * JOBS as usize, "events missing");
    check_lifecycles(&events, JOBS as usize);
    assert!(reader.next(Duration::from_millis(300)).await.is_none(), "nothing more");
    // The stream is the feed: the same ids in the same order.
    let feed = ops::feed(&t.db, &events[0].id, 10_000).await.expect("feed");
    assert_eq!(
        feed.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        events[1..].iter().map(|e| e.id.as_str()).collect::<Vec<_>>()
    );
}

conformance!(a_client_that_reconnects_with_last_event_id_gets_exactly_what_it_missed, mysql);
async fn a_client_that_reconnects_with_last_event_id_gets_exactly_what_it_missed(t: TestDb) {
    let served = Served::start(&t.db, opts()).await;
    let start = ops::feed_head(&t.db).await.expect("head");
    let mut reader = SseReader::open(&served.url(&format!("/api/events?after={start}")), &[]).await;
    enqueue_probes(&t, 1, JOBS / 2).await;
    let worker = tokio::spawn({
        let t2 = t.db.clone();
        async move {
            Worker::builder(&t2)
                .concurrency(8)
                .poll_interval(Duration::from_millis(20))
                .register(|_: Probe, _| async {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    Ok::<_, JobError>(())
                })
                .build()
                .await
                .expect("build")
                .drain()
                .await
                .expect("drain")
        }
    });
    // Mid-run: read some, hang up, let more happen, then resume.
    let first = read(&mut reader, FIRST).await;
    assert_eq!(first.len(), FIRST);
    drop(reader);
    enqueue_probes(&t, JOBS, JOBS / 2).await;
    worker.await.expect("worker");
    drain(&t).await;
    let last = first.last().expect("some").id.clone();
    let mut resumed = SseReader::open(&served.url("/api/events"), &[("last-event-id", &last)]).await;
    let rest = read(&mut resumed, 3 * JOBS as usize - FIRST).await;
    assert!(resumed.next(Duration::from_millis(300)).await.is_none(), "nothing more after the missed events");
    let all: Vec<SseEvent> = first.into_iter().chain(rest).collect();
    check_lifecycles(&all, JOBS as usize);
    let feed = ops::feed(&t.db, &start, 10_000).await.expect("feed");
    assert_eq!(
        all.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        feed.iter().map(|e| e.id.as_str()).collect::<Vec<_>>()
    );

    // A position this database cannot have written is refused with 400 naming the header.
    let resp = outbox_tests::http_client()
        .get(served.url("/api/events"))
        .header("last-event-id", "not an id")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert!(body["message"].as_str().unwrap_or("").contains("Last-Event-ID"), "{body}");
    // Filters narrow the stream.
    let mut only =
        SseReader::open(&served.url(&format!("/api/events?after={start}&event=completed&kind=probe")), &[]).await;
    let completed = read(&mut only, JOBS as usize).await;
    assert_eq!(completed.len(), JOBS as usize);
    assert!(completed.iter().all(|e| e.event == "completed"));
    let resp = outbox_tests::http_client().get(served.url("/api/events?event=exploded")).send().await.expect("send");
    assert_eq!(resp.status(), 400);
}

conformance!(events_written_by_a_worker_in_another_process_arrive, mysql);
async fn events_written_by_a_worker_in_another_process_arrive(t: TestDb) {
    let served = Served::start(&t.db, opts()).await;
    let mut reader = SseReader::open(&served.url("/api/events?kind=race&event=completed"), &[]).await;
    let jobs: Vec<Race> = (1..=200).map(|n| Race { n, sleep_ms: 0 }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("runs.log");
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox-test-worker"))
        .args([t.url.as_str(), log.to_str().expect("utf-8 path"), "drain", "60000"])
        .process_group(0)
        .spawn()
        .expect("spawn the worker process");
    // Kills the worker's process group if the test fails before it exits.
    let _group = GroupGuard::new(worker.id().expect("the worker's pid"));
    let status = tokio::time::timeout(Duration::from_secs(120), worker.wait()).await;
    let status = status.expect("the worker process did not drain within 120 s").expect("wait for the worker process");
    assert!(status.success(), "the worker process failed: {status}");
    let events = read(&mut reader, 200).await;
    assert_eq!(events.len(), 200, "every completion from the other process");
    let runs = std::fs::read_to_string(&log).expect("run log");
    let pids: HashSet<&str> = runs.lines().filter_map(|l| l.split(' ').nth(3)).collect();
    assert!(!pids.contains(std::process::id().to_string().as_str()), "ran in another process");
    let workers: HashSet<String> =
        events.iter().filter_map(|e| e.json()["worker"].as_str().map(str::to_owned)).collect();
    assert_eq!(workers.len(), 1, "{workers:?}");
}
