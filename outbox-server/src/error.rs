//! The crate's error type: what can go wrong configuring or running the server. What the API answers a
//! client is a JSON error body (see the crate docs), not this.

use std::net::SocketAddr;

/// Result alias with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong configuring or running the server, or resolving a kind by name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No built-in kind and no kind recorded in the database has this name.
    #[error("unknown kind `{name}`; {}", known_list(.known))]
    UnknownKind {
        /// The name asked for.
        name: String,
        /// Every known kind, sorted.
        known: Vec<String>,
    },
    /// A token is malformed: its role is unknown, or its secret is empty or not sendable in a header. The
    /// secret itself is never part of the message.
    #[error("invalid token: {reason}")]
    InvalidToken {
        /// What is wrong.
        reason: String,
    },
    /// A CORS origin is not of the form `scheme://host[:port]`.
    #[error("invalid cors origin `{origin}`: {reason}")]
    InvalidOrigin {
        /// The origin as given.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// The server would accept requests from other machines without asking for a token.
    #[error(
        "refusing to listen on {addr} without tokens: only a loopback address (127.0.0.1, ::1) may serve \
         without them; configure a token, or listen on a loopback address"
    )]
    Unprotected {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The listener failed (its address could not be read, or accepting connections failed for good).
    #[error("serving http on {addr}: {source}")]
    Serve {
        /// The listening address, as far as it is known.
        addr: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// A field of a request or file cannot be read (`steps[2].delay` of a workflow).
    #[error("field `{field}`: {reason}")]
    InvalidField {
        /// The field, as a path into the document.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The queue failed (the database, a recorded kind that does not compile).
    #[error(transparent)]
    Outbox(#[from] outbox::Error),
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        return "no kind is known yet: kinds are recorded when a worker that handles them starts".to_owned();
    }
    format!("known kinds: {}", known.join(", "))
}
