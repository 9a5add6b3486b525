//! Who may call a route: bearer tokens with roles, compared in constant time and never logged or echoed.
//!
//! Routes are grouped by the role they need, and [`Auth::require`] guards a whole group, so a route added
//! to a group cannot be left unguarded. With no token configured, every guarded route is open, but only to
//! requests addressed to a loopback host and not sent by a page of another origin: a web page the operator
//! visits can neither reach the open server through DNS rebinding nor post to it across sites.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};
use utoipa_axum::router::OpenApiRouter;

use crate::api_error::ApiError;
use crate::opts::{Role, ServerOpts};

/// The configured tokens (as digests) and the origins a browser may call from.
pub(crate) struct Auth {
    /// Each token's role and the sha256 of its secret: comparing equal-length digests takes the same time
    /// whatever the presented token is, its length included.
    tokens: Vec<(Role, [u8; 32])>,
    cors_origins: Vec<HeaderValue>,
}

const CHALLENGE: &str = r#"Bearer realm="outbox""#;
const CHALLENGE_INVALID: &str = r#"Bearer realm="outbox", error="invalid_token""#;

fn digest(secret: &[u8]) -> [u8; 32] {
    Sha256::digest(secret).into()
}

impl Auth {
    pub(crate) fn new(opts: &ServerOpts) -> Arc<Auth> {
        let tokens = opts.tokens.iter().map(|t| (t.role(), digest(t.secret().as_bytes()))).collect();
        Arc::new(Auth { tokens, cors_origins: opts.cors_origins.clone() })
    }

    /// `routes` with every route (and its answer to other methods) open only to tokens granting `role`.
    pub(crate) fn require<S: Clone + Send + Sync + 'static>(
        self: &Arc<Self>,
        role: Role,
        routes: OpenApiRouter<S>,
    ) -> OpenApiRouter<S> {
        let auth = Arc::clone(self);
        routes.route_layer(middleware::from_fn(move |req: Request, next: Next| {
            let auth = Arc::clone(&auth);
            async move {
                match auth.check(req.headers(), role) {
                    Ok(()) => next.run(req).await,
                    Err(e) => e.into_response(),
                }
            }
        }))
    }

    /// Whether the request's headers carry a token granting `needed` (or, with no tokens, come from where an
    /// open server answers).
    fn check(&self, headers: &HeaderMap, needed: Role) -> Result<(), ApiError> {
        if self.tokens.is_empty() {
            return self.check_open(headers);
        }
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Err(ApiError::unauthorized(
                "this route needs a token: send `authorization: Bearer <token>`",
                CHALLENGE,
            ));
        };
        let Some(presented) = bearer(value) else {
            return Err(ApiError::unauthorized("the authorization header must be `Bearer <token>`", CHALLENGE_INVALID));
        };
        let presented = digest(presented);
        // Every configured token is compared, with no branch on any one result: the time taken says
        // nothing about which token (if any) matched.
        let (mut known, mut granted) = (Choice::from(0), Choice::from(0));
        for (role, secret) in &self.tokens {
            let matched = secret.ct_eq(&presented);
            known |= matched;
            granted |= matched & Choice::from(u8::from(role.grants(needed)));
        }
        if !bool::from(known) {
            return Err(ApiError::unauthorized("the token is not one this server accepts", CHALLENGE_INVALID));
        }
        if !bool::from(granted) {
            return Err(ApiError::forbidden(format!("this route needs a token with the `{needed}` role")));
        }
        Ok(())
    }

    /// What `GET /api/session` answers: whether the server needs tokens, and the role the request's token
    /// grants (`null` without one it accepts). A server without tokens grants every role to loopback
    /// requests. Never an error, so a page can ask before it has a token.
    pub(crate) fn session(&self, headers: &HeaderMap) -> crate::routes::Session {
        if self.tokens.is_empty() {
            let role = self.check_open(headers).is_ok().then_some(Role::Operate.as_str());
            return crate::routes::Session::new(false, role, "none");
        }
        // The strongest role the token's own checks grant: operate implies read.
        let role = [Role::Operate, Role::Read, Role::Work].into_iter().find(|r| self.check(headers, *r).is_ok());
        let token = match (role, headers.contains_key(header::AUTHORIZATION)) {
            (Some(_), _) => "valid",
            (None, true) => "invalid",
            (None, false) => "none",
        };
        crate::routes::Session::new(true, role.map(Role::as_str), token)
    }

    /// An open server answers requests addressed to a loopback host, from no page or a page of a loopback
    /// or configured origin.
    fn check_open(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let open =
            "a server without tokens answers only requests to a loopback address; configure tokens to serve others";
        if let Some(host) = headers.get(header::HOST)
            && !host.to_str().is_ok_and(|h| is_loopback_host(strip_port(h)))
        {
            return Err(ApiError::forbidden(format!("the request is addressed to another host: {open}")));
        }
        if let Some(origin) = headers.get(header::ORIGIN)
            && !self.cors_origins.contains(origin)
            && !origin.to_str().is_ok_and(is_loopback_origin)
        {
            return Err(ApiError::forbidden(format!("the request comes from a page of another origin: {open}")));
        }
        Ok(())
    }
}

/// The token of a `Bearer <token>` header (the scheme in any case), if it is one.
fn bearer(value: &HeaderValue) -> Option<&[u8]> {
    let bytes = value.as_bytes();
    let (scheme, rest) = bytes.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// `host:port`, `[::1]:port` or a bare host, without its port and brackets.
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// `http://localhost:8080` and the like: a page served from this machine.
fn is_loopback_origin(origin: &str) -> bool {
    let rest = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    rest.is_some_and(|host| is_loopback_host(strip_port(host)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opts::Token;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (k.clone(), HeaderValue::from_str(v).expect("header"))).collect()
    }

    fn auth(tokens: &[(Role, &str)]) -> Arc<Auth> {
        let tokens = tokens.iter().map(|(role, secret)| Token::new(*role, *secret).expect("token"));
        Auth::new(&ServerOpts::new().tokens(tokens))
    }

    fn status(result: Result<(), ApiError>) -> u16 {
        result.map_or_else(|e| e.into_parts().0.as_u16(), |()| 200)
    }

    #[test]
    fn roles_are_granted_by_their_tokens() {
        let auth = auth(&[(Role::Read, "r"), (Role::Operate, "o"), (Role::Work, "w")]);
        let with = |token: &str| headers(&[(header::AUTHORIZATION, &format!("Bearer {token}"))]);
        assert_eq!(status(auth.check(&with("r"), Role::Read)), 200);
        assert_eq!(status(auth.check(&with("r"), Role::Operate)), 403);
        assert_eq!(status(auth.check(&with("o"), Role::Read)), 200, "operate implies read");
        assert_eq!(status(auth.check(&with("o"), Role::Operate)), 200);
        assert_eq!(status(auth.check(&with("o"), Role::Work)), 403);
        assert_eq!(status(auth.check(&with("w"), Role::Work)), 200);
        assert_eq!(status(auth.check(&with("w"), Role::Read)), 403);
        assert_eq!(status(auth.check(&with("x"), Role::Read)), 401);
        assert_eq!(status(auth.check(&with("rr"), Role::Read)), 401);
        assert_eq!(status(auth.check(&HeaderMap::new(), Role::Read)), 401);
        let basic = headers(&[(header::AUTHORIZATION, "Basic cjpy")]);
        assert_eq!(status(auth.check(&basic, Role::Read)), 401);
        let lower = headers(&[(header::AUTHORIZATION, "bearer  o ")]);
        assert_eq!(status(auth.check(&lower, Role::Operate)), 200, "the scheme is case-insensitive");
    }

    #[test]
    fn an_open_server_answers_loopback_hosts_and_origins_only() {
        let auth = auth(&[]);
        for host in ["127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:80", "app.localhost", "127.1.2.3"] {
            assert_eq!(status(auth.check(&headers(&[(header::HOST, host)]), Role::Operate)), 200, "{host}");
        }
        for host in ["evil.example:8080", "10.0.0.1", "[2001:db8::1]:80", "localhost.evil.example"] {
            assert_eq!(status(auth.check(&headers(&[(header::HOST, host)]), Role::Read)), 403, "{host}");
        }
        let from = |origin: &str| headers(&[(header::HOST, "127.0.0.1:8080"), (header::ORIGIN, origin)]);
        assert_eq!(status(auth.check(&from("http://localhost:3000"), Role::Operate)), 200);
        assert_eq!(status(auth.check(&from("https://evil.example"), Role::Operate)), 403);
        assert_eq!(status(auth.check(&from("null"), Role::Operate)), 403);
        let opts = ServerOpts::new().cors_origin("https://ops.example").expect("origin");
        let allowed = Auth::new(&opts);
        assert_eq!(status(allowed.check(&from("https://ops.example"), Role::Operate)), 200);
    }

    #[test]
    fn ports_and_brackets_are_stripped() {
        assert_eq!(strip_port("[::1]:8080"), "::1");
        assert_eq!(strip_port("localhost:80"), "localhost");
        assert_eq!(strip_port("example"), "example");
    }
}
