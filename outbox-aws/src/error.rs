//! The crate's error type, and how each error decides a job's fate.

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use outbox::JobError;

/// Result alias with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong on the AWS side. No variant ever carries a credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An AWS call failed. `retryable` says whether trying again later can help (throttling, 5xx,
    /// timeouts, connection failures) or not (validation, access, a missing bucket).
    #[error("{op} `{resource}`: {message}")]
    Aws {
        /// The operation (`CreateBucket`, `PutObject`, ...).
        op: &'static str,
        /// The resource it was for (`s3_bucket invoices`).
        resource: String,
        /// The service's error code (`AccessDenied`, `SlowDown`), when it answered with one.
        code: Option<String>,
        /// The HTTP status, when there was a response.
        status: Option<u16>,
        /// What went wrong, with the service's message.
        message: String,
        /// Whether a later attempt can succeed.
        retryable: bool,
    },
    /// The live resource cannot be made to match the config (a bucket in another region, a queue whose
    /// FIFO type differs): a permanent failure.
    #[error("{resource}: {message}")]
    Conflict {
        /// The resource (`s3_bucket invoices`).
        resource: String,
        /// Why the config cannot be applied.
        message: String,
    },
    /// A transient condition that should clear by itself (a bucket that still holds objects).
    #[error("{resource}: {message}")]
    NotYet {
        /// The resource.
        resource: String,
        /// What has to happen first.
        message: String,
    },
    /// No provider is registered for the resource type.
    #[error("unknown resource type `{resource_type}`; known resource types: {known}")]
    UnknownResourceType {
        /// The type asked for.
        resource_type: String,
        /// The registered types, comma-separated.
        known: String,
    },
    /// A provider with the same resource type is already registered.
    #[error("a provider for resource type `{0}` is already registered")]
    DuplicateProvider(String),
    /// The SDK configuration is unusable (no region, no credentials, a bad endpoint).
    #[error("aws configuration: {0}")]
    Config(String),
    /// An error of the queue itself (database, payload).
    #[error(transparent)]
    Outbox(#[from] outbox::Error),
    /// A bug: a state that should be impossible.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Whether a later attempt can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Aws { retryable, .. } => *retryable,
            Error::NotYet { .. } => true,
            Error::Outbox(e) => matches!(e, outbox::Error::Database { .. }),
            _ => false,
        }
    }

    /// Whether AWS said to slow down (throttling, after the SDK's own retries): the fleet waits, not this job alone.
    pub fn is_throttling(&self) -> bool {
        match self {
            Error::Aws { code, status, .. } => {
                status == &Some(429) || code.as_deref().is_some_and(|c| THROTTLING_CODES.contains(&c))
            }
            _ => false,
        }
    }

    /// The job's fate: held with its kind for the fleet when throttled, retry with backoff, or fail permanently.
    pub(crate) fn into_job_error(self) -> JobError {
        if self.is_throttling() {
            tracing::warn!(error = %self, hold = ?THROTTLING_HOLD, "aws throttled; holding sync_aws fleet-wide");
            return JobError::rate_limited(THROTTLING_HOLD);
        }
        if self.is_retryable() { JobError::retry(self) } else { JobError::permanent(self) }
    }
}

/// How long a throttled call holds `sync_aws` for every worker: AWS says to slow down without saying for how
/// long, and the SDK has already backed off within the call.
const THROTTLING_HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// Service error codes that mean "slow down": the kind is held fleet-wide (see [`Error::into_job_error`]).
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "SlowDown",
    "BandwidthLimitExceeded",
    "ProvisionedThroughputExceededException",
    "AWS.SimpleQueueService.RequestThrottled",
    "KMS.ThrottlingException",
];

/// Service error codes that mean "try again" (beside [`THROTTLING_CODES`], which mean it too): retried whatever
/// their status.
const RETRY_CODES: &[&str] = &[
    "TransactionInProgressException",
    "RequestTimeout",
    "RequestTimeoutException",
    "RequestExpired",
    "ExpiredToken",
    "ExpiredTokenException",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "OperationAborted",
    "PriorRequestNotComplete",
];

/// Turns an SDK error into an [`Error::Aws`], deciding whether it is worth retrying: throttling, 5xx,
/// 429, timeouts and failures to reach the service retry; everything else (validation, access denied,
/// not found) is permanent.
pub(crate) fn sdk<E>(op: &'static str, resource: impl Into<String>, err: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let resource = resource.into();
    let code = err.code().map(str::to_owned);
    let status = match &err {
        SdkError::ServiceError(e) => Some(e.raw().status().as_u16()),
        SdkError::ResponseError(e) => Some(e.raw().status().as_u16()),
        _ => None,
    };
    let (retryable, message) = match &err {
        SdkError::ConstructionFailure(_) => (false, format!("the request could not be built: {}", chain(&err))),
        SdkError::TimeoutError(_) => (true, "the call timed out".to_owned()),
        SdkError::DispatchFailure(d) => {
            let why = if d.is_timeout() {
                "timed out connecting"
            } else if d.is_io() {
                "connection failed"
            } else {
                "the request could not be sent"
            };
            (!d.is_user(), format!("{why}: {}", chain(&err)))
        }
        SdkError::ResponseError(_) => (true, format!("unreadable response: {}", chain(&err))),
        SdkError::ServiceError(_) => {
            let status = status.unwrap_or_default();
            let retry = status >= 500
                || status == 429
                || code.as_deref().is_some_and(|c| RETRY_CODES.contains(&c) || THROTTLING_CODES.contains(&c));
            let text = match (code.as_deref(), err.message()) {
                (Some(c), Some(m)) if !m.is_empty() => format!("{c}: {m}"),
                (Some(c), _) => c.to_owned(),
                (None, Some(m)) => m.to_owned(),
                (None, None) => "the service refused the request".to_owned(),
            };
            (retry, format!("{text} (http {status})"))
        }
        _ => (true, chain(&err).to_string()),
    };
    Error::Aws { op, resource, code, status, message, retryable }
}

/// An error and its sources, `: `-separated, without the Debug dump the SDK's own context display adds.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryability_follows_the_variant() {
        let aws = |retryable| Error::Aws {
            op: "PutObject",
            resource: "s3_object b/k".into(),
            code: None,
            status: None,
            message: "x".into(),
            retryable,
        };
        assert!(aws(true).is_retryable());
        assert!(!aws(false).is_retryable());
        assert!(Error::NotYet { resource: "r".into(), message: "m".into() }.is_retryable());
        assert!(!Error::Conflict { resource: "r".into(), message: "m".into() }.is_retryable());
        assert!(
            matches!(aws(false).into_job_error(), JobError::Permanent(m) if m.contains("PutObject `s3_object b/k`"))
        );
    }

    #[test]
    fn throttling_holds_the_kind_for_the_fleet() {
        let aws = |code: Option<&str>, status| Error::Aws {
            op: "PutObject",
            resource: "s3_object b/k".into(),
            code: code.map(str::to_owned),
            status,
            message: "slow down".into(),
            retryable: true,
        };
        for throttled in
            [aws(Some("SlowDown"), Some(503)), aws(Some("ThrottlingException"), Some(400)), aws(None, Some(429))]
        {
            assert!(throttled.is_throttling());
            assert!(matches!(throttled.into_job_error(), JobError::RateLimited(d) if d == THROTTLING_HOLD));
        }
        assert!(matches!(aws(Some("InternalError"), Some(500)).into_job_error(), JobError::Retry(_)));
    }
}
