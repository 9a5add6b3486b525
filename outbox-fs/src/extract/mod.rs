//! Running a frozen prompt through Claude: the [`Extractor`] seam and its two backends, the Claude Code CLI
//! in headless mode ([`ClaudeCli`]) and the Anthropic Messages API over HTTP ([`AnthropicApi`]).

mod api;
mod cli;
mod https;

use std::future::Future;
use std::pin::Pin;

pub use api::{AnthropicApi, ApiKey, ApiOpts};
pub use cli::{ClaudeCli, CliOpts};

/// What the model is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtractRequest {
    /// The frozen prompt, sent verbatim.
    pub prompt: String,
    /// sha256 (hex) of `prompt`.
    pub prompt_hash: String,
    /// The requirement the answer belongs to (for logs only).
    pub requirement_id: String,
}

/// Token counts of one answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_creation_input_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: u64,
}

/// The model's answer and what it cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Extraction {
    /// The answer text, written to the target file.
    pub text: String,
    /// The model that answered.
    pub model: String,
    /// Token counts.
    pub usage: Usage,
    /// Cost in US dollars when the backend reports it.
    pub cost_usd: Option<f64>,
}

/// Why an extraction failed, and whether trying again can help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    /// Timeouts, rate limits, overload, 5xx, a crashed child: try again later.
    #[error("{0}")]
    Retryable(String),
    /// Bad credentials, a refused request, malformed output that will not change: fail the job.
    #[error("{0}")]
    Permanent(String),
    /// The service said to wait (429 rate limited, 529 overloaded): the job's attempt is given back and the kind
    /// is held for every worker of the fleet until `retry_after` has passed.
    #[error("{message}")]
    RateLimited {
        /// What the service answered.
        message: String,
        /// How long it said to wait (its `retry-after`), or a default when it did not say.
        retry_after: std::time::Duration,
    },
}

/// Runs a prompt and returns the answer. Implementations never put credentials in errors or logs.
pub trait Extractor: Send + Sync + 'static {
    /// Sends `request` to the model.
    fn extract<'a>(
        &'a self,
        request: &'a ExtractRequest,
    ) -> Pin<Box<dyn Future<Output = Result<Extraction, ExtractError>> + Send + 'a>>;
}

impl ExtractError {
    /// Rewrites the message, keeping the class (retryable or permanent).
    fn map_message(self, f: impl FnOnce(String) -> String) -> ExtractError {
        match self {
            ExtractError::Retryable(m) => ExtractError::Retryable(f(m)),
            ExtractError::Permanent(m) => ExtractError::Permanent(f(m)),
            ExtractError::RateLimited { message, retry_after } => {
                ExtractError::RateLimited { message: f(message), retry_after }
            }
        }
    }
}

/// Token counts as both the Messages API and the CLI report them; the cache fields may be absent or null.
#[derive(Debug, Default, serde::Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(w: WireUsage) -> Self {
        Usage {
            input_tokens: w.input_tokens.unwrap_or(0),
            output_tokens: w.output_tokens.unwrap_or(0),
            cache_creation_input_tokens: w.cache_creation_input_tokens.unwrap_or(0),
            cache_read_input_tokens: w.cache_read_input_tokens.unwrap_or(0),
        }
    }
}
