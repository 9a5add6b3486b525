//! Who may call what: tokens and roles, the open loopback server, CORS, unknown routes and methods.

use outbox::EnqueueOpts;
use outbox_server::{Role, ServerOpts};
use outbox_tests::{Probe, TestDb, conformance};
use reqwest::Method;
use serde_json::json;

use crate::harness::{self, OPERATE, READ, Server, WORK};

/// Every route, with the role it needs and a body it accepts.
fn routes(id: &str) -> Vec<(Method, String, Role)> {
    let job = format!("/api/jobs/{id}");
    let work = format!("/api/work/jobs/{id}");
    vec![
        (Method::GET, "/api/stats".into(), Role::Read),
        (Method::GET, "/api/activity".into(), Role::Read),
        (Method::GET, "/api/failures".into(), Role::Read),
        (Method::GET, "/api/queues".into(), Role::Read),
        (Method::GET, "/api/kinds".into(), Role::Read),
        (Method::GET, "/api/kinds/probe".into(), Role::Read),
        (Method::GET, "/api/workers".into(), Role::Read),
        (Method::GET, "/api/schedules".into(), Role::Read),
        (Method::GET, "/api/jobs".into(), Role::Read),
        (Method::GET, job.clone(), Role::Read),
        (Method::GET, "/api/events".into(), Role::Read),
        (Method::GET, "/metrics".into(), Role::Read),
        (Method::POST, "/api/jobs".into(), Role::Operate),
        (Method::POST, "/api/jobs/retry-failed".into(), Role::Operate),
        (Method::POST, format!("{job}/retry"), Role::Operate),
        (Method::POST, format!("{job}/cancel"), Role::Operate),
        (Method::DELETE, job, Role::Operate),
        (Method::POST, "/api/work/claim".into(), Role::Work),
        (Method::POST, format!("{work}/heartbeat"), Role::Work),
        (Method::POST, format!("{work}/complete"), Role::Work),
        (Method::POST, format!("{work}/fail"), Role::Work),
        (Method::POST, format!("{work}/snooze"), Role::Work),
    ]
}

/// A body each route accepts as well formed (a `probe` enqueue, a claim, a fenced call for attempt 1).
fn body_of(method: &Method, path: &str) -> Option<serde_json::Value> {
    if *method != Method::POST {
        return None;
    }
    Some(match path {
        "/api/jobs" => json!({"kind": "probe", "payload": {"n": 2}}),
        "/api/work/claim" => json!({"worker": "w", "kinds": ["nothing-to-claim"]}),
        p if p.ends_with("/fail") => json!({"worker": "w", "run": 1, "error": "e"}),
        p if p.ends_with("/snooze") => json!({"worker": "w", "run": 1, "delay": "1s"}),
        p if p.starts_with("/api/work/") => json!({"worker": "w", "run": 1}),
        _ => json!({}),
    })
}

conformance!(tokens_grant_their_roles_on_every_route, mysql);
async fn tokens_grant_their_roles_on_every_route(t: TestDb) {
    let server = Server::start(&t).await;
    let id = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    let tokens = [(Role::Read, READ), (Role::Operate, OPERATE), (Role::Work, WORK)];
    for (method, path, needs) in routes(&id) {
        let call = |token: Option<&'static str>| {
            let request = server.request(method.clone(), &path, token);
            match body_of(&method, &path) {
                Some(body) => request.json(&body),
                None => request,
            }
        };
        let none = server.send(call(None)).await;
        none.error(401, "unauthorized");
        let challenge = none.headers.get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(challenge.starts_with("Bearer"), "{method} {path}: {challenge:?}");

        let wrong = server.send(call(Some("not-a-token"))).await;
        wrong.error(401, "unauthorized");
        let challenge = wrong.headers.get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(challenge.contains("invalid_token"), "{method} {path}: {challenge:?}");
        for answer in [&none, &wrong] {
            let text = answer.body.to_string();
            assert!(![READ, OPERATE, WORK].iter().any(|s| text.contains(s)), "a secret echoed: {text}");
        }

        for (role, secret) in tokens {
            if role.grants(needs) {
                // Past the guard: answered by the route (a retry of a pending job is a conflict, a fenced call
                // for a claim nobody holds is stale, not a refusal). The event stream never ends: only its
                // status is read.
                let response = call(Some(secret)).send().await.expect("send");
                let status = response.status().as_u16();
                assert!(!matches!(status, 401 | 403), "{role} on {method} {path}: {status}");
                assert!(status < 500, "{role} on {method} {path}: {status}");
            } else {
                let refused = server.send(call(Some(secret))).await;
                let message = refused.error(403, "forbidden");
                assert!(message.contains(&format!("`{needs}` role")), "{role} on {method} {path}: {message}");
                assert!(![READ, OPERATE, WORK].iter().any(|s| refused.body.to_string().contains(s)));
            }
        }
    }
    // The health check is open to every caller, with or without a token.
    for token in [None, Some("not-a-token"), Some(READ)] {
        let health = server.send(server.request(Method::GET, "/api/health", token)).await;
        assert_eq!(health.ok(200)["status"], "ok");
    }
    // A malformed header is refused like a missing token.
    let basic = server.request(Method::GET, "/api/queues", None).header("authorization", "Basic cmVhZDpyZWFk");
    server.send(basic).await.error(401, "unauthorized");
}

conformance!(unknown_routes_and_methods_answer_json, mysql);
async fn unknown_routes_and_methods_answer_json(t: TestDb) {
    let server = Server::start(&t).await;
    let missing = server.get("/api/nothing-here").await;
    assert!(missing.error(404, "not_found").contains("/api/nothing-here"));
    server.send(server.request(Method::GET, "/nothing-here", None)).await.error(404, "not_found");
    let put = server.send(server.request(Method::PUT, "/api/jobs", Some(OPERATE))).await;
    let message = put.error(405, "method_not_allowed");
    assert!(message.contains("PUT /api/jobs") || message.contains("/api/jobs does not answer PUT"), "{message}");
    let allow = put.headers.get("allow").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow:?}");
}

conformance!(the_router_mounts_under_a_prefix, mysql);
async fn the_router_mounts_under_a_prefix(t: TestDb) {
    let app = axum::Router::new().nest("/outbox", outbox_server::router(t.db.clone(), harness::opts()));
    let server = Server::mounted(app, "/outbox").await;
    assert!(server.get("/api/queues").await.ok(200)["queues"].is_array());
    let enqueued = server.enqueue(json!({"kind": "probe", "payload": {"n": 1}})).await;
    assert_eq!(enqueued.ok(201)["created"], true);
}

conformance!(an_open_server_answers_loopback_requests_only, mysql);
async fn an_open_server_answers_loopback_requests_only(t: TestDb) {
    let server = Server::with(&t, ServerOpts::new().kind(harness::probe())).await;
    assert_eq!(server.send(server.request(Method::GET, "/api/queues", None)).await.status, 200);
    let enqueued = server
        .send(server.request(Method::POST, "/api/jobs", None).json(&json!({"kind": "probe", "payload": {"n": 1}})))
        .await;
    assert_eq!(enqueued.ok(201)["created"], true);
    // DNS rebinding: a page of another name resolving to 127.0.0.1.
    let rebound = server.request(Method::GET, "/api/queues", None).header("host", "evil.example");
    assert!(server.send(rebound).await.error(403, "forbidden").contains("loopback"));
    // A page of another site posting across origins.
    let cross = server.request(Method::POST, "/api/jobs/retry-failed", None).header("origin", "https://evil.example");
    server.send(cross).await.error(403, "forbidden");
    let local = server.request(Method::POST, "/api/jobs/retry-failed", None).header("origin", "http://localhost:3000");
    assert_eq!(server.send(local).await.ok(200)["retried"], 0);
}

conformance!(cors_headers_only_for_configured_origins, mysql);
async fn cors_headers_only_for_configured_origins(t: TestDb) {
    let origin = "https://ops.example";
    let plain = Server::start(&t).await;
    let answer = plain.send(plain.request(Method::GET, "/api/queues", Some(READ)).header("origin", origin)).await;
    assert_eq!(answer.status, 200);
    assert!(!answer.headers.contains_key("access-control-allow-origin"), "no CORS unless configured");

    let opts = harness::opts().cors_origin(origin).expect("origin");
    let server = Server::with(&t, opts).await;
    let answer = server.send(server.request(Method::GET, "/api/queues", Some(READ)).header("origin", origin)).await;
    assert_eq!(answer.headers.get("access-control-allow-origin").and_then(|v| v.to_str().ok()), Some(origin));
    let preflight = server
        .client
        .request(Method::OPTIONS, format!("{}/api/jobs", server.base))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization, content-type")
        .send()
        .await
        .expect("preflight");
    assert!(preflight.status().is_success(), "{}", preflight.status());
    assert_eq!(preflight.headers().get("access-control-allow-origin").and_then(|v| v.to_str().ok()), Some(origin));
    let other = server
        .send(server.request(Method::GET, "/api/queues", Some(READ)).header("origin", "https://evil.example"))
        .await;
    assert!(!other.headers.contains_key("access-control-allow-origin"));
}
