//! Providers: one per `resourceType`, each making one kind of AWS resource match a config.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use outbox::{Kind, KindOpts, Violation};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::Aws;
use crate::error::{Error, Result};

/// A boxed future, as the provider methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Makes one kind of AWS resource match a desired config. Every method must be idempotent: "already
/// exists / already yours" on create and "not found" on delete are successes.
///
/// Providers are registered process-wide ([`crate::register_provider`]) so that enqueue, which knows only the
/// payload, can reject unknown types and malformed configs.
pub trait Provider: Send + Sync + 'static {
    /// The `resourceType` this provider answers to (`s3_bucket`).
    fn resource_type(&self) -> &'static str;

    /// Every problem with `resource_id` (reported at `/resourceId`) and `config` (at `/config/...`),
    /// checked at enqueue and again before each run. `config` is `None` for a delete.
    fn check(&self, resource_id: &str, config: Option<&Value>) -> Vec<Violation>;

    /// Creates the resource, or updates it where it differs from `config`. The output records what
    /// identifies the result (ARN, URL, ETag) and what changed.
    fn apply<'a>(&'a self, aws: &'a Aws, resource_id: &'a str, config: &'a Value) -> BoxFuture<'a, Result<Value>>;

    /// Makes sure the resource does not exist; already absent is a success.
    fn delete<'a>(&'a self, aws: &'a Aws, resource_id: &'a str) -> BoxFuture<'a, Result<Value>>;

    /// Whether the resource exists now (for the reconciler).
    fn exists<'a>(&'a self, aws: &'a Aws, resource_id: &'a str) -> BoxFuture<'a, Result<bool>>;
}

/// A provider's typed config: its JSON Schema (from `schemars`), compiled once, checks the raw config and
/// names every violation by its path under `/config`.
pub struct ConfigSchema<T> {
    /// The compiled schema, or why it does not compile (reported as a violation of every config).
    kind: std::result::Result<Kind, String>,
    _config: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for ConfigSchema<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSchema").field("compiled", &self.kind.is_ok()).finish_non_exhaustive()
    }
}

impl<T: JsonSchema + DeserializeOwned> ConfigSchema<T> {
    /// Compiles the schema of `T`; `name` is used in messages (`s3_bucket config`). A schema that does
    /// not compile makes every config invalid, with the reason.
    pub fn new(name: &str) -> Self {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>().to_value();
        let kind = Kind::from_schema(name, schema, KindOpts::DEFAULT).map_err(|e| e.to_string());
        ConfigSchema { kind, _config: PhantomData }
    }

    /// The JSON Schema, when it compiles.
    pub fn schema(&self) -> Option<&Value> {
        self.kind.as_ref().ok().map(Kind::schema)
    }

    /// The typed config, or every violation (paths under `/config`).
    pub fn parse(&self, config: &Value) -> std::result::Result<T, Vec<Violation>> {
        let kind = self.kind.as_ref().map_err(|e| vec![violation("/config", e.clone())])?;
        let violations = kind.violations(config);
        if !violations.is_empty() {
            return Err(violations.into_iter().map(|v| at("/config", v)).collect());
        }
        serde_json::from_value(config.clone())
            .map_err(|e| vec![Violation { path: "/config".into(), message: format!("invalid config: {e}") }])
    }
}

/// `v` with its path prefixed by `prefix`.
fn at(prefix: &str, v: Violation) -> Violation {
    Violation { path: format!("{prefix}{}", v.path), message: v.message }
}

/// A violation at `path`.
pub(crate) fn violation(path: &str, message: impl Into<String>) -> Violation {
    Violation { path: path.to_owned(), message: message.into() }
}

/// The violations of a config that must be present (apply) or is absent (delete).
pub(crate) fn check_typed<T: JsonSchema + DeserializeOwned>(
    schema: &ConfigSchema<T>,
    config: Option<&Value>,
    rules: impl FnOnce(&T) -> Vec<Violation>,
) -> Vec<Violation> {
    match config {
        None => Vec::new(),
        Some(config) => match schema.parse(config) {
            Ok(typed) => rules(&typed),
            Err(violations) => violations,
        },
    }
}

/// Parses a config that [`Provider::check`] has already accepted.
pub(crate) fn parsed<T: JsonSchema + DeserializeOwned>(
    schema: &ConfigSchema<T>,
    resource: &str,
    config: &Value,
) -> Result<T> {
    schema.parse(config).map_err(|v| {
        let list = v.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        Error::Conflict { resource: resource.to_owned(), message: format!("invalid config: {list}") }
    })
}
