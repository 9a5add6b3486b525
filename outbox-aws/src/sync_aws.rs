//! The `sync_aws` job kind and its handler.

use outbox::{Job, JobContext, JobError, Violation, WorkerBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Aws;
use crate::provider::violation;
use crate::registry;

/// Makes one AWS resource match `config`: present creates the resource or updates it where it differs;
/// `null` makes sure it is absent. Which resource is `resourceType` (a registered [`crate::Provider`]:
/// `s3_bucket`, `s3_object`, `sqs_queue`) plus `resourceId`; the config's shape is the provider's.
///
/// `config` must be given, as `null` for a delete: a payload without it is refused rather than read as a
/// delete. Unknown resource types and malformed configs are refused at enqueue, naming the field.
///
/// Up to 8 attempts by default (throttling, a bucket whose own job has not run yet); override per job
/// with `EnqueueOpts::max_attempts`.
///
/// The job output records `resourceType`, `resourceId`, `present` (what the job left), and what
/// identifies the result (`arn`, `queueUrl`, `etag`).
#[derive(Job, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[job(kind = "sync_aws", max_attempts = 8, sequence = "aws:{resourceType}/{resourceId}", validate = Self::check)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncAws {
    /// The provider: `s3_bucket`, `s3_object`, `sqs_queue`, or one registered by the application.
    #[schemars(length(min = 1))]
    pub resource_type: String,
    /// The resource within the provider: a bucket name, `bucket/key`, a queue name.
    #[schemars(length(min = 1))]
    pub resource_id: String,
    /// The desired state, or `null` for "absent".
    #[schemars(required)]
    pub config: Option<Value>,
}

impl SyncAws {
    /// The job that makes `resource_type` `resource_id` match `config`.
    pub fn upsert(resource_type: impl Into<String>, resource_id: impl Into<String>, config: Value) -> Self {
        SyncAws { resource_type: resource_type.into(), resource_id: resource_id.into(), config: Some(config) }
    }

    /// The job that makes sure `resource_type` `resource_id` does not exist.
    pub fn delete(resource_type: impl Into<String>, resource_id: impl Into<String>) -> Self {
        SyncAws { resource_type: resource_type.into(), resource_id: resource_id.into(), config: None }
    }

    /// Rules beyond the schema, checked at enqueue and before the handler runs: a known resource type,
    /// and the provider's own checks of the id and config.
    fn check(&self) -> Result<(), Vec<Violation>> {
        let violations = match registry::provider(&self.resource_type) {
            Ok(p) => p.check(&self.resource_id, self.config.as_ref()),
            Err(e) => vec![violation("/resourceType", e.to_string())],
        };
        if violations.is_empty() { Ok(()) } else { Err(violations) }
    }
}

/// Registers the `sync_aws` handler on `builder`, calling AWS through `aws`.
pub fn register_handlers(builder: WorkerBuilder, aws: &Aws) -> WorkerBuilder {
    let aws = aws.clone();
    builder.register(move |job: SyncAws, ctx: JobContext| handle(aws.clone(), job, ctx))
}

async fn handle(aws: Aws, job: SyncAws, ctx: JobContext) -> Result<Value, JobError> {
    let SyncAws { resource_type, resource_id, config } = job;
    let provider = registry::provider(&resource_type).map_err(JobError::permanent)?;
    let present = config.is_some();
    let result = match &config {
        Some(config) => provider.apply(&aws, &resource_id, config).await,
        None => provider.delete(&aws, &resource_id).await,
    };
    match result {
        Ok(mut output) => {
            if let Some(map) = output.as_object_mut() {
                map.insert("resourceType".into(), resource_type.clone().into());
                map.insert("resourceId".into(), resource_id.clone().into());
                map.insert("present".into(), present.into());
            }
            tracing::info!(job_id = ctx.id(), resource_type = %resource_type, resource_id = %resource_id, present,
                attempt = ctx.attempt(), "aws resource in sync");
            Ok(output)
        }
        Err(e) => {
            tracing::warn!(job_id = ctx.id(), resource_type = %resource_type, resource_id = %resource_id,
                retryable = e.is_retryable(), attempt = ctx.attempt(), error = %e, "aws sync failed");
            Err(e.into_job_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox::Kind;
    use serde_json::json;

    #[test]
    fn config_is_required_and_may_be_null() {
        let kind = Kind::of::<SyncAws>().expect("kind");
        let missing = kind.violations(&json!({"resourceType": "s3_bucket", "resourceId": "abc"}));
        assert!(missing.iter().any(|v| v.message.contains("config")), "{missing:?}");
        assert!(kind.violations(&json!({"resourceType": "s3_bucket", "resourceId": "abc", "config": null})).is_empty());
        let typo = kind.violations(&json!({"resourceType": "s3_bucket", "resourceId": "abc", "confg": {}}));
        assert!(!typo.is_empty());
    }

    #[test]
    fn unknown_types_name_the_known_ones() {
        let kind = Kind::of::<SyncAws>().expect("kind");
        let v = kind.violations(&json!({"resourceType": "dynamo_table", "resourceId": "t", "config": {}}));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].path, "/resourceType");
        assert!(v[0].message.contains("s3_bucket, s3_object, sqs_queue"), "{}", v[0].message);
    }
}
