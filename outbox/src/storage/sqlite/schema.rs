//! SQLite's schema: its migrations (`migrations/`), in the order of `schema::MIGRATIONS` (the names are the same on
//! every engine), the current schema whole (`schema.sql`), and how the database tells that it has outbox's
//! migrations table.

use crate::storage::engine::Migration;

/// One count: whether the database has `outbox_migrations`.
pub(super) const HAS_MIGRATIONS_TABLE: &str =
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'outbox_migrations'";

/// The migrations. Undoing the fourth drops the workflow tables and columns and restores the sequence triggers; undoing the third drops the subject and trace columns; undoing the second drops the flow tables and columns; undoing the first drops every outbox table, with the jobs in them; the archive's partitions,
/// tables retention named, are dropped before it (`archive.rs`).
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        up: include_str!("migrations/001_schema.sql"),
        down: "DROP VIEW IF EXISTS outbox_jobs_archive; DROP TABLE IF EXISTS outbox_jobs_done; \
           DROP TABLE IF EXISTS outbox_reconciliations; DROP TABLE IF EXISTS outbox_locks; \
           DROP TABLE IF EXISTS outbox_schedules; DROP TABLE IF EXISTS outbox_workers; \
           DROP TABLE IF EXISTS outbox_kinds; DROP TABLE IF EXISTS outbox_jobs; \
           DROP TABLE IF EXISTS outbox_job_events;",
    },
    Migration {
        up: include_str!("migrations/002_flow.sql"),
        down: "DROP TABLE IF EXISTS outbox_fair; DROP TABLE IF EXISTS outbox_rates; DROP TABLE IF EXISTS outbox_pauses; \
           ALTER TABLE outbox_kinds DROP COLUMN cost; ALTER TABLE outbox_kinds DROP COLUMN fair; \
           ALTER TABLE outbox_kinds DROP COLUMN rate_key; ALTER TABLE outbox_kinds DROP COLUMN rate; \
           DROP INDEX IF EXISTS outbox_jobs_flow_keys; ALTER TABLE outbox_jobs DROP COLUMN cost; \
           ALTER TABLE outbox_jobs DROP COLUMN flow_key;",
    },
    Migration {
        up: include_str!("migrations/003_subject.sql"),
        down: "DROP INDEX IF EXISTS outbox_jobs_subject; ALTER TABLE outbox_kinds DROP COLUMN subject; \
           ALTER TABLE outbox_jobs DROP COLUMN trace; ALTER TABLE outbox_jobs DROP COLUMN subject;",
    },
    Migration {
        up: include_str!("migrations/004_workflow.sql"),
        down: include_str!("migrations/004_workflow_down.sql"),
    },
];

/// What taking over a database the dated migrations made changes beyond their records: nothing, as they left this
/// schema exactly.
pub(super) const ADOPT_DATED: &str = "SELECT 1";

/// The current schema, whole.
#[cfg(test)]
pub(super) const SCHEMA: &str = include_str!("schema.sql");
