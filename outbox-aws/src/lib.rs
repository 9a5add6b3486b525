//! # outbox-aws
//!
//! AWS resources kept in step with the database: the `sync_aws` job kind ([`SyncAws`]) makes one
//! resource match a desired config, idempotently, and [`reconcile`] reports resources that no longer
//! match what the latest completed job left.
//!
//! Providers ([`Provider`]) are registered by `resourceType`; the built-ins run on the official SDK:
//!
//! | `resourceType` | `resourceId` | `config` |
//! |---|---|---|
//! | `s3_bucket` | bucket name | `region`, `versioning`, `tags` ([`S3BucketConfig`]) |
//! | `s3_object` | `bucket/key` | `body`, `encoding`, `contentType`, `metadata` ([`S3ObjectConfig`]) |
//! | `sqs_queue` | queue name | `attributes` ([`SqsQueueConfig`]) |
//!
//! A `null` config deletes; "already exists" and "already gone" count as done. Throttling, 5xx and
//! network failures retry with backoff; validation and access errors fail the job at once.
//!
//! Credentials come from the standard AWS chain (or [`AwsOpts::static_credentials`]) and never enter
//! payloads, job rows or logs; an error answer that echoes the session token has it cut out before the SDK
//! traces the answer or an error quotes it. `AWS_ENDPOINT_URL` or [`AwsOpts::endpoint_url`] points the
//! clients at an S3/SQS-compatible server (path-style addressing is then on). TLS is rustls on ring.
//!
//! ```no_run
//! use outbox_aws::{Aws, AwsOpts, SyncAws};
//! use outbox::{EnqueueOpts, Worker};
//! use serde_json::json;
//!
//! # async fn demo(db: &sea_orm::DatabaseConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let job = SyncAws::upsert("s3_bucket", "invoices", json!({ "versioning": true, "tags": { "team": "billing" } }));
//! outbox::enqueue(db, &job, EnqueueOpts::new()).await?;
//!
//! let aws = Aws::connect(AwsOpts::new()).await?;
//! let worker = outbox_aws::register_handlers(Worker::builder(db), &aws).build().await?;
//! worker.drain().await?;
//!
//! let report = outbox_aws::reconcile(db, &aws, outbox_aws::ReconcileOpts::new()).await?;
//! assert!(report.is_clean());
//! # Ok(()) }
//! ```

mod config;
mod error;
mod provider;
mod reconcile;
mod redact;
mod registry;
mod s3_bucket;
mod s3_object;
mod sqs_queue;
mod sync_aws;

pub use config::{Aws, AwsOpts};
pub use error::{Error, Result};
pub use provider::{BoxFuture, ConfigSchema, Provider};
pub use reconcile::{Discrepancy, DiscrepancyKind, ReconcileOpts, Report, reconcile, reconcile_at_start};
pub use registry::{provider, register_provider, resource_types};
pub use s3_bucket::S3BucketConfig;
pub use s3_object::{BodyEncoding, S3ObjectConfig};
pub use sqs_queue::{AttributeValue, SqsQueueConfig};
pub use sync_aws::{SyncAws, register_handlers};
