//! Stats, queues and kinds.

use outbox::{EnqueueOpts, JobError, Worker};
use outbox_tests::{Keyed, Probe, TestDb, conformance};
use reqwest::Method;
use serde_json::Value;

use crate::harness::Server;

conformance!(stats_and_queues_answer, mysql);
async fn stats_and_queues_answer(t: TestDb) {
    let server = Server::start(&t).await;
    outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    outbox::enqueue(&t.db, &Probe { n: 2 }, EnqueueOpts::new().queue("slow")).await.expect("enqueue");

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

conformance!(kinds_are_built_in_or_recorded, mysql);
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
    assert_eq!(probe["schema_hash"].as_str().map(str::len), Some(16));

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

conformance!(activity_and_failure_groups_count_finished_jobs, mysql);
async fn activity_and_failure_groups_count_finished_jobs(t: TestDb) {
    let server = Server::start(&t).await;
    for n in 1..=7 {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue");
    }
    // 1 and 2 complete; 3, 4 and 5 fail with one error, 6 and 7 with another.
    let worker = Worker::builder(&t.db)
        .register(|p: Probe, _| async move {
            match p.n {
                1 | 2 => Ok(()),
                3..=5 => Err(JobError::permanent("disk full")),
                _ => Err(JobError::permanent("no such bucket")),
            }
        })
        .build()
        .await
        .expect("worker");
    worker.drain().await.expect("drain");

    let activity = server.get("/api/activity?window=10m&bucket=1m").await;
    let body = activity.ok(200);
    assert_eq!((body["window_secs"].as_u64(), body["bucket_secs"].as_u64()), (Some(600), Some(60)));
    let points = body["points"].as_array().expect("points");
    // A point for every minute, the first at or before ten minutes ago.
    assert!((10..=11).contains(&points.len()), "{points:?}");
    let sum = |field: &str| points.iter().map(|p| p[field].as_u64().expect("count")).sum::<u64>();
    assert_eq!((sum("completed"), sum("failed")), (2, 5), "{points:?}");
    assert_eq!(server.get("/api/activity").await.ok(200)["points"].as_array().map(Vec::len), Some(61));
    let bad = server.get("/api/activity?window=30d&bucket=1s").await;
    assert!(bad.error(400, "invalid_request").contains("`bucket`"));
    server.get("/api/activity?bucket=0s").await.error(400, "invalid_request");

    let groups = server.get("/api/failures").await;
    let groups = groups.ok(200)["groups"].as_array().expect("groups").clone();
    let shape: Vec<(String, u64)> = groups
        .iter()
        .map(|g| (g["error"].as_str().expect("error").to_owned(), g["count"].as_u64().expect("count")))
        .collect();
    assert_eq!(shape, [("disk full".to_owned(), 3), ("no such bucket".to_owned(), 2)]);
    assert!(groups.iter().all(|g| g["kind"] == "probe" && g["latest_id"].is_string()), "{groups:?}");
    server.get("/api/failures?limit=0").await.error(400, "invalid_request");

    // Retrying one group leaves the other failed.
    let retried = server
        .operate(
            Method::POST,
            "/api/jobs/retry-failed",
            Some(serde_json::json!({"kind": "probe", "error": "no such bucket"})),
        )
        .await;
    assert_eq!(retried.ok(200)["retried"], 2);
    let left = server.get("/api/failures").await;
    assert_eq!(left.ok(200)["groups"].as_array().map(Vec::len), Some(1));
    assert_eq!(left.body["groups"][0]["count"], 3);
}

conformance!(a_session_tells_the_role_of_its_token, mysql);
async fn a_session_tells_the_role_of_its_token(t: TestDb) {
    let server = &Server::start(&t).await;
    let role = |token: Option<&'static str>| {
        let request = server.request(Method::GET, "/api/session", token);
        async move {
            let answer = server.send(request).await;
            let body = answer.ok(200).clone();
            assert_eq!(body["tokens"], true);
            (body["role"].as_str().map(str::to_owned), body["token"].as_str().map(str::to_owned))
        }
    };
    assert_eq!(role(None).await, (None, Some("none".into())));
    assert_eq!(role(Some("nope")).await, (None, Some("invalid".into())));
    assert_eq!(role(Some(crate::harness::READ)).await, (Some("read".into()), Some("valid".into())));
    assert_eq!(role(Some(crate::harness::OPERATE)).await, (Some("operate".into()), Some("valid".into())));
    assert_eq!(role(Some(crate::harness::WORK)).await, (Some("work".into()), Some("valid".into())));

    let open = Server::with(&t, outbox_server::ServerOpts::new()).await;
    let answer = open.send(open.request(Method::GET, "/api/session", None)).await;
    assert_eq!(answer.ok(200)["role"], "operate");
    assert_eq!(answer.body["tokens"], false);
}

conformance!(the_dashboard_is_served_under_any_prefix, mysql);
async fn the_dashboard_is_served_under_any_prefix(t: TestDb) {
    let app = axum::Router::new().nest("/outbox", outbox_server::router(t.db.clone(), crate::harness::opts()));
    let server = Server::mounted(app, "/outbox").await;
    // With or without the trailing slash, the page links the assets and the API under the prefix.
    for address in [server.base.clone(), format!("{}/", server.base)] {
        let page = server.client.get(&address).send().await.expect("page");
        if address.ends_with('/') && page.status() == 404 {
            continue; // the application's router decides whether `/outbox/` reaches the nested `/`
        }
        assert_eq!(page.status(), 200, "{address}");
        let policy = page.headers().get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(policy.contains("script-src 'self'") && !policy.contains("unsafe"), "{policy}");
        let html = page.text().await.expect("html");
        assert!(html.contains(r#"src="/outbox/assets/app.js""#) && html.contains(r#"data-base="/outbox/""#), "{html}");
    }
    for (path, content_type) in [("/assets/app.js", "text/javascript"), ("/assets/app.css", "text/css")] {
        let asset = server.client.get(format!("{}{path}", server.base)).send().await.expect("asset");
        assert_eq!(asset.status(), 200, "{path}");
        let got = asset.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        assert!(got.starts_with(content_type), "{path}: {got}");
    }
    let top = Server::start(&t).await;
    let html = top.client.get(format!("{}/", top.base)).send().await.expect("page").text().await.expect("html");
    assert!(html.contains(r#"src="/assets/app.js""#), "{html}");
}
