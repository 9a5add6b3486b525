//! `sqs_queue` against a real moto server.

mod common;

use std::collections::HashMap;

use aws_sdk_sqs::types::QueueAttributeName;
use common::{aws, completed, endpoint, sync, unique};
use outbox_aws::SyncAws;
use outbox_tests::fresh_db;
use serde_json::json;

async fn attributes(aws: &outbox_aws::Aws, url: &str) -> HashMap<QueueAttributeName, String> {
    let out = aws
        .sqs()
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .expect("queue attributes");
    out.attributes().cloned().unwrap_or_default()
}

async fn exists(aws: &outbox_aws::Aws, name: &str) -> bool {
    aws.sqs().get_queue_url().queue_name(name).send().await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_is_created_updated_and_deleted() {
    let Some(endpoint) = endpoint("a_queue_is_created_updated_and_deleted") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let name = unique("jobs");

    let create = json!({ "attributes": { "VisibilityTimeout": 45, "MessageRetentionPeriod": "86400" } });
    let out = completed(&sync(&t.db, &aws, &SyncAws::upsert("sqs_queue", &name, create.clone())).await);
    assert_eq!(out["created"], true);
    let url = out["queueUrl"].as_str().expect("queue url").to_owned();
    assert!(url.ends_with(&name), "{url}");
    assert!(out["arn"].as_str().is_some_and(|a| a.starts_with("arn:aws:sqs:") && a.ends_with(&name)), "{out}");
    let attrs = attributes(&aws, &url).await;
    assert_eq!(attrs[&QueueAttributeName::VisibilityTimeout], "45");
    assert_eq!(attrs[&QueueAttributeName::MessageRetentionPeriod], "86400");

    // Creating again changes nothing.
    let again = completed(&sync(&t.db, &aws, &SyncAws::upsert("sqs_queue", &name, create)).await);
    assert_eq!((again["created"].clone(), again["changed"].clone()), (json!(false), json!([])));
    assert_eq!(again["queueUrl"], url.as_str());

    let update =
        json!({ "attributes": { "VisibilityTimeout": 60, "DelaySeconds": 5, "MessageRetentionPeriod": 86400 } });
    let out = completed(&sync(&t.db, &aws, &SyncAws::upsert("sqs_queue", &name, update)).await);
    assert_eq!(out["changed"], json!(["DelaySeconds", "VisibilityTimeout"]), "{out}");
    let attrs = attributes(&aws, &url).await;
    assert_eq!(attrs[&QueueAttributeName::VisibilityTimeout], "60");
    assert_eq!(attrs[&QueueAttributeName::DelaySeconds], "5");

    let gone = completed(&sync(&t.db, &aws, &SyncAws::delete("sqs_queue", &name)).await);
    assert_eq!(gone["deleted"], true);
    assert!(!exists(&aws, &name).await);
    let twice = completed(&sync(&t.db, &aws, &SyncAws::delete("sqs_queue", &name)).await);
    assert_eq!(twice["deleted"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_queues_take_their_type_from_the_name() {
    let Some(endpoint) = endpoint("fifo_queues_take_their_type_from_the_name") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let name = format!("{}.fifo", unique("orders"));
    let config = json!({ "attributes": { "ContentBasedDeduplication": true } });
    let out = completed(&sync(&t.db, &aws, &SyncAws::upsert("sqs_queue", &name, config)).await);
    let attrs = attributes(&aws, out["queueUrl"].as_str().expect("url")).await;
    assert_eq!(attrs[&QueueAttributeName::FifoQueue].to_lowercase(), "true");
    assert_eq!(attrs[&QueueAttributeName::ContentBasedDeduplication].to_lowercase(), "true");

    // A standard queue of the same name cannot be had: refused at enqueue, naming the attribute.
    let standard = SyncAws::upsert("sqs_queue", &name, json!({ "attributes": { "FifoQueue": false } }));
    let err = outbox::enqueue(&t.db, &standard, outbox::EnqueueOpts::new()).await.expect_err("refused");
    assert!(err.to_string().contains("/config/attributes/FifoQueue"), "{err}");
}
