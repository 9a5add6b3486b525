//! Bad payloads are refused at enqueue, naming the field; nothing reaches the queue. No server needed.

use outbox::{EnqueueOpts, Error};
use outbox_aws::SyncAws;
use outbox_tests::{fresh_db, scalar};
use serde_json::json;

/// The violations of a refused enqueue, as `path: message` lines.
async fn refused(db: &sea_orm::DatabaseConnection, payload: serde_json::Value) -> Vec<(String, String)> {
    let kind = outbox::Kind::of::<SyncAws>().expect("kind");
    match outbox::enqueue_raw(db, &kind, payload, EnqueueOpts::new()).await {
        Err(Error::InvalidPayload { kind, violations }) => {
            assert_eq!(kind, "sync_aws");
            violations.into_iter().map(|v| (v.path, v.message)).collect()
        }
        other => panic!("expected an invalid payload, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unknown_resource_type_is_refused_with_the_known_ones() {
    let t = fresh_db().await;
    let v = refused(&t.db, json!({ "resourceType": "dynamodb_table", "resourceId": "t", "config": {} })).await;
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].0, "/resourceType");
    assert!(v[0].1.contains("`dynamodb_table`") && v[0].1.contains("s3_bucket, s3_object, sqs_queue"), "{}", v[0].1);

    // The typed path says the same.
    let err =
        outbox::enqueue(&t.db, &SyncAws::delete("ec2_instance", "i-1"), EnqueueOpts::new()).await.expect_err("refused");
    assert!(err.to_string().contains("/resourceType") && err.to_string().contains("ec2_instance"), "{err}");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);
}

#[tokio::test]
async fn a_malformed_config_is_refused_naming_the_field() {
    let t = fresh_db().await;
    let cases = [
        (
            json!({ "resourceType": "s3_bucket", "resourceId": "ok-bucket", "config": { "versioning": "yes" } }),
            "/config/versioning",
            "boolean",
        ),
        (
            json!({ "resourceType": "s3_bucket", "resourceId": "ok-bucket", "config": { "tags": { "team": 7 } } }),
            "/config/tags/team",
            "string",
        ),
        (
            json!({ "resourceType": "s3_bucket", "resourceId": "ok-bucket", "config": { "versionning": true } }),
            "/config",
            "versionning",
        ),
        (
            json!({ "resourceType": "s3_bucket", "resourceId": "ok-bucket", "config": { "region": "moon-1" } }),
            "/config/region",
            "moon-1",
        ),
        (
            json!({ "resourceType": "s3_bucket", "resourceId": "Not_A_Bucket", "config": {} }),
            "/resourceId",
            "Not_A_Bucket",
        ),
        (json!({ "resourceType": "s3_bucket", "resourceId": "ok-bucket", "config": [] }), "/config", "object"),
        (
            json!({ "resourceType": "s3_object", "resourceId": "ok-bucket", "config": { "body": "x" } }),
            "/resourceId",
            "bucket/key",
        ),
        (
            json!({ "resourceType": "s3_object", "resourceId": "ok-bucket/k", "config": { "contentType": "text/plain" } }),
            "/config/body",
            "required",
        ),
        (
            json!({ "resourceType": "s3_object", "resourceId": "ok-bucket/k", "config": { "body": "!", "encoding": "base64" } }),
            "/config/body",
            "base64",
        ),
        (
            json!({ "resourceType": "s3_object", "resourceId": "ok-bucket/k", "config": { "body": "x", "encoding": "utf16" } }),
            "/config/encoding",
            "utf16",
        ),
        (
            json!({ "resourceType": "sqs_queue", "resourceId": "q", "config": { "attributes": { "VisibilityTimout": 3 } } }),
            "/config/attributes/VisibilityTimout",
            "VisibilityTimeout",
        ),
        (
            json!({ "resourceType": "sqs_queue", "resourceId": "q", "config": { "attributes": { "DelaySeconds": "soon" } } }),
            "/config/attributes/DelaySeconds",
            "integer",
        ),
        (json!({ "resourceType": "sqs_queue", "resourceId": "bad queue", "config": null }), "/resourceId", "bad queue"),
        (json!({ "resourceType": "s3_bucket", "resourceId": "ok-bucket" }), "/config", "config"),
        (json!({ "resourceType": "s3_bucket", "resourceId": "", "config": null }), "/resourceId", ""),
    ];
    for (payload, path, mentions) in cases {
        let v = refused(&t.db, payload.clone()).await;
        assert!(
            v.iter().any(|(p, m)| p == path && m.contains(mentions)),
            "{payload}: expected a violation at `{path}` mentioning `{mentions}`, got {v:?}"
        );
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);
}

#[tokio::test]
async fn a_misspelt_top_level_field_is_refused_naming_it() {
    let t = fresh_db().await;
    let cases = [
        (
            json!({ "resourceType": "s3_bucket", "resourceId": "ok-bucket", "config": {}, "region": "eu-west-1" }),
            "region",
        ),
        (
            json!({ "resourceType": "s3_bucket", "resourceId": "ok-bucket", "config": null, "resourceID": "x" }),
            "resourceID",
        ),
    ];
    for (payload, field) in cases {
        let v = refused(&t.db, payload.clone()).await;
        assert!(v.iter().any(|(p, m)| p.is_empty() && m.contains(&format!("'{field}'"))), "{payload}: {v:?}");
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);
}

#[tokio::test]
async fn good_payloads_are_accepted_and_identical_intents_collapse() {
    let t = fresh_db().await;
    let job = SyncAws::upsert("s3_bucket", "ok-bucket", json!({ "versioning": true }));
    let first = outbox::enqueue(&t.db, &job, EnqueueOpts::new()).await.expect("enqueue");
    let second = outbox::enqueue(&t.db, &job, EnqueueOpts::new()).await.expect("enqueue");
    assert_eq!(first.id(), second.id());
    assert!(matches!(second, outbox::Enqueued::Existing(_)));
    outbox::enqueue(&t.db, &SyncAws::delete("s3_bucket", "ok-bucket"), EnqueueOpts::new()).await.expect("delete");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 2);
}

#[tokio::test]
async fn a_provider_registered_by_the_application_is_known_at_enqueue() {
    use outbox::Violation;
    use outbox_aws::{Aws, BoxFuture, Provider};

    struct Topic;
    impl Provider for Topic {
        fn resource_type(&self) -> &'static str {
            "test_topic"
        }
        fn check(&self, resource_id: &str, _config: Option<&serde_json::Value>) -> Vec<Violation> {
            if resource_id.starts_with("topic-") {
                Vec::new()
            } else {
                vec![Violation { path: "/resourceId".into(), message: "topics are named topic-*".into() }]
            }
        }
        fn apply<'a>(
            &'a self,
            _: &'a Aws,
            _: &'a str,
            _: &'a serde_json::Value,
        ) -> BoxFuture<'a, outbox_aws::Result<serde_json::Value>> {
            Box::pin(async { Ok(json!({})) })
        }
        fn delete<'a>(&'a self, _: &'a Aws, _: &'a str) -> BoxFuture<'a, outbox_aws::Result<serde_json::Value>> {
            Box::pin(async { Ok(json!({})) })
        }
        fn exists<'a>(&'a self, _: &'a Aws, _: &'a str) -> BoxFuture<'a, outbox_aws::Result<bool>> {
            Box::pin(async { Ok(true) })
        }
    }
    outbox_aws::register_provider(Topic).expect("register");
    assert!(
        matches!(outbox_aws::register_provider(Topic), Err(outbox_aws::Error::DuplicateProvider(t)) if t == "test_topic")
    );
    let t = fresh_db().await;
    outbox::enqueue(&t.db, &SyncAws::upsert("test_topic", "topic-a", json!({})), EnqueueOpts::new())
        .await
        .expect("known now");
    // The config's shape is the provider's: `sync_aws` refuses unknown fields beside it, never inside it.
    let free_form = SyncAws::upsert("test_topic", "topic-b", json!({ "anyField": { "deep": [1, "two"] } }));
    outbox::enqueue(&t.db, &free_form, EnqueueOpts::new()).await.expect("a free-form config");
    let v = refused(&t.db, json!({ "resourceType": "test_topic", "resourceId": "b", "config": {} })).await;
    assert_eq!(v, [("/resourceId".to_owned(), "topics are named topic-*".to_owned())]);
}
