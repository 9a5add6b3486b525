//! The SQLite schema: each migration's statements, and how to undo them.

use crate::storage::{Migration, blocking};

/// The migrations in order; their names are [`crate::storage::MIGRATION_NAMES`].
pub(super) const MIGRATIONS: [Migration; 9] = [
    Migration { up: SCHEMA_V1, down: &["DROP TABLE IF EXISTS outbox_jobs"] },
    Migration {
        up: SCHEMA_V2_EVENTS,
        down: &[
            "DROP TRIGGER IF EXISTS outbox_jobs_transition",
            "DROP TRIGGER IF EXISTS outbox_jobs_purged",
            "DROP TABLE IF EXISTS outbox_job_events",
        ],
    },
    Migration { up: SCHEMA_V3_KINDS, down: &["DROP TABLE IF EXISTS outbox_kinds"] },
    Migration { up: SCHEMA_V4_SEQUENCES, down: SCHEMA_V4_DOWN },
    Migration { up: SCHEMA_V5_STRICT, down: SCHEMA_V5_DOWN },
    Migration { up: SCHEMA_V6_FEED, down: SCHEMA_V6_DOWN },
    Migration { up: SCHEMA_V7_BATCHED, down: SCHEMA_V7_DOWN },
    // How PostgreSQL stores long feed rows; SQLite has no TOAST, so nothing changes here.
    Migration { up: &[], down: &[] },
    Migration { up: SCHEMA_V9_TIME, down: SCHEMA_V9_DOWN },
];

/// The jobs table, as `$name`, with JSON columns of `$json` type and `$options` after it (`STRICT`).
macro_rules! jobs_table {
    ($name:literal, $json:literal, $options:literal) => {
        concat!(
            "CREATE TABLE ",
            $name,
            " (
            id TEXT PRIMARY KEY NOT NULL,
            kind TEXT NOT NULL,
            queue TEXT NOT NULL DEFAULT 'default',
            payload ",
            $json,
            " NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
            priority INTEGER NOT NULL DEFAULT 0,
            attempts INTEGER NOT NULL DEFAULT 0,
            runs INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
            run_at INTEGER NOT NULL,
            locked_by TEXT,
            locked_at INTEGER,
            lease_expires_at INTEGER,
            last_error TEXT,
            idempotency_key TEXT,
            schema_hash TEXT NOT NULL,
            output ",
            $json,
            ",
            created_at INTEGER NOT NULL,
            claimed_at INTEGER,
            completed_at INTEGER,
            updated_at INTEGER NOT NULL,
            sequence_key TEXT,
            sequence_no INTEGER,
            waiting INTEGER NOT NULL DEFAULT 0,
            sequence_hold INTEGER NOT NULL DEFAULT 1",
            $options
        )
    };
}

/// The statements that replace the jobs table with `$create` filled by `$copy` (as `outbox_jobs_rebuild`):
/// the old table's triggers go first, then the table; the new one takes its name and gets the indexes and
/// triggers back. The migration runs in one transaction whose first statement writes, so it takes the write
/// lock at once, waiting out other writers (a transaction that read first could not wait for it).
macro_rules! rebuild {
    ($create:expr, $copy:expr) => {
        &[
            $create,
            $copy,
            "DROP TRIGGER IF EXISTS outbox_jobs_transition",
            "DROP TRIGGER IF EXISTS outbox_jobs_purged",
            "DROP TRIGGER IF EXISTS outbox_jobs_sequence_next",
            "DROP TRIGGER IF EXISTS outbox_jobs_sequence_purged",
            "DROP TRIGGER IF EXISTS outbox_jobs_sequence_rejoin",
            "DROP TABLE outbox_jobs",
            "ALTER TABLE outbox_jobs_rebuild RENAME TO outbox_jobs",
            ACTIVE_KEY_INDEX,
            LEASE_INDEX,
            FINISHED_INDEX,
            READY_INDEX,
            READY_QUEUE_INDEX,
            SEQUENCE_INDEX,
            SEQUENCE_BLOCKING_INDEX,
            TRANSITION_TRIGGER,
            PURGED_TRIGGER,
            SEQUENCE_NEXT_TRIGGER,
            SEQUENCE_PURGED_TRIGGER,
            SEQUENCE_REJOIN_TRIGGER,
        ]
    };
}

/// A text column copied into a STRICT table: a BLOB (which a TEXT column of a STRICT table refuses) becomes
/// its hex literal, so nothing is lost.
macro_rules! text_of {
    ($c:literal) => {
        concat!("CASE WHEN typeof(", $c, ") = 'blob' THEN 'x''' || hex(", $c, ") || '''' ELSE ", $c, " END")
    };
}

/// A JSON column copied into a STRICT table: a BLOB becomes a JSON string of its hex literal.
macro_rules! json_of {
    ($c:literal) => {
        concat!("CASE WHEN typeof(", $c, ") = 'blob' THEN json_quote('x''' || hex(", $c, ") || '''') ELSE ", $c, " END")
    };
}

/// A job of the old table that was waiting to run with a payload it cannot be run with.
macro_rules! unrunnable {
    () => {
        "typeof(payload) = 'blob' AND status IN ('pending', 'claimed')"
    };
}

/// Types that the database enforces (and attempt counts that cannot overflow a claim's `attempts + 1`). An
/// ordinary SQLite table stores whatever a writer hands it (a BLOB in
/// `payload`, text in `attempts`), and one such row written by another tool used to stop every claim; a
/// STRICT table refuses wrong types, and its JSON columns (`ANY`, which keeps values as written, where a TEXT
/// column would turn a number into text) must hold text: BLOB, INTEGER and REAL payloads are refused at the
/// write. Existing rows are copied over; a job whose payload was a BLOB keeps the bytes as a hex string and,
/// if it was waiting to run, is failed with an error naming the column.
const SCHEMA_V5_STRICT: &[&str] = rebuild!(
    jobs_table!(
        "outbox_jobs_rebuild",
        "ANY",
        ",
            CHECK (typeof(payload) = 'text'),
            CHECK (output IS NULL OR typeof(output) = 'text'),
            CHECK (attempts BETWEEN 0 AND 1000000000 AND runs BETWEEN 0 AND 1000000000)
        ) STRICT"
    ),
    concat!(
        "INSERT INTO outbox_jobs_rebuild SELECT ",
        text_of!("id"),
        ", ",
        text_of!("kind"),
        ", ",
        text_of!("queue"),
        ", ",
        json_of!("payload"),
        ", CASE WHEN ",
        unrunnable!(),
        " THEN 'failed' ELSE status END, CAST(priority AS INTEGER), \
         MIN(MAX(CAST(attempts AS INTEGER), 0), 1000000000), MIN(MAX(CAST(runs AS INTEGER), 0), 1000000000), \
         MAX(CAST(max_attempts AS INTEGER), 1), CAST(run_at AS INTEGER), ",
        text_of!("locked_by"),
        ", CAST(locked_at AS INTEGER), CASE WHEN ",
        unrunnable!(),
        " THEN NULL ELSE CAST(lease_expires_at AS INTEGER) END, CASE WHEN ",
        unrunnable!(),
        " THEN 'job `' || ",
        text_of!("id"),
        " || '` cannot be read: its `payload` column holds a BLOB of ' || length(payload) \
         || ' bytes; failed by the upgrade to a strict schema (the bytes are kept in the payload as hex)' ELSE ",
        text_of!("last_error"),
        " END, ",
        text_of!("idempotency_key"),
        ", ",
        text_of!("schema_hash"),
        ", ",
        json_of!("output"),
        ", CAST(created_at AS INTEGER), CAST(claimed_at AS INTEGER), CAST(completed_at AS INTEGER), \
         CAST(updated_at AS INTEGER), ",
        text_of!("sequence_key"),
        ", CAST(sequence_no AS INTEGER), CAST(waiting AS INTEGER), CAST(sequence_hold AS INTEGER) \
         FROM outbox_jobs"
    )
);

const SCHEMA_V5_DOWN: &[&str] = rebuild!(
    jobs_table!("outbox_jobs_rebuild", "TEXT", ")"),
    "INSERT INTO outbox_jobs_rebuild SELECT * FROM outbox_jobs"
);

/// Lets the first job of `OLD`'s sequence that is still waiting run, if nothing earlier holds it back.
macro_rules! release_next {
    () => {
        concat!(
            "UPDATE outbox_jobs SET waiting = 0 WHERE id = (SELECT h.id FROM outbox_jobs h \
             WHERE h.sequence_key = OLD.sequence_key AND ",
            blocking!("h"),
            " ORDER BY h.sequence_no LIMIT 1) AND status = 'pending' AND waiting = 1;"
        )
    };
}

/// Sequences and fleet-wide limits. A sequenced job gets its place (`sequence_no`, per key) from the
/// database when it is inserted, and is `waiting` while an earlier job of its key blocks it; waiting jobs are
/// left out of the claim indexes, so a claim never reads them. Triggers keep `waiting` right for every
/// writer: when a job stops blocking its sequence (completed, failed or cancelled under the continue policy,
/// released by an operator, deleted), the next one is let go; a finished job put back to pending rejoins its
/// sequence behind whatever blocks it, and behind a later job that is running or free to run (a job retried
/// after the sequence went on without it never runs beside another of its sequence).
const SCHEMA_V4_SEQUENCES: &[&str] = &[
    "ALTER TABLE outbox_jobs ADD COLUMN sequence_key TEXT",
    "ALTER TABLE outbox_jobs ADD COLUMN sequence_no INTEGER",
    "ALTER TABLE outbox_jobs ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE outbox_jobs ADD COLUMN sequence_hold INTEGER NOT NULL DEFAULT 1",
    "DROP INDEX IF EXISTS outbox_jobs_claim",
    "DROP INDEX IF EXISTS outbox_jobs_claim_queue",
    READY_INDEX,
    READY_QUEUE_INDEX,
    SEQUENCE_INDEX,
    SEQUENCE_BLOCKING_INDEX,
    SEQUENCE_NEXT_TRIGGER,
    SEQUENCE_PURGED_TRIGGER,
    SEQUENCE_REJOIN_TRIGGER,
    "ALTER TABLE outbox_kinds ADD COLUMN sequence TEXT",
    "ALTER TABLE outbox_kinds ADD COLUMN on_sequence_failure TEXT NOT NULL DEFAULT 'hold'",
    "ALTER TABLE outbox_kinds ADD COLUMN concurrency INTEGER",
];

const READY_INDEX: &str = "CREATE INDEX IF NOT EXISTS outbox_jobs_ready
        ON outbox_jobs (priority DESC, run_at, id) WHERE status = 'pending' AND waiting = 0";
const READY_QUEUE_INDEX: &str = "CREATE INDEX IF NOT EXISTS outbox_jobs_ready_queue
        ON outbox_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending' AND waiting = 0";
const SEQUENCE_INDEX: &str = "CREATE INDEX IF NOT EXISTS outbox_jobs_sequence
        ON outbox_jobs (sequence_key, sequence_no) WHERE sequence_key IS NOT NULL";
const SEQUENCE_BLOCKING_INDEX: &str = concat!(
    "CREATE INDEX IF NOT EXISTS outbox_jobs_sequence_blocking ON outbox_jobs (sequence_key, sequence_no) \
         WHERE sequence_key IS NOT NULL AND ",
    blocking!("outbox_jobs")
);
const SEQUENCE_NEXT_TRIGGER: &str = concat!(
    "CREATE TRIGGER IF NOT EXISTS outbox_jobs_sequence_next AFTER UPDATE OF status, sequence_hold ON outbox_jobs \
         WHEN NEW.sequence_key IS NOT NULL AND ",
    blocking!("OLD"),
    " AND NOT ",
    blocking!("NEW"),
    " BEGIN ",
    release_next!(),
    " END"
);
const SEQUENCE_PURGED_TRIGGER: &str = concat!(
    "CREATE TRIGGER IF NOT EXISTS outbox_jobs_sequence_purged AFTER DELETE ON outbox_jobs \
         WHEN OLD.sequence_key IS NOT NULL AND ",
    blocking!("OLD"),
    " BEGIN ",
    release_next!(),
    " END"
);
const SEQUENCE_REJOIN_TRIGGER: &str = concat!(
    "CREATE TRIGGER IF NOT EXISTS outbox_jobs_sequence_rejoin AFTER UPDATE OF status ON outbox_jobs \
         WHEN NEW.sequence_key IS NOT NULL AND NEW.status = 'pending' \
         AND OLD.status IN ('completed', 'failed', 'cancelled') BEGIN \
         UPDATE outbox_jobs SET waiting = EXISTS (SELECT 1 FROM outbox_jobs b \
         WHERE b.sequence_key = NEW.sequence_key AND b.id <> NEW.id AND ((b.sequence_no < NEW.sequence_no AND ",
    blocking!("b"),
    ") OR b.status = 'claimed' OR (b.status = 'pending' AND b.waiting = 0))) WHERE id = NEW.id; END"
);

const SCHEMA_V4_DOWN: &[&str] = &[
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_next",
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_purged",
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_rejoin",
    "DROP INDEX IF EXISTS outbox_jobs_sequence_blocking",
    "DROP INDEX IF EXISTS outbox_jobs_sequence",
    "DROP INDEX IF EXISTS outbox_jobs_ready",
    "DROP INDEX IF EXISTS outbox_jobs_ready_queue",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim
        ON outbox_jobs (priority DESC, run_at, id) WHERE status = 'pending'",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim_queue
        ON outbox_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending'",
    "ALTER TABLE outbox_jobs DROP COLUMN sequence_hold",
    "ALTER TABLE outbox_jobs DROP COLUMN waiting",
    "ALTER TABLE outbox_jobs DROP COLUMN sequence_no",
    "ALTER TABLE outbox_jobs DROP COLUMN sequence_key",
    "ALTER TABLE outbox_kinds DROP COLUMN concurrency",
    "ALTER TABLE outbox_kinds DROP COLUMN on_sequence_failure",
    "ALTER TABLE outbox_kinds DROP COLUMN sequence",
];

/// The first schema: the jobs table and the indexes of the claim paths, the lease scan, dedup and purge.
const SCHEMA_V1: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS outbox_jobs (
        id TEXT PRIMARY KEY NOT NULL,
        kind TEXT NOT NULL,
        queue TEXT NOT NULL DEFAULT 'default',
        payload TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending'
            CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
        priority INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        runs INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
        run_at INTEGER NOT NULL,
        locked_by TEXT,
        locked_at INTEGER,
        lease_expires_at INTEGER,
        last_error TEXT,
        idempotency_key TEXT,
        schema_hash TEXT NOT NULL,
        output TEXT,
        created_at INTEGER NOT NULL,
        claimed_at INTEGER,
        completed_at INTEGER,
        updated_at INTEGER NOT NULL
    )",
    // Workers serving every queue claim in (priority, run_at, id) order straight off this index; a claim
    // that had to sort the whole backlog would cost time proportional to it.
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim
        ON outbox_jobs (priority DESC, run_at, id) WHERE status = 'pending'",
    // Workers restricted to queues seek each queue's due jobs here.
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim_queue
        ON outbox_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending'",
    ACTIVE_KEY_INDEX,
    LEASE_INDEX,
    FINISHED_INDEX,
];

const ACTIVE_KEY_INDEX: &str = "CREATE UNIQUE INDEX IF NOT EXISTS outbox_jobs_active_key
        ON outbox_jobs (kind, idempotency_key)
        WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL";
const LEASE_INDEX: &str = "CREATE INDEX IF NOT EXISTS outbox_jobs_lease
        ON outbox_jobs (lease_expires_at) WHERE status = 'claimed'";
const FINISHED_INDEX: &str = "CREATE INDEX IF NOT EXISTS outbox_jobs_finished
        ON outbox_jobs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled')";

/// The job history, written by a trigger so every writer (workers, operators, hand-written SQL) is recorded
/// without an extra round trip. Only the transitions the job row cannot tell are stored: retries with their
/// errors, failures, rescues, snoozes, releases, cancels and operator retries. The happy path (enqueue, claim,
/// complete) adds no row; `ops::history` reads those milestones off the job itself.
const SCHEMA_V2_EVENTS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS outbox_job_events (
        id INTEGER PRIMARY KEY,
        job_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        event TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        worker TEXT,
        error TEXT
    )",
    "CREATE INDEX IF NOT EXISTS outbox_job_events_job ON outbox_job_events (job_id, id)",
    TRANSITION_TRIGGER,
    PURGED_TRIGGER,
];

const TRANSITION_TRIGGER: &str = "CREATE TRIGGER IF NOT EXISTS outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs
    WHEN (OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts)
        AND NEW.status NOT IN ('claimed', 'completed') BEGIN
        INSERT INTO outbox_job_events (job_id, at, event, attempt, worker, error)
        VALUES (
            NEW.id,
            NEW.updated_at,
            CASE
                WHEN NEW.status = 'cancelled' THEN 'cancelled'
                WHEN OLD.status IN ('failed', 'cancelled') THEN 'retried_by_operator'
                WHEN OLD.status = 'claimed' AND NEW.attempts = OLD.attempts AND NEW.last_error LIKE 'lease expired%' THEN
                    CASE WHEN NEW.status = 'failed' THEN 'rescued_failed' ELSE 'rescued' END
                WHEN NEW.status = 'failed' THEN 'failed'
                WHEN NEW.attempts < OLD.attempts THEN
                    CASE WHEN NEW.run_at > NEW.updated_at THEN 'snoozed' ELSE 'released' END
                ELSE 'retried'
            END,
            CASE WHEN NEW.attempts < OLD.attempts THEN OLD.attempts ELSE NEW.attempts END,
            NEW.locked_by,
            CASE WHEN NEW.status IN ('pending', 'failed') AND OLD.status = 'claimed' AND NEW.attempts >= OLD.attempts
                THEN NEW.last_error END
        );
    END";
const PURGED_TRIGGER: &str = "CREATE TRIGGER IF NOT EXISTS outbox_jobs_purged AFTER DELETE ON outbox_jobs BEGIN
        DELETE FROM outbox_job_events WHERE job_id = OLD.id;
    END";

/// The kinds workers have registered, with their JSON Schemas, so tools without the Rust types can validate
/// and show them.
const SCHEMA_V3_KINDS: &[&str] = &["CREATE TABLE IF NOT EXISTS outbox_kinds (
        name TEXT PRIMARY KEY NOT NULL,
        schema TEXT NOT NULL,
        schema_hash TEXT NOT NULL,
        queue TEXT NOT NULL,
        priority INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        is_unique INTEGER NOT NULL,
        key_fields TEXT NOT NULL,
        recorded_by TEXT,
        first_seen_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    )"];

/// The event feed and the worker registry. Every transition now leaves a history row, the happy path
/// (enqueued, claimed, completed) included, with the job's kind and queue: the history is the feed that
/// `/api/events` streams, resumable by id. Ids come from `AUTOINCREMENT` so that an id is never handed out
/// twice, even after the newest events are purged (a reader resuming after it would skip the reused one);
/// one writer at a time means ids grow in commit order.
const SCHEMA_V6_FEED: &[&str] = &[
    "CREATE TABLE outbox_job_events_v6 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL,
        kind TEXT NOT NULL DEFAULT '',
        queue TEXT NOT NULL DEFAULT '',
        at INTEGER NOT NULL,
        event TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        worker TEXT,
        error TEXT
    ) STRICT",
    concat!(
        "INSERT INTO outbox_job_events_v6 (id, job_id, kind, queue, at, event, attempt, worker, error) \
         SELECT e.id, ",
        text_of!("e.job_id"),
        ", COALESCE(j.kind, ''), COALESCE(j.queue, ''), e.at, e.event, e.attempt, ",
        text_of!("e.worker"),
        ", ",
        text_of!("e.error"),
        " FROM outbox_job_events e LEFT JOIN outbox_jobs j ON j.id = e.job_id"
    ),
    "DROP TRIGGER IF EXISTS outbox_jobs_transition",
    "DROP TRIGGER IF EXISTS outbox_jobs_purged",
    "DROP TABLE outbox_job_events",
    "ALTER TABLE outbox_job_events_v6 RENAME TO outbox_job_events",
    "CREATE INDEX IF NOT EXISTS outbox_job_events_job ON outbox_job_events (job_id, id)",
    ENQUEUED_TRIGGER,
    FEED_TRANSITION_TRIGGER,
    PURGED_TRIGGER,
    "CREATE TABLE IF NOT EXISTS outbox_workers (
        id TEXT PRIMARY KEY NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER,
        queues TEXT,
        kinds TEXT NOT NULL,
        concurrency INTEGER,
        running INTEGER NOT NULL DEFAULT 0,
        remote INTEGER NOT NULL DEFAULT 0,
        started_at INTEGER NOT NULL,
        last_seen_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    ) STRICT",
];

const SCHEMA_V6_DOWN: &[&str] = &[
    "DROP TABLE IF EXISTS outbox_workers",
    "DROP TRIGGER IF EXISTS outbox_jobs_enqueued",
    "DROP TRIGGER IF EXISTS outbox_jobs_transition",
    "DROP TRIGGER IF EXISTS outbox_jobs_purged",
    "DELETE FROM outbox_job_events WHERE event IN ('enqueued', 'claimed', 'completed')",
    "CREATE TABLE outbox_job_events_v2 (
        id INTEGER PRIMARY KEY,
        job_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        event TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        worker TEXT,
        error TEXT
    )",
    "INSERT INTO outbox_job_events_v2 (id, job_id, at, event, attempt, worker, error) \
     SELECT id, job_id, at, event, attempt, worker, error FROM outbox_job_events",
    "DROP TABLE outbox_job_events",
    "ALTER TABLE outbox_job_events_v2 RENAME TO outbox_job_events",
    "CREATE INDEX IF NOT EXISTS outbox_job_events_job ON outbox_job_events (job_id, id)",
    TRANSITION_TRIGGER,
    PURGED_TRIGGER,
];

/// `enqueued`, for every row inserted by any writer.
const ENQUEUED_TRIGGER: &str = "CREATE TRIGGER IF NOT EXISTS outbox_jobs_enqueued AFTER INSERT ON outbox_jobs BEGIN
        INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
        VALUES (NEW.id, NEW.kind, NEW.queue, NEW.created_at, 'enqueued', NEW.attempts);
    END";

/// Every change of status or attempt count, named as in [`TRANSITION_TRIGGER`] plus `claimed` and
/// `completed`.
const FEED_TRANSITION_TRIGGER: &str = concat!(
    "CREATE TRIGGER IF NOT EXISTS outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs \
     WHEN OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts BEGIN \
     INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, error) VALUES (",
    crate::storage::transition_event!(),
    "); END"
);

/// Workers record their own claims and completions, one feed row per statement. A row per job and event
/// (with its place in the job index) cost the drain about a tenth of its instructions; a worker's claim of a
/// hundred jobs is now one row whose `jobs` lists them, and the feed hands out one event per job from it.
/// The statements that write such a row flip `event_flip` on the jobs they cover; the transition trigger
/// records only changes that leave the flag as it was, so every other writer (operators, rescues,
/// hand-written SQL) is still recorded one row per job, and nothing twice. The trigger also notes the claim
/// (and completion) a transition ended, so one job's history still shows every attempt's claim.
const SCHEMA_V7_BATCHED: &[&str] = &[
    "ALTER TABLE outbox_jobs ADD COLUMN event_flip INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE outbox_job_events ADD COLUMN jobs TEXT",
    "ALTER TABLE outbox_job_events ADD COLUMN claimed_at INTEGER",
    "ALTER TABLE outbox_job_events ADD COLUMN completed_at INTEGER",
    "DROP TRIGGER IF EXISTS outbox_jobs_transition",
    BATCHED_TRANSITION_TRIGGER,
];

const BATCHED_TRANSITION_TRIGGER: &str = concat!(
    "CREATE TRIGGER IF NOT EXISTS outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs \
     WHEN (OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts) AND OLD.event_flip = NEW.event_flip BEGIN ",
    crate::storage::record_transition!(),
    "; END"
);

/// Undoing gives every job of a batch row a row of its own (with new ids, after the others).
const SCHEMA_V7_DOWN: &[&str] = &[
    "DROP TRIGGER IF EXISTS outbox_jobs_transition",
    FEED_TRANSITION_TRIGGER,
    "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker) \
     SELECT j.value ->> 0, j.value ->> 1, j.value ->> 2, e.at, e.event, j.value ->> 3, e.worker \
     FROM outbox_job_events e, json_each(e.jobs) j WHERE e.jobs IS NOT NULL ORDER BY e.id, j.key",
    "DELETE FROM outbox_job_events WHERE jobs IS NOT NULL",
    "ALTER TABLE outbox_job_events DROP COLUMN completed_at",
    "ALTER TABLE outbox_job_events DROP COLUMN claimed_at",
    "ALTER TABLE outbox_job_events DROP COLUMN jobs",
    "ALTER TABLE outbox_jobs DROP COLUMN event_flip",
];

/// Periodic schedules (one row each: the tick last enqueued, set by compare-and-set so one process enqueues
/// each tick), named leases of fleet-wide chores (retention runs in one process at a time), and the latest
/// report of each reconciler.
const SCHEMA_V9_TIME: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS outbox_schedules (
        name TEXT PRIMARY KEY NOT NULL,
        kind TEXT NOT NULL,
        spec TEXT NOT NULL,
        time_zone TEXT NOT NULL,
        missed TEXT NOT NULL,
        last_tick INTEGER,
        last_job_id TEXT,
        updated_at INTEGER NOT NULL
    ) STRICT",
    "CREATE TABLE IF NOT EXISTS outbox_locks (
        name TEXT PRIMARY KEY NOT NULL,
        holder TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    ) STRICT",
    "CREATE TABLE IF NOT EXISTS outbox_reconciliations (
        reconciler TEXT PRIMARY KEY NOT NULL,
        at INTEGER NOT NULL,
        worker TEXT,
        report TEXT NOT NULL
    ) STRICT",
];

const SCHEMA_V9_DOWN: &[&str] = &[
    "DROP TABLE IF EXISTS outbox_reconciliations",
    "DROP TABLE IF EXISTS outbox_locks",
    "DROP TABLE IF EXISTS outbox_schedules",
];
