//! PostgreSQL's schema: its migrations (`migrations/`), in the order of `schema::MIGRATIONS` (the names are the
//! same on every engine), the current schema whole (`schema.sql`), and how the database tells that it has outbox's
//! migrations table.

use crate::storage::engine::Migration;

/// One count: whether the connection's schema has `outbox_migrations`.
pub(super) const HAS_MIGRATIONS_TABLE: &str =
    "SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'outbox_migrations'";

/// The migrations. Undoing the fourth drops the workflow tables and columns and restores the sequence triggers; undoing the third drops the subject and trace columns; undoing the second drops the flow tables and columns; undoing the first drops every outbox table, with the jobs in them.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        up: include_str!("migrations/001_schema.sql"),
        down: "DROP VIEW IF EXISTS outbox_jobs_archive; \
           DROP TABLE IF EXISTS outbox_jobs_done, outbox_finished, outbox_claims, outbox_reconciliations, \
           outbox_locks, outbox_schedules, outbox_workers, outbox_kinds, outbox_jobs, outbox_job_events; \
           DROP SEQUENCE IF EXISTS outbox_jobs_sequence_no; \
           DROP FUNCTION IF EXISTS outbox_jobs_notify(), outbox_jobs_sequence_insert(), outbox_jobs_sequence_note(), \
           outbox_jobs_sequence_next(), outbox_jobs_sequence_rejoined(), outbox_jobs_enqueued(), \
           outbox_jobs_purged(), outbox_jobs_transition(), outbox_jobs_claimed_elsewhere(), \
           outbox_jobs_finished_elsewhere();",
    },
    Migration {
        up: include_str!("migrations/002_flow.sql"),
        down: "DROP TABLE IF EXISTS outbox_fair, outbox_rates, outbox_pauses; \
           ALTER TABLE outbox_kinds DROP COLUMN IF EXISTS rate, DROP COLUMN IF EXISTS rate_key, \
           DROP COLUMN IF EXISTS fair, DROP COLUMN IF EXISTS cost; \
           DROP INDEX IF EXISTS outbox_jobs_flow_keys; \
           ALTER TABLE outbox_jobs DROP COLUMN IF EXISTS flow_key, DROP COLUMN IF EXISTS cost;",
    },
    Migration {
        up: include_str!("migrations/003_subject.sql"),
        down: "DROP INDEX IF EXISTS outbox_jobs_subject; ALTER TABLE outbox_kinds DROP COLUMN IF EXISTS subject; \
           ALTER TABLE outbox_jobs DROP COLUMN IF EXISTS trace, DROP COLUMN IF EXISTS subject;",
    },
    Migration {
        up: include_str!("migrations/004_workflow.sql"),
        down: include_str!("migrations/004_workflow_down.sql"),
    },
];

/// What taking over a database the dated migrations made changes beyond their records: the function their sixth
/// step kept for its undo, which no trigger calls.
pub(super) const ADOPT_DATED: &str = "DROP FUNCTION IF EXISTS outbox_jobs_sequence_rejoin()";

/// The current schema, whole.
#[cfg(test)]
pub(super) const SCHEMA: &str = include_str!("schema.sql");
