//! The `LISTEN` connection that wakes this process's workers when jobs are enqueued, from any writer.

use std::time::Duration;

use sea_orm::sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};

use super::CHANNEL;
use crate::backoff::Backoff;
use crate::wake;

/// A pool of one connection for [`listen`], on `options`: the `LISTEN` connection is held for as long as it
/// listens, so it is never one another pool counts on.
pub(super) fn pool(options: PgConnectOptions) -> PgPool {
    PgPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(30)).connect_lazy_with(options)
}

/// Keeps one connection listening on the wake-up channel, reconnecting with backoff, and wakes this process's
/// workers on every notification for their schema. Polling covers whatever is missed while reconnecting.
pub(super) async fn listen(pool: PgPool, schema: String, worker: String) {
    let mut retry = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(worker = %worker, error = %e, retry_in = ?retry.peek(), "cannot open the listen connection");
                retry.sleep().await;
                continue;
            }
        };
        if let Err(e) = listener.listen(CHANNEL).await {
            tracing::warn!(worker = %worker, error = %e, retry_in = ?retry.peek(), "cannot listen for wake-ups");
            retry.sleep().await;
            continue;
        }
        tracing::debug!(worker = %worker, channel = CHANNEL, "listening for wake-ups");
        retry.reset();
        // Whatever was enqueued while not listening was not announced.
        wake::wake();
        loop {
            match listener.try_recv().await {
                Ok(Some(note)) => {
                    if note.payload() == schema {
                        wake::wake();
                    }
                }
                Ok(None) => {
                    tracing::info!(worker = %worker, "the listen connection was lost; reconnecting");
                    wake::wake();
                }
                Err(e) => {
                    tracing::warn!(worker = %worker, error = %e, retry_in = ?retry.peek(), "listening for wake-ups failed");
                    retry.sleep().await;
                    break;
                }
            }
        }
    }
}
