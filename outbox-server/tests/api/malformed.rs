//! Malformed requests: every one answered with a JSON 4xx naming what is wrong, never a 5xx.

use outbox_tests::{TestDb, conformance};
use reqwest::Method;

use crate::harness::{OPERATE, READ, Server};

conformance!(malformed_bodies_are_named, mysql);
async fn malformed_bodies_are_named(t: TestDb) {
    let server = Server::start(&t).await;
    let post = |path: &str, content_type: Option<&str>, body: Vec<u8>| {
        let request = server.request(Method::POST, path, Some(OPERATE)).body(body);
        match content_type {
            Some(ct) => request.header("content-type", ct),
            None => request,
        }
    };
    let json = Some("application/json");
    for (body, says) in [
        (&br#"{"kind": "probe", "payload": "#[..], "not valid json"),
        (br#"{"kind": 5, "payload": {}}"#, "at `kind`: invalid type: integer `5`, expected a string"),
        (br#"{"kind": "probe", "payload": {"n": 1}, "priority": "high"}"#, "at `priority`"),
        (br#"{"kind": "probe", "payload": {"n": 1}, "priority": 1099511627776}"#, "at `priority`"),
        (br#"{"kind": "probe", "payload": {"n": 1}, "colour": "red"}"#, "unknown field `colour`"),
        (br#"{"kind": "probe"}"#, "missing field `payload`"),
        (br#"[1, 2]"#, "invalid request body"),
        (br#"{"kind": "probe", "payload": {"n": 1}} {}"#, "not valid json"),
        (b"{\"kind\": \"pro\xffbe\", \"payload\": {}}", "invalid"),
        (b"", "not valid json"),
    ] {
        let answer = server.send(post("/api/jobs", json, body.to_vec())).await;
        let message = answer.error(400, "invalid_request");
        assert!(message.contains(says), "{}: {message}", String::from_utf8_lossy(body));
    }
    // An empty body without a type reads as `{}`.
    let bare = server.send(post("/api/jobs", None, Vec::new())).await;
    assert!(bare.error(400, "invalid_request").contains("missing field `kind`"));
    let deep = format!("{{\"kind\": \"probe\", \"payload\": {}1{}}}", "[".repeat(300), "]".repeat(300));
    let answer = server.send(post("/api/jobs", json, deep.into_bytes())).await;
    assert!((400..500).contains(&answer.status), "{:?}", answer.body);

    // Bodies must be declared JSON; only an empty body may go without a type.
    let payload = br#"{"kind": "probe", "payload": {"n": 1}}"#.to_vec();
    for content_type in [Some("text/plain"), Some("application/x-www-form-urlencoded"), None] {
        let answer = server.send(post("/api/jobs", content_type, payload.clone())).await;
        assert!(answer.error(415, "unsupported_media_type").contains("application/json"));
    }
    let charset = server.send(post("/api/jobs", Some("application/json; charset=utf-8"), payload)).await;
    assert_eq!(charset.status, 201, "{:?}", charset.body);

    for (body, says) in [(r#"{"kind": 1}"#, "at `kind`"), (r#"{"knd": "probe"}"#, "unknown field `knd`")] {
        let answer = server.send(post("/api/jobs/retry-failed", json, body.into())).await;
        assert!(answer.error(400, "invalid_request").contains(says));
    }
}

conformance!(malformed_queries_and_paths_are_named, mysql);
async fn malformed_queries_and_paths_are_named(t: TestDb) {
    let server = Server::start(&t).await;
    for (query, names) in [
        ("limit=0", "`limit`"),
        ("limit=1001", "`limit`"),
        ("limit=abc", "`limit`"),
        ("limit=-1", "`limit`"),
        ("limit=1&limit=2", "`limit`"),
        ("status=done", "`status`"),
        ("since=yesterday", "`since`"),
        ("since=100000000d", "`since`"),
        ("colour=red", "`colour`"),
        ("status=pending&status=failed", "`status`"),
    ] {
        let answer = server.get(&format!("/api/jobs?{query}")).await;
        let message = answer.error(400, "invalid_request");
        assert!(message.starts_with(&format!("query parameter {names}: ")), "{query}: {message}");
    }
    let answer = server.get("/api/stats?window=1h&extra=1").await;
    let message = answer.error(400, "invalid_request");
    assert!(message.starts_with("query parameter `extra`: unknown parameter"), "{message}");
    // A path segment that is not UTF-8 once decoded.
    let answer = server.send(server.request(Method::GET, "/api/jobs/%FF%FE", Some(READ))).await;
    answer.error(400, "invalid_request");
    let answer = server.send(server.request(Method::GET, "/api/kinds/%C3%28", Some(READ))).await;
    answer.error(400, "invalid_request");
}
