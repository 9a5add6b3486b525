//! The reconciler hook against a real moto server: drift behind the queue's back is reported, never fixed.

mod common;

use common::{aws, completed, endpoint, sync, unique};
use outbox_aws::{DiscrepancyKind, ReconcileOpts, SyncAws};
use outbox_tests::{fresh_db, scalar};
use serde_json::json;

async fn bucket_exists(aws: &outbox_aws::Aws, bucket: &str) -> bool {
    aws.s3().head_bucket().bucket(bucket).send().await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_behind_the_queues_back_is_reported_and_left_alone() {
    let Some(endpoint) = endpoint("drift_behind_the_queues_back_is_reported") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let (kept, lost, revived, queue) = (unique("kept"), unique("lost"), unique("revived"), unique("lostq"));
    for bucket in [&kept, &lost, &revived] {
        completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", bucket, json!({}))).await);
    }
    completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_object", format!("{kept}/a.txt"), json!({ "body": "a" }))).await);
    completed(&sync(&t.db, &aws, &SyncAws::upsert("sqs_queue", &queue, json!({}))).await);
    completed(&sync(&t.db, &aws, &SyncAws::delete("s3_bucket", &revived)).await);
    let clean = outbox_aws::reconcile(&t.db, &aws, ReconcileOpts::new()).await.expect("reconcile");
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!((clean.resources_checked, clean.jobs_scanned, clean.ok), (5, 6, 5));

    // Behind the queue's back: a bucket and a queue deleted, a deleted bucket created again.
    aws.s3().delete_bucket().bucket(&lost).send().await.expect("delete bucket by hand");
    let url = aws.sqs().get_queue_url().queue_name(&queue).send().await.expect("url");
    aws.sqs().delete_queue().queue_url(url.queue_url().expect("url")).send().await.expect("delete queue by hand");
    aws.s3().create_bucket().bucket(&revived).send().await.expect("create bucket by hand");
    let jobs_before = scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await;

    let report = outbox_aws::reconcile(&t.db, &aws, ReconcileOpts::new()).await.expect("reconcile");
    assert!(!report.is_clean());
    assert_eq!((report.resources_checked, report.ok), (5, 2), "{report:?}");
    assert_eq!((report.missing, report.should_be_absent, report.check_failed), (2, 1, 0), "{report:?}");
    let mut found: Vec<(&str, &str, DiscrepancyKind)> =
        report.discrepancies.iter().map(|d| (d.resource_type.as_str(), d.resource_id.as_str(), d.kind)).collect();
    found.sort();
    let mut want = vec![
        ("s3_bucket", lost.as_str(), DiscrepancyKind::Missing),
        ("s3_bucket", revived.as_str(), DiscrepancyKind::ShouldBeAbsent),
        ("sqs_queue", queue.as_str(), DiscrepancyKind::Missing),
    ];
    want.sort();
    assert_eq!(found, want);

    // Report only: nothing was fixed, no job was written.
    assert!(!bucket_exists(&aws, &lost).await);
    assert!(bucket_exists(&aws, &revived).await);
    assert!(aws.sqs().get_queue_url().queue_name(&queue).send().await.is_err());
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, jobs_before);

    let capped = outbox_aws::reconcile(&t.db, &aws, ReconcileOpts::new().max_listed(1)).await.expect("reconcile");
    assert_eq!((capped.discrepancies.len(), capped.unlisted, capped.missing), (1, 2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_that_cannot_be_checked_are_reported_as_such() {
    let Some(endpoint) = endpoint("resources_that_cannot_be_checked") else { return };
    let (t, aws) = (fresh_db().await, aws(&endpoint).await);
    let bucket = unique("unreachable");
    completed(&sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({}))).await);

    // Nothing listens on a freshly released port.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let dead = common::opts(&format!("http://127.0.0.1:{port}")).sdk_max_attempts(1);
    let dead = outbox_aws::Aws::connect(dead).await.expect("clients");
    let report = outbox_aws::reconcile(&t.db, &dead, ReconcileOpts::new()).await.expect("reconcile");
    assert_eq!((report.check_failed, report.missing, report.ok), (1, 0, 0), "{report:?}");
    let detail = report.discrepancies[0].detail.clone().unwrap_or_default();
    assert!(detail.contains("HeadBucket") && detail.contains(&bucket), "{detail}");
}
