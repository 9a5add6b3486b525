//! How the command fails: one line naming the thing at fault, a hint, and a documented exit code.

use std::fmt;

/// Exit codes, documented in `outbox --help` and docs/reference/cli.md.
pub(crate) mod code {
    /// Success (and a clean reconcile).
    pub(crate) const OK: u8 = 0;
    /// The database, the filesystem or a worker failed.
    pub(crate) const ERROR: u8 = 1;
    /// Bad input: invalid JSON, a payload violating its schema, an unknown kind, a bad duration or option.
    pub(crate) const INVALID: u8 = 2;
    /// No job with the given id.
    pub(crate) const NOT_FOUND: u8 = 3;
    /// The action does not apply to the job's status (retry a pending job, cancel a completed one).
    pub(crate) const CONFLICT: u8 = 4;
    /// `reconcile` found discrepancies.
    pub(crate) const DISCREPANCIES: u8 = 5;
    /// A call for a claim that is not held any more: nothing was changed.
    pub(crate) const STALE_CLAIM: u8 = 6;
    /// `enqueue --wait`: the job ended failed or cancelled.
    pub(crate) const JOB_FAILED: u8 = 7;
    /// Stopped by Ctrl-C or SIGTERM (128 + SIGINT), having given back what it claimed.
    pub(crate) const INTERRUPTED: u8 = 130;
}

/// A failed command.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Failure { code, message: one_line(&message.into()), hint: None }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Failure::new(code::INVALID, message)
    }

    pub(crate) fn error(message: impl Into<String>) -> Self {
        Failure::new(code::ERROR, message)
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(one_line(&hint.into()));
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` as quoted in a one-line message: control characters escaped. One rule for every message, the
/// server's and the durations' included.
pub(crate) use outbox_server::duration::quoted;

impl From<outbox::Error> for Failure {
    fn from(e: outbox::Error) -> Self {
        use outbox::Error as E;
        let message = e.to_string();
        match &e {
            E::InvalidPayload { kind, .. } | E::PayloadTooLarge { kind, .. } | E::Serde { kind, .. } => {
                Failure::invalid(message).hint(format!("`outbox schema {kind}` prints the kind's JSON Schema"))
            }
            E::InvalidOpts { .. } | E::InvalidKind { .. } | E::Invalid(_) => Failure::invalid(message),
            E::InvalidWorkflow { .. } => {
                Failure::invalid(message).hint("nothing was written; `outbox schema KIND` prints a kind's JSON Schema")
            }
            E::NotFound { .. } => Failure::new(code::NOT_FOUND, message)
                .hint("`outbox list` shows job ids; an id is 26 characters (a ULID)"),
            E::InvalidTransition { id, .. } => {
                let hint = format!("`outbox get {id}` shows its status and history");
                Failure::new(code::CONFLICT, message).hint(hint)
            }
            E::Unsupported(_) => Failure::invalid(message),
            E::StaleClaim { id, .. } => Failure::new(code::STALE_CLAIM, message)
                .hint(format!("`outbox get {id}` shows who holds the job now; claim again for new work")),
            _ if message.contains("no such table") => Failure::error(message)
                .hint("the database has no outbox tables yet: run `outbox migrate` against it first"),
            _ => Failure::error(message),
        }
    }
}

impl From<outbox_server::Error> for Failure {
    fn from(e: outbox_server::Error) -> Self {
        match e {
            outbox_server::Error::Outbox(e) => e.into(),
            outbox_server::Error::UnknownKind { .. } => Failure::invalid(e.to_string())
                .hint("kinds of your application are recorded when one of its workers starts against this database"),
            outbox_server::Error::InvalidToken { .. }
            | outbox_server::Error::InvalidOrigin { .. }
            | outbox_server::Error::Unprotected { .. } => Failure::invalid(e.to_string()),
            outbox_server::Error::InvalidField { .. } => {
                Failure::invalid(e.to_string()).hint("`outbox workflow create --help` lists the fields")
            }
            other => Failure::error(other.to_string()),
        }
    }
}

impl From<outbox_fs::Error> for Failure {
    fn from(e: outbox_fs::Error) -> Self {
        match e {
            outbox_fs::Error::Outbox(e) => e.into(),
            outbox_fs::Error::Root { .. } => {
                Failure::invalid(e.to_string()).hint("--root must name an existing directory")
            }
            other => Failure::error(other.to_string()),
        }
    }
}

impl From<outbox_aws::Error> for Failure {
    fn from(e: outbox_aws::Error) -> Self {
        match e {
            outbox_aws::Error::Outbox(e) => e.into(),
            outbox_aws::Error::Config(_) => Failure::invalid(e.to_string())
                .hint("configure AWS through the standard environment (AWS_REGION, AWS_PROFILE, ...) or drop --aws"),
            other => Failure::error(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_one_line_with_their_hint() {
        let f = Failure::invalid("bad\nthing  here").hint("do\nthis");
        assert_eq!(f.to_string(), "error: bad thing here (hint: do this)");
        assert_eq!(f.code, code::INVALID);
    }

    #[test]
    fn core_errors_map_to_their_exit_codes() {
        let not_found: Failure = outbox::Error::NotFound { id: "x".into() }.into();
        assert_eq!(not_found.code, code::NOT_FOUND);
        let invalid: Failure = outbox::Error::Invalid("nope".into()).into();
        assert_eq!(invalid.code, code::INVALID);
    }
}
