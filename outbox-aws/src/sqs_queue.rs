//! `sqs_queue`: a queue and its attributes (`resourceId` is the queue name).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_sqs::types::QueueAttributeName;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use outbox::Violation;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Aws;
use crate::error::{Error, Result, sdk};
use crate::provider::{BoxFuture, ConfigSchema, Provider, check_typed, parsed, violation};

/// An attribute value: SQS takes strings, numbers and flags are written as such for convenience.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum AttributeValue {
    /// A number of seconds, bytes, ...
    Number(i64),
    /// `true` / `false`.
    Flag(bool),
    /// Anything else, as SQS spells it (a JSON policy, a KMS key id).
    Text(String),
}

impl AttributeValue {
    fn as_sqs(&self) -> String {
        match self {
            AttributeValue::Number(n) => n.to_string(),
            AttributeValue::Flag(b) => b.to_string(),
            AttributeValue::Text(s) => s.clone(),
        }
    }
}

/// The desired state of a queue.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SqsQueueConfig {
    /// Queue attributes by their SQS names (`VisibilityTimeout`, `DelaySeconds`, ...); attributes left
    /// out are not changed.
    #[serde(default)]
    pub attributes: BTreeMap<String, AttributeValue>,
}

/// The attributes a queue's owner may set, and what their values are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Integer,
    Flag,
    Json,
    Text,
}

const ATTRIBUTES: &[(&str, Shape)] = &[
    ("ContentBasedDeduplication", Shape::Flag),
    ("DeduplicationScope", Shape::Text),
    ("DelaySeconds", Shape::Integer),
    ("FifoQueue", Shape::Flag),
    ("FifoThroughputLimit", Shape::Text),
    ("KmsDataKeyReusePeriodSeconds", Shape::Integer),
    ("KmsMasterKeyId", Shape::Text),
    ("MaximumMessageSize", Shape::Integer),
    ("MessageRetentionPeriod", Shape::Integer),
    ("Policy", Shape::Json),
    ("ReceiveMessageWaitTimeSeconds", Shape::Integer),
    ("RedriveAllowPolicy", Shape::Json),
    ("RedrivePolicy", Shape::Json),
    ("SqsManagedSseEnabled", Shape::Flag),
    ("VisibilityTimeout", Shape::Integer),
];

fn shape(name: &str) -> Option<Shape> {
    ATTRIBUTES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The `sqs_queue` provider.
pub(crate) struct SqsQueue {
    schema: ConfigSchema<SqsQueueConfig>,
}

impl SqsQueue {
    pub(crate) fn new() -> Self {
        SqsQueue { schema: ConfigSchema::new("sqs_queue config") }
    }
}

fn name_rule(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    if name.is_empty() || name.len() > 80 {
        return Some(format!("a queue name must be 1 to 80 characters long, not {}", name.len()));
    }
    if let Some(c) = stem.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
        return Some(format!(
            "queue name `{}` may hold only letters, digits, `-` and `_` (and end in `.fifo`), not {c:?}",
            name.escape_debug()
        ));
    }
    (stem.is_empty()).then(|| "a queue name needs more than `.fifo`".to_owned())
}

fn rules(name: &str, config: &SqsQueueConfig) -> Vec<Violation> {
    let mut out = Vec::new();
    for (attr, value) in &config.attributes {
        let at = format!("/config/attributes/{}", attr.replace('~', "~0").replace('/', "~1"));
        let Some(shape) = shape(attr) else {
            let known = ATTRIBUTES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
            out.push(violation(&at, format!("unknown queue attribute `{attr}`; settable attributes: {known}")));
            continue;
        };
        let text = value.as_sqs();
        let ok = match shape {
            Shape::Integer => text.parse::<i64>().is_ok(),
            Shape::Flag => text == "true" || text == "false",
            Shape::Json => serde_json::from_str::<Value>(&text).is_ok_and(|v| v.is_object()),
            Shape::Text => !text.is_empty(),
        };
        if !ok {
            let want = match shape {
                Shape::Integer => "an integer",
                Shape::Flag => "true or false",
                Shape::Json => "a JSON object (as a string)",
                Shape::Text => "a non-empty string",
            };
            out.push(violation(&at, format!("`{attr}` must be {want}, not `{}`", text.escape_debug())));
        }
    }
    let fifo_name = name.ends_with(".fifo");
    let fifo_attr = config.attributes.get("FifoQueue").map(AttributeValue::as_sqs);
    if fifo_attr.as_deref() == Some("true") && !fifo_name {
        out.push(violation("/config/attributes/FifoQueue", "a FIFO queue's name must end in `.fifo`"));
    }
    if fifo_attr.as_deref() == Some("false") && fifo_name {
        out.push(violation("/config/attributes/FifoQueue", "a queue named `*.fifo` is a FIFO queue"));
    }
    out
}

/// The attributes to send: the config's, with `FifoQueue` implied by a `.fifo` name.
fn desired(name: &str, config: &SqsQueueConfig) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = config.attributes.iter().map(|(k, v)| (k.clone(), v.as_sqs())).collect();
    if name.ends_with(".fifo") {
        out.entry("FifoQueue".into()).or_insert_with(|| "true".into());
    }
    out
}

/// Whether a live attribute value matches the desired one (flags ignore case, JSON compares parsed).
fn same(name: &str, have: Option<&String>, want: &str) -> bool {
    let Some(have) = have else { return false };
    match shape(name) {
        Some(Shape::Flag) => have.eq_ignore_ascii_case(want),
        Some(Shape::Json) => match (serde_json::from_str::<Value>(have), serde_json::from_str::<Value>(want)) {
            (Ok(a), Ok(b)) => a == b,
            _ => have == want,
        },
        _ => have == want,
    }
}

fn queue_missing<E: ProvideErrorMetadata>(e: &E) -> bool {
    matches!(e.code(), Some("QueueDoesNotExist" | "AWS.SimpleQueueService.NonExistentQueue"))
}

fn to_sqs(attrs: &BTreeMap<String, String>) -> HashMap<QueueAttributeName, String> {
    attrs.iter().map(|(k, v)| (QueueAttributeName::from(k.as_str()), v.clone())).collect()
}

async fn queue_url(aws: &Aws, name: &str, res: &str) -> Result<Option<String>> {
    match aws.sqs().get_queue_url().queue_name(name).send().await {
        Ok(out) => Ok(out.queue_url().map(str::to_owned)),
        Err(e) if queue_missing(&e) => Ok(None),
        Err(e) => Err(sdk("GetQueueUrl", res, e)),
    }
}

impl Provider for SqsQueue {
    fn resource_type(&self) -> &'static str {
        "sqs_queue"
    }

    fn check(&self, resource_id: &str, config: Option<&Value>) -> Vec<Violation> {
        let mut out: Vec<Violation> = name_rule(resource_id).map(|m| violation("/resourceId", m)).into_iter().collect();
        out.extend(check_typed(&self.schema, config, |c| rules(resource_id, c)));
        out
    }

    fn apply<'a>(&'a self, aws: &'a Aws, name: &'a str, config: &'a Value) -> BoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            let res = format!("sqs_queue {name}");
            let config = parsed(&self.schema, &res, config)?;
            let want = desired(name, &config);
            let sqs = aws.sqs();
            let mut created = false;
            let url = match queue_url(aws, name, &res).await? {
                Some(url) => url,
                None => match sqs.create_queue().queue_name(name).set_attributes(Some(to_sqs(&want))).send().await {
                    Ok(out) => {
                        created = true;
                        out.queue_url()
                            .map(str::to_owned)
                            .ok_or_else(|| Error::Internal(format!("{res}: CreateQueue returned no url")))?
                    }
                    // Created meanwhile, with other attributes: compare and update below.
                    Err(e)
                        if e.code()
                            .is_some_and(|c| c.contains("QueueNameExists") || c.contains("QueueAlreadyExists")) =>
                    {
                        queue_url(aws, name, &res).await?.ok_or_else(|| Error::NotYet {
                            resource: res.clone(),
                            message: "the queue is being created or deleted".into(),
                        })?
                    }
                    Err(e) => return Err(sdk("CreateQueue", &res, e)),
                },
            };
            let have: BTreeMap<String, String> = sqs
                .get_queue_attributes()
                .queue_url(&url)
                .attribute_names(QueueAttributeName::All)
                .send()
                .await
                .map_err(|e| sdk("GetQueueAttributes", &res, e))?
                .attributes()
                .map(|m| m.iter().map(|(k, v)| (k.as_str().to_owned(), v.clone())).collect())
                .unwrap_or_default();
            let diff: BTreeMap<String, String> =
                want.iter().filter(|(k, v)| !same(k, have.get(*k), v)).map(|(k, v)| (k.clone(), v.clone())).collect();
            if diff.contains_key("FifoQueue") {
                return Err(Error::Conflict {
                    resource: res,
                    message: "FifoQueue cannot change on an existing queue; delete and recreate it".into(),
                });
            }
            if !diff.is_empty() {
                sqs.set_queue_attributes()
                    .queue_url(&url)
                    .set_attributes(Some(to_sqs(&diff)))
                    .send()
                    .await
                    .map_err(|e| sdk("SetQueueAttributes", &res, e))?;
            }
            Ok(json!({
                "queueUrl": url,
                "arn": have.get("QueueArn"),
                "created": created,
                "changed": if created { Vec::new() } else { diff.keys().cloned().collect::<Vec<_>>() },
            }))
        })
    }

    fn delete<'a>(&'a self, aws: &'a Aws, name: &'a str) -> BoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            let res = format!("sqs_queue {name}");
            let Some(url) = queue_url(aws, name, &res).await? else {
                return Ok(json!({ "queueName": name, "deleted": false }));
            };
            let deleted = match aws.sqs().delete_queue().queue_url(&url).send().await {
                Ok(_) => true,
                Err(e) if queue_missing(&e) => false,
                Err(e) => return Err(sdk("DeleteQueue", &res, e)),
            };
            Ok(json!({ "queueName": name, "queueUrl": url, "deleted": deleted }))
        })
    }

    fn exists<'a>(&'a self, aws: &'a Aws, name: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { Ok(queue_url(aws, name, &format!("sqs_queue {name}")).await?.is_some()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_configs_are_checked_by_attribute() {
        let p = SqsQueue::new();
        let ok = json!({"attributes": {"VisibilityTimeout": 30, "DelaySeconds": "5"}});
        assert!(p.check("jobs", Some(&ok)).is_empty());
        let v = p.check("jobs", Some(&json!({"attributes": {"VisibilityTimout": 30}})));
        assert_eq!(v[0].path, "/config/attributes/VisibilityTimout");
        assert!(v[0].message.contains("VisibilityTimeout"), "{}", v[0].message);
        let v = p.check("jobs", Some(&json!({"attributes": {"DelaySeconds": "soon"}})));
        assert_eq!(v[0].path, "/config/attributes/DelaySeconds");
        let v = p.check("jobs", Some(&json!({"attributes": {"FifoQueue": true}})));
        assert_eq!(v[0].path, "/config/attributes/FifoQueue");
        assert!(p.check("bad name", None)[0].path == "/resourceId");
        assert_eq!(desired("q.fifo", &SqsQueueConfig { attributes: BTreeMap::new() })["FifoQueue"], "true");
    }

    #[test]
    fn live_values_compare_by_shape() {
        assert!(same("FifoQueue", Some(&"True".into()), "true"));
        assert!(same("Policy", Some(&r#"{"a": 1}"#.into()), r#"{"a":1}"#));
        assert!(!same("DelaySeconds", Some(&"5".into()), "6"));
        assert!(!same("DelaySeconds", None, "6"));
    }
}
