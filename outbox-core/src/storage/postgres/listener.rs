//! The `LISTEN` connection that wakes this process's workers when jobs are enqueued, from any writer, and on
//! which a worker's listener lets go the sequences that transactions of one snapshot enqueued onto
//! (`snapshot_enqueue.sql`).

use std::time::Duration;

use sea_orm::sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sea_orm::sqlx::{self, Acquire};

use super::CHANNEL;
use crate::backoff::Backoff;
use crate::wake;

/// A pool of one connection for [`listen`], on `options`: the `LISTEN` connection is held for as long as it
/// listens, so it is never one another pool counts on.
pub(super) fn pool(options: PgConnectOptions) -> PgPool {
    PgPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(30)).connect_lazy_with(options)
}

/// Keeps one connection listening on the wake-up channel, reconnecting with backoff, and wakes this process's
/// workers on every notification for their schema. Polling covers whatever is missed while reconnecting. With
/// `releases` (a worker's listener), a notification naming a sequence of the schema lets its first job go on the
/// same connection when nothing of it runs or is free to run; the rescuers' sweep covers what is missed.
pub(super) async fn listen(pool: PgPool, schema: String, worker: String, releases: bool) {
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
        wake::wake_heard();
        loop {
            match listener.try_recv().await {
                Ok(Some(note)) => {
                    if note.payload() == schema {
                        wake::wake_heard();
                    } else if releases && let Some(key) = sequence_of(note.payload(), &schema) {
                        release(&mut listener, &schema, &[key.to_owned()], &worker).await;
                    }
                }
                Ok(None) => {
                    tracing::info!(worker = %worker, "the listen connection was lost; reconnecting");
                    wake::wake_heard();
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

/// The sequence a notification asks to let go: `<schema>`, the record separator, `<key>`.
fn sequence_of<'a>(payload: &'a str, schema: &str) -> Option<&'a str> {
    payload.strip_prefix(schema)?.strip_prefix('\u{1e}').filter(|key| !key.is_empty())
}

/// Lets go the first job of each of `keys` on the listening connection (notifications arriving meanwhile wait in
/// its buffer). A failure is logged and left to the sweep; a dropped connection is found by the next receive.
async fn release(listener: &mut PgListener, schema: &str, keys: &[String], worker: &str) {
    let released: Result<u64, sqlx::Error> = async {
        let conn = listener.acquire().await?;
        super::store::release_sequences(conn, schema, keys).await
    }
    .await;
    match released {
        Ok(0) => {}
        Ok(jobs) => {
            tracing::debug!(worker = %worker, jobs, "let go jobs enqueued onto their sequences under a snapshot");
            wake::wake();
        }
        Err(e) => {
            tracing::debug!(worker = %worker, error = %e, "letting go a sequence failed; the sweep will");
        }
    }
}
