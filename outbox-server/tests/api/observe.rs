//! Health, the worker registry, metrics and the remote-worker routes.

use std::time::Duration;

use outbox::{EnqueueOpts, JobError, Worker};
use outbox_tests::{Probe, TestDb, conformance, eventually, exec};
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{READ, Server, WORK};

async fn work(server: &Server, path: &str, body: Value) -> crate::harness::Answer {
    server.send(server.request(Method::POST, path, Some(WORK)).json(&body)).await
}

conformance!(health_tells_when_the_schema_is_not_current, mysql);
async fn health_tells_when_the_schema_is_not_current(t: TestDb) {
    let server = Server::start(&t).await;
    let health = server.send(server.request(Method::GET, "/api/health", None)).await;
    let body = health.ok(200);
    assert_eq!((body["status"].as_str(), body["migrations"]["current"].as_bool()), (Some("ok"), Some(true)));
    assert_eq!(body["workers"], 0);
    exec(&t.db, "DELETE FROM outbox_migrations", vec![]).await;
    let health = server.send(server.request(Method::GET, "/api/health", None)).await;
    assert_eq!(health.status, 503, "{:?}", health.body);
    assert_eq!(health.body["status"], "unhealthy");
    assert_eq!(health.body["migrations"]["pending"], json!(["001_schema", "002_flow", "003_subject", "004_workflow"]));
}

conformance!(workers_and_metrics_show_the_fleet, mysql);
async fn workers_and_metrics_show_the_fleet(t: TestDb) {
    let server = Server::start(&t).await;
    for n in 1..=5 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let handle = Worker::builder(&t.db)
        .id("metrics-worker")
        .presence_interval(Duration::from_millis(100))
        .poll_interval(Duration::from_millis(20))
        .register(|_: Probe, _| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    // The counters follow the feed on a task of their own and the gauges are read at the scrape, so one scrape can
    // show the feed's count ahead of the table's: wait until every line holds.
    let expected = [
        r#"outbox_jobs_completed_total{kind="probe",queue="default"} 5"#,
        r#"outbox_jobs{kind="probe",status="completed"} 5"#,
        r#"outbox_queue_jobs{queue="default",state="completed"} 5"#,
        "outbox_workers 1",
        "# TYPE outbox_job_duration_seconds histogram",
        r#"outbox_job_duration_seconds_count{kind="probe"} 5"#,
        "# TYPE outbox_oldest_pending_age_seconds gauge",
    ];
    let missing = |text: &str| -> Vec<&str> {
        expected
            .iter()
            .copied()
            .filter(|line| !text.lines().any(|l| l == *line || l.starts_with(&format!("{line} "))))
            .collect()
    };
    let mut listed = false;
    let mut text = String::new();
    for _ in 0..100 {
        let workers = server.get("/api/workers").await;
        listed = workers.ok(200)["workers"].as_array().is_some_and(|w| w.iter().any(|w| w["id"] == "metrics-worker"));
        let response = server.request(Method::GET, "/metrics", Some(READ)).send().await.expect("metrics");
        assert_eq!(response.status(), 200);
        let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
        text = response.text().await.expect("text");
        if listed && missing(&text).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handle.shutdown().await.expect("shutdown");
    assert!(listed, "the worker was never listed");
    assert_eq!(missing(&text), Vec::<&str>::new(), "in:\n{text}");
}

conformance!(schedules_and_reconciliations_are_served, mysql);
async fn schedules_and_reconciliations_are_served(t: TestDb) {
    let server = Server::start(&t).await;
    assert_eq!(server.get("/api/schedules").await.ok(200), &json!({"schedules": []}));
    let schedule = outbox::Schedule::every("probe-every-200ms", Duration::from_millis(200), |tick| Probe {
        n: u64::try_from(tick.timestamp_millis()).unwrap_or(1),
    });
    let handle = Worker::builder(&t.db)
        .schedule(schedule)
        .on_start("record a reconciliation", |db, worker| async move {
            let record = outbox::ReconciliationRecord::new("fs", Some(worker), json!({"missing": 2}));
            outbox::ops::record_reconciliation(&db, &record).await
        })
        .register(|_: Probe, _| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    let mut listed = Value::Null;
    for _ in 0..100 {
        listed = server.get("/api/schedules").await.ok(200).clone();
        if listed["schedules"][0]["last_job_id"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await.expect("shutdown");
    let entry = &listed["schedules"][0];
    assert_eq!(entry["name"], "probe-every-200ms", "{listed}");
    assert_eq!((entry["kind"].as_str(), entry["spec"].as_str()), (Some("probe"), Some("every 200ms")));
    assert!(entry["last_tick"].is_string() && entry["next_tick"].is_string(), "{listed}");
    let job = entry["last_job_id"].as_str().expect("a tick's job");
    assert_eq!(server.get(&format!("/api/jobs/{job}")).await.ok(200)["job"]["kind"], "probe");
    let stats = server.get("/api/stats").await.ok(200).clone();
    assert_eq!(stats["reconciliations"][0]["reconciler"], "fs", "{stats}");
    assert_eq!(stats["reconciliations"][0]["report"]["missing"], 2, "{stats}");
}

conformance!(a_claim_that_waits_returns_the_job_enqueued_while_it_waits, mysql);
async fn a_claim_that_waits_returns_the_job_enqueued_while_it_waits(t: TestDb) {
    let server = std::sync::Arc::new(Server::start(&t).await);
    let body = json!({"worker": "waiting-1", "kinds": ["probe"], "limit": 5, "wait": "20s"});
    let claim = tokio::spawn({
        let server = std::sync::Arc::clone(&server);
        async move { work(&server, "/api/work/claim", body).await }
    });
    // The claim records its worker before it looks for jobs: once it shows, the queue was empty when it
    // looked, and only waiting can hand it the job enqueued next.
    let registered = eventually(Duration::from_secs(20), || async {
        outbox::ops::workers(&t.db).await.expect("workers").iter().any(|w| w.id == "waiting-1")
    })
    .await;
    assert!(registered, "the waiting claim never registered its worker");
    assert!(!claim.is_finished(), "the claim returned before anything was enqueued");
    let job = outbox::enqueue(&t.db, &Probe { n: 7 }, EnqueueOpts::new()).await.expect("enqueue");
    let answer = claim.await.expect("claim task");
    let jobs = answer.ok(200)["jobs"].as_array().expect("jobs").clone();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["id"].as_str(), Some(job.id()));
    let empty = work(&server, "/api/work/claim", json!({"worker": "w", "kinds": ["probe"], "wait": "50ms"})).await;
    assert_eq!(empty.ok(200)["jobs"], json!([]));
    let bad = work(&server, "/api/work/claim", json!({"worker": "w", "kinds": ["probe"], "wait": "6m"})).await;
    assert!(bad.error(400, "invalid_request").contains("wait"));
    let bad = work(&server, "/api/work/claim", json!({"worker": "w", "kinds": ["probe"], "wait": "soon"})).await;
    assert!(bad.error(400, "invalid_request").contains("`wait`"));
}

conformance!(a_remote_worker_claims_heartbeats_and_finishes_over_http, mysql);
async fn a_remote_worker_claims_heartbeats_and_finishes_over_http(t: TestDb) {
    let server = Server::start(&t).await;
    for n in 1..=3 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    let claim =
        work(&server, "/api/work/claim", json!({"worker": "w1", "kinds": ["probe"], "limit": 3, "lease": "30s"})).await;
    let jobs = claim.ok(200)["jobs"].as_array().expect("jobs").clone();
    assert_eq!(jobs.len(), 3);
    let id = |i: usize| jobs[i]["id"].as_str().expect("id").to_owned();
    let beat =
        work(&server, &format!("/api/work/jobs/{}/heartbeat", id(0)), json!({"worker": "w1", "run": 1, "lease": "5m"}))
            .await;
    assert!(beat.ok(200)["lease_expires_at"].is_string());
    let done = work(
        &server,
        &format!("/api/work/jobs/{}/complete", id(0)),
        json!({"worker": "w1", "run": 1, "output": {"ok": 1}}),
    )
    .await;
    assert_eq!(done.ok(200)["status"], "completed");
    let stale = work(&server, &format!("/api/work/jobs/{}/complete", id(0)), json!({"worker": "w1", "run": 1})).await;
    assert!(stale.error(409, "stale_claim").contains(&id(0)));
    let beat = work(&server, &format!("/api/work/jobs/{}/heartbeat", id(0)), json!({"worker": "w1", "run": 1})).await;
    beat.error(409, "stale_claim");
    let failed = work(
        &server,
        &format!("/api/work/jobs/{}/fail", id(1)),
        json!({"worker": "w1", "run": 1, "error": "boom", "retryable": false}),
    )
    .await;
    assert_eq!(failed.ok(200)["status"], "failed");
    let snoozed =
        work(&server, &format!("/api/work/jobs/{}/snooze", id(2)), json!({"worker": "w1", "run": 1, "delay": "1h"}))
            .await;
    assert_eq!(snoozed.ok(200)["status"], "pending");
    let job = server.get(&format!("/api/jobs/{}", id(1))).await;
    assert_eq!(
        (job.ok(200)["job"]["status"].as_str(), job.body["job"]["last_error"].as_str()),
        (Some("failed"), Some("boom"))
    );
    // Bad calls name the field at fault.
    let bad = work(&server, "/api/work/claim", json!({"worker": "w1", "kinds": ["probe"], "lease": "forever"})).await;
    assert!(bad.error(400, "invalid_request").contains("`lease`"));
    let bad = work(&server, "/api/work/claim", json!({"worker": "w1", "kinds": [], "limit": 3})).await;
    assert!(bad.error(400, "invalid_request").contains("at least one kind"));
    let bad = work(&server, "/api/work/claim", json!({"worker": "w1", "kinds": ["probe"], "limit": 100000})).await;
    assert!(bad.error(400, "invalid_request").contains("limit"));
    let bad =
        work(&server, &format!("/api/work/jobs/{}/fail", id(2)), json!({"worker": "w1", "run": 1, "error": " "})).await;
    assert!(bad.error(400, "invalid_request").contains("`error`"));
    let listed = server.get("/api/workers").await;
    let w1 = listed.ok(200)["workers"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["id"] == "w1").cloned())
        .expect("w1 listed");
    assert_eq!((w1["remote"].as_bool(), w1["kinds"].clone()), (Some(true), json!(["probe"])));
}
