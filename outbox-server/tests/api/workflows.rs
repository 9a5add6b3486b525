//! The workflow routes: create a workflow of known kinds, read its graph and its steps' parents and children, cancel
//! it; and bad workflows refused with every problem named and nothing written.

use outbox::ops;
use outbox_tests::{TestDb, conformance, scalar};
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::Server;

fn diamond() -> Value {
    json!({"name": "diamond", "steps": [
        {"name": "a", "kind": "probe", "payload": {"n": 1}},
        {"name": "b", "kind": "probe", "payload": {"n": 2}, "after": ["a"]},
        {"name": "c", "kind": "probe", "payload": {"n": 3}, "after": ["a"]},
        {"name": "d", "kind": "probe", "payload": {"n": 4}, "after": ["b", "c"], "on_parent_failure": "run"}
    ]})
}

conformance!(a_workflow_is_created_read_and_cancelled_over_http, mysql);
async fn a_workflow_is_created_read_and_cancelled_over_http(t: TestDb) {
    let server = Server::start(&t).await;
    let created = server.operate(Method::POST, "/api/workflows", Some(diamond())).await;
    let body = created.ok(201).clone();
    let id = body["id"].as_str().expect("id").to_owned();
    let d = body["steps"]["d"].as_str().expect("d's job").to_owned();

    let graph = server.get(&format!("/api/workflows/{id}")).await;
    let graph = graph.ok(200);
    assert_eq!(graph["name"], "diamond");
    assert_eq!(graph["state"], "running");
    let states: Vec<(&str, &str)> = graph["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| (s["step"].as_str().expect("step"), s["state"].as_str().expect("state")))
        .collect();
    assert_eq!(states, [("a", "pending"), ("b", "waiting"), ("c", "waiting"), ("d", "waiting")]);

    let job = server.get(&format!("/api/jobs/{d}")).await;
    let parents: Vec<&str> =
        job.ok(200)["parents"].as_array().expect("parents").iter().map(|p| p["step"].as_str().expect("s")).collect();
    assert_eq!(parents, ["b", "c"]);
    assert_eq!(job.body["job"]["status"], "pending");

    let cancelled = server.operate(Method::POST, &format!("/api/workflows/{id}/cancel"), None).await;
    assert_eq!(cancelled.ok(200), &json!({"cancelled": 4}));
    assert_eq!(server.get(&format!("/api/workflows/{id}")).await.ok(200)["state"], "cancelled");
    server.get("/api/workflows/nope").await.error(404, "not_found");
    server.operate(Method::POST, "/api/workflows/nope/cancel", None).await.error(404, "not_found");
}

conformance!(bad_workflows_are_refused_over_http_and_write_nothing, mysql);
async fn bad_workflows_are_refused_over_http_and_write_nothing(t: TestDb) {
    let server = Server::start(&t).await;
    let post = |body: Value| server.operate(Method::POST, "/api/workflows", Some(body));
    let cycle = json!({"name": "cycle", "steps": [
        {"name": "a", "kind": "probe", "payload": {"n": 1}, "after": ["b"]},
        {"name": "b", "kind": "probe", "payload": {"n": 2}, "after": ["a"]}
    ]});
    let refused = post(cycle).await;
    let message = refused.error(422, "invalid_workflow").to_owned();
    assert!(message.contains("cycle: a, b"), "{message}");
    let bad_payload = json!({"name": "payload", "steps": [
        {"name": "a", "kind": "probe", "payload": {"n": 0}},
        {"name": "a", "kind": "probe", "payload": {"n": 1}, "after": ["zz"]}
    ]});
    let refused = post(bad_payload).await;
    let message = refused.error(422, "invalid_workflow").to_owned();
    assert!(message.contains("step `a` is named twice") && message.contains("`zz`"), "{message}");
    let policy = json!({"name": "policy", "steps": [
        {"name": "a", "kind": "probe", "payload": {"n": 1}, "on_parent_failure": "ignore"}
    ]});
    let refused = post(policy).await;
    let message = refused.error(400, "invalid_request").to_owned();
    assert!(message.contains("steps[0].on_parent_failure") && message.contains("`ignore`"), "{message}");
    post(json!({"name": "kind", "steps": [{"name": "a", "kind": "nope", "payload": {}}]}))
        .await
        .error(404, "unknown_kind");
    let invalid_step = json!({"name": "payload", "steps": [{"name": "a", "kind": "probe", "payload": {"n": 0}}]});
    let refused = post(invalid_step).await;
    let message = refused.error(422, "invalid_workflow").to_owned();
    assert!(message.contains("step `a`") && message.contains("/n"), "{message}");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_workflows").await, 0);
    assert!(ops::list(&t.db, &Default::default()).await.expect("list").is_empty());
}
