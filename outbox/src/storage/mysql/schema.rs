//! MySQL's schema: its migrations, in the order of `schema::MIGRATIONS` (the names are the same on every engine),
//! the current schema whole (`schema.sql`), and how the database tells that it has outbox's migrations table.
//!
//! No database had outbox's tables on MariaDB before this engine, so its first migration makes the current schema
//! whole and the three after it have nothing left to do; a migration that changes the schema later freezes a copy
//! of `schema.sql` as `migrations/001_schema.sql` first. DDL commits each statement here, so a migration cannot be
//! rolled back: every statement of the schema is written to be run again (`IF NOT EXISTS`, `OR REPLACE`), and a
//! migration cut short completes when run again.

use crate::storage::engine::Migration;

/// One count: whether the connection's database has `outbox_migrations`.
pub(super) const HAS_MIGRATIONS_TABLE: &str = "SELECT COUNT(*) FROM information_schema.tables \
    WHERE table_schema = DATABASE() AND table_name = 'outbox_migrations'";

/// What a migration with nothing to do sends: the server refuses an empty query.
const NOTHING: &str = "DO 0";

/// The migrations. Undoing the first drops every outbox table, with the jobs in them; undoing the others changes
/// nothing, since the first made what they add on the other engines.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        up: include_str!("schema.sql"),
        down: "DROP FUNCTION IF EXISTS outbox_wake; DROP FUNCTION IF EXISTS outbox_feed_stamp; \
           DROP VIEW IF EXISTS outbox_jobs_archive; \
           DROP TABLE IF EXISTS outbox_job_deps, outbox_workflows, outbox_fair, outbox_rates, outbox_pauses, \
           outbox_reconciliations, outbox_locks, outbox_schedules, outbox_workers, outbox_kinds, outbox_jobs_done, \
           outbox_finished, outbox_claims, outbox_limits, outbox_job_events, outbox_sequence_notes, outbox_sequences, \
           outbox_wake_log, outbox_wake_counter, outbox_feed_stamps, outbox_feed_stamper, outbox_outlived, \
           outbox_workflow_notes, outbox_workflow_turn, \
           outbox_jobs;",
    },
    Migration { up: NOTHING, down: NOTHING },
    Migration { up: NOTHING, down: NOTHING },
    Migration { up: NOTHING, down: NOTHING },
];

/// No dated migration ever ran on MySQL.
pub(super) const ADOPT_DATED: &str = NOTHING;

/// The current schema, whole.
#[cfg(test)]
pub(super) const SCHEMA: &str = include_str!("schema.sql");
