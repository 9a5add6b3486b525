//! `s3_object`: an object's body, content type and metadata (`resourceId` is `bucket/key`).

use std::collections::BTreeMap;

use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use md5::{Digest, Md5};
use outbox::Violation;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Aws;
use crate::error::{Error, Result, sdk};
use crate::provider::{BoxFuture, ConfigSchema, Provider, check_typed, parsed, violation};
use crate::s3_bucket::bucket_name_rule;

/// How an object's `body` is written in the payload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BodyEncoding {
    /// The body is the object's content as text (default).
    #[default]
    Utf8,
    /// The body is the object's bytes in standard base64.
    Base64,
}

/// The desired state of an object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3ObjectConfig {
    /// The object's content.
    pub body: String,
    /// How `body` is written (default `utf8`).
    #[serde(default)]
    pub encoding: BodyEncoding,
    /// The `Content-Type` to store; omitted, S3's default on a write and not compared.
    pub content_type: Option<String>,
    /// The object's complete user metadata (lowercase keys); omitted, none on a write and not compared.
    pub metadata: Option<BTreeMap<String, String>>,
}

/// The `s3_object` provider.
pub(crate) struct S3Object {
    schema: ConfigSchema<S3ObjectConfig>,
}

impl S3Object {
    pub(crate) fn new() -> Self {
        S3Object { schema: ConfigSchema::new("s3_object config") }
    }
}

/// `bucket/key` split, or why it cannot be.
fn split(resource_id: &str) -> std::result::Result<(&str, &str), String> {
    let Some((bucket, key)) = resource_id.split_once('/') else {
        return Err(format!("`{}` is not `bucket/key`", resource_id.escape_debug()));
    };
    if let Some(rule) = bucket_name_rule(bucket) {
        return Err(rule);
    }
    if key.is_empty() || key.len() > 1024 {
        return Err(format!("the object key must be 1 to 1024 bytes long, not {}", key.len()));
    }
    Ok((bucket, key))
}

/// `bucket/key` of a resource id [`Provider::check`] has accepted; a conflict naming `res` otherwise.
fn located<'a>(resource_id: &'a str, res: &str) -> Result<(&'a str, &'a str)> {
    split(resource_id).map_err(|message| Error::Conflict { resource: res.to_owned(), message })
}

/// The object's head, `None` when it (or its bucket) does not exist.
async fn head(aws: &Aws, bucket: &str, key: &str, res: &str) -> Result<Option<HeadObjectOutput>> {
    match aws.s3().head_object().bucket(bucket).key(key).send().await {
        Ok(head) => Ok(Some(head)),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(None),
        Err(e) => Err(sdk("HeadObject", res, e)),
    }
}

fn body(config: &S3ObjectConfig) -> std::result::Result<Vec<u8>, String> {
    match config.encoding {
        BodyEncoding::Utf8 => Ok(config.body.as_bytes().to_vec()),
        BodyEncoding::Base64 => {
            aws_smithy_types::base64::decode(&config.body).map_err(|e| format!("body is not valid base64: {e}"))
        }
    }
}

fn rules(config: &S3ObjectConfig) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Err(e) = body(config) {
        out.push(violation("/config/body", e));
    }
    if let Some(meta) = &config.metadata {
        for key in meta.keys() {
            let ok = !key.is_empty()
                && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
            if !ok {
                let at = format!("/config/metadata/{}", key.replace('~', "~0").replace('/', "~1"));
                out.push(violation(&at, "metadata keys are lowercase letters, digits, `-`, `_` and `.`"));
            }
        }
        let size: usize = meta.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > 2048 {
            out.push(violation("/config/metadata", format!("user metadata is limited to 2 KB, this is {size} bytes")));
        }
    }
    out
}

impl Provider for S3Object {
    fn resource_type(&self) -> &'static str {
        "s3_object"
    }

    fn check(&self, resource_id: &str, config: Option<&Value>) -> Vec<Violation> {
        let mut out: Vec<Violation> =
            split(resource_id).err().map(|m| violation("/resourceId", m)).into_iter().collect();
        out.extend(check_typed(&self.schema, config, rules));
        out
    }

    fn apply<'a>(&'a self, aws: &'a Aws, resource_id: &'a str, config: &'a Value) -> BoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            let res = format!("s3_object {resource_id}");
            let config = parsed(&self.schema, &res, config)?;
            let (bucket, key) = located(resource_id, &res)?;
            let bytes = body(&config).map_err(|m| Error::Conflict { resource: res.clone(), message: m })?;
            let md5 = hex::encode(Md5::digest(&bytes));
            let s3 = aws.s3();

            // A single-part upload's ETag is the body's MD5: equal ETag, type and metadata mean done.
            if let Some(head) = head(aws, bucket, key, &res).await? {
                let same_body = head.e_tag().map(|t| t.trim_matches('"')) == Some(md5.as_str());
                let same_type = config.content_type.as_deref().is_none_or(|t| head.content_type() == Some(t));
                let same_meta = config.metadata.as_ref().is_none_or(|want| {
                    let have: BTreeMap<String, String> =
                        head.metadata().map(|m| m.clone().into_iter().collect()).unwrap_or_default();
                    &have == want
                });
                if same_body && same_type && same_meta {
                    return Ok(json!({
                        "bucket": bucket,
                        "key": key,
                        "etag": head.e_tag(),
                        "versionId": head.version_id(),
                        "size": bytes.len(),
                        "written": false,
                    }));
                }
            }
            let mut put = s3
                .put_object()
                .bucket(bucket)
                .key(key)
                .body(ByteStream::from(bytes.clone()))
                .set_content_type(config.content_type.clone());
            if let Some(meta) = &config.metadata {
                put = put.set_metadata(Some(meta.clone().into_iter().collect()));
            }
            let out = match put.send().await {
                Ok(out) => out,
                // The bucket's own job may not have run yet: worth another attempt.
                Err(e) if e.code() == Some("NoSuchBucket") => {
                    return Err(Error::NotYet {
                        resource: res,
                        message: format!("bucket `{bucket}` does not exist (yet)"),
                    });
                }
                Err(e) => return Err(sdk("PutObject", &res, e)),
            };
            Ok(json!({
                "bucket": bucket,
                "key": key,
                "etag": out.e_tag(),
                "versionId": out.version_id(),
                "size": bytes.len(),
                "written": true,
            }))
        })
    }

    fn delete<'a>(&'a self, aws: &'a Aws, resource_id: &'a str) -> BoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            let res = format!("s3_object {resource_id}");
            let (bucket, key) = located(resource_id, &res)?;
            let s3 = aws.s3();
            let etag = head(aws, bucket, key, &res).await?.and_then(|h| h.e_tag().map(str::to_owned));
            let version_id = match s3.delete_object().bucket(bucket).key(key).send().await {
                Ok(out) => out.version_id().map(str::to_owned),
                Err(e) if e.code() == Some("NoSuchBucket") => None,
                Err(e) => return Err(sdk("DeleteObject", &res, e)),
            };
            Ok(json!({
                "bucket": bucket,
                "key": key,
                "deleted": etag.is_some(),
                "etag": etag,
                "versionId": version_id,
            }))
        })
    }

    fn exists<'a>(&'a self, aws: &'a Aws, resource_id: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let res = format!("s3_object {resource_id}");
            let (bucket, key) = located(resource_id, &res)?;
            Ok(head(aws, bucket, key, &res).await?.is_some())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_ids_are_bucket_slash_key() {
        assert_eq!(split("bkt/a/b.txt"), Ok(("bkt", "a/b.txt")));
        assert!(split("bkt").is_err());
        assert!(split("bkt/").is_err());
        assert!(split("B_K/x").is_err());
    }

    #[test]
    fn configs_are_checked_field_by_field() {
        let p = S3Object::new();
        assert!(p.check("bkt/k", Some(&json!({"body": "hi", "contentType": "text/plain"}))).is_empty());
        assert!(p.check("bkt/k", Some(&json!({"body": "aGk=", "encoding": "base64"}))).is_empty());
        let v = p.check("bkt/k", Some(&json!({"body": "%%%", "encoding": "base64"})));
        assert_eq!(v[0].path, "/config/body");
        let v = p.check("bkt/k", Some(&json!({"contentType": "text/plain"})));
        assert!(v[0].path == "/config/body" && v[0].message.contains("required"), "{v:?}");
        let v = p.check("bkt/k", Some(&json!({"body": "x", "metadata": {"Owner": "me"}})));
        assert_eq!(v[0].path, "/config/metadata/Owner");
        assert_eq!(hex::encode(Md5::digest(b"hello")), "5d41402abc4b2a76b9719d911017c592");
    }
}
