//! Following the event feed: read what came after a position, then wait for more (woken at once by this
//! process's own writes, and by polling for other processes').

use std::time::Duration;

use outbox::{FeedEvent, ops};
use sea_orm::DatabaseConnection;

/// Events read per query.
const PAGE: u64 = 500;
/// The longest wait between tries while the database fails.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A reader of the feed at a position.
pub(crate) struct Tail {
    db: DatabaseConnection,
    after: String,
    poll: Duration,
}

impl Tail {
    /// A reader after `position` (an event id).
    pub(crate) fn after(db: DatabaseConnection, position: String, poll: Duration) -> Tail {
        Tail { db, after: position, poll }
    }

    /// A reader of what is committed from now on; waits for the database when it cannot be read.
    pub(crate) async fn from_head(db: DatabaseConnection, poll: Duration) -> Tail {
        let mut backoff = poll;
        loop {
            match ops::feed_head(&db).await {
                Ok(after) => return Tail { db, after, poll },
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot read the end of the event feed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// The next events after the position, at least one; the position moves past them.
    pub(crate) async fn next_page(&mut self) -> Vec<FeedEvent> {
        let mut backoff = self.poll;
        loop {
            // Registered before the read, so a write in between still wakes the wait.
            let changed = ops::changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match ops::feed(&self.db, &self.after, PAGE).await {
                Ok(page) if !page.is_empty() => {
                    if let Some(last) = page.last() {
                        self.after = last.id.clone();
                    }
                    return page;
                }
                Ok(_) => backoff = self.poll,
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "reading the event feed failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep(self.poll) => {}
            }
        }
    }
}
