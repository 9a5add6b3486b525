//! The framework's error type. What a handler says about a job is [`crate::JobError`], not this.

use crate::job::Violation;

/// Result alias with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `key` as one token of a JSON pointer (`~` and `/` escaped), for a [`Violation`]'s path.
pub(crate) fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Joins violations as `at /a: ...; at /b: ...`.
pub(crate) fn join_violations(violations: &[Violation]) -> String {
    violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Everything that can go wrong in the framework itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A database statement failed, on the caller's connection or the worker's own.
    #[error("database error while {context}: {source}")]
    Database {
        /// What the framework was doing.
        context: String,
        /// The database driver's error (a `sea_orm::DbErr` for statements on the caller's connection).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A payload does not match its kind's JSON Schema.
    #[error("invalid payload for kind `{kind}`: {}", join_violations(.violations))]
    InvalidPayload {
        /// The job kind.
        kind: String,
        /// Every violation, each with its JSON path.
        violations: Vec<Violation>,
    },
    /// A payload is larger than the configured cap.
    #[error("payload for kind `{kind}` is {size} bytes, over the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The job kind.
        kind: String,
        /// Serialized size in bytes.
        size: usize,
        /// The configured cap.
        limit: usize,
    },
    /// A payload could not be serialized or deserialized.
    #[error("payload for kind `{kind}` is not valid json for its type: {source}")]
    Serde {
        /// The job kind.
        kind: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A kind's JSON Schema does not compile, or its options contradict the schema.
    #[error("kind `{kind}` is misconfigured: {reason}")]
    InvalidKind {
        /// The job kind.
        kind: String,
        /// What is wrong.
        reason: String,
    },
    /// Enqueue options are out of range.
    #[error("invalid enqueue options for kind `{kind}`: {reason}")]
    InvalidOpts {
        /// The job kind.
        kind: String,
        /// What is wrong.
        reason: String,
    },
    /// A worker was given two handlers for one kind.
    #[error("kind `{kind}` is registered twice on this worker")]
    DuplicateKind {
        /// The job kind.
        kind: String,
    },
    /// No job has this id.
    #[error("no job with id `{id}`")]
    NotFound {
        /// The job id.
        id: String,
    },
    /// The job completed and was deleted as it did: its kind keeps nothing ([`crate::Retention::kind_keep_nothing`]),
    /// so its row and output are gone. Its events stay in the feed until retention prunes them.
    #[error("job `{id}` completed and was not kept: its kind keeps nothing, so only its events remain")]
    CompletedUnkept {
        /// The job id.
        id: String,
    },
    /// An operator action does not apply to the job's current status.
    #[error("cannot {action} job `{id}`: its status is `{status}` ({hint})")]
    InvalidTransition {
        /// The job id.
        id: String,
        /// What was attempted (`retry`, `cancel`).
        action: &'static str,
        /// The job's status.
        status: String,
        /// Which statuses allow it.
        hint: &'static str,
    },
    /// A workflow that cannot be enqueued, with every problem found (a cycle, a duplicate or unknown step, a payload
    /// its kind refuses, a job waited for that is unknown or finished). Nothing was written.
    #[error("invalid workflow `{workflow}`: {reason}")]
    InvalidWorkflow {
        /// The workflow's name.
        workflow: String,
        /// Every problem, separated by `; `.
        reason: String,
    },
    /// The database is not one the framework supports for this operation.
    #[error("unsupported database: {0}")]
    Unsupported(String),
    /// A row holds a value the framework cannot read.
    #[error("corrupt job row `{id}`: {reason}")]
    CorruptRow {
        /// The job id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// A request the framework refuses, with the reason naming what is at fault.
    #[error("{0}")]
    Invalid(String),
    /// Something inside the framework failed that is not the caller's doing (a thread that would not start,
    /// a task that died); the message says what.
    #[error("internal error: {0}")]
    Internal(String),
    /// A job did not finish within the time [`crate::ops::wait`] was given.
    #[error("job `{id}` is still {status} after waiting {waited:?}")]
    WaitTimeout {
        /// The job id.
        id: String,
        /// Its status when the wait gave up.
        status: crate::record::JobStatus,
        /// How long the wait lasted.
        waited: std::time::Duration,
    },
    /// The worker has stopped.
    #[error("the worker has stopped")]
    WorkerStopped,
    /// A call for a claim that is no longer this worker's: its lease expired and it was rescued (and perhaps
    /// claimed again), or the attempt already ended. Nothing was changed.
    #[error(
        "job `{id}` is not claimed by worker `{worker}` in run {run}: the claim expired and was rescued, or the attempt already ended; nothing was changed"
    )]
    StaleClaim {
        /// The job id.
        id: String,
        /// The worker that called.
        worker: String,
        /// The claim's run it gave (see `RemoteJob::run`).
        run: i32,
    },
}

impl Error {
    /// Whether trying again later can succeed without anyone changing anything: the database server
    /// restarting or refusing connections, a full disk, a read-only database file, a lock held too long.
    /// Configuration errors (a bad URL, missing tables, a schema newer than this binary) and invalid input
    /// are not. Workers retry transient errors with backoff and never stop for them.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Database { source, .. } => crate::storage::transient::any(source.as_ref()),
            _ => false,
        }
    }

    /// Wraps a driver error with what the framework was doing.
    pub(crate) fn db<E>(context: impl Into<String>) -> impl FnOnce(E) -> Error
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let context = context.into();
        move |source| Error::Database { context, source: Box::new(source) }
    }
}

/// A statement the caller ran in a closure given to [`crate::transaction`] failed: `?` works there with
/// [`Error`] as the closure's error type.
impl From<sea_orm::DbErr> for Error {
    fn from(source: sea_orm::DbErr) -> Self {
        Error::Database { context: "running a statement of the application".into(), source: Box::new(source) }
    }
}

/// An outbox call inside a sea-orm `ActiveModelBehavior` hook, whose error type is `DbErr`: `?` works there, and the
/// hook's error aborts the save or delete with outbox's message. A database error keeps its own `DbErr`.
impl From<Error> for sea_orm::DbErr {
    fn from(e: Error) -> Self {
        match e {
            Error::Database { context, source } => match source.downcast::<sea_orm::DbErr>() {
                Ok(db) => *db,
                Err(other) => sea_orm::DbErr::Custom(format!("database error while {context}: {other}")),
            },
            other => sea_orm::DbErr::Custom(other.to_string()),
        }
    }
}
