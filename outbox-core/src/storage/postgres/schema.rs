//! The PostgreSQL schema: each migration's statements, and how to undo them. A trigger is named with its
//! table here, and its function outlives it, so undoing drops both.

use crate::storage::{Migration, blocking};

/// The migrations in order; their names are [`crate::storage::MIGRATION_NAMES`].
pub(super) const MIGRATIONS: [Migration; 9] = [
    Migration {
        up: SCHEMA_V1,
        down: &["DROP TABLE IF EXISTS outbox_jobs", "DROP FUNCTION IF EXISTS outbox_jobs_notify()"],
    },
    Migration {
        up: SCHEMA_V2_EVENTS,
        down: &[
            "DROP TRIGGER IF EXISTS outbox_jobs_transition ON outbox_jobs",
            "DROP TRIGGER IF EXISTS outbox_jobs_purged ON outbox_jobs",
            "DROP FUNCTION IF EXISTS outbox_jobs_transition()",
            "DROP FUNCTION IF EXISTS outbox_jobs_purged()",
            "DROP TABLE IF EXISTS outbox_job_events",
        ],
    },
    Migration { up: SCHEMA_V3_KINDS, down: &["DROP TABLE IF EXISTS outbox_kinds"] },
    Migration { up: SCHEMA_V4_SEQUENCES, down: SCHEMA_V4_DOWN },
    // Enforced types: the column types here already refuse what SQLite's strict table now refuses (a jsonb
    // payload cannot hold bytes, an integer column cannot hold text), so there is nothing to change.
    Migration { up: &[], down: &[] },
    Migration { up: SCHEMA_V6_FEED, down: SCHEMA_V6_DOWN },
    Migration { up: SCHEMA_V7_BATCHED, down: SCHEMA_V7_DOWN },
    Migration { up: SCHEMA_V8_INLINE_FEED, down: &["ALTER TABLE outbox_job_events RESET (toast_tuple_target)"] },
    Migration { up: SCHEMA_V9_TIME, down: SCHEMA_V9_DOWN },
];

/// The transaction-scoped advisory lock of one sequence in this schema, taken by every writer that inserts
/// into a sequence or puts a finished job back into one: two transactions enqueuing onto one sequence commit
/// in the order of their places in it. The release (`RELEASE_NEXT`) and the workers' sweep take it only when
/// it is free, so letting a job go never misses one enqueued concurrently and never waits for the enqueuer.
macro_rules! lock_sequence {
    ($key:literal) => {
        concat!(
            "PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || ",
            $key,
            ", 0));"
        )
    };
}

/// The statement-level release: for every sequence a row of the statement let go (noted by
/// `outbox_jobs_sequence_note` in the transaction's `outbox.sequences` setting) whose lock is free, lets the
/// first job go when it is waiting, and wakes the workers when any went. A sequence whose lock an enqueuing
/// transaction holds is not waited for (a slow application transaction would stall the worker's completions,
/// and could deadlock with an insert waiting on the completed job's idempotency key): the workers' sweep
/// (`SWEEP` in `worker.rs`) lets its next job go once that transaction has ended. Once per statement rather
/// than per row, and the per-row part only notes a key: per row, the release cost a third of the unsequenced
/// rate of the worker's completions, and a statement-level trigger over transition tables a tenth of every
/// unsequenced claim and completion (measured). The lookups are planned once per transaction where the
/// session would plan them afresh each time (the worker's connections, `force_custom_plan`).
const RELEASE_NEXT: &str = concat!(
    "CREATE OR REPLACE FUNCTION outbox_jobs_sequence_next() RETURNS trigger LANGUAGE plpgsql AS $$ \
     DECLARE noted text; released bigint; locked text[]; BEGIN \
     noted := current_setting('outbox.sequences', true); \
     IF noted IS NULL OR noted = '' THEN RETURN NULL; END IF; \
     PERFORM set_config('outbox.sequences', '', true); \
     IF current_setting('plan_cache_mode') = 'force_custom_plan' THEN \
         PERFORM set_config('plan_cache_mode', 'force_generic_plan', true); END IF; \
     SELECT array_agg(s.k) INTO locked FROM (SELECT DISTINCT k FROM unnest(string_to_array(noted, chr(30))) AS u(k) \
         WHERE k <> '' ORDER BY 1) s \
     WHERE pg_try_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || s.k, 0)); \
     IF locked IS NULL THEN RETURN NULL; END IF; \
     UPDATE outbox_jobs w SET waiting = false FROM unnest(locked) AS s(k) \
     WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = s.k AND ",
    blocking!("h"),
    " ORDER BY h.sequence_no LIMIT 1) AND w.status = 'pending' AND w.waiting; \
     GET DIAGNOSTICS released = ROW_COUNT; \
     IF released > 0 THEN PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA); END IF; \
     RETURN NULL; END $$"
);

/// Sequences and fleet-wide limits, as on SQLite (see `sqlite/schema.rs`), with the places taken from one
/// database sequence and each sequence's writers serialized by an advisory lock. A job let go wakes the
/// workers of every machine, as an insert does.
const SCHEMA_V4_SEQUENCES: &[&str] = &[
    r#"ALTER TABLE outbox_jobs
        ADD COLUMN IF NOT EXISTS sequence_key text COLLATE "C",
        ADD COLUMN IF NOT EXISTS sequence_no bigint,
        ADD COLUMN IF NOT EXISTS waiting boolean NOT NULL DEFAULT false,
        ADD COLUMN IF NOT EXISTS sequence_hold smallint NOT NULL DEFAULT 1"#,
    "CREATE SEQUENCE IF NOT EXISTS outbox_jobs_sequence_no",
    "DROP INDEX IF EXISTS outbox_jobs_claim",
    "DROP INDEX IF EXISTS outbox_jobs_claim_queue",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_ready
        ON outbox_jobs (priority DESC, run_at, id) WHERE status = 'pending' AND NOT waiting",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_ready_queue
        ON outbox_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending' AND NOT waiting",
    // `list --sequence`; the places themselves come from the database sequence.
    "CREATE INDEX IF NOT EXISTS outbox_jobs_sequence
        ON outbox_jobs (sequence_key, sequence_no) WHERE sequence_key IS NOT NULL",
    concat!(
        "CREATE INDEX IF NOT EXISTS outbox_jobs_sequence_blocking ON outbox_jobs (sequence_key, sequence_no) \
         WHERE sequence_key IS NOT NULL AND ",
        blocking!("outbox_jobs")
    ),
    concat!(
        "CREATE OR REPLACE FUNCTION outbox_jobs_sequence_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ",
        lock_sequence!("NEW.sequence_key"),
        " NEW.sequence_no := nextval('outbox_jobs_sequence_no'); \
         NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key AND ",
        blocking!("b"),
        "); RETURN NEW; END $$"
    ),
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_insert ON outbox_jobs",
    "CREATE TRIGGER outbox_jobs_sequence_insert BEFORE INSERT ON outbox_jobs
        FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL) EXECUTE FUNCTION outbox_jobs_sequence_insert()",
    // A job that stops holding its sequence back notes the sequence (separated by the record separator; a
    // key holding one is split, and its next job is left to the sweep).
    "CREATE OR REPLACE FUNCTION outbox_jobs_sequence_note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        PERFORM set_config('outbox.sequences',
            COALESCE(current_setting('outbox.sequences', true), '') || OLD.sequence_key || chr(30), true);
        RETURN NULL;
    END $$",
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_moved ON outbox_jobs",
    concat!(
        "CREATE TRIGGER outbox_jobs_sequence_moved AFTER UPDATE OF status, sequence_hold ON outbox_jobs \
         FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL AND ",
        blocking!("OLD"),
        " AND NOT ",
        blocking!("NEW"),
        ") EXECUTE FUNCTION outbox_jobs_sequence_note()"
    ),
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_purged ON outbox_jobs",
    concat!(
        "CREATE TRIGGER outbox_jobs_sequence_purged AFTER DELETE ON outbox_jobs \
         FOR EACH ROW WHEN (OLD.sequence_key IS NOT NULL AND ",
        blocking!("OLD"),
        ") EXECUTE FUNCTION outbox_jobs_sequence_note()"
    ),
    RELEASE_NEXT,
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_next ON outbox_jobs",
    "CREATE TRIGGER outbox_jobs_sequence_next AFTER UPDATE OR DELETE ON outbox_jobs
        FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_sequence_next()",
    concat!(
        "CREATE OR REPLACE FUNCTION outbox_jobs_sequence_rejoin() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ",
        lock_sequence!("NEW.sequence_key"),
        " NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key \
         AND b.id <> NEW.id AND ((b.sequence_no < NEW.sequence_no AND ",
        blocking!("b"),
        ") OR b.status = 'claimed' OR (b.status = 'pending' AND NOT b.waiting))); RETURN NEW; END $$"
    ),
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_rejoin ON outbox_jobs",
    "CREATE TRIGGER outbox_jobs_sequence_rejoin BEFORE UPDATE OF status ON outbox_jobs
        FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL AND NEW.status = 'pending'
            AND OLD.status IN ('completed', 'failed', 'cancelled'))
        EXECUTE FUNCTION outbox_jobs_sequence_rejoin()",
    "ALTER TABLE outbox_kinds
        ADD COLUMN IF NOT EXISTS sequence text,
        ADD COLUMN IF NOT EXISTS on_sequence_failure text NOT NULL DEFAULT 'hold',
        ADD COLUMN IF NOT EXISTS concurrency bigint",
];

const SCHEMA_V4_DOWN: &[&str] = &[
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_insert ON outbox_jobs",
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_next ON outbox_jobs",
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_moved ON outbox_jobs",
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_purged ON outbox_jobs",
    "DROP TRIGGER IF EXISTS outbox_jobs_sequence_rejoin ON outbox_jobs",
    "DROP FUNCTION IF EXISTS outbox_jobs_sequence_insert()",
    "DROP FUNCTION IF EXISTS outbox_jobs_sequence_next()",
    "DROP FUNCTION IF EXISTS outbox_jobs_sequence_note()",
    "DROP FUNCTION IF EXISTS outbox_jobs_sequence_rejoin()",
    "DROP INDEX IF EXISTS outbox_jobs_sequence_blocking",
    "DROP INDEX IF EXISTS outbox_jobs_sequence",
    "DROP INDEX IF EXISTS outbox_jobs_ready",
    "DROP INDEX IF EXISTS outbox_jobs_ready_queue",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim
        ON outbox_jobs (priority DESC, run_at, id) WHERE status = 'pending'",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim_queue
        ON outbox_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending'",
    "ALTER TABLE outbox_jobs DROP COLUMN IF EXISTS sequence_hold, DROP COLUMN IF EXISTS waiting, \
     DROP COLUMN IF EXISTS sequence_no, DROP COLUMN IF EXISTS sequence_key",
    "DROP SEQUENCE IF EXISTS outbox_jobs_sequence_no",
    "ALTER TABLE outbox_kinds DROP COLUMN IF EXISTS concurrency, DROP COLUMN IF EXISTS on_sequence_failure, \
     DROP COLUMN IF EXISTS sequence",
];

/// The first schema: the jobs table, the indexes of the claim paths, the lease scan, dedup and purge, and
/// the wake-up trigger.
const SCHEMA_V1: &[&str] = &[
    r#"CREATE TABLE IF NOT EXISTS outbox_jobs (
        id text COLLATE "C" PRIMARY KEY,
        kind text COLLATE "C" NOT NULL,
        queue text COLLATE "C" NOT NULL DEFAULT 'default',
        payload jsonb NOT NULL,
        status text COLLATE "C" NOT NULL DEFAULT 'pending'
            CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
        priority integer NOT NULL DEFAULT 0,
        attempts integer NOT NULL DEFAULT 0,
        runs integer NOT NULL DEFAULT 0,
        max_attempts integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
        run_at timestamptz NOT NULL,
        locked_by text,
        locked_at timestamptz,
        lease_expires_at timestamptz,
        last_error text,
        idempotency_key text COLLATE "C",
        schema_hash text NOT NULL,
        output jsonb,
        created_at timestamptz NOT NULL,
        claimed_at timestamptz,
        completed_at timestamptz,
        updated_at timestamptz NOT NULL
    )"#,
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim
        ON outbox_jobs (priority DESC, run_at, id) WHERE status = 'pending'",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_claim_queue
        ON outbox_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending'",
    "CREATE UNIQUE INDEX IF NOT EXISTS outbox_jobs_active_key
        ON outbox_jobs (kind, idempotency_key)
        WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_lease
        ON outbox_jobs (lease_expires_at) WHERE status = 'claimed'",
    "CREATE INDEX IF NOT EXISTS outbox_jobs_finished
        ON outbox_jobs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled')",
    // One notification per inserting statement, delivered when its transaction commits (PostgreSQL folds
    // identical notifications of one transaction into one): every writer wakes the workers, the `outbox`
    // command and hand-written SQL included.
    "CREATE OR REPLACE FUNCTION outbox_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA);
        RETURN NULL;
    END $$",
    "DROP TRIGGER IF EXISTS outbox_jobs_notify ON outbox_jobs",
    "CREATE TRIGGER outbox_jobs_notify AFTER INSERT ON outbox_jobs
        FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_notify()",
];

/// The job history, written by triggers exactly as on SQLite (see `sqlite/schema.rs`).
const SCHEMA_V2_EVENTS: &[&str] = &[
    r#"CREATE TABLE IF NOT EXISTS outbox_job_events (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        job_id text COLLATE "C" NOT NULL,
        at timestamptz NOT NULL,
        event text NOT NULL,
        attempt integer NOT NULL,
        worker text,
        error text
    )"#,
    "CREATE INDEX IF NOT EXISTS outbox_job_events_job ON outbox_job_events (job_id, id)",
    "CREATE OR REPLACE FUNCTION outbox_jobs_transition() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO outbox_job_events (job_id, at, event, attempt, worker, error)
        VALUES (
            NEW.id,
            NEW.updated_at,
            CASE
                WHEN NEW.status = 'cancelled' THEN 'cancelled'
                WHEN OLD.status IN ('failed', 'cancelled') THEN 'retried_by_operator'
                WHEN OLD.status = 'claimed' AND NEW.attempts = OLD.attempts
                    AND NEW.last_error LIKE 'lease expired%' THEN
                    CASE WHEN NEW.status = 'failed' THEN 'rescued_failed' ELSE 'rescued' END
                WHEN NEW.status = 'failed' THEN 'failed'
                WHEN NEW.attempts < OLD.attempts THEN
                    CASE WHEN NEW.run_at > NEW.updated_at THEN 'snoozed' ELSE 'released' END
                ELSE 'retried'
            END,
            CASE WHEN NEW.attempts < OLD.attempts THEN OLD.attempts ELSE NEW.attempts END,
            NEW.locked_by,
            CASE WHEN NEW.status IN ('pending', 'failed') AND OLD.status = 'claimed'
                AND NEW.attempts >= OLD.attempts THEN NEW.last_error END
        );
        RETURN NULL;
    END $$",
    "DROP TRIGGER IF EXISTS outbox_jobs_transition ON outbox_jobs",
    "CREATE TRIGGER outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs
        FOR EACH ROW WHEN ((OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts)
            AND NEW.status NOT IN ('claimed', 'completed'))
        EXECUTE FUNCTION outbox_jobs_transition()",
    "CREATE OR REPLACE FUNCTION outbox_jobs_purged() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM outbox_job_events WHERE job_id = OLD.id;
        RETURN NULL;
    END $$",
    "DROP TRIGGER IF EXISTS outbox_jobs_purged ON outbox_jobs",
    "CREATE TRIGGER outbox_jobs_purged AFTER DELETE ON outbox_jobs
        FOR EACH ROW EXECUTE FUNCTION outbox_jobs_purged()",
];

/// The kinds workers have registered, with their JSON Schemas.
const SCHEMA_V3_KINDS: &[&str] = &[r#"CREATE TABLE IF NOT EXISTS outbox_kinds (
        name text COLLATE "C" PRIMARY KEY,
        schema jsonb NOT NULL,
        schema_hash text NOT NULL,
        queue text NOT NULL,
        priority integer NOT NULL,
        max_attempts integer NOT NULL,
        is_unique boolean NOT NULL,
        key_fields jsonb NOT NULL,
        recorded_by text,
        first_seen_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    )"#];

/// The event feed and the worker registry (see `sqlite/schema.rs`). Identity values are handed out before
/// commit, so a reader cannot take "ids above the last one seen" as "everything since": each event also
/// records its transaction id, and the feed reads in (transaction, id) order only events of transactions older
/// than every transaction still running (`pg_snapshot_xmin`). An event that commits later always has a
/// transaction id at or above that bound, so it is never skipped.
const SCHEMA_V6_FEED: &[&str] = &[
    "ALTER TABLE outbox_job_events ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT '', \
     ADD COLUMN IF NOT EXISTS queue text NOT NULL DEFAULT '', \
     ADD COLUMN IF NOT EXISTS txid xid8 NOT NULL DEFAULT pg_current_xact_id()",
    "UPDATE outbox_job_events e SET kind = j.kind, queue = j.queue FROM outbox_jobs j WHERE j.id = e.job_id",
    "CREATE INDEX IF NOT EXISTS outbox_job_events_feed ON outbox_job_events (txid, id)",
    "CREATE OR REPLACE FUNCTION outbox_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
        SELECT id, kind, queue, created_at, 'enqueued', attempts FROM inserted ORDER BY id;
        RETURN NULL;
    END $$",
    "DROP TRIGGER IF EXISTS outbox_jobs_enqueued ON outbox_jobs",
    "CREATE TRIGGER outbox_jobs_enqueued AFTER INSERT ON outbox_jobs REFERENCING NEW TABLE AS inserted
        FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_enqueued()",
    V6_TRANSITION_FUNCTION,
    "DROP TRIGGER IF EXISTS outbox_jobs_transition ON outbox_jobs",
    V6_TRANSITION_TRIGGER,
    r#"CREATE TABLE IF NOT EXISTS outbox_workers (
        id text COLLATE "C" PRIMARY KEY,
        host text NOT NULL,
        pid bigint,
        queues jsonb,
        kinds jsonb NOT NULL,
        concurrency bigint,
        running bigint NOT NULL DEFAULT 0,
        remote boolean NOT NULL DEFAULT false,
        started_at timestamptz NOT NULL,
        last_seen_at timestamptz NOT NULL,
        expires_at timestamptz NOT NULL
    )"#,
];

const SCHEMA_V6_DOWN: &[&str] = &[
    "DROP TABLE IF EXISTS outbox_workers",
    "DROP TRIGGER IF EXISTS outbox_jobs_enqueued ON outbox_jobs",
    "DROP FUNCTION IF EXISTS outbox_jobs_enqueued()",
    "DELETE FROM outbox_job_events WHERE event IN ('enqueued', 'claimed', 'completed')",
    "DROP INDEX IF EXISTS outbox_job_events_feed",
    "ALTER TABLE outbox_job_events DROP COLUMN IF EXISTS kind, DROP COLUMN IF EXISTS queue, \
     DROP COLUMN IF EXISTS txid",
    // The transition trigger of migration 2.
    SCHEMA_V2_EVENTS[2],
    SCHEMA_V2_EVENTS[3],
    SCHEMA_V2_EVENTS[4],
];

const V6_TRANSITION_FUNCTION: &str = concat!(
    "CREATE OR REPLACE FUNCTION outbox_jobs_transition() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
     INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, error) VALUES (",
    crate::storage::transition_event!(),
    "); RETURN NULL; END $$"
);

const V6_TRANSITION_TRIGGER: &str =
    "CREATE TRIGGER outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs
        FOR EACH ROW WHEN (OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts)
        EXECUTE FUNCTION outbox_jobs_transition()";

/// Workers record their own claims and completions, one feed row per statement (see `sqlite/schema.rs`).
/// A row per job and event cost the drain a third to a half of its throughput here: each was a function
/// call, an insert and three index entries. The worker's claim and finish statements now insert one row
/// listing their jobs in a data-modifying CTE, and flip `event_flip` on those jobs so the trigger leaves them
/// alone.
///
/// The feed's `(txid, id)` becomes the events' primary key in place of `id` alone: every read is by feed
/// position or by job, so a third index on every event row bought nothing.
const SCHEMA_V7_BATCHED: &[&str] = &[
    "ALTER TABLE outbox_jobs ADD COLUMN IF NOT EXISTS event_flip boolean NOT NULL DEFAULT false",
    "ALTER TABLE outbox_job_events ADD COLUMN IF NOT EXISTS jobs json, \
     ADD COLUMN IF NOT EXISTS claimed_at timestamptz, ADD COLUMN IF NOT EXISTS completed_at timestamptz",
    "ALTER TABLE outbox_job_events DROP CONSTRAINT IF EXISTS outbox_job_events_pkey",
    "ALTER TABLE outbox_job_events ADD CONSTRAINT outbox_job_events_pkey PRIMARY KEY (txid, id)",
    "DROP INDEX IF EXISTS outbox_job_events_feed",
    concat!(
        "CREATE OR REPLACE FUNCTION outbox_jobs_transition() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ",
        crate::storage::record_transition!(),
        "; RETURN NULL; END $$"
    ),
    "DROP TRIGGER IF EXISTS outbox_jobs_transition ON outbox_jobs",
    "CREATE TRIGGER outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs
        FOR EACH ROW WHEN ((OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts)
            AND OLD.event_flip = NEW.event_flip)
        EXECUTE FUNCTION outbox_jobs_transition()",
];

/// Undoing gives every job of a batch row a row of its own (with new ids, after the others).
const SCHEMA_V7_DOWN: &[&str] = &[
    "DROP TRIGGER IF EXISTS outbox_jobs_transition ON outbox_jobs",
    V6_TRANSITION_FUNCTION,
    V6_TRANSITION_TRIGGER,
    "INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker) \
     SELECT j.value ->> 0, j.value ->> 1, j.value ->> 2, e.at, e.event, (j.value ->> 3)::int4, e.worker \
     FROM outbox_job_events e, json_array_elements(e.jobs) WITH ORDINALITY AS j(value, n) \
     WHERE e.jobs IS NOT NULL ORDER BY e.txid, e.id, j.n",
    "DELETE FROM outbox_job_events WHERE jobs IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS outbox_job_events_feed ON outbox_job_events (txid, id)",
    "ALTER TABLE outbox_job_events DROP CONSTRAINT IF EXISTS outbox_job_events_pkey",
    "ALTER TABLE outbox_job_events ADD CONSTRAINT outbox_job_events_pkey PRIMARY KEY (id)",
    "ALTER TABLE outbox_job_events DROP COLUMN IF EXISTS jobs, DROP COLUMN IF EXISTS claimed_at, \
     DROP COLUMN IF EXISTS completed_at",
    "ALTER TABLE outbox_jobs DROP COLUMN IF EXISTS event_flip",
];

/// A worker's feed row lists up to a claim's worth of jobs (about 64 bytes each): 4.5 kB for 70. Past the
/// default target of 2 kB PostgreSQL compressed each such row and moved it to the TOAST table, a second heap
/// insert and an index entry per statement; up to the largest target (one 8 kB page) the row stays inline
/// and uncompressed. Measured on the worker's drain of 20,000 jobs (medians of 3): 7 % faster with durable
/// commits, 14 % faster without.
const SCHEMA_V8_INLINE_FEED: &[&str] = &["ALTER TABLE outbox_job_events SET (toast_tuple_target = 8160)"];

/// Periodic schedules, named leases of fleet-wide chores, and the latest report of each reconciler (see
/// `sqlite/schema.rs`).
const SCHEMA_V9_TIME: &[&str] = &[
    r#"CREATE TABLE IF NOT EXISTS outbox_schedules (
        name text COLLATE "C" PRIMARY KEY,
        kind text NOT NULL,
        spec text NOT NULL,
        time_zone text NOT NULL,
        missed text NOT NULL,
        last_tick timestamptz,
        last_job_id text,
        updated_at timestamptz NOT NULL
    )"#,
    r#"CREATE TABLE IF NOT EXISTS outbox_locks (
        name text COLLATE "C" PRIMARY KEY,
        holder text NOT NULL,
        expires_at timestamptz NOT NULL
    )"#,
    r#"CREATE TABLE IF NOT EXISTS outbox_reconciliations (
        reconciler text COLLATE "C" PRIMARY KEY,
        at timestamptz NOT NULL,
        worker text,
        report jsonb NOT NULL
    )"#,
];

const SCHEMA_V9_DOWN: &[&str] = &[
    "DROP TABLE IF EXISTS outbox_reconciliations",
    "DROP TABLE IF EXISTS outbox_locks",
    "DROP TABLE IF EXISTS outbox_schedules",
];
