//! The job routes: enqueue, read back, list and page, act on jobs.

use outbox::{EnqueueOpts, ops};
use outbox_tests::{Probe, TestDb, conformance, exec};
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::Server;

conformance!(enqueue_deduplicates_and_reads_back, mysql);
async fn enqueue_deduplicates_and_reads_back(t: TestDb) {
    let server = Server::start(&t).await;
    let first = server.enqueue(json!({"kind": "probe", "payload": {"n": 1}})).await;
    let id = first.ok(201)["id"].as_str().expect("id").to_owned();
    assert_eq!(first.body["created"], true);

    // The same intent while the first is pending: its id, nothing written.
    let again = server.enqueue(json!({"kind": "probe", "payload": {"n": 1}})).await;
    assert_eq!(again.ok(200), &json!({"id": id, "created": false}));
    assert_eq!(ops::list(&t.db, &Default::default()).await.expect("list").len(), 1);

    let got = server.get(&format!("/api/jobs/{id}")).await;
    let job = &got.ok(200)["job"];
    assert_eq!(
        (job["id"].as_str(), job["kind"].as_str(), job["status"].as_str()),
        (Some(&*id), Some("probe"), Some("pending"))
    );
    assert_eq!(job["payload"], json!({"n": 1}));
    assert!(chrono::DateTime::parse_from_rfc3339(job["created_at"].as_str().expect("time")).is_ok(), "{job}");
    assert_eq!(got.body["history"][0]["event"], "enqueued");

    // Options: queue, priority, key, max attempts, sequence, delay or run_at.
    let delayed = server
        .enqueue(json!({
            "kind": "probe", "payload": {"n": 2}, "queue": "slow", "priority": -5, "delay": "10m",
            "max_attempts": 9, "key": "k-2", "sequence": "seq:a",
        }))
        .await;
    let delayed_id = delayed.ok(201)["id"].as_str().expect("id").to_owned();
    let job = ops::get(&t.db, &delayed_id).await.expect("get");
    assert_eq!((job.queue.as_str(), job.priority, job.max_attempts), ("slow", -5, 9));
    assert_eq!((job.idempotency_key.as_deref(), job.sequence_key.as_deref()), (Some("k-2"), Some("seq:a")));
    let ahead = job.run_at - chrono::Utc::now();
    assert!(ahead > chrono::TimeDelta::minutes(9) && ahead <= chrono::TimeDelta::minutes(10), "{ahead}");
    let at = server.enqueue(json!({"kind": "probe", "payload": {"n": 3}, "run_at": "2100-01-02T03:04:05+01:00"})).await;
    let job = ops::get(&t.db, at.ok(201)["id"].as_str().expect("id")).await.expect("get");
    assert_eq!(job.run_at.to_rfc3339(), "2100-01-02T02:04:05+00:00");

    // Unknown ids are 404 `not_found`.
    let missing = server.get("/api/jobs/no-such-job").await;
    assert!(missing.error(404, "not_found").contains("no-such-job"));
}

conformance!(enqueue_refusals_name_what_is_wrong, mysql);
async fn enqueue_refusals_name_what_is_wrong(t: TestDb) {
    let server = Server::start(&t).await;
    // Every violation, each with its JSON path.
    let invalid = server.enqueue(json!({"kind": "probe", "payload": {"n": 0, "extra": true}})).await;
    invalid.error(422, "invalid_payload");
    let violations = invalid.body["violations"].as_array().expect("violations");
    let paths: Vec<&str> = violations.iter().map(|v| v["path"].as_str().expect("path")).collect();
    assert!(paths.contains(&"/n"), "{violations:?}");
    assert!(violations.iter().all(|v| v["message"].as_str().is_some_and(|m| !m.is_empty())));
    let missing = server.enqueue(json!({"kind": "probe", "payload": {}})).await;
    assert_eq!(missing.body["violations"][0]["path"], "/n", "{:?}", missing.body);

    // An unknown kind names every known one.
    let unknown = server.enqueue(json!({"kind": "nope", "payload": {}})).await;
    let message = unknown.error(404, "unknown_kind");
    assert!(message.contains("unknown kind `nope`") && message.contains("probe"), "{message}");

    // Bad options: 400 naming the field.
    for (body, names) in [
        (json!({"kind": "probe", "payload": {"n": 1}, "delay": "soon"}), "`delay`"),
        (json!({"kind": "probe", "payload": {"n": 1}, "delay": "100000000d"}), "year 9999"),
        (json!({"kind": "probe", "payload": {"n": 1}, "run_at": "tomorrow"}), "`run_at`"),
        (json!({"kind": "probe", "payload": {"n": 1}, "delay": "1s", "run_at": "2100-01-01T00:00:00Z"}), "not both"),
        (json!({"kind": "probe", "payload": {"n": 1}, "queue": ""}), "queue name is empty"),
        (json!({"kind": "probe", "payload": {"n": 1}, "max_attempts": 0}), "max_attempts"),
        (json!({"kind": "probe", "payload": {"n": 1}, "key": ""}), "idempotency key is empty"),
    ] {
        let answer = server.enqueue(body.clone()).await;
        let message = answer.error(400, "invalid_request");
        assert!(message.contains(names), "{body}: {message}");
    }
    assert!(ops::list(&t.db, &Default::default()).await.expect("list").is_empty(), "nothing was written");
}

conformance!(lists_filter_and_page_by_id, mysql);
async fn lists_filter_and_page_by_id(t: TestDb) {
    let server = Server::start(&t).await;
    let mut ids = Vec::new();
    for n in 1..=5 {
        let opts = EnqueueOpts::new().queue(if n % 2 == 0 { "even" } else { "odd" });
        ids.push(outbox::enqueue(&t.db, &Probe { n }, opts).await.expect("enqueue").id().to_owned());
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    let listed = |answer: &crate::harness::Answer| -> Vec<String> {
        let jobs = answer.ok(200)["jobs"].as_array().expect("jobs").clone();
        jobs.iter().map(|j| j["id"].as_str().expect("id").to_owned()).collect()
    };

    let all = server.get("/api/jobs").await;
    assert_eq!(listed(&all), newest_first);
    assert_eq!(all.body["next"], Value::Null, "a short page is the last");

    // Pages of two: `next` is the last id of a full page, and `before` continues after it. Jobs enqueued
    // while paging land before the first page: the pages neither repeat nor skip a job.
    let mut seen = Vec::new();
    let mut path = "/api/jobs?limit=2".to_owned();
    let mut inserted = 100;
    loop {
        let page = server.get(&path).await;
        seen.extend(listed(&page));
        inserted += 1;
        outbox::enqueue(&t.db, &Probe { n: inserted }, EnqueueOpts::new()).await.expect("enqueue");
        match page.body["next"].as_str() {
            Some(next) => path = format!("/api/jobs?limit=2&before={next}"),
            None => break,
        }
    }
    assert_eq!(seen, newest_first);
    exec(&t.db, "DELETE FROM outbox_jobs WHERE id > ?", vec![ids[4].clone().into()]).await;

    let odd = server.get("/api/jobs?queue=odd&kind=probe&status=pending&since=1h&limit=1000").await;
    assert_eq!(listed(&odd), [ids[4].clone(), ids[2].clone(), ids[0].clone()]);
    let keyed =
        outbox::enqueue(&t.db, &Probe { n: 9 }, EnqueueOpts::new().idempotency_key("the key")).await.expect("enqueue");
    assert_eq!(listed(&server.get("/api/jobs?key=the%20key").await), [keyed.id().to_owned()]);
    assert!(listed(&server.get("/api/jobs?status=failed").await).is_empty());
    assert!(listed(&server.get("/api/jobs?since=2999-01-01T00:00:00Z").await).is_empty());
    // Empty parameters, as forms send them, count as not given.
    assert_eq!(listed(&server.get("/api/jobs?status=&kind=&limit=").await).len(), 6);
}

conformance!(actions_follow_the_lifecycle, mysql);
async fn actions_follow_the_lifecycle(t: TestDb) {
    let server = Server::start(&t).await;
    let id = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    let act = |action: &str| format!("/api/jobs/{id}/{action}");

    // A pending job cannot be retried or deleted.
    server.operate(Method::POST, &act("retry"), None).await.error(409, "conflict");
    let refused = server.operate(Method::DELETE, &format!("/api/jobs/{id}"), None).await;
    assert!(refused.error(409, "conflict").contains("its status is `pending`"));

    let cancelled = server.operate(Method::POST, &act("cancel"), None).await;
    assert_eq!(cancelled.ok(200)["job"]["status"], "cancelled");
    server.operate(Method::POST, &act("cancel"), None).await.error(409, "conflict");

    let retried = server.operate(Method::POST, &act("retry"), None).await;
    assert_eq!(
        (retried.ok(200)["job"]["status"].as_str(), retried.body["job"]["attempts"].as_i64()),
        (Some("pending"), Some(0))
    );

    // A finished job is deleted, history and all.
    exec(&t.db, "UPDATE outbox_jobs SET status = 'completed' WHERE id = ?", vec![id.clone().into()]).await;
    let deleted = server.operate(Method::DELETE, &format!("/api/jobs/{id}"), None).await;
    assert_eq!(deleted.ok(200), &json!({"deleted": id}));
    server.get(&format!("/api/jobs/{id}")).await.error(404, "not_found");
    for (method, path) in
        [(Method::POST, act("retry")), (Method::POST, act("cancel")), (Method::DELETE, format!("/api/jobs/{id}"))]
    {
        server.operate(method, &path, None).await.error(404, "not_found");
    }

    // Retry every failed job, or those of one kind; the body is optional.
    let mut failed = Vec::new();
    for n in 2..=4 {
        let job = outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
        exec(&t.db, "UPDATE outbox_jobs SET status = 'failed' WHERE id = ?", vec![job.id().into()]).await;
        failed.push(job);
    }
    let other_kind = server.operate(Method::POST, "/api/jobs/retry-failed", Some(json!({"kind": "other"}))).await;
    assert_eq!(other_kind.ok(200), &json!({"retried": 0}));
    let of_kind = server.operate(Method::POST, "/api/jobs/retry-failed", Some(json!({"kind": "probe"}))).await;
    assert_eq!(of_kind.ok(200), &json!({"retried": 3}));
    exec(&t.db, "UPDATE outbox_jobs SET status = 'failed' WHERE id = ?", vec![failed[0].id().into()]).await;
    let bare = server.operate(Method::POST, "/api/jobs/retry-failed", None).await;
    assert_eq!(bare.ok(200), &json!({"retried": 1}));
}

conformance!(subjects_list_cancel_and_retry_a_row_s_jobs, mysql);
/// A subject given on `POST /api/jobs` or derived by a recorded kind's template; `GET /api/jobs?subject=` lists that
/// subject's jobs alone; `cancel-subject` and `retry-subject` act on them; a subject no job could carry is a 400
/// naming the field or parameter, with nothing written.
async fn subjects_list_cancel_and_retry_a_row_s_jobs(t: TestDb) {
    let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}});
    let opts = outbox::KindOpts { subject: Some("order:{id}"), ..outbox::KindOpts::DEFAULT };
    let kind = outbox::Kind::from_schema("order.confirm", schema, opts).expect("kind");
    ops::record_kind(&t.db, &kind, "elsewhere").await.expect("record the kind");
    let server = Server::start(&t).await;
    let derived = server.enqueue(json!({"kind": "order.confirm", "payload": {"id": 7}})).await;
    let derived = derived.ok(201)["id"].as_str().expect("id").to_owned();
    assert_eq!(ops::get(&t.db, &derived).await.expect("get").subject.as_deref(), Some("order:7"), "from the template");
    let given = server.enqueue(json!({"kind": "probe", "payload": {"n": 1}, "subject": "order:7"})).await;
    given.ok(201);
    server.enqueue(json!({"kind": "probe", "payload": {"n": 2}, "subject": "order:8"})).await.ok(201);

    let listed = server.get("/api/jobs?subject=order:7").await;
    let subjects: Vec<&str> =
        listed.ok(200)["jobs"].as_array().expect("jobs").iter().map(|j| j["subject"].as_str().expect("s")).collect();
    assert_eq!(subjects, ["order:7", "order:7"]);

    let cancelled = server.operate(Method::POST, "/api/jobs/cancel-subject", Some(json!({"subject": "order:7"}))).await;
    assert_eq!(cancelled.ok(200), &json!({"cancelled": 2}));
    assert_eq!(ops::get(&t.db, &derived).await.expect("get").status, outbox::JobStatus::Cancelled);
    let retried = server.operate(Method::POST, "/api/jobs/retry-subject", Some(json!({"subject": "order:7"}))).await;
    assert_eq!(retried.ok(200), &json!({"retried": 2}));
    let other = ops::by_subject(&t.db, "order:8", 10).await.expect("by subject");
    assert_eq!(other[0].status, outbox::JobStatus::Pending, "another subject's job is untouched");

    // Refusals name what is at fault, and write nothing.
    let long = "x".repeat(257);
    let refused = server.enqueue(json!({"kind": "probe", "payload": {"n": 3}, "subject": ""})).await;
    assert!(refused.error(400, "invalid_request").contains("field `subject`: the subject is empty"));
    // A payload the template cannot make a subject of: the field is named.
    let refused = server.enqueue(json!({"kind": "order.confirm", "payload": {}})).await;
    let message = refused.error(422, "invalid_payload");
    assert!(message.contains("/id") && message.contains("the subject `order:{id}` needs it"), "{message}");
    let refused = server.get(&format!("/api/jobs?subject={long}")).await;
    assert!(refused.error(400, "invalid_request").contains("query parameter `subject`: the subject is 257 bytes"));
    for route in ["/api/jobs/cancel-subject", "/api/jobs/retry-subject"] {
        let refused = server.operate(Method::POST, route, Some(json!({"subject": "a\u{0}b"}))).await;
        assert!(refused.error(400, "invalid_request").contains("field `subject`"), "{route}: {:?}", refused.body);
    }
    assert_eq!(ops::list(&t.db, &Default::default()).await.expect("list").len(), 3, "nothing written");
}
