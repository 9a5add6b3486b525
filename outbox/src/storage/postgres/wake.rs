//! The `LISTEN` connection that wakes this process's workers when jobs are enqueued, from any writer, and on
//! which a worker's listener lets go the sequences that transactions of one snapshot enqueued onto
//! (`outbox_jobs_sequence_insert` in `schema.sql`).

use std::time::Duration;

use sea_orm::sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sea_orm::sqlx::{self, Acquire};

use super::CHANNEL;
use crate::backoff::Backoff;
use crate::wake;

/// The wait before reconnecting after a failure, doubling up to the last.
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(30);

/// The wake-up of the workers of the schema `$1`, at commit.
pub(in crate::storage::postgres) const NOTIFY: &str = "SELECT pg_notify('outbox_jobs', $1)";

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
    let mut retry = Backoff::new(FIRST_RETRY, LAST_RETRY);
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
        retry = Backoff::new(FIRST_RETRY, LAST_RETRY);
        // Whatever was enqueued while not listening was not announced.
        wake::wake_heard();
        // Sequences to let go whose lock another transaction held: tried again, sooner first.
        let mut busy = Busy::default();
        loop {
            let received = match busy.due() {
                Some(at) => match tokio::time::timeout_at(at, listener.try_recv()).await {
                    Ok(received) => received,
                    Err(_) => {
                        let keys = busy.take_due();
                        if !release(&mut listener, &schema, keys, &worker, &mut busy).await {
                            retry.sleep().await;
                            break;
                        }
                        continue;
                    }
                },
                None => listener.try_recv().await,
            };
            match received {
                Ok(Some(note)) => {
                    if note.payload() == schema {
                        wake::wake_heard();
                    } else if releases && let Some(key) = sequence_of(note.payload(), &schema) {
                        let keys = vec![(key.to_owned(), 0)];
                        if !release(&mut listener, &schema, keys, &worker, &mut busy).await {
                            retry.sleep().await;
                            break;
                        }
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

/// Sequences whose release found their lock held, each with how many times it was tried and when it is tried
/// again. Past [`BUSY_TRIES`] a sequence is left to the rescuers' sweep.
#[derive(Default)]
struct Busy(Vec<(String, u32, tokio::time::Instant)>);

/// Tries at a held sequence: 5 ms doubling, about 10 s in all.
const BUSY_TRIES: u32 = 11;

impl Busy {
    fn due(&self) -> Option<tokio::time::Instant> {
        self.0.iter().map(|(_, _, at)| *at).min()
    }

    fn take_due(&mut self) -> Vec<(String, u32)> {
        let now = tokio::time::Instant::now();
        let (due, later) = std::mem::take(&mut self.0).into_iter().partition(|(_, _, at)| *at <= now);
        self.0 = later;
        due.into_iter().map(|(key, tries, _)| (key, tries)).collect()
    }

    fn again(&mut self, key: String, tries: u32) {
        if tries >= BUSY_TRIES || self.0.iter().any(|(k, ..)| *k == key) {
            return;
        }
        let wait = Duration::from_millis(5) * 2u32.pow(tries);
        self.0.push((key, tries + 1, tokio::time::Instant::now() + wait));
    }
}

/// The sequence a notification asks to let go: `<schema>`, the record separator, `<key>`.
fn sequence_of<'a>(payload: &'a str, schema: &str) -> Option<&'a str> {
    payload.strip_prefix(schema)?.strip_prefix('\u{1e}').filter(|key| !key.is_empty())
}

/// Lets go the first job of each of `keys` (with the tries each has had) on the listening connection
/// (notifications arriving meanwhile wait in its buffer); a sequence whose lock is held is tried again later
/// ([`Busy`]). False when the statements failed: the transaction may be left open on the connection, where no
/// notification is delivered, so the listener reconnects (the server rolls it back) and the sweep covers these.
async fn release(
    listener: &mut PgListener,
    schema: &str,
    keys: Vec<(String, u32)>,
    worker: &str,
    busy: &mut Busy,
) -> bool {
    let names: Vec<String> = keys.iter().map(|(key, _)| key.clone()).collect();
    let released = async {
        let conn = listener.acquire().await?;
        release_sequences(conn, schema, &names).await
    }
    .await;
    match released {
        Ok((jobs, held)) => {
            if jobs > 0 {
                tracing::debug!(worker = %worker, jobs, "let go jobs enqueued onto their sequences under a snapshot");
                wake::wake();
            }
            for (key, tries) in keys {
                if held.contains(&key) {
                    busy.again(key, tries);
                }
            }
            true
        }
        Err(e) => {
            tracing::warn!(worker = %worker, error = %e, "letting go a sequence failed; reconnecting, and the sweep will");
            false
        }
    }
}

/// The second half, in the same transaction and so with a snapshot taken under those locks: lets go the first
/// job of each sequence when it waits with nothing ahead of it holding it and no job of the sequence running
/// or free to run (a job retried after its sequence went on waits for the later one that runs). The release triggers skip a
/// sequence an enqueuing transaction holds, and a job enqueued by a transaction of one snapshot (`REPEATABLE
/// READ`, `SERIALIZABLE`) goes in waiting whatever it saw (`outbox_jobs_sequence_insert` in `schema.sql`); the sweep catches both.
pub(in crate::storage::postgres) const SWEEP: &str = "UPDATE outbox_jobs w SET waiting = false FROM unnest($1::text[]) AS s(k) \
     WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = s.k AND h.blocks \
     ORDER BY h.sequence_no LIMIT 1) AND w.status = 'pending' AND w.waiting AND w.parents_left = 0 \
     AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = s.k AND c.blocks \
     AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting)))";

/// The first half of the sweep for the sequences `$2` alone (`$1` the schema): of those with a waiting job, none of
/// whose jobs is running or free to run, the ones whose lock it took (for the transaction), and the ones whose
/// lock another transaction holds (an enqueue onto the sequence, or another worker's release). What a worker's
/// listener runs when a transaction of one snapshot enqueued onto them (`outbox_jobs_sequence_insert` in `schema.sql`).
pub(in crate::storage::postgres) const SWEEP_KEYS_LOCK: &str = "SELECT array_agg(k) FILTER (WHERE locked), array_agg(k) FILTER (WHERE NOT locked) \
     FROM (SELECT k, pg_try_advisory_xact_lock(hashtextextended($1 || ' outbox sequence ' || k, 0)) AS locked \
     FROM (SELECT DISTINCT u.k FROM unnest($2::text[]) AS u(k) WHERE EXISTS (SELECT 1 FROM outbox_jobs w \
     WHERE w.sequence_key = u.k AND w.blocks AND w.status = 'pending' AND w.waiting) \
     AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = u.k AND c.blocks \
     AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting))) \
     ORDER BY 1) s) t";

/// Lets go the first job of each of the sequences `keys` of `schema` when nothing of it runs or is free to run,
/// in a transaction of its own on `conn` ([`SWEEP_KEYS_LOCK`], then [`SWEEP`]), and wakes the workers when it
/// let any go; how many it let go, and the sequences it could not lock (to try again: whoever holds the lock may
/// be an enqueue that lets nothing go).
pub(super) async fn release_sequences(
    conn: &mut sqlx::postgres::PgConnection,
    schema: &str,
    keys: &[String],
) -> std::result::Result<(u64, Vec<String>), sqlx::Error> {
    let mut tx = sqlx::Connection::begin(conn).await?;
    let (locked, busy): (Option<Vec<String>>, Option<Vec<String>>) =
        sqlx::query_as(SWEEP_KEYS_LOCK).bind(schema).bind(keys).fetch_one(&mut *tx).await?;
    let released = match locked {
        Some(locked) => sqlx::query(SWEEP).bind(&locked).execute(&mut *tx).await?.rows_affected(),
        None => 0,
    };
    if released > 0 {
        sqlx::query(NOTIFY).bind(schema).execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok((released, busy.unwrap_or_default()))
}
