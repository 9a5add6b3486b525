//! Wake-ups across processes on MySQL, which has no `LISTEN`: every enqueue statement writes one of its jobs into a
//! ring of `MEMORY` tables (`outbox_wake`, `schema.sql`), and each process polls the ring's counter on a connection
//! of its own, every 10 ms while it heard something in the last second and every 50 ms otherwise (the figures behind
//! the choice are in `docs/internals/mariadb.md`). A job read from the ring wakes this process's workers once its
//! `enqueued` event can be read, that is once its enqueue committed (the event stays when a job is deleted as it
//! completes, which its row does not): it is looked for again 1, 2, 4, … ms later up to the poll's interval, then at
//! every poll for a minute (a rolled-back enqueue's job never shows). More than [`AWAITED_AT_MOST`] jobs awaited at
//! once wake the workers once and are dropped: a claim looks at everything.

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, Value};
use tokio::time::Instant;

use super::{conn, stmt};
use crate::backoff::Backoff;
use crate::wake::{self, Watch};

/// The poll's interval while this process heard a job in the last second, and otherwise.
const BUSY: Duration = Duration::from_millis(10);
const IDLE: Duration = Duration::from_millis(50);
/// How long after hearing a job the poll stays at [`BUSY`].
const BUSY_FOR: Duration = Duration::from_secs(1);
/// How long a job read from the ring is looked for before it is taken for rolled back.
const LOOK_FOR: Duration = Duration::from_secs(60);
/// The ring's slots (`outbox_wake` writes place `n` into slot `n MOD 32768`).
const RING: i64 = 32_768;
/// Jobs awaited at most; past it, the workers are woken and the list emptied.
const AWAITED_AT_MOST: usize = 4_096;
/// Jobs whose events one statement looks for: a fixed list, so the statement's text never changes (a statement
/// prepared afresh for every poll waited about 50 ms for the server's acknowledgement).
const LOOK: usize = 16;

const ANNOUNCE: &str = "DO outbox_wake($1)";
const COUNTER: &str = "SELECT n FROM outbox_wake_counter WHERE id = 1";
const LOG: &str = "SELECT seq, job_id FROM outbox_wake_log WHERE seq > $1 AND seq <= $2 ORDER BY seq";

/// Writes the job `id` into the ring, in `conn`'s transaction. A failure is logged (once a process: a user without
/// `EXECUTE` on the function would fail every time) and the enqueue goes on: the other processes' polls find the job
/// at their next claim.
pub(super) async fn announce<C: ConnectionTrait + ?Sized>(conn: &C, id: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Err(e) = conn.execute_raw(stmt(ANNOUNCE, vec![id.into()])).await
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            job_id = %id, error = %e,
            "could not tell other processes of an enqueued job (`DO outbox_wake`); they find it at their next poll, \
             and this warning is not repeated"
        );
    }
}

/// Jobs a store's committed transaction made claimable (a sequence's next job, a rescued job): this process's
/// workers are woken, and other processes told through the ring (after the commit, so that what they read is
/// claimable).
pub(super) async fn let_go(db: &DatabaseConnection, ids: &[String]) {
    if let Some(first) = ids.first() {
        wake::wake();
        announce(db, first).await;
    }
}

/// A task polling the ring on a connection of its own, for as long as the watch lasts.
pub(super) fn watch(db: &DatabaseConnection) -> Watch {
    Watch::new(None, Some(tokio::spawn(poll(conn::own_pool(db, 1)))))
}

/// A job read from the ring whose `enqueued` event could not be read yet (its enqueue had not committed).
struct Awaited {
    id: String,
    heard: Instant,
    next: Instant,
    step: Duration,
}

async fn poll(db: DatabaseConnection) {
    let mut last: Option<i64> = None;
    let mut awaited: Vec<Awaited> = Vec::new();
    let mut busy_until = Instant::now();
    let failing_from = || Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
    let mut failing = failing_from();
    loop {
        let interval = if Instant::now() < busy_until { BUSY } else { IDLE };
        let due = awaited.iter().map(|a| a.next).min();
        let at = due.map_or(Instant::now() + interval, |d| d.min(Instant::now() + interval));
        tokio::time::sleep_until(at).await;
        match look(&db, &mut last, &mut awaited, interval).await {
            Ok(true) => {
                wake::wake_heard();
                busy_until = Instant::now() + BUSY_FOR;
                failing = failing_from();
            }
            Ok(false) => failing = failing_from(),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?failing.peek(), "cannot read the wake-up ring");
                failing.sleep().await;
                // Whatever was enqueued meanwhile was not heard.
                last = None;
            }
        }
    }
}

/// One look at the ring and at the jobs awaited; whether this process's workers are to claim.
async fn look(
    db: &DatabaseConnection,
    last: &mut Option<i64>,
    awaited: &mut Vec<Awaited>,
    interval: Duration,
) -> Result<bool, sea_orm::DbErr> {
    let now = Instant::now();
    let n = match db.query_one_raw(stmt(COUNTER, vec![])).await? {
        Some(row) => row.try_get_by_index::<i64>(0)?,
        None => 0,
    };
    let mut heard = false;
    match *last {
        // The first look, a ring gone back (a restarted server empties MEMORY tables) or one that went round
        // since the last look: whatever is there is claimed once.
        None => heard = true,
        Some(l) if n < l || n - l > RING => heard = true,
        Some(l) if n > l => {
            for row in db.query_all_raw(stmt(LOG, vec![l.into(), n.into()])).await? {
                let id: String = row.try_get_by_index(1)?;
                awaited.push(Awaited { id, heard: now, next: now, step: Duration::from_millis(1) });
            }
        }
        Some(_) => {}
    }
    *last = Some(n);
    if awaited.len() > AWAITED_AT_MOST {
        awaited.clear();
        return Ok(true);
    }
    let due: Vec<usize> = (0..awaited.len()).filter(|&i| awaited[i].next <= now).collect();
    let mut found = Vec::new();
    for chunk in due.chunks(LOOK) {
        let mut values: Vec<Value> = chunk.iter().map(|&i| Value::from(awaited[i].id.clone())).collect();
        values.resize(LOOK, Value::from(""));
        let sql = format!(
            "SELECT DISTINCT job_id FROM outbox_job_events WHERE job_id IN ({}) AND event = 'enqueued'",
            super::marks(1, LOOK)
        );
        for row in db.query_all_raw(stmt(&sql, values)).await? {
            found.push(row.try_get_by_index::<String>(0)?);
        }
    }
    heard |= !found.is_empty();
    awaited.retain_mut(|a| {
        if found.contains(&a.id) || now.duration_since(a.heard) > LOOK_FOR {
            return false;
        }
        if a.next <= now {
            a.next = now + a.step;
            a.step = (a.step * 2).min(interval);
        }
        true
    });
    Ok(heard)
}
