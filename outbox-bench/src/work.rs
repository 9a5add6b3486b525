//! The database's work in a case, beside its time: per job, the WAL bytes written, the rows written (inserted,
//! updated or deleted, every table of the run's schema) and the commits, and the dead tuples left behind.
//!
//! PostgreSQL: the WAL from `pg_current_wal_insert_lsn()` read around each phase (server-wide: run on an
//! otherwise idle server); rows and dead tuples from `pg_stat_user_tables` of the run's schema, commits from
//! `pg_stat_database`. A backend reports its counts when its transaction ends, at most once a second, and
//! always when it exits: the counts are read once the run's own connections are closed, on a connection of
//! their own, until two readings agree.
//!
//! SQLite: the bytes this process handed to `write(2)` (`wchar` of `/proc/self/io`): WAL frames and
//! checkpoints of the run's file, the worker running in this process. SQLite keeps no row or commit
//! counters across connections; those stay empty.

use std::time::{Duration, Instant};

use sea_orm::sqlx::{self, Connection, Row};

use crate::BoxError;
use crate::scratch::Location;

/// Counters read at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mark {
    /// WAL position (PostgreSQL) or bytes written by this process (SQLite).
    bytes: i64,
    /// Rows inserted, updated or deleted in the schema's tables; PostgreSQL only.
    rows: Option<i64>,
    /// Commits in the database; PostgreSQL only.
    commits: Option<i64>,
    /// Dead tuples in the schema's tables; PostgreSQL only.
    dead: Option<i64>,
}

/// The WAL position (PostgreSQL) or this process's bytes written (SQLite), at once: no statistics to wait for.
pub(crate) async fn bytes(location: &Location) -> Result<i64, BoxError> {
    match location {
        Location::File(_) => written(),
        Location::Url(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await?;
            let lsn: i64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::int8")
                .fetch_one(&mut conn)
                .await?;
            conn.close().await?;
            Ok(lsn)
        }
    }
}

/// Every counter, once the connections that wrote have closed (PostgreSQL: read until two readings 200 ms
/// apart agree, at most 15 s).
pub(crate) async fn mark(location: &Location) -> Result<Mark, BoxError> {
    let Location::Url(url) = location else {
        return Ok(Mark { bytes: written()?, ..Mark::default() });
    };
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let sql = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::int8, \
         (SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0)::int8 FROM pg_stat_user_tables \
          WHERE schemaname = current_schema()), \
         (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), \
         (SELECT COALESCE(SUM(n_dead_tup), 0)::int8 FROM pg_stat_user_tables WHERE schemaname = current_schema())";
    let read = async |conn: &mut sqlx::PgConnection| -> Result<Mark, BoxError> {
        let row = sqlx::query(sql).fetch_one(&mut *conn).await?;
        Ok(Mark { bytes: row.try_get(0)?, rows: row.try_get(1)?, commits: row.try_get(2)?, dead: row.try_get(3)? })
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = read(&mut conn).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        // A fresh snapshot of the statistics each time (they are cached for the transaction otherwise).
        sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut conn).await?;
        let now = read(&mut conn).await?;
        let settled = now.rows == last.rows && now.dead == last.dead;
        // Commits move with every reading of this very connection; only the rows and dead tuples must settle.
        last = Mark { bytes: last.bytes, ..now };
        if settled || Instant::now() >= deadline {
            break;
        }
    }
    conn.close().await?;
    Ok(last)
}

/// `wchar` of `/proc/self/io`: bytes this process passed to `write(2)` and its relatives.
fn written() -> Result<i64, BoxError> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    let line = io.lines().find_map(|l| l.strip_prefix("wchar:")).ok_or("/proc/self/io has no wchar line")?;
    Ok(line.trim().parse()?)
}

/// The work of a case per job, from marks around it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Work {
    /// WAL bytes (PostgreSQL) or bytes written (SQLite) per job while the jobs were enqueued.
    pub(crate) enqueue_bytes: f64,
    /// The same while they were drained.
    pub(crate) drain_bytes: f64,
    /// Rows written per job over the jobs' whole life.
    pub(crate) rows: Option<f64>,
    /// Commits per job over the jobs' whole life.
    pub(crate) commits: Option<f64>,
    /// Dead tuples in the schema's tables after the drain.
    pub(crate) dead: Option<i64>,
}

impl Work {
    /// From `start` (before the enqueue), the WAL position `drain_from` where the drain began, and `end`.
    pub(crate) fn of(start: Mark, drain_from: i64, end: Mark, jobs: u64) -> Work {
        let n = jobs.max(1) as f64;
        let per = |a: Option<i64>, b: Option<i64>| Some((b? - a?) as f64 / n);
        Work {
            enqueue_bytes: (drain_from - start.bytes) as f64 / n,
            drain_bytes: (end.bytes - drain_from) as f64 / n,
            rows: per(start.rows, end.rows),
            commits: per(start.commits, end.commits),
            dead: end.dead,
        }
    }

    /// Bytes per job over the jobs' whole life.
    pub(crate) fn life_bytes(&self) -> f64 {
        self.enqueue_bytes + self.drain_bytes
    }
}
