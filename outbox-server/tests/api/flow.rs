//! The flow-control routes: pause, hold and resume with the operate role, what is paused and every rate with the
//! read role, fair shares and weights, bad input named, and the gauges of `/metrics`.

use outbox_tests::{TestDb, conformance};
use reqwest::Method;
use serde_json::json;

use crate::harness::{OPERATE, READ, Server};

conformance!(pauses_holds_and_rates_through_the_api, mysql);
async fn pauses_holds_and_rates_through_the_api(t: TestDb) {
    let server = Server::start(&t).await;
    let post = |path: &'static str, token, body: serde_json::Value| {
        let server = &server;
        async move { server.send(server.request(Method::POST, path, Some(token)).json(&body)).await }
    };
    let queue = json!({"scope": "queue", "name": "mail"});
    let answer = post("/api/flow/pause", OPERATE, json!({"target": queue, "reason": "provider down"})).await;
    assert_eq!(answer.ok(200)["paused"], queue);
    assert!(answer.body["until"].is_null(), "a pause has no end");
    let key = json!({"scope": "kind", "name": "claude_extraction", "key": "acme"});
    let held = post("/api/flow/pause", OPERATE, json!({"target": key, "for": "30s"})).await;
    let until = held.ok(200)["until"].as_str().expect("a hold's end").to_owned();
    assert!(until.ends_with('Z') && until.len() == "2026-11-29T08:16:13.805Z".len(), "{until}");
    // The read role sees them, and cannot pause.
    let flow = server.send(server.request(Method::GET, "/api/flow", Some(READ))).await;
    let paused = flow.ok(200)["paused"].as_array().expect("paused").clone();
    assert_eq!(paused.len(), 2, "{paused:?}");
    assert!(paused.iter().any(|p| p["target"] == queue && p["reason"] == "provider down"), "{paused:?}");
    post("/api/flow/pause", READ, json!({"target": queue})).await.error(403, "forbidden");
    // Bad input names what is at fault and changes nothing.
    let bad = post("/api/flow/pause", OPERATE, json!({"target": {"scope": "queue", "name": ""}})).await;
    assert!(bad.error(400, "invalid_request").contains("has an empty name"), "{:?}", bad.body);
    let bad = post("/api/flow/pause", OPERATE, json!({"target": queue, "for": "soon"})).await;
    assert!(bad.error(400, "invalid_request").contains("field `for`"), "{:?}", bad.body);
    let bad = post("/api/flow/pause", OPERATE, json!({"target": {"scope": "tenant", "name": "a"}})).await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    let bad =
        post("/api/flow/weights", OPERATE, json!({"kind": "claude_extraction", "key": "acme", "weight": 0})).await;
    assert!(bad.error(400, "invalid_request").contains("is 0"), "{:?}", bad.body);
    let bad =
        post("/api/flow/weights", OPERATE, json!({"kind": "claude_extraction", "key": "acme", "weight": -2})).await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    let flow = server.send(server.request(Method::GET, "/api/flow", Some(READ))).await;
    assert_eq!(flow.ok(200)["paused"].as_array().expect("paused").len(), 2, "nothing changed");
    // Weights and shares.
    let w = post("/api/flow/weights", OPERATE, json!({"kind": "claude_extraction", "key": "acme", "weight": 3})).await;
    assert_eq!(w.ok(200)["weight"], 3);
    let shares = server.send(server.request(Method::GET, "/api/flow/shares/claude_extraction", Some(READ))).await;
    let shares = shares.ok(200)["shares"].as_array().expect("shares").clone();
    assert!(shares.iter().any(|s| s["key"] == "acme" && s["weight"] == 3), "{shares:?}");
    // Rates and the gauges.
    outbox::flow::define_rate(&t.db, "claude_extraction", "50/1m burst 5".parse().expect("rate")).await.expect("rate");
    let flow = server.send(server.request(Method::GET, "/api/flow", Some(READ))).await;
    let rates = flow.ok(200)["rates"].as_array().expect("rates").clone();
    assert!(rates.iter().any(|r| r["name"] == "claude_extraction" && r["rate"] == "50/1m burst 5"), "{rates:?}");
    let metrics = server.request(Method::GET, "/metrics", Some(READ)).send().await.expect("metrics");
    let text = metrics.text().await.expect("text");
    assert!(text.contains(r#"outbox_paused{scope="queue",name="mail",key=""} 1"#), "{text}");
    assert!(text.contains(r#"outbox_held_seconds{scope="kind",name="claude_extraction",key="acme"}"#), "{text}");
    assert!(text.contains(r#"outbox_rate_burst{name="claude_extraction",key=""} 5"#), "{text}");
    // Resume.
    let resumed = post("/api/flow/resume", OPERATE, json!({"target": queue})).await;
    assert_eq!(resumed.ok(200)["was_paused"], true);
    let again = post("/api/flow/resume", OPERATE, json!({"target": queue})).await;
    assert_eq!(again.ok(200)["was_paused"], false);
}
