//! Who may call what: tokens and roles, the open loopback server, CORS, unknown routes and methods.

use outbox_core::EnqueueOpts;
use outbox_server::{Role, ServerOpts};
use outbox_tests::{Probe, TestDb, conformance};
use reqwest::Method;
use serde_json::json;

use crate::harness::{self, OPERATE, READ, Server, WORK};

/// Every route, with the role it needs and a body it accepts.
fn routes(id: &str) -> Vec<(Method, String, Role)> {
    let job = format!("/api/jobs/{id}");
    vec![
        (Method::GET, "/api/stats".into(), Role::Read),
        (Method::GET, "/api/queues".into(), Role::Read),
        (Method::GET, "/api/kinds".into(), Role::Read),
        (Method::GET, "/api/kinds/probe".into(), Role::Read),
        (Method::GET, "/api/jobs".into(), Role::Read),
        (Method::GET, job.clone(), Role::Read),
        (Method::POST, "/api/jobs".into(), Role::Operate),
        (Method::POST, "/api/jobs/retry-failed".into(), Role::Operate),
        (Method::POST, format!("{job}/retry"), Role::Operate),
        (Method::POST, format!("{job}/cancel"), Role::Operate),
        (Method::DELETE, job, Role::Operate),
    ]
}

conformance!(tokens_grant_their_roles_on_every_route);
async fn tokens_grant_their_roles_on_every_route(t: TestDb) {
    let server = Server::start(&t).await;
    let id = outbox_core::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned();
    let body = json!({"kind": "probe", "payload": {"n": 2}});
    for (method, path, needs) in routes(&id) {
        let call = |token: Option<&'static str>| {
            let request = server.request(method.clone(), &path, token);
            if method == Method::POST && path == "/api/jobs" { request.json(&body) } else { request }
        };
        let none = server.send(call(None)).await;
        none.error(401, "unauthorized");
        let challenge = none.headers.get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(challenge.starts_with("Bearer"), "{method} {path}: {challenge:?}");

        let wrong = server.send(call(Some("not-a-token"))).await;
        wrong.error(401, "unauthorized");
        let challenge = wrong.headers.get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(challenge.contains("invalid_token"), "{method} {path}: {challenge:?}");

        server.send(call(Some(WORK))).await.error(403, "forbidden");
        let read = server.send(call(Some(READ))).await;
        match needs {
            Role::Read => assert!(read.status < 400, "{method} {path}: {:?}", read.body),
            _ => assert!(read.error(403, "forbidden").contains("`operate` role"), "{method} {path}"),
        }
        let operate = server.send(call(Some(OPERATE))).await;
        // Past the guard: answered by the route (a retry of a pending job is a conflict, not a refusal).
        assert!(!matches!(operate.status, 401 | 403), "operate implies read: {method} {path}: {:?}", operate.body);
        for answer in [&none, &wrong, &read, &operate] {
            let text = answer.body.to_string();
            assert!(![READ, OPERATE, WORK].iter().any(|s| text.contains(s)), "a secret echoed: {text}");
        }
    }
    // A malformed header is refused like a missing token.
    let basic = server.request(Method::GET, "/api/queues", None).header("authorization", "Basic cmVhZDpyZWFk");
    server.send(basic).await.error(401, "unauthorized");
}

conformance!(unknown_routes_and_methods_answer_json);
async fn unknown_routes_and_methods_answer_json(t: TestDb) {
    let server = Server::start(&t).await;
    let missing = server.get("/api/nothing-here").await;
    assert!(missing.error(404, "not_found").contains("/api/nothing-here"));
    server.send(server.request(Method::GET, "/", None)).await.error(404, "not_found");
    let put = server.send(server.request(Method::PUT, "/api/jobs", Some(OPERATE))).await;
    let message = put.error(405, "method_not_allowed");
    assert!(message.contains("PUT /api/jobs") || message.contains("/api/jobs does not answer PUT"), "{message}");
    let allow = put.headers.get("allow").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow:?}");
}

conformance!(the_router_mounts_under_a_prefix);
async fn the_router_mounts_under_a_prefix(t: TestDb) {
    let app = axum::Router::new().nest("/outbox", outbox_server::router(t.db.clone(), harness::opts()));
    let server = Server::mounted(app, "/outbox").await;
    assert!(server.get("/api/queues").await.ok(200)["queues"].is_array());
    let enqueued = server.enqueue(json!({"kind": "probe", "payload": {"n": 1}})).await;
    assert_eq!(enqueued.ok(201)["created"], true);
}

conformance!(an_open_server_answers_loopback_requests_only);
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

conformance!(cors_headers_only_for_configured_origins);
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
