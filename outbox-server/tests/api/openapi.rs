//! The OpenAPI document and the router agree: every operation the document describes is served, a method
//! the document does not list for a path is refused, no route is added outside the document, an operation
//! needs a token exactly when the document says so, and what the reading routes answer fits their schemas.

use std::path::Path;

use outbox::EnqueueOpts;
use outbox_tests::{Probe, TestDb, sqlite_only};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::harness::{OPERATE, READ, Server, WORK};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// The document as served, without a token.
async fn document(server: &Server) -> Value {
    let answer = server.send(server.request(Method::GET, "/api/openapi.json", None)).await;
    answer.ok(200).clone()
}

/// The path with its parameters filled in: the id of a job that exists, the name of a known kind.
fn concrete(path: &str, job: &str) -> String {
    path.replace("{id}", job).replace("{kind}", "probe")
}

/// Whether an answer came from the router's fallback or a method router's refusal: no handler ran.
async fn unrouted(response: reqwest::Response) -> Option<String> {
    let status = response.status();
    if status == StatusCode::METHOD_NOT_ALLOWED {
        return Some("405 method not allowed".into());
    }
    if status == StatusCode::NOT_FOUND {
        let body: Value = response.json().await.unwrap_or_default();
        if body["message"].as_str().is_some_and(|m| m.starts_with("no route for")) {
            return Some(format!("404 {}", body["message"]));
        }
    }
    None
}

sqlite_only!(every_documented_operation_is_served);
async fn every_documented_operation_is_served(t: TestDb) {
    let server = Server::start(&t).await;
    let job = outbox::enqueue(&t.db, &outbox_tests::Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let doc = document(&server).await;
    assert_eq!(doc["openapi"], "3.1.0", "{doc}");
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 23, "{} paths: {:?}", paths.len(), paths.keys().collect::<Vec<_>>());
    let mut operations = 0;
    for (path, item) in paths {
        for method in METHODS.into_iter().filter(|m| item.get(*m).is_some()) {
            operations += 1;
            let token = if path.starts_with("/api/work/") { WORK } else { OPERATE };
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let mut request = server.request(method.clone(), &concrete(path, job.id()), Some(token));
            if method != Method::GET {
                request = request.json(&serde_json::json!({}));
            }
            let response = request.send().await.expect("send");
            if let Some(why) = unrouted(response).await {
                panic!("the document describes {method} {path}, but the server does not serve it: {why}");
            }
        }
    }
    assert!(operations >= 25, "{operations} operations");
}

sqlite_only!(a_method_the_document_does_not_list_is_not_served);
async fn a_method_the_document_does_not_list_is_not_served(t: TestDb) {
    let server = Server::start(&t).await;
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let doc = document(&server).await;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        // The token the path's group needs, so the refusal is the router's, not the token check's.
        let token = if path.starts_with("/api/work/") { WORK } else { OPERATE };
        for method in METHODS.into_iter().filter(|m| item.get(*m).is_none()) {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let response = server
                .request(method.clone(), &concrete(path, job.id()), Some(token))
                .json(&serde_json::json!({}))
                .send()
                .await
                .expect("send");
            assert!(
                unrouted(response).await.is_some(),
                "{method} {path} is served but the document does not describe it: declare it with \
                 #[utoipa::path] and add it with routes!()"
            );
        }
    }
}

/// Routes reach the router only through `routes!()`, which adds each to the document: a `.route(` call is a
/// route the document cannot know. The dashboard's page and assets are the one exception.
#[test]
fn no_route_is_added_outside_the_document() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let mut splits = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("pages.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read file");
            for (n, line) in text.lines().enumerate() {
                let at = format!("{}:{}", path.strip_prefix(&src).unwrap_or(&path).display(), n + 1);
                let calls = [".route(", ".route_service(", ".nest(", ".nest_service(", ".fallback_service("];
                if calls.iter().any(|call| line.contains(call)) && !line.trim_start().starts_with("//") {
                    found.push(format!("{at}: {}", line.trim()));
                }
                if line.contains("split_for_parts()") {
                    splits.push(at);
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "routes added outside the OpenAPI document (declare each with #[utoipa::path] and add it with routes!()):\n{}",
        found.join("\n")
    );
    // One documented router, split once into the router and its document: a second split would be a group of
    // routes whose document could be left out.
    assert_eq!(splits.len(), 1, "the documented router is split once, not at {splits:?}");
}

/// The open operations: every other one needs a token.
const OPEN: [&str; 3] = ["get /api/health", "get /api/session", "get /api/openapi.json"];

sqlite_only!(an_operation_needs_a_token_exactly_when_the_document_says_so);
async fn an_operation_needs_a_token_exactly_when_the_document_says_so(t: TestDb) {
    let server = Server::start(&t).await;
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let doc = document(&server).await;
    let mut guarded = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS.into_iter().filter(|m| item.get(*m).is_some()) {
            let operation = &item[method];
            let secured = operation["security"].as_array().is_some_and(|s| !s.is_empty());
            let name = format!("{method} {path}");
            assert_eq!(secured, !OPEN.contains(&name.as_str()), "{name}: `security` in the document");
            let http = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let response = server
                .request(http, &concrete(path, job.id()), None)
                .json(&serde_json::json!({}))
                .send()
                .await
                .expect("send");
            let status = response.status();
            if secured {
                guarded += 1;
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{name} without a token");
                assert!(operation["responses"]["401"].is_object(), "{name} documents its 401");
            } else {
                assert_ne!(status, StatusCode::UNAUTHORIZED, "{name} is open in the document");
            }
        }
    }
    assert!(guarded >= 22, "{guarded} guarded operations");
}

/// The JSON schema of `GET path`'s answer with `status`, resolvable on its own: the document's components
/// beside the answer's schema.
fn answer_schema(doc: &Value, path: &str, status: &str) -> Option<Value> {
    let schema = doc["paths"][path]["get"]["responses"][status]["content"]["application/json"]["schema"].clone();
    if schema.is_null() {
        return None;
    }
    Some(serde_json::json!({ "allOf": [schema], "components": doc["components"].clone() }))
}

sqlite_only!(what_the_reading_routes_answer_fits_the_documents_schemas);
async fn what_the_reading_routes_answer_fits_the_documents_schemas(t: TestDb) {
    let server = Server::start(&t).await;
    let job = outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let doc = document(&server).await;
    let mut checked = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        if item.get("get").is_none() || path == "/api/openapi.json" || path == "/api/events" {
            continue;
        }
        let response = server.request(Method::GET, &concrete(path, job.id()), Some(READ)).send().await.expect("send");
        let status = response.status().as_u16().to_string();
        let json =
            response.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        let Some(schema) = answer_schema(&doc, path, &status) else {
            assert!(!json, "GET {path} answered {status} with JSON the document does not describe");
            continue;
        };
        let body: Value = response.json().await.expect("json");
        let validator = jsonschema::draft202012::new(&schema).unwrap_or_else(|e| panic!("GET {path}: schema: {e}"));
        let errors: Vec<String> =
            validator.iter_errors(&body).map(|e| format!("{e} at {}", e.instance_path())).collect();
        assert!(errors.is_empty(), "GET {path} answered {status} outside its schema: {errors:?}\n{body}");
        checked.push(path.clone());
    }
    assert!(checked.len() >= 11, "{checked:?}");
}

// `outbox_server::openapi_json()` prints what the server serves.
sqlite_only!(the_printed_document_is_the_served_one);
async fn the_printed_document_is_the_served_one(t: TestDb) {
    let server = Server::start(&t).await;
    let printed: Value =
        serde_json::from_str(&outbox_server::openapi_json().expect("the document serializes")).expect("json");
    assert_eq!(printed, document(&server).await);
}

/// Every operation has an id of its own: generators name client methods by it, and the specification requires it
/// (two handlers both named `get` once gave two operations the id `get`).
#[test]
fn every_operation_id_is_unique() {
    let doc: Value =
        serde_json::from_str(&outbox_server::openapi_json().expect("the document serializes")).expect("json");
    let mut seen = std::collections::HashMap::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if let Some(id) = op.get("operationId").and_then(Value::as_str)
                && let Some(other) = seen.insert(id.to_owned(), format!("{method} {path}"))
            {
                panic!("operation id `{id}` of {method} {path} is also {other}'s");
            }
        }
    }
    assert!(seen.len() > 30, "{seen:?}");
}
