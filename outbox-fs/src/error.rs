//! The crate's error type, and how each error decides a job's fate.

use std::io;
use std::path::PathBuf;

use outbox_core::JobError;

use crate::extract::ExtractError;

/// Result alias with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong on the filesystem side.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configured root cannot be opened.
    #[error("cannot open root directory `{}`: {source}", .path.display())]
    Root {
        /// The root as configured.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A path is refused because it would leave the root, or could not be resolved beneath it.
    #[error("path `{path}` is refused: {rule}")]
    Escape {
        /// The path as given (with NUL bytes and control characters escaped).
        path: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A path names a directory where a file is expected.
    #[error("`{path}` is a directory, not a file")]
    IsDirectory {
        /// The path.
        path: String,
    },
    /// `create_file` without `overwrite` found other content at its path.
    #[error("`{path}` already holds {found} and overwrite is false")]
    Conflict {
        /// The path.
        path: String,
        /// What is there now: `other content (sha256 ...)`, `a symbolic link`, `a fifo`, ...
        found: String,
    },
    /// `delete_file` with `requireExists` found nothing on its first attempt.
    #[error("`{path}` does not exist and requireExists is set")]
    NotFound {
        /// The path.
        path: String,
    },
    /// A filesystem operation failed.
    #[error("{op} `{path}`: {source}")]
    Io {
        /// What was being done (`writing`, `renaming into place`, ...).
        op: &'static str,
        /// The path it was done to.
        path: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The extractor failed.
    #[error("extraction for requirement `{requirement_id}` failed: {source}")]
    Extract {
        /// The requirement the prompt belongs to.
        requirement_id: String,
        /// The backend's error.
        #[source]
        source: ExtractError,
    },
    /// The job store failed (the reconciler reads it).
    #[error(transparent)]
    Outbox(#[from] outbox_core::Error),
    /// A blocking filesystem task died (it panicked or the runtime shut down).
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Whether retrying can never help: the payload or the tree contradicts the job until someone changes it.
    pub(crate) fn is_permanent(&self) -> bool {
        match self {
            Error::Escape { .. } | Error::IsDirectory { .. } | Error::Conflict { .. } | Error::NotFound { .. } => true,
            Error::Extract { source, .. } => matches!(source, ExtractError::Permanent(_)),
            // A file where a directory must be (`a` in `a/b`) stays until someone moves it.
            Error::Io { source, .. } => {
                matches!(source.kind(), io::ErrorKind::NotADirectory | io::ErrorKind::InvalidFilename)
            }
            Error::Root { .. } | Error::Outbox(_) | Error::Internal(_) => false,
        }
    }

    /// What the worker should do with the job. Not a `From` impl: `JobError` turns every error into a retry
    /// on `?`, and escapes must never be retried into success by accident.
    pub(crate) fn into_job_error(self) -> JobError {
        if self.is_permanent() { JobError::permanent(self) } else { JobError::retry(self) }
    }
}
