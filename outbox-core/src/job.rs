//! Job kinds: the `Job` trait implemented by `#[derive(Job)]`, and the per-kind options.

use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};

use crate::error::Violation;

/// A typed job kind: the payload struct of one kind of side effect.
///
/// Implement it with `#[derive(Job)]`:
///
/// ```
/// use outbox_core::Job;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Job, Serialize, Deserialize, JsonSchema)]
/// #[job(kind = "send_welcome", queue = "mail", priority = 5, max_attempts = 10)]
/// struct SendWelcome {
///     #[job(key)]
///     user_id: i64,
///     template: String,
/// }
/// # assert_eq!(<SendWelcome as outbox_core::Job>::KIND, "send_welcome");
/// ```
///
/// The `kind` string is stored with every job and used to dispatch it to a handler, so it must stay the same
/// when the Rust type is renamed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an outbox job kind",
    label = "not a job kind",
    note = "add `#[derive(outbox_core::Job)]` and `#[job(kind = \"...\")]` to `{Self}`"
)]
pub trait Job: Serialize + DeserializeOwned + JsonSchema + Send + Sync + 'static {
    /// The stable name of this kind, stored in each job row.
    const KIND: &'static str;
    /// Defaults for jobs of this kind; each can be overridden per enqueue through `EnqueueOpts`.
    const OPTS: KindOpts = KindOpts::DEFAULT;

    /// Rules the JSON Schema cannot express (a field that must be the hash of another, say), checked after
    /// the schema at enqueue and again before the handler runs. Each problem names its JSON path.
    fn validate(&self) -> Result<(), Vec<Violation>> {
        Ok(())
    }
}

/// Per-kind defaults, set with `#[job(...)]` on the payload type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindOpts {
    /// Queue the kind's jobs go to (`default` unless set).
    pub queue: &'static str,
    /// Higher runs first; 0 unless set.
    pub priority: i32,
    /// Attempts before a job fails for good (3 unless set).
    pub max_attempts: i32,
    /// Whether enqueues collapse onto an active job with the same idempotency key (true unless set).
    pub unique: bool,
    /// Serialized names of the payload fields that form the idempotency key. Empty: the key is the sha256
    /// of the kind and the canonical payload.
    pub key_fields: &'static [&'static str],
}

impl KindOpts {
    /// The options of a kind that sets none.
    pub const DEFAULT: KindOpts =
        KindOpts { queue: "default", priority: 0, max_attempts: 3, unique: true, key_fields: &[] };
}

impl Default for KindOpts {
    fn default() -> Self {
        Self::DEFAULT
    }
}
