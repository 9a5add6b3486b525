//! Stats, queues and kinds.

use outbox_core::{EnqueueOpts, JobError, Worker};
use outbox_tests::{Keyed, Probe, TestDb, conformance};
use serde_json::Value;

use crate::harness::Server;

conformance!(stats_and_queues_answer);
async fn stats_and_queues_answer(t: TestDb) {
    let server = Server::start(&t).await;
    outbox_core::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    outbox_core::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new().queue("slow")).await.expect("enqueue");

    let stats = server.get("/api/stats").await;
    assert_eq!(stats.ok(200)["window_secs"], 3_600);
    let counts = stats.body["counts"].as_array().expect("counts");
    assert!(counts.iter().any(|c| c["kind"] == "probe" && c["status"] == "pending" && c["count"] == 2), "{counts:?}");
    assert_eq!(server.get("/api/stats?window=2h30m").await.ok(200)["window_secs"], 9_000);
    let bad = server.get("/api/stats?window=forever").await;
    assert!(bad.error(400, "invalid_request").contains("query parameter `window`"));
    server.get("/api/stats?window=100000000d").await.error(400, "invalid_request");

    let queues = server.get("/api/queues").await;
    let queues = queues.ok(200)["queues"].as_array().expect("queues").clone();
    let available = |name: &str| queues.iter().find(|q| q["queue"] == name).map(|q| q["available"].clone());
    assert_eq!((available("default"), available("slow")), (Some(1.into()), Some(1.into())), "{queues:?}");
}

conformance!(kinds_are_built_in_or_recorded);
async fn kinds_are_built_in_or_recorded(t: TestDb) {
    let server = Server::start(&t).await;
    let listed = server.get("/api/kinds").await;
    let names = |body: &Value| -> Vec<String> {
        body["kinds"].as_array().expect("kinds").iter().map(|k| k["name"].as_str().expect("name").to_owned()).collect()
    };
    assert_eq!(names(listed.ok(200)), ["probe"]);
    let probe = &listed.body["kinds"][0];
    assert_eq!((probe["source"].as_str(), probe["recorded"].clone()), (Some("built_in"), Value::Null));
    assert_eq!(probe["options"]["max_attempts"], 3);
    assert_eq!(probe["schema_hash"].as_str().map(str::len), Some(64));

    // A worker of the application records its kinds; the server knows them from then on.
    let worker =
        Worker::builder(&t.db).register(|_: Keyed, _| async { Ok::<_, JobError>(()) }).build().await.expect("worker");
    drop(worker);
    let listed = server.get("/api/kinds").await;
    assert_eq!(names(listed.ok(200)), ["keyed", "probe"]);
    let keyed = server.get("/api/kinds/keyed").await;
    let keyed = keyed.ok(200);
    assert_eq!((keyed["source"].as_str(), keyed["options"]["queue"].as_str()), (Some("recorded"), Some("mail")));
    assert_eq!(keyed["options"]["key_fields"], serde_json::json!(["userId"]));
    assert!(keyed["recorded"]["updated_at"].is_string(), "{keyed}");
    assert!(keyed["schema"]["properties"]["userId"].is_object(), "{keyed}");

    // A recorded kind validates enqueues like a built-in one.
    let bad = server.enqueue(serde_json::json!({"kind": "keyed", "payload": {"userId": "x", "note": "n"}})).await;
    assert!(bad.error(422, "invalid_payload").contains("keyed"));
    let ok = server.enqueue(serde_json::json!({"kind": "keyed", "payload": {"userId": 7, "note": "n"}})).await;
    assert_eq!(ok.ok(201)["created"], true);

    let unknown = server.get("/api/kinds/nope").await;
    let message = unknown.error(404, "unknown_kind");
    assert!(message.contains("unknown kind `nope`") && message.contains("keyed, probe"), "{message}");
}
