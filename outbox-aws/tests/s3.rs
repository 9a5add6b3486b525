//! `s3_bucket` and `s3_object` against a real moto server.

mod common;

use std::collections::BTreeMap;

use common::{aws, completed, endpoint, enqueue, sync, unique};
use outbox::JobStatus;
use outbox_aws::SyncAws;
use outbox_tests::fresh_db;
use serde_json::json;

async fn bucket_count(aws: &outbox_aws::Aws, name: &str) -> usize {
    let out = aws.s3().list_buckets().send().await.expect("list buckets");
    out.buckets().iter().filter(|b| b.name() == Some(name)).count()
}

async fn tags(aws: &outbox_aws::Aws, bucket: &str) -> BTreeMap<String, String> {
    match aws.s3().get_bucket_tagging().bucket(bucket).send().await {
        Ok(out) => out.tag_set().iter().map(|t| (t.key().to_owned(), t.value().to_owned())).collect(),
        Err(_) => BTreeMap::new(),
    }
}

/// The bucket's versioning status, read from the raw answer too: moto names the root element of its
/// answer differently from S3, which the SDK refuses to parse.
async fn versioning(aws: &outbox_aws::Aws, bucket: &str) -> Option<String> {
    match aws.s3().get_bucket_versioning().bucket(bucket).send().await {
        Ok(out) => out.status().map(|s| s.as_str().to_owned()),
        Err(e) => {
            let raw = e.raw_response().expect("a versioning answer");
            assert!(raw.status().is_success(), "GetBucketVersioning failed: {e:?}");
            let xml = String::from_utf8_lossy(raw.body().bytes().expect("body")).into_owned();
            let start = xml.find("<Status>")? + "<Status>".len();
            Some(xml[start..start + xml[start..].find("</Status>")?].to_owned())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_bucket_twice_leaves_one_bucket_and_two_completed_jobs() {
    let Some(endpoint) = endpoint("creating_a_bucket_twice") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let bucket = unique("twice");
    let job = SyncAws::upsert("s3_bucket", &bucket, json!({ "tags": { "team": "billing" } }));

    let first = completed(&sync(&t.db, &aws, &job).await);
    let second = completed(&sync(&t.db, &aws, &job).await);
    assert_eq!(first["created"], true);
    assert_eq!(second["created"], false, "{second}");
    assert_eq!(second["changed"], json!([]), "nothing left to change: {second}");
    assert_eq!(first["arn"], format!("arn:aws:s3:::{bucket}"));
    assert_eq!((first["present"].clone(), first["resourceId"].clone()), (json!(true), json!(bucket)));
    assert_eq!(bucket_count(&aws, &bucket).await, 1);
    let done = outbox_tests::scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await;
    assert_eq!(done, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_changes_versioning_and_tags() {
    let Some(endpoint) = endpoint("an_update_changes_versioning_and_tags") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let bucket = unique("update");
    completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({ "tags": { "a": "1" } }))).await);
    assert_eq!(tags(&aws, &bucket).await, BTreeMap::from([("a".to_owned(), "1".to_owned())]));

    let update = json!({ "versioning": true, "tags": { "a": "2", "b": "3" } });
    let out = completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, update)).await);
    assert_eq!(out["changed"], json!(["versioning", "tags"]), "{out}");
    assert_eq!(out["versioning"], "Enabled");
    assert_eq!(versioning(&aws, &bucket).await.as_deref(), Some("Enabled"));
    let want = BTreeMap::from([("a".to_owned(), "2".to_owned()), ("b".to_owned(), "3".to_owned())]);
    assert_eq!(tags(&aws, &bucket).await, want);

    // The same config again changes nothing.
    let update = json!({ "versioning": true, "tags": { "a": "2", "b": "3" } });
    let out = completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, update)).await);
    assert_eq!(out["changed"], json!([]), "{out}");

    // Versioning off means suspended; `{}` removes every tag.
    let out = completed(
        &sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({ "versioning": false, "tags": {} }))).await,
    );
    assert_eq!(out["changed"], json!(["versioning", "tags"]), "{out}");
    assert_eq!(versioning(&aws, &bucket).await.as_deref(), Some("Suspended"));
    assert!(tags(&aws, &bucket).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_bucket_twice_succeeds() {
    let Some(endpoint) = endpoint("deleting_a_bucket_twice_succeeds") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let bucket = unique("delete");
    completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({}))).await);
    assert_eq!(bucket_count(&aws, &bucket).await, 1);

    let first = completed(&sync(&t.db, &aws, &SyncAws::delete("s3_bucket", &bucket)).await);
    let second = completed(&sync(&t.db, &aws, &SyncAws::delete("s3_bucket", &bucket)).await);
    assert_eq!((first["deleted"].clone(), second["deleted"].clone()), (json!(true), json!(false)));
    assert_eq!(first["present"], false);
    assert_eq!(bucket_count(&aws, &bucket).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_cannot_move_to_another_region() {
    let Some(endpoint) = endpoint("a_bucket_cannot_move_to_another_region") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let bucket = unique("region");
    let out =
        completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({ "region": "eu-west-1" }))).await);
    assert_eq!(out["region"], "eu-west-1");
    let moved = sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({ "region": "us-west-2" }))).await;
    assert_eq!(moved.status, JobStatus::Failed);
    assert_eq!(moved.attempts, 1, "a conflict is permanent");
    let error = moved.last_error.unwrap_or_default();
    assert!(error.contains("lives in `eu-west-1`") && error.contains("cannot move"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_put_overwritten_and_deleted_with_their_etag() {
    let Some(endpoint) = endpoint("objects_are_put_overwritten_and_deleted") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let bucket = unique("objects");
    completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({}))).await);
    let id = format!("{bucket}/reports/2026/q4.txt");
    let body = |text: &str| json!({ "body": text, "contentType": "text/plain", "metadata": { "source": "outbox" } });

    let put = completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_object", &id, body("version one"))).await);
    // A single-part upload's ETag is the MD5 of the body.
    assert_eq!(put["etag"], format!("\"{}\"", md5_hex(b"version one")));
    assert_eq!(put["written"], true);
    let got = aws.s3().get_object().bucket(&bucket).key("reports/2026/q4.txt").send().await.expect("get");
    assert_eq!(got.content_type(), Some("text/plain"));
    assert_eq!(got.metadata().and_then(|m| m.get("source")).map(String::as_str), Some("outbox"));
    assert_eq!(got.body.collect().await.expect("body").into_bytes().as_ref(), b"version one");

    let again = completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_object", &id, body("version one"))).await);
    assert_eq!((again["written"].clone(), again["etag"].clone()), (json!(false), put["etag"].clone()));

    let over = completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_object", &id, body("version two"))).await);
    assert_eq!(over["written"], true);
    assert_eq!(over["etag"], format!("\"{}\"", md5_hex(b"version two")));
    let got = aws.s3().get_object().bucket(&bucket).key("reports/2026/q4.txt").send().await.expect("get");
    assert_eq!(got.body.collect().await.expect("body").into_bytes().as_ref(), b"version two");

    let gone = completed(&sync(&t.db, &aws, &SyncAws::delete("s3_object", &id)).await);
    assert_eq!((gone["deleted"].clone(), gone["etag"].clone()), (json!(true), over["etag"].clone()));
    let head = aws.s3().head_object().bucket(&bucket).key("reports/2026/q4.txt").send().await;
    assert!(head.is_err_and(|e| e.as_service_error().is_some_and(|s| s.is_not_found())));
    let twice = completed(&sync(&t.db, &aws, &SyncAws::delete("s3_object", &id)).await);
    assert_eq!((twice["deleted"].clone(), twice["etag"].clone()), (json!(false), json!(null)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_bodies_travel_as_base64() {
    let Some(endpoint) = endpoint("binary_bodies_travel_as_base64") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let bucket = unique("binary");
    completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({}))).await);
    let bytes: Vec<u8> = (0..=255u8).collect();
    let config = json!({ "body": aws_smithy_types::base64::encode(&bytes), "encoding": "base64" });
    let out = completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_object", format!("{bucket}/blob.bin"), config)).await);
    assert_eq!(out["size"], 256);
    let got = aws.s3().get_object().bucket(&bucket).key("blob.bin").send().await.expect("get");
    assert_eq!(got.body.collect().await.expect("body").into_bytes().as_ref(), bytes.as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_waits_for_its_bucket_then_lands() {
    let Some(endpoint) = endpoint("an_object_waits_for_its_bucket") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let bucket = unique("later");
    // The object's job runs first: a missing bucket is worth retrying, not a permanent failure.
    let object = enqueue(&t.db, &SyncAws::upsert("s3_object", format!("{bucket}/k"), json!({ "body": "x" }))).await;
    drain_once(&t.db, &aws).await;
    let row = outbox::ops::get(&t.db, &object).await.expect("get");
    assert_eq!(row.status, JobStatus::Pending, "retried, not failed: {:?}", row.last_error);
    assert!(row.last_error.as_deref().is_some_and(|e| e.contains("does not exist (yet)")), "{:?}", row.last_error);

    completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({}))).await);
    let handle = common::worker(&t.db, &aws).build().await.expect("worker").start();
    let landed =
        outbox_tests::wait_status(&t.db, &object, JobStatus::Completed, std::time::Duration::from_secs(20)).await;
    handle.shutdown().await.expect("shutdown");
    assert!(landed, "the object's retry never completed");
    let out = completed(&outbox::ops::get(&t.db, &object).await.expect("get"));
    assert_eq!(out["etag"], format!("\"{}\"", md5_hex(b"x")));
}

/// One claim-and-run pass: a worker that stops as soon as the due jobs ran once.
async fn drain_once(db: &sea_orm::DatabaseConnection, aws: &outbox_aws::Aws) {
    let builder = outbox::Worker::builder(db).retry_policy(outbox::RetryPolicy {
        base: std::time::Duration::from_secs(1),
        max: std::time::Duration::from_secs(1),
        jitter: 0.0,
    });
    outbox_aws::register_handlers(builder, aws).build().await.expect("worker").drain().await.expect("drain");
}

fn md5_hex(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    Md5::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}
