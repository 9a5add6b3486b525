//! Serving the router on a listener until a shutdown signal.

use std::future::Future;

use sea_orm::DatabaseConnection;
use tokio::net::TcpListener;

use crate::error::{Error, Result};
use crate::opts::ServerOpts;

/// Serves [`crate::router`] on `listener` until `shutdown` completes, then stops accepting connections and
/// waits for the requests in flight. Refuses ([`Error::Unprotected`]) a listener on a non-loopback address
/// when `opts` has no token. Logs the address it listens on (never a token).
pub async fn serve<F>(listener: TcpListener, db: DatabaseConnection, opts: ServerOpts, shutdown: F) -> Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let addr = listener.local_addr().map_err(|source| Error::Serve { addr: "the listener".to_owned(), source })?;
    opts.check_listen(addr)?;
    let mut roles: Vec<&str> = opts.tokens.iter().map(|t| t.role().as_str()).collect();
    roles.sort_unstable();
    roles.dedup();
    let roles = if roles.is_empty() { "none: every route is open on loopback".to_owned() } else { roles.join(",") };
    tracing::info!(%addr, token_roles = %roles, "serving the outbox api");
    axum::serve(listener, crate::router(db, opts))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| Error::Serve { addr: addr.to_string(), source })?;
    tracing::info!(%addr, "server stopped");
    Ok(())
}
