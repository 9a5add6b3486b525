//! What a server is configured with: its tokens and their roles, the kinds built into its binary, CORS
//! origins, and its limits.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use outbox::Kind;

use crate::error::{Error, Result};

/// Room a request body has beyond the payload itself: the kind, options and JSON punctuation around it.
const ENVELOPE_BYTES: usize = 64 * 1024;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// Read: stats, queues, kinds, jobs and their history (the `GET` routes).
    Read,
    /// Operate: enqueue, retry, cancel and delete jobs; implies [`Role::Read`].
    Operate,
    /// Work: the routes remote workers claim, heartbeat and complete jobs through.
    Work,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 3] = [Role::Read, Role::Operate, Role::Work];

    /// The name used in `role:secret` (`read`, `operate`, `work`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Operate => "operate",
            Role::Work => "work",
        }
    }

    /// Whether a token of this role may do what `needed` allows.
    pub fn grants(self, needed: Role) -> bool {
        self == needed || (self == Role::Operate && needed == Role::Read)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Role::ALL.into_iter().find(|r| r.as_str() == s).ok_or_else(|| Error::InvalidToken {
            reason: format!("unknown role `{}` (expected read, operate or work)", crate::duration::quoted(s)),
        })
    }
}

/// A bearer token and its role. Its secret is never displayed, logged or echoed: `Debug` shows the role only.
#[derive(Clone)]
pub struct Token {
    role: Role,
    secret: String,
}

impl Token {
    /// A token of `role`. The secret must be non-empty visible ASCII without spaces (what a client can send
    /// in an `Authorization: Bearer` header).
    pub fn new(role: Role, secret: impl Into<String>) -> Result<Token> {
        let secret = secret.into();
        if secret.is_empty() {
            return Err(Error::InvalidToken { reason: format!("the {role} token's secret is empty") });
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::InvalidToken {
                reason: format!("the {role} token's secret has characters other than visible ascii"),
            });
        }
        Ok(Token { role, secret })
    }

    /// The token's role.
    pub fn role(&self) -> Role {
        self.role
    }

    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token").field("role", &self.role).field("secret", &"***").finish()
    }
}

/// `role:secret`, as `outbox serve --token` and `OUTBOX_TOKENS` take it. Errors name the role, never the
/// secret.
impl std::str::FromStr for Token {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let (role, secret) = s.split_once(':').ok_or_else(|| Error::InvalidToken {
            reason: "a token is written role:secret (role read, operate or work)".to_owned(),
        })?;
        Token::new(role.trim().parse()?, secret)
    }
}

/// How a server runs: built with [`ServerOpts::new`] (or `default()`) and the methods below.
///
/// ```
/// use std::time::Duration;
/// use outbox_server::{Role, ServerOpts, Token};
///
/// let opts = ServerOpts::new()
///     .token(Token::new(Role::Read, "s3cret-for-dashboards")?)
///     .token("operate:s3cret-for-operators".parse()?)
///     .cors_origin("https://ops.example.com")?
///     .request_timeout(Duration::from_secs(10));
/// # Ok::<(), outbox_server::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ServerOpts {
    pub(crate) tokens: Vec<Token>,
    pub(crate) kinds: Vec<Arc<Kind>>,
    pub(crate) cors_origins: Vec<HeaderValue>,
    pub(crate) request_timeout: Duration,
    pub(crate) body_limit: Option<usize>,
    pub(crate) max_payload_bytes: usize,
    pub(crate) events_poll: Duration,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            tokens: Vec::new(),
            kinds: Vec::new(),
            cors_origins: Vec::new(),
            request_timeout: Duration::from_secs(30),
            body_limit: None,
            max_payload_bytes: outbox::DEFAULT_MAX_PAYLOAD_BYTES,
            events_poll: Duration::from_millis(100),
        }
    }
}

impl ServerOpts {
    /// No tokens (every route open: only for a loopback listener), no built-in kinds, no CORS, requests
    /// cut off after 30 s, bodies capped at the payload limit plus 64 KiB.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `token`. With none, every route is open, and [`crate::serve`] refuses a non-loopback
    /// listener.
    pub fn token(mut self, token: Token) -> Self {
        self.tokens.push(token);
        self
    }

    /// Accepts every token of `tokens`.
    pub fn tokens(mut self, tokens: impl IntoIterator<Item = Token>) -> Self {
        self.tokens.extend(tokens);
        self
    }

    /// Knows `kind` as built in (its full rules, such as [`Kind::of`] gives), besides the kinds workers
    /// record in the database.
    pub fn kind(mut self, kind: Arc<Kind>) -> Self {
        self.kinds.push(kind);
        self
    }

    /// Knows every kind of `kinds` as built in.
    pub fn kinds(mut self, kinds: impl IntoIterator<Item = Arc<Kind>>) -> Self {
        self.kinds.extend(kinds);
        self
    }

    /// Lets pages served from `origin` (`https://ops.example.com`, no path) call the API from a browser.
    /// Without any, the server sends no CORS headers.
    pub fn cors_origin(mut self, origin: &str) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidOrigin { origin: origin.to_owned(), reason: reason.to_owned() };
        let rest = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"))
            .ok_or_else(|| bad("it must start with https:// or http://"))?;
        if rest.is_empty() || rest.contains(['/', '?', '#', '*']) {
            return Err(bad("it must be scheme://host[:port], with no path, query or wildcard"));
        }
        let value = HeaderValue::from_str(origin).map_err(|_| bad("it must be visible ascii"))?;
        self.cors_origins.push(value);
        Ok(self)
    }

    /// Cuts off a request not answered within `timeout` (a slow client sending its body, a slow database)
    /// with 408 `timeout`. 30 s by default.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Refuses request bodies over `bytes` with 413 `payload_too_large`. By default, the payload limit
    /// ([`ServerOpts::max_payload_bytes`]) plus 64 KiB for the rest of the request.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = Some(bytes);
        self
    }

    /// The largest serialized payload `POST /api/jobs` enqueues (413 `payload_too_large` past it); by default
    /// [`outbox::DEFAULT_MAX_PAYLOAD_BYTES`], 256 KiB.
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// How often the event stream and the metrics look for events written by other processes (100 ms by
    /// default); this process's own writes wake them at once.
    pub fn events_poll(mut self, every: Duration) -> Self {
        self.events_poll = every.max(Duration::from_millis(10));
        self
    }

    /// Whether these options may serve on `addr`: without tokens, only a loopback address may, since every
    /// route is open. [`crate::serve`] checks this itself; call it to refuse before binding.
    pub fn check_listen(&self, addr: SocketAddr) -> Result<()> {
        if self.tokens.is_empty() && !addr.ip().to_canonical().is_loopback() {
            return Err(Error::Unprotected { addr });
        }
        Ok(())
    }

    pub(crate) fn effective_body_limit(&self) -> usize {
        self.body_limit.unwrap_or_else(|| self.max_payload_bytes.saturating_add(ENVELOPE_BYTES))
    }
}
