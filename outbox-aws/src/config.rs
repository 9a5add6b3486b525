//! Building the SDK clients: the standard credential chain, an endpoint override for S3-compatible and
//! local servers, and TLS through rustls on ring (no C crypto build).

use std::sync::Arc;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_credential_types::provider::ProvideCredentials;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;

use crate::error::{Error, Result};

/// How [`Aws::connect`] builds its clients. Everything left unset comes from the standard AWS chain:
/// environment (`AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, ...),
/// shared config and credentials files (`AWS_PROFILE`), web identity, ECS and instance metadata.
#[derive(Clone, Default)]
pub struct AwsOpts {
    region: Option<String>,
    endpoint_url: Option<String>,
    force_path_style: Option<bool>,
    credentials: Option<Credentials>,
    operation_timeout: Option<Duration>,
    sdk_max_attempts: Option<u32>,
    check_credentials: bool,
}

impl std::fmt::Debug for AwsOpts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsOpts")
            .field("region", &self.region)
            .field("endpoint_url", &self.endpoint_url)
            .field("force_path_style", &self.force_path_style)
            .field("credentials", &self.credentials.as_ref().map(|_| "** static, redacted **"))
            .field("operation_timeout", &self.operation_timeout)
            .field("sdk_max_attempts", &self.sdk_max_attempts)
            .field("check_credentials", &self.check_credentials)
            .finish()
    }
}

impl AwsOpts {
    /// Everything from the standard chain; credentials are checked when connecting.
    pub fn new() -> Self {
        AwsOpts { check_credentials: true, ..AwsOpts::default() }
    }

    /// The region (otherwise `AWS_REGION`, `AWS_DEFAULT_REGION` or the profile's).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sends every call to `url` (a local `moto` server, MinIO, LocalStack); otherwise `AWS_ENDPOINT_URL`
    /// or the service's own endpoint. A custom endpoint turns on S3 path-style addressing unless
    /// [`AwsOpts::force_path_style`] says otherwise.
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// S3 path-style addressing (`http://host/bucket/key`) instead of virtual-hosted style.
    pub fn force_path_style(mut self, on: bool) -> Self {
        self.force_path_style = Some(on);
        self
    }

    /// Static credentials instead of the chain. They are kept out of `Debug` output and logs.
    pub fn static_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        self.credentials =
            Some(Credentials::new(access_key_id, secret_access_key, session_token, None, "outbox-static"));
        self
    }

    /// The longest one SDK operation may take, retries included (default 60 s).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }

    /// How many times the SDK itself tries one call before the job sees the error (default 3, the SDK's
    /// standard mode); 1 leaves every retry to the queue's backoff.
    pub fn sdk_max_attempts(mut self, n: u32) -> Self {
        self.sdk_max_attempts = Some(n.max(1));
        self
    }

    /// Whether [`Aws::connect`] resolves credentials up front, failing fast when there are none
    /// (default true).
    pub fn check_credentials(mut self, on: bool) -> Self {
        self.check_credentials = on;
        self
    }
}

/// The SDK clients the providers use, built once and shared (cheap to clone).
#[derive(Clone, Debug)]
pub struct Aws {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    sdk: SdkConfig,
    s3: aws_sdk_s3::Client,
    s3_conf: aws_sdk_s3::Config,
    sqs: aws_sdk_sqs::Client,
}

impl Aws {
    /// Loads the configuration (see [`AwsOpts`]) and builds the clients. Fails with [`Error::Config`]
    /// when no region is configured, or, with credential checking on, when no credentials are found.
    pub async fn connect(opts: AwsOpts) -> Result<Aws> {
        let http = crate::redact::redacting(
            aws_smithy_http_client::Builder::new().tls_provider(tls::Provider::Rustls(CryptoMode::Ring)).build_https(),
        );
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(10))
            .operation_timeout(opts.operation_timeout.unwrap_or(Duration::from_secs(60)))
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http).timeout_config(timeouts);
        if let Some(n) = opts.sdk_max_attempts {
            loader = loader.retry_config(RetryConfig::standard().with_max_attempts(n));
        }
        if let Some(region) = &opts.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(url) = &opts.endpoint_url {
            loader = loader.endpoint_url(url.clone());
        }
        if let Some(credentials) = &opts.credentials {
            loader = loader.credentials_provider(credentials.clone());
        }
        let sdk = loader.load().await;
        let region = sdk.region().ok_or_else(|| {
            Error::Config("no region configured: set AWS_REGION (or a profile's region), or use AwsOpts::region".into())
        })?;
        if let Some(url) = sdk.endpoint_url()
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(Error::Config(format!("endpoint url `{url}` must start with http:// or https://")));
        }
        if opts.check_credentials {
            let provider = sdk
                .credentials_provider()
                .ok_or_else(|| Error::Config("no credentials provider is configured".into()))?;
            // The error names the providers tried, never a secret.
            provider.provide_credentials().await.map_err(|e| {
                Error::Config(format!(
                    "no usable credentials from the standard chain: {}",
                    crate::error::chain(&e).replace(":\n  ", " ").replace("\n  ", "; ")
                ))
            })?;
        }
        let path_style = opts.force_path_style.unwrap_or(sdk.endpoint_url().is_some());
        let s3_conf = aws_sdk_s3::config::Builder::from(&sdk).force_path_style(path_style).build();
        let s3 = aws_sdk_s3::Client::from_conf(s3_conf.clone());
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        tracing::info!(region = %region, endpoint = sdk.endpoint_url().unwrap_or("default"), path_style,
            "aws clients ready");
        Ok(Aws { inner: Arc::new(Inner { sdk, s3, s3_conf, sqs }) })
    }

    /// The loaded SDK configuration, for providers that need clients of other services.
    pub fn sdk_config(&self) -> &SdkConfig {
        &self.inner.sdk
    }

    /// The configured region.
    pub fn region(&self) -> &str {
        self.inner.sdk.region().map_or("", |r| r.as_ref())
    }

    /// The S3 client.
    pub fn s3(&self) -> &aws_sdk_s3::Client {
        &self.inner.s3
    }

    /// An S3 client signing for `region` (the configured client when it is the configured region).
    pub fn s3_in(&self, region: &str) -> aws_sdk_s3::Client {
        if region == self.region() {
            return self.inner.s3.clone();
        }
        aws_sdk_s3::Client::from_conf(self.inner.s3_conf.to_builder().region(Region::new(region.to_owned())).build())
    }

    /// The SQS client.
    pub fn sqs(&self) -> &aws_sdk_sqs::Client {
        &self.inner.sqs
    }
}
