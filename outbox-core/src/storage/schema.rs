//! The schema: per backend, one migration creating the tables (`sqlite/schema.sql`, `postgres/schema.sql`),
//! one giving claims their ready indexes (`ready.sql`), one letting jobs deleted at completion leave their
//! events to the feed (`keep.sql`), one making PostgreSQL write less per job (`fewer_writes.sql`: a
//! statement's enqueued jobs in one row, room on each page for its rows' updates), one keying PostgreSQL's
//! unique index of active jobs' keys on a generated column rather than their status (`active_keys.sql`), one
//! rebuilding PostgreSQL's jobs table with the columns its updates change last and its rejoin trigger run after
//! the update (`columns_last.sql`), one making the archive of completed jobs kept in time partitions
//! (`archive.sql`), one finding PostgreSQL's leases through a table of claims rather than an index of the jobs
//! (`claims.sql`; nothing on SQLite), one keeping one of PostgreSQL's two ready indexes (`one_ready_index.sql`;
//! nothing on SQLite), one keying PostgreSQL's indexes on generated columns a claim leaves as they were, so that a
//! claim updates its rows in place (`hot_claim.sql`; nothing on SQLite), one leaving room on each page for a job's
//! claimed and completed versions (`room_for_both.sql`; nothing on SQLite), one finding PostgreSQL's finished jobs
//! through a log of when they finished rather than an index of the jobs (`finished_log.sql`; nothing on SQLite),
//! one putting a sequenced job enqueued under `REPEATABLE READ` or `SERIALIZABLE` in waiting, to be let go by the
//! workers (`snapshot_enqueue.sql`; nothing on SQLite), and the refusal of a database created by a build from
//! before them.

use sea_orm::{ConnectionTrait, DbBackend};

use super::Backend;
use crate::error::{Error, Result};

/// The migrations' names, in the order they apply.
pub(crate) const MIGRATIONS: [&str; 13] = [
    "m20261128_000001_outbox_schema",
    "m20261129_000002_ready_jobs",
    "m20261130_000003_keep_nothing",
    "m20261201_000004_fewer_writes",
    "m20261202_000005_active_keys",
    "m20261203_000006_columns_last",
    "m20261204_000007_archive",
    "m20261205_000008_claims",
    "m20261206_000009_one_ready_index",
    "m20261207_000010_hot_claim",
    "m20261208_000011_room_for_both",
    "m20261209_000012_finished_log",
    "m20261210_000013_snapshot_enqueue",
];

/// The migration that makes the archive of completed jobs kept in time partitions.
#[cfg(feature = "sqlite")]
pub(crate) const ARCHIVE: &str = "m20261204_000007_archive";

/// The migrations of builds before the schema was written as one. Their tables may match, but a database that
/// lists them grew through nine steps this build cannot vouch for: it is refused, never modified.
const LEGACY: &str = "m20261122_000001_create_outbox_jobs m20261122_000002_create_outbox_job_events \
    m20261122_000003_create_outbox_kinds m20261123_000004_sequences_and_limits m20261123_000005_enforced_types \
    m20261124_000006_event_feed_and_workers m20261125_000007_batched_worker_events m20261126_000008_inline_feed_rows \
    m20261127_000009_schedules_locks_reconciliations";

/// The statements of migration `step` (an index into [`MIGRATIONS`]) on `backend`, and those undoing it.
/// Undoing `ready_jobs` fails (and changes nothing) while two active jobs share a key, one of them superseded
/// by the other: the earlier unique index cannot hold both; let them finish first.
pub(crate) fn statements(backend: DbBackend, step: usize) -> Option<(&'static str, &'static str)> {
    match (backend, step) {
        #[cfg(feature = "sqlite")]
        (DbBackend::Sqlite, 0) => Some((
            include_str!("sqlite/schema.sql"),
            "DROP TABLE IF EXISTS outbox_reconciliations; DROP TABLE IF EXISTS outbox_locks; \
             DROP TABLE IF EXISTS outbox_schedules; DROP TABLE IF EXISTS outbox_workers; \
             DROP TABLE IF EXISTS outbox_kinds; DROP TABLE IF EXISTS outbox_jobs; \
             DROP TABLE IF EXISTS outbox_job_events;",
        )),
        #[cfg(feature = "sqlite")]
        (DbBackend::Sqlite, 1) => Some((
            include_str!("sqlite/ready.sql"),
            "DROP INDEX outbox_jobs_ready; DROP INDEX outbox_jobs_ready_queue; DROP INDEX outbox_jobs_scheduled; \
             DROP INDEX outbox_jobs_active_key; \
             ALTER TABLE outbox_jobs DROP COLUMN scheduled; ALTER TABLE outbox_jobs DROP COLUMN superseded; \
             CREATE INDEX outbox_jobs_ready ON outbox_jobs (priority DESC, run_at, id) \
                 WHERE status = 'pending' AND waiting = 0; \
             CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, priority DESC, run_at, id) \
                 WHERE status = 'pending' AND waiting = 0; \
             CREATE UNIQUE INDEX outbox_jobs_active_key ON outbox_jobs (kind, idempotency_key) \
                 WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL;",
        )),
        #[cfg(feature = "sqlite")]
        (DbBackend::Sqlite, 2) => Some((
            include_str!("sqlite/keep.sql"),
            "DROP TRIGGER outbox_jobs_purged; \
             CREATE TRIGGER outbox_jobs_purged AFTER DELETE ON outbox_jobs BEGIN \
                 DELETE FROM outbox_job_events WHERE job_id = OLD.id; \
             END;",
        )),
        #[cfg(feature = "sqlite")]
        (DbBackend::Sqlite, 3) => Some((include_str!("sqlite/fewer_writes.sql"), "SELECT 1;")),
        #[cfg(feature = "sqlite")]
        (DbBackend::Sqlite, 4) => Some((include_str!("sqlite/active_keys.sql"), "SELECT 1;")),
        #[cfg(feature = "sqlite")]
        (DbBackend::Sqlite, 5) => Some((include_str!("sqlite/columns_last.sql"), "SELECT 1;")),
        // Undoing it drops the archive's tables, with the jobs in them.
        #[cfg(feature = "sqlite")]
        (DbBackend::Sqlite, 6) => Some((include_str!("sqlite/archive.sql"), SQLITE_ARCHIVE_UNDO)),
        #[cfg(feature = "sqlite")]
        (DbBackend::Sqlite, 7..=12) => Some(("SELECT 1;", "SELECT 1;")),
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 0) => Some((
            include_str!("postgres/schema.sql"),
            "DROP TABLE IF EXISTS outbox_reconciliations, outbox_locks, outbox_schedules, outbox_workers, \
             outbox_kinds, outbox_jobs, outbox_job_events; DROP SEQUENCE IF EXISTS outbox_jobs_sequence_no; \
             DROP FUNCTION IF EXISTS outbox_jobs_notify(), outbox_jobs_sequence_insert(), \
             outbox_jobs_sequence_note(), outbox_jobs_sequence_next(), outbox_jobs_sequence_rejoin(), \
             outbox_jobs_enqueued(), outbox_jobs_purged(), outbox_jobs_transition();",
        )),
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 1) => Some((
            include_str!("postgres/ready.sql"),
            "DROP INDEX outbox_jobs_ready, outbox_jobs_ready_queue, outbox_jobs_scheduled, outbox_jobs_active_key; \
             ALTER TABLE outbox_jobs DROP COLUMN scheduled, DROP COLUMN superseded; \
             CREATE INDEX outbox_jobs_ready ON outbox_jobs (priority DESC, run_at, id) \
                 WHERE status = 'pending' AND NOT waiting; \
             CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, priority DESC, run_at, id) \
                 WHERE status = 'pending' AND NOT waiting; \
             CREATE UNIQUE INDEX outbox_jobs_active_key ON outbox_jobs (kind, idempotency_key) \
                 WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL;",
        )),
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 2) => Some((
            include_str!("postgres/keep.sql"),
            "DROP TRIGGER outbox_jobs_purged ON outbox_jobs; \
             CREATE TRIGGER outbox_jobs_purged AFTER DELETE ON outbox_jobs FOR EACH ROW \
                 EXECUTE FUNCTION outbox_jobs_purged();",
        )),
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 3) => Some((
            include_str!("postgres/fewer_writes.sql"),
            "ALTER TABLE outbox_jobs RESET (fillfactor); \
             CREATE OR REPLACE FUNCTION outbox_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
                 INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt) \
                 SELECT id, kind, queue, created_at, 'enqueued', attempts FROM inserted ORDER BY id; \
                 RETURN NULL; \
             END $$;",
        )),
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 4) => Some((
            include_str!("postgres/active_keys.sql"),
            "DROP INDEX outbox_jobs_active_key; ALTER TABLE outbox_jobs DROP COLUMN active_key; \
             CREATE UNIQUE INDEX outbox_jobs_active_key ON outbox_jobs (kind, idempotency_key) \
                 WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL AND NOT superseded;",
        )),
        // The column order stays: every statement of every build names the columns it reads and writes.
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 5) => Some((
            include_str!("postgres/columns_last.sql"),
            "DROP TRIGGER outbox_jobs_sequence_rejoin ON outbox_jobs; DROP FUNCTION outbox_jobs_sequence_rejoined(); \
             CREATE TRIGGER outbox_jobs_sequence_rejoin BEFORE UPDATE OF status ON outbox_jobs \
                 FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL AND NEW.status = 'pending' \
                     AND OLD.status IN ('completed', 'failed', 'cancelled')) \
                 EXECUTE FUNCTION outbox_jobs_sequence_rejoin();",
        )),
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 6) => {
            Some((include_str!("postgres/archive.sql"), "DROP VIEW outbox_jobs_archive; DROP TABLE outbox_jobs_done;"))
        }
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 7) => Some((
            include_str!("postgres/claims.sql"),
            "CREATE INDEX outbox_jobs_lease ON outbox_jobs (lease_expires_at) WHERE status = 'claimed'; \
             DROP TRIGGER outbox_jobs_claimed_elsewhere ON outbox_jobs; \
             DROP TRIGGER outbox_jobs_inserted_claimed ON outbox_jobs; \
             DROP FUNCTION outbox_jobs_claimed_elsewhere(); DROP TABLE outbox_claims;",
        )),
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 8) => Some((
            include_str!("postgres/one_ready_index.sql"),
            "CREATE INDEX outbox_jobs_ready ON outbox_jobs (kind, priority DESC, run_at, id) \
                 WHERE status = 'pending' AND NOT waiting AND NOT scheduled;",
        )),
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 9) => {
            Some((include_str!("postgres/hot_claim.sql"), include_str!("postgres/hot_claim_undo.sql")))
        }
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 10) => {
            Some((include_str!("postgres/room_for_both.sql"), "ALTER TABLE outbox_jobs SET (fillfactor = 50);"))
        }
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 11) => Some((
            include_str!("postgres/finished_log.sql"),
            "CREATE INDEX outbox_jobs_finished ON outbox_jobs (finished_at) WHERE finished_at IS NOT NULL; \
             DROP TRIGGER outbox_jobs_finished_elsewhere ON outbox_jobs; \
             DROP TRIGGER outbox_jobs_inserted_finished ON outbox_jobs; \
             DROP FUNCTION outbox_jobs_finished_elsewhere(); DROP TABLE outbox_finished;",
        )),
        // Undone, the insert trigger is `hot_claim.sql`'s; jobs that went in waiting are let go by the sweep.
        #[cfg(feature = "postgres")]
        (DbBackend::Postgres, 12) => Some((
            include_str!("postgres/snapshot_enqueue.sql"),
            "CREATE OR REPLACE FUNCTION outbox_jobs_sequence_insert() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
                 PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' \
                     || NEW.sequence_key, 0)); \
                 NEW.sequence_no := nextval('outbox_jobs_sequence_no'); \
                 NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key \
                     AND b.blocks); \
                 RETURN NEW; \
             END $$;",
        )),
        _ => None,
    }
}

/// Undoes `sqlite/archive.sql`, after the migration has dropped the tables retention renamed (`migration.rs`).
#[cfg(feature = "sqlite")]
const SQLITE_ARCHIVE_UNDO: &str = "DROP VIEW outbox_jobs_archive; DROP TABLE outbox_jobs_done;";

/// Refuses a database whose outbox tables an earlier build created, saying what to do; a database without
/// them, or with this build's, passes.
pub(crate) async fn refuse_legacy<C: ConnectionTrait + ?Sized>(conn: &C) -> Result<()> {
    let b = Backend::of(conn)?;
    let exists = match b {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'outbox_migrations'",
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            "SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema() \
             AND tablename = 'outbox_migrations'"
        }
    };
    let ctx = || Error::db("reading the applied outbox migrations");
    let count = |row: Option<sea_orm::QueryResult>| -> Result<i64> {
        row.map(|r| r.try_get_by_index::<i64>(0)).transpose().map_err(ctx()).map(Option::unwrap_or_default)
    };
    if count(conn.query_one_raw(b.stmt(exists, vec![])).await.map_err(ctx())?)? == 0 {
        return Ok(());
    }
    let legacy: Vec<sea_orm::Value> = LEGACY.split_whitespace().map(Into::into).collect();
    let marks = (1..=legacy.len()).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
    let sql = format!("SELECT COUNT(*) FROM outbox_migrations WHERE version IN ({marks})");
    if count(conn.query_one_raw(b.stmt(sql, legacy)).await.map_err(ctx())?)? == 0 {
        return Ok(());
    }
    Err(Error::Unsupported(
        "this database's outbox tables were created by an earlier build of outbox (its `outbox_migrations` lists \
         `m20261122_000001_create_outbox_jobs`), whose nine migrations this build replaces with a schema of its own: it cannot be \
         upgraded in place and was left untouched. Let the old build's workers finish the jobs, then drop the \
         outbox tables (`outbox_*`; on SQLite a file of their own can be deleted) and run `outbox migrate`"
            .into(),
    ))
}
