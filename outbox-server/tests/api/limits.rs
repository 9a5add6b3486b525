//! Limits: body size, payload size, slow clients, an unavailable database.

use std::time::Duration;

use outbox::ConnectOpts;
use outbox_tests::{TestDb, conformance};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{self, OPERATE, Server};

conformance!(oversized_bodies_and_payloads_are_refused, mysql);
async fn oversized_bodies_and_payloads_are_refused(t: TestDb) {
    let small = Server::with(&t, harness::opts().body_limit(1024)).await;
    let body = json!({"kind": "probe", "payload": {"n": 1, "pad": "x".repeat(2048)}});
    let answer = small.enqueue(body).await;
    assert!(answer.error(413, "payload_too_large").contains("size limit"));

    // Within the body limit but over the payload limit of the queue.
    let server = Server::with(&t, harness::opts().body_limit(4 << 20)).await;
    let limit = outbox::DEFAULT_MAX_PAYLOAD_BYTES;
    let answer = server.enqueue(json!({"kind": "probe", "payload": {"n": 1, "pad": "x".repeat(limit)}})).await;
    assert!(answer.error(413, "payload_too_large").contains(&format!("over the limit of {limit} bytes")));

    // The default limit leaves room for a payload at the limit.
    let default = Server::start(&t).await;
    let answer = default.enqueue(json!({"kind": "probe", "payload": {"n": 1, "pad": "x".repeat(limit)}})).await;
    assert!(answer.error(413, "payload_too_large").contains("over the limit"), "the queue's limit, not the body's");

    // A server of its own may take bigger payloads; the body limit follows, and nothing else in the process
    // changes (the default server above still refuses them).
    let big = Server::with(&t, harness::opts().max_payload_bytes(limit * 2)).await;
    let payload = json!({"n": 1, "pad": "x".repeat(limit)});
    big.enqueue(json!({"kind": "probe", "payload": payload})).await.ok(201);
    let answer = default.enqueue(json!({"kind": "probe", "payload": payload})).await;
    assert!(answer.error(413, "payload_too_large").contains(&format!("over the limit of {limit} bytes")));
}

conformance!(slow_clients_time_out, mysql);
async fn slow_clients_time_out(t: TestDb) {
    let server = Server::with(&t, harness::opts().request_timeout(Duration::from_millis(300))).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.expect("connect");
    let head = format!(
        "POST /api/jobs HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {OPERATE}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"kind\":"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    // The rest of the body never comes; the answer does, whole, within the timeout.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 1024];
        while !String::from_utf8_lossy(&answer).ends_with('}') {
            match stream.read(&mut chunk).await.expect("read") {
                0 => break,
                n => answer.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(read.is_ok(), "no answer to a stalled body: {answer}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""code":"timeout""#) && answer.contains("application/json"), "{answer}");
}

/// A database locked by another writer past its busy timeout is a 503 the client may retry, not a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_answers_unavailable() {
    let t = outbox_tests::fresh_db().await;
    let opts = ConnectOpts { busy_timeout: Duration::from_millis(100), ..ConnectOpts::default() };
    let db = outbox::connect_with(&t.url, opts).await.expect("connect");
    let server = Server::mounted(outbox_server::router(db, harness::opts()), "").await;
    let lock = rusqlite::Connection::open(&t.path).expect("open");
    lock.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let answer = server.enqueue(json!({"kind": "probe", "payload": {"n": 1}})).await;
    assert!(answer.error(503, "unavailable").contains("try again"));
    lock.execute_batch("ROLLBACK").expect("release the write lock");
    assert_eq!(server.enqueue(json!({"kind": "probe", "payload": {"n": 1}})).await.ok(201)["created"], true);
}
