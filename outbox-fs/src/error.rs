//! The crate's error type, and how each error decides a job's fate.

use std::io;
use std::path::PathBuf;

use outbox::JobError;

use crate::errno;
use crate::extract::ExtractError;

/// Result alias with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong on the filesystem side.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configured root cannot be opened.
    #[error("cannot open root directory `{}`: {}", .path.display(), errno::describe(.source))]
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
    #[error("{op} `{path}`: {}", errno::describe(.source))]
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
    Outbox(#[from] outbox::Error),
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
            // A full disk, a read-only remount or a failing device is the machine's condition, not the job's:
            // the job waits for it to clear (`errno` lists which errnos are which).
            Error::Io { source, .. } => errno::is_permanent(source),
            Error::Root { .. } | Error::Outbox(_) | Error::Internal(_) => false,
        }
    }

    /// What the worker should do with the job. Not a `From` impl: `JobError` turns every error into a retry
    /// on `?`, and escapes must never be retried into success by accident.
    pub(crate) fn into_job_error(self) -> JobError {
        if let Error::Extract { source: ExtractError::RateLimited { retry_after, .. }, .. } = &self {
            return JobError::rate_limited(*retry_after);
        }
        if self.is_permanent() { JobError::permanent(self) } else { JobError::retry(self) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(op: &'static str, code: i32) -> Error {
        Error::Io { op, path: "a.txt".into(), source: io::Error::from_raw_os_error(code) }
    }

    #[test]
    fn a_full_disk_retries_and_names_its_errno() {
        for (code, text) in [
            (libc::ENOSPC, "writing `a.txt`: No space left on device (ENOSPC)"),
            (libc::EDQUOT, "writing `a.txt`: Disk quota exceeded (EDQUOT)"),
            (libc::EROFS, "writing `a.txt`: Read-only file system (EROFS)"),
            (libc::EIO, "writing `a.txt`: Input/output error (EIO)"),
        ] {
            let fate = io("writing", code).into_job_error();
            assert!(matches!(&fate, JobError::Retry(m) if m == text), "{fate:?}");
        }
    }

    #[test]
    fn a_file_in_the_way_of_a_directory_is_permanent() {
        let expected = "creating the parent directories of `a.txt`: Not a directory (ENOTDIR)";
        let fate = io("creating the parent directories of", libc::ENOTDIR).into_job_error();
        assert!(matches!(&fate, JobError::Permanent(m) if m == expected), "{fate:?}");
    }
}
