//! `s3_bucket`: a bucket with its region, versioning and tags.

use std::collections::BTreeMap;

use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration, Tag, Tagging, VersioningConfiguration,
};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use outbox::Violation;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Aws;
use crate::error::{Error, Result, sdk};
use crate::provider::{BoxFuture, ConfigSchema, Provider, check_typed, parsed, violation};

/// The desired state of a bucket (`resourceId` is the bucket name). Omitted fields are left as they are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3BucketConfig {
    /// The region the bucket lives in (default: the configured region). A bucket cannot move: an existing
    /// bucket in another region fails the job.
    pub region: Option<String>,
    /// `true`: versioning enabled; `false`: suspended (a bucket that never had it stays unversioned).
    pub versioning: Option<bool>,
    /// The bucket's complete tag set; `{}` removes every tag.
    pub tags: Option<BTreeMap<String, String>>,
}

/// The `s3_bucket` provider.
pub(crate) struct S3Bucket {
    schema: ConfigSchema<S3BucketConfig>,
}

impl S3Bucket {
    pub(crate) fn new() -> Self {
        S3Bucket { schema: ConfigSchema::new("s3_bucket config") }
    }
}

/// Why `name` is not a valid bucket name, if it is not.
pub(crate) fn bucket_name_rule(name: &str) -> Option<String> {
    let len = name.len();
    if !(3..=63).contains(&len) {
        return Some(format!("bucket name `{name}` must be 3 to 63 characters long, not {len}"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '.' || *c == '-')) {
        return Some(format!(
            "bucket name `{}` may hold only lowercase letters, digits, `.` and `-`, not {c:?}",
            name.escape_debug()
        ));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge(name.chars().next()) || !edge(name.chars().last()) {
        return Some(format!("bucket name `{name}` must begin and end with a letter or digit"));
    }
    if name.contains("..") || name.contains(".-") || name.contains("-.") {
        return Some(format!("bucket name `{name}` must not hold `..`, `.-` or `-.`"));
    }
    if name.split('.').count() == 4 && name.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())) {
        return Some(format!("bucket name `{name}` must not look like an IP address"));
    }
    if name.starts_with("xn--") || name.ends_with("-s3alias") || name.ends_with("--ol-s3") {
        return Some(format!("bucket name `{name}` uses a prefix or suffix S3 reserves"));
    }
    None
}

/// Why `region` does not look like a region name (`eu-west-1`), if it does not.
pub(crate) fn region_rule(region: &str) -> Option<String> {
    let parts: Vec<&str> = region.split('-').collect();
    let letters = |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase());
    let ok = parts.len() >= 3
        && letters(&parts[0])
        && parts[1..parts.len() - 1].iter().all(letters)
        && parts.last().is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    (!ok).then(|| format!("`{}` is not a region name like `eu-west-1`", region.escape_debug()))
}

/// The `<Status>` of a versioning answer: `None` when the bucket was never versioned.
fn versioning_status(xml: &str) -> Option<BucketVersioningStatus> {
    let start = xml.find("<Status>")? + "<Status>".len();
    let end = start + xml[start..].find("</Status>")?;
    Some(BucketVersioningStatus::from(xml[start..end].trim()))
}

fn tag_rules(tags: &BTreeMap<String, String>) -> Vec<Violation> {
    let mut out = Vec::new();
    if tags.len() > 50 {
        out.push(violation("/config/tags", format!("a bucket takes at most 50 tags, not {}", tags.len())));
    }
    for (key, value) in tags {
        let at = format!("/config/tags/{}", key.replace('~', "~0").replace('/', "~1"));
        if key.is_empty() || key.chars().count() > 128 {
            out.push(violation(&at, "a tag key must be 1 to 128 characters long"));
        } else if key.starts_with("aws:") {
            out.push(violation(&at, "tag keys beginning with `aws:` are reserved"));
        }
        if value.chars().count() > 256 {
            out.push(violation(&at, "a tag value must be at most 256 characters long"));
        }
    }
    out
}

impl Provider for S3Bucket {
    fn resource_type(&self) -> &'static str {
        "s3_bucket"
    }

    fn check(&self, resource_id: &str, config: Option<&Value>) -> Vec<Violation> {
        let mut out: Vec<Violation> =
            bucket_name_rule(resource_id).map(|m| violation("/resourceId", m)).into_iter().collect();
        out.extend(check_typed(&self.schema, config, |c| {
            let mut v: Vec<Violation> =
                c.region.as_deref().and_then(region_rule).map(|m| violation("/config/region", m)).into_iter().collect();
            if let Some(tags) = &c.tags {
                v.extend(tag_rules(tags));
            }
            v
        }));
        out
    }

    fn apply<'a>(&'a self, aws: &'a Aws, bucket: &'a str, config: &'a Value) -> BoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            let res = format!("s3_bucket {bucket}");
            let config = parsed(&self.schema, &res, config)?;
            let region = config.region.clone().unwrap_or_else(|| aws.region().to_owned());
            let s3 = aws.s3_in(&region);
            let mut changed: Vec<&str> = Vec::new();

            let exists = match s3.head_bucket().bucket(bucket).send().await {
                Ok(_) => true,
                Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => false,
                Err(e) => return Err(sdk("HeadBucket", &res, e)),
            };
            let mut created = false;
            if !exists {
                let mut req = s3.create_bucket().bucket(bucket);
                if region != "us-east-1" {
                    let location = CreateBucketConfiguration::builder()
                        .location_constraint(BucketLocationConstraint::from(region.as_str()))
                        .build();
                    req = req.create_bucket_configuration(location);
                }
                match req.send().await {
                    Ok(_) => created = true,
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_bucket_already_owned_by_you()) => {}
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_bucket_already_exists()) => {
                        return Err(Error::Conflict {
                            resource: res,
                            message: "the bucket name is taken by another account".into(),
                        });
                    }
                    Err(e) => return Err(sdk("CreateBucket", &res, e)),
                }
                if created {
                    changed.push("created");
                }
            }
            if !created && config.region.is_some() {
                let out = s3
                    .get_bucket_location()
                    .bucket(bucket)
                    .send()
                    .await
                    .map_err(|e| sdk("GetBucketLocation", &res, e))?;
                // No constraint means us-east-1; `EU` is the legacy name of eu-west-1.
                let actual = match out.location_constraint().map(|l| l.as_str()) {
                    None | Some("") => "us-east-1",
                    Some("EU") => "eu-west-1",
                    Some(other) => other,
                };
                if actual != region {
                    return Err(Error::Conflict {
                        resource: res,
                        message: format!(
                            "the bucket lives in `{actual}`, the config asks for `{region}`; a bucket cannot move"
                        ),
                    });
                }
            }

            let mut versioning = None;
            if let Some(want) = config.versioning {
                let current = match s3.get_bucket_versioning().bucket(bucket).send().await {
                    Ok(out) => Some(out.status().cloned()),
                    // Some S3-compatible servers answer with another root element: read its `Status`, and
                    // when even that fails, write the wanted state (harmless) rather than guess.
                    Err(e) => match e.raw_response().filter(|r| r.status().is_success()) {
                        Some(raw) => raw.body().bytes().map(|b| versioning_status(&String::from_utf8_lossy(b))),
                        None => return Err(sdk("GetBucketVersioning", &res, e)),
                    },
                };
                let enabled = matches!(current, Some(Some(BucketVersioningStatus::Enabled)));
                let target = match (want, &current) {
                    (true, _) if !enabled => Some(BucketVersioningStatus::Enabled),
                    (false, None) => Some(BucketVersioningStatus::Suspended),
                    (false, _) if enabled => Some(BucketVersioningStatus::Suspended),
                    _ => None,
                };
                versioning =
                    Some(current.flatten().map_or_else(|| "Unversioned".to_owned(), |s| s.as_str().to_owned()));
                if let Some(status) = target {
                    versioning = Some(status.as_str().to_owned());
                    s3.put_bucket_versioning()
                        .bucket(bucket)
                        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
                        .send()
                        .await
                        .map_err(|e| sdk("PutBucketVersioning", &res, e))?;
                    changed.push("versioning");
                }
            }

            if let Some(want) = &config.tags {
                let current: BTreeMap<String, String> = match s3.get_bucket_tagging().bucket(bucket).send().await {
                    Ok(out) => out.tag_set().iter().map(|t| (t.key().to_owned(), t.value().to_owned())).collect(),
                    Err(e) if e.code() == Some("NoSuchTagSet") => BTreeMap::new(),
                    Err(e) => return Err(sdk("GetBucketTagging", &res, e)),
                };
                if &current != want {
                    if want.is_empty() {
                        s3.delete_bucket_tagging()
                            .bucket(bucket)
                            .send()
                            .await
                            .map_err(|e| sdk("DeleteBucketTagging", &res, e))?;
                    } else {
                        let internal =
                            |e: aws_sdk_s3::error::BuildError| Error::Internal(format!("building tags: {e}"));
                        let tags = want
                            .iter()
                            .map(|(k, v)| Tag::builder().key(k).value(v).build().map_err(internal))
                            .collect::<Result<Vec<_>>>()?;
                        let tagging = Tagging::builder().set_tag_set(Some(tags)).build().map_err(internal)?;
                        s3.put_bucket_tagging()
                            .bucket(bucket)
                            .tagging(tagging)
                            .send()
                            .await
                            .map_err(|e| sdk("PutBucketTagging", &res, e))?;
                    }
                    changed.push("tags");
                }
            }
            Ok(json!({
                "arn": format!("arn:aws:s3:::{bucket}"),
                "bucket": bucket,
                "region": region,
                "created": created,
                "versioning": versioning,
                "changed": changed,
            }))
        })
    }

    fn delete<'a>(&'a self, aws: &'a Aws, bucket: &'a str) -> BoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            let res = format!("s3_bucket {bucket}");
            let deleted = match aws.s3().delete_bucket().bucket(bucket).send().await {
                Ok(_) => true,
                Err(e) if e.code() == Some("NoSuchBucket") => false,
                // Objects may still be on their way out (their own jobs): worth another attempt.
                Err(e) if e.code() == Some("BucketNotEmpty") => {
                    return Err(Error::NotYet {
                        resource: res,
                        message: "the bucket still holds objects; delete them first".into(),
                    });
                }
                Err(e) => return Err(sdk("DeleteBucket", &res, e)),
            };
            Ok(json!({ "arn": format!("arn:aws:s3:::{bucket}"), "bucket": bucket, "deleted": deleted }))
        })
    }

    fn exists<'a>(&'a self, aws: &'a Aws, bucket: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            match aws.s3().head_bucket().bucket(bucket).send().await {
                Ok(_) => Ok(true),
                Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
                Err(e) => Err(sdk("HeadBucket", format!("s3_bucket {bucket}"), e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_follow_s3_rules() {
        for ok in ["abc", "my-bucket.v2", "a1b", &"a".repeat(63)] {
            assert_eq!(bucket_name_rule(ok), None, "{ok}");
        }
        for bad in
            ["ab", "Upper", "-lead", "trail-", "a..b", "a.-b", "192.168.0.1", "xn--abc", "my_bucket", &"a".repeat(64)]
        {
            assert!(bucket_name_rule(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn versioning_status_is_read_from_any_root() {
        let xml = |inner: &str| {
            format!(
                r#"<?xml version="1.0"?><GetBucketVersioningResponse xmlns="x">{inner}</GetBucketVersioningResponse>"#
            )
        };
        assert_eq!(versioning_status(&xml("<Status>Enabled</Status>")), Some(BucketVersioningStatus::Enabled));
        assert_eq!(versioning_status(&xml("<Status>Suspended</Status>")), Some(BucketVersioningStatus::Suspended));
        assert_eq!(versioning_status(&xml("")), None);
    }

    #[test]
    fn regions_look_like_regions() {
        for ok in ["us-east-1", "eu-west-3", "us-gov-west-1", "ap-southeast-2"] {
            assert_eq!(region_rule(ok), None, "{ok}");
        }
        for bad in ["", "us", "us-east", "US-EAST-1", "us-east-one", "us--1"] {
            assert!(region_rule(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn configs_are_checked_field_by_field() {
        let p = S3Bucket::new();
        assert!(p.check("good-bucket", Some(&json!({"versioning": true, "tags": {"team": "a"}}))).is_empty());
        assert!(p.check("good-bucket", None).is_empty());
        let v = p.check("good-bucket", Some(&json!({"versioning": "yes"})));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].path, "/config/versioning");
        let v = p.check("good-bucket", Some(&json!({"colour": "red"})));
        assert!(v[0].path == "/config" && v[0].message.contains("colour"), "{v:?}");
        let v = p.check("Bad_Bucket", Some(&json!({"region": "mars", "tags": {"aws:x": "1"}})));
        let paths: Vec<&str> = v.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(paths, ["/resourceId", "/config/region", "/config/tags/aws:x"]);
    }
}
