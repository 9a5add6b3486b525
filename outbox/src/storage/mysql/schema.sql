-- The outbox schema on MariaDB (10.6 and later), whole: the first migration applies this file as it is
-- (`schema.rs` says why), and `tests/tests/mariadb.rs` holds what the engine rests on (the claims read their indexes
-- with no sort; a key is unique per kind while its job is active; a payload must be JSON; text is utf8mb4; no
-- trigger writes a MEMORY table). DDL commits each statement here, so each is written to be run again.
--
-- Against the PostgreSQL schema (`storage/postgres/schema.sql`), the same tables in MariaDB's types:
-- - Times are BIGINT milliseconds, as on SQLite: a DATETIME difference is digit arithmetic, and DATETIME and
--   FROM_UNIXTIME read the session's time zone, which the caller's connection owns.
-- - Text is utf8mb4 whatever the server's default (MariaDB's is latin1), and identifiers and keys compare
--   bytewise without padding (`utf8mb4_nopad_bin`): under `utf8mb4_bin`, 'a ' = 'a'.
-- - JSON is MariaDB's JSON type: LONGTEXT with a JSON_VALID check, the text kept as written.
-- - Partial indexes become stored generated columns that are NULL outside the predicate, indexed: InnoDB keeps an
--   entry for every row, NULL keys included, but a claim (pending to claimed) changes none of the values an index
--   reads.
-- - Triggers are per row (there are none per statement), one per table, event and timing, each section of its body
--   one of PostgreSQL's triggers. A trigger here cannot write the table that fired it (error 1442): what
--   PostgreSQL's sequence triggers do to other jobs, the store does on the notes these leave (`mysql/sequences.rs`);
--   the workflows' come with a later step of the engine (`docs/internals/mariadb.md`).

CREATE TABLE IF NOT EXISTS outbox_jobs (
    id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL PRIMARY KEY,
    kind VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    queue VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT 'default',
    payload JSON NOT NULL,
    priority INT NOT NULL DEFAULT 0,
    max_attempts INT NOT NULL DEFAULT 3,
    idempotency_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
    schema_hash VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at BIGINT NOT NULL,
    sequence_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
    sequence_no BIGINT,
    sequence_hold SMALLINT NOT NULL DEFAULT 1,
    waiting BOOLEAN NOT NULL DEFAULT FALSE,
    superseded BOOLEAN NOT NULL DEFAULT FALSE,
    scheduled BOOLEAN NOT NULL DEFAULT FALSE,
    run_at BIGINT NOT NULL,
    last_error TEXT,
    output JSON,
    attempts INT NOT NULL DEFAULT 0,
    runs INT NOT NULL DEFAULT 0,
    locked_by VARCHAR(255),
    locked_at BIGINT,
    claimed_at BIGINT,
    status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
    completed_at BIGINT,
    lease_expires_at BIGINT,
    updated_at BIGINT NOT NULL,
    event_flip BOOLEAN NOT NULL DEFAULT FALSE,
    flow_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
    cost INT,
    subject VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
    trace TEXT,
    workflow_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin,
    step VARCHAR(255),
    parents_left INT NOT NULL DEFAULT 0,
    on_parent_failure SMALLINT NOT NULL DEFAULT 0,
    has_children BOOLEAN NOT NULL DEFAULT FALSE,
    -- The key an active job holds, which the unique index of keys reads (NULLs never conflict).
    active_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
        AS (CASE WHEN status IN ('pending', 'claimed') AND NOT superseded THEN idempotency_key END) STORED,
    -- The queue of a job in the ready index (pending or claimed, neither waiting nor due later), else NULL.
    ready_queue VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
        AS (CASE WHEN status IN ('pending', 'claimed') AND NOT waiting AND NOT scheduled THEN queue END) STORED,
    -- The kind of a ready job of a keyed kind, else NULL: the index a claim walks the keys with ready jobs by.
    ready_flow_kind VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
        AS (CASE WHEN status IN ('pending', 'claimed') AND NOT waiting AND NOT scheduled AND flow_key IS NOT NULL
            THEN kind END) STORED,
    -- The same job's kind and key as one 16-byte digest: the index a claim reads each key's head by. Kind (1,020
    -- bytes reserved) and key (2,048) leave no room in a 3,072-byte index key for the order that follows them; the
    -- claim compares kind and key too, so a collision of digests costs a row read, never a wrong job.
    ready_flow_head BINARY(16)
        AS (CASE WHEN status IN ('pending', 'claimed') AND NOT waiting AND NOT scheduled AND flow_key IS NOT NULL
            THEN UNHEX(MD5(CONCAT(kind, CHAR(0), flow_key))) END) STORED,
    -- A scheduled job's run time, which the claim's promotion reads.
    due_at BIGINT AS (CASE WHEN status = 'pending' AND scheduled THEN run_at END) STORED,
    -- A finished job's last change.
    finished_at BIGINT AS (CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN updated_at END) STORED,
    -- Whether a job of a sequence holds back the later ones (TRUE, or NULL).
    blocks BOOLEAN AS (CASE WHEN sequence_key IS NOT NULL AND (status IN ('pending', 'claimed')
        OR (status IN ('failed', 'cancelled') AND sequence_hold = 1)) THEN TRUE END) STORED,
    -- The sequence of a blocking job, else NULL: the blocking index.
    blocking_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
        AS (CASE WHEN sequence_key IS NOT NULL AND (status IN ('pending', 'claimed')
            OR (status IN ('failed', 'cancelled') AND sequence_hold = 1)) THEN sequence_key END) STORED,
    -- The sequence of a job that runs or is free to run (claimed, or pending and not waiting), else NULL: a
    -- sequence's next job is let go only while it has none. A claim leaves it as it is.
    live_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin
        AS (CASE WHEN sequence_key IS NOT NULL AND (status = 'claimed' OR (status = 'pending' AND NOT waiting))
            THEN sequence_key END) STORED,
    KEY outbox_jobs_ready_queue (ready_queue, kind, priority DESC, run_at, id),
    KEY outbox_jobs_scheduled (due_at),
    KEY outbox_jobs_flow_keys (ready_flow_kind, flow_key),
    KEY outbox_jobs_flow_heads (ready_flow_head, priority DESC, run_at, id),
    KEY outbox_jobs_subject (subject, id),
    KEY outbox_jobs_workflow (workflow_id, id),
    UNIQUE KEY outbox_jobs_active_key (kind, active_key),
    KEY outbox_jobs_sequence (sequence_key, sequence_no),
    KEY outbox_jobs_sequence_blocking (blocking_key, sequence_no),
    KEY outbox_jobs_sequence_live (live_key),
    CONSTRAINT outbox_jobs_max_attempts_check CHECK (max_attempts >= 1),
    CONSTRAINT outbox_jobs_status_check CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
    CONSTRAINT outbox_jobs_cost_check CHECK (cost >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;


-- Sequences: the last place each one handed out, and the row its enqueuers take turns on. A sequenced job's insert
-- takes the next place under its sequence's row (an upsert, held to commit: `outbox_jobs_placed`), so enqueuers of
-- one sequence commit in the order of their places, as PostgreSQL's advisory lock makes them. Rows are not deleted
-- yet (one per sequence ever used): retention, when the engine has it, deletes those of sequences with no job left.
CREATE TABLE IF NOT EXISTS outbox_sequences (
    sequence_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
    last_no BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Sequences to look at, written by the triggers in the writer's transaction: a job of the sequence went in, stopped
-- holding it back, was deleted while holding it, or rejoined it. A trigger here cannot write `outbox_jobs`, so the
-- store lets each noted sequence's next job go (`mysql/sequences.rs`), in a transaction of its own: before every
-- claim, after the outcomes it writes and after a rescue. A note is deleted once its sequence was looked at; one
-- whose sequence an enqueuer holds stays for the next look.
CREATE TABLE IF NOT EXISTS outbox_sequence_notes (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    sequence_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    KEY outbox_sequence_notes_key (sequence_key, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- The history of every job and the event feed (see `storage/events.rs`). A worker's claim and completion write one
-- row for their jobs (`job_id` empty, the jobs in `jobs`); every other writer's changes are recorded by the
-- triggers below, one row per job. `seq` is the stamp that puts a row in the feed, after its commit
-- (`outbox_feed_stamp` below); NULL until then.
CREATE TABLE IF NOT EXISTS outbox_job_events (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    seq BIGINT,
    job_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL,
    kind VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT '',
    queue VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT '',
    at BIGINT NOT NULL,
    event VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt INT NOT NULL,
    worker VARCHAR(255),
    error TEXT,
    jobs JSON,
    claimed_at BIGINT,
    completed_at BIGINT,
    KEY outbox_job_events_job (job_id, id),
    KEY outbox_job_events_feed (seq, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- The feed's order. Ids are handed out before commit, so a row can commit after a row of a higher id, and MariaDB
-- shows no reader which transactions still run. A reader of the feed therefore stamps the rows committed since
-- the last stamp first, all with the next number of `outbox_feed_stamps.last`, under that row's lock, and reads
-- by `(seq, id)`: stamps commit in the order of their numbers, so a row that commits later gets a later stamp
-- and a reader resuming from a position misses nothing. `outbox_feed_stamper` is the row a reader tries first
-- and passes over when another holds it (then that one stamps).
CREATE TABLE IF NOT EXISTS outbox_feed_stamps (
    one TINYINT NOT NULL PRIMARY KEY,
    last BIGINT NOT NULL
) ENGINE = InnoDB;

INSERT INTO outbox_feed_stamps (one, last) VALUES (1, 0) ON DUPLICATE KEY UPDATE one = one;

CREATE TABLE IF NOT EXISTS outbox_feed_stamper (
    one TINYINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

INSERT INTO outbox_feed_stamper (one) VALUES (1) ON DUPLICATE KEY UPDATE one = one;

-- Leases are found through the claims, not through an index of the jobs: a claim records its jobs (a JSON array of
-- ids) and their lease in one row, as on PostgreSQL (`storage/postgres/schema.sql` says how the rescuers read it).
CREATE TABLE IF NOT EXISTS outbox_claims (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    worker VARCHAR(255) NOT NULL,
    lease_expires_at BIGINT NOT NULL,
    jobs JSON NOT NULL,
    KEY outbox_claims_lease (lease_expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Finished jobs are found through a log of when they finished, as on PostgreSQL; a row has an id here, which
-- retention deletes it by (PostgreSQL's `ctid`).
CREATE TABLE IF NOT EXISTS outbox_finished (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at BIGINT NOT NULL,
    jobs JSON NOT NULL,
    KEY outbox_finished_at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Jobs deleted while claimed: a kind that keeps nothing, or keeps its jobs in the archive, deletes the job as it
-- completes, and its events outlive it for the feed's readers. Retention deletes those events by the feed rows'
-- age, through this list (`mysql/retention.rs`); the other engines find them through the worker's feed row that
-- recorded the completion, which this engine's store does not write.
CREATE TABLE IF NOT EXISTS outbox_outlived (
    job_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL PRIMARY KEY,
    at BIGINT NOT NULL,
    KEY outbox_outlived_at (at, job_id)
) ENGINE = InnoDB;

-- The archive: completed jobs of kinds kept in time partitions, by `updated_at` (their completion). RANGE has no
-- default partition here: the last one, `pmax`, takes every time past the others, and retention splits spans off
-- it ahead of time (cheap while it is empty) and drops old ones whole. A partitioned table's unique keys must
-- hold the partition column, so ids are found through a plain index. The columns are the jobs table's as the
-- archive's readers name them (`storage/archive.rs`).
CREATE TABLE IF NOT EXISTS outbox_jobs_done (
    id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL,
    kind VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    queue VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    payload JSON NOT NULL,
    priority INT NOT NULL,
    max_attempts INT NOT NULL,
    idempotency_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
    schema_hash VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at BIGINT NOT NULL,
    sequence_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin,
    sequence_no BIGINT,
    sequence_hold SMALLINT NOT NULL,
    waiting BOOLEAN NOT NULL,
    superseded BOOLEAN NOT NULL,
    scheduled BOOLEAN NOT NULL,
    run_at BIGINT NOT NULL,
    last_error TEXT,
    output JSON,
    attempts INT NOT NULL,
    runs INT NOT NULL,
    locked_by VARCHAR(255),
    locked_at BIGINT,
    claimed_at BIGINT,
    status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    completed_at BIGINT NOT NULL,
    lease_expires_at BIGINT,
    updated_at BIGINT NOT NULL,
    KEY outbox_jobs_done_id (id),
    CONSTRAINT outbox_jobs_done_status_check CHECK (status = 'completed')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin PARTITION BY RANGE (updated_at) (PARTITION pmax VALUES LESS THAN MAXVALUE);

-- What readers name: the same on every engine.
CREATE OR REPLACE VIEW outbox_jobs_archive AS SELECT * FROM outbox_jobs_done;

-- The kinds workers have registered, with their JSON Schemas. `schema` is a reserved word here: statements quote it.
CREATE TABLE IF NOT EXISTS outbox_kinds (
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
    `schema` JSON NOT NULL,
    schema_hash VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    queue VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    priority INT NOT NULL,
    max_attempts INT NOT NULL,
    is_unique BOOLEAN NOT NULL,
    key_fields JSON NOT NULL,
    recorded_by VARCHAR(255),
    first_seen_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    sequence TEXT,
    on_sequence_failure VARCHAR(16) NOT NULL DEFAULT 'hold',
    concurrency BIGINT,
    rate TEXT,
    rate_key TEXT,
    fair TEXT,
    cost TEXT,
    subject TEXT
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- The worker registry: one row per live worker, in this process or remote.
CREATE TABLE IF NOT EXISTS outbox_workers (
    id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
    host VARCHAR(255) NOT NULL,
    pid BIGINT,
    queues JSON,
    kinds JSON NOT NULL,
    concurrency BIGINT,
    running BIGINT NOT NULL DEFAULT 0,
    remote BOOLEAN NOT NULL DEFAULT FALSE,
    started_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Periodic schedules: the tick last enqueued, moved by compare-and-set so one process enqueues each tick.
CREATE TABLE IF NOT EXISTS outbox_schedules (
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
    kind VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    spec TEXT NOT NULL,
    time_zone VARCHAR(64) NOT NULL,
    missed VARCHAR(32) NOT NULL,
    last_tick BIGINT,
    last_job_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin,
    updated_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Named leases of fleet-wide chores (retention runs in one process at a time).
CREATE TABLE IF NOT EXISTS outbox_locks (
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
    holder VARCHAR(255) NOT NULL,
    expires_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- The latest report of each reconciler.
CREATE TABLE IF NOT EXISTS outbox_reconciliations (
    reconciler VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY,
    at BIGINT NOT NULL,
    worker VARCHAR(255),
    report JSON NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Pauses and holds: work of a queue, a kind, or one key of a kind that no claim takes (an empty key: the whole
-- kind). `key` is a reserved word here: statements quote it. The scope is an ENUM, one byte in the primary key:
-- name (1,020 bytes reserved) and key (2,048) leave 4 of InnoDB's 3,072.
CREATE TABLE IF NOT EXISTS outbox_pauses (
    scope ENUM('queue', 'kind') CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    `key` VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT '',
    ends_at BIGINT,
    reason TEXT,
    paused_at BIGINT NOT NULL,
    PRIMARY KEY (scope, name, `key`)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Rate limits by name: the rate, and a token bucket per key (an empty key: the name's own). `level` units at `at`
-- (ms); it refills at amount / window_ms up to burst.
CREATE TABLE IF NOT EXISTS outbox_rates (
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    `key` VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT '',
    amount BIGINT NOT NULL,
    window_ms BIGINT NOT NULL,
    burst BIGINT NOT NULL,
    level DOUBLE NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (name, `key`),
    CONSTRAINT outbox_rates_amount_check CHECK (amount > 0),
    CONSTRAINT outbox_rates_window_ms_check CHECK (window_ms > 0),
    CONSTRAINT outbox_rates_burst_check CHECK (burst > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Fair share by kind: each key's weight and pass; the empty key holds the kind's clock.
CREATE TABLE IF NOT EXISTS outbox_fair (
    name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    `key` VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    weight INT NOT NULL DEFAULT 1,
    pass DOUBLE NOT NULL DEFAULT 0,
    PRIMARY KEY (name, `key`),
    CONSTRAINT outbox_fair_weight_check CHECK (weight > 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Kinds with a fleet-wide limit on running jobs: a claim of such a kind holds its row (an upsert) until it commits,
-- so claims of the kind take turns and each counts what the others claimed (PostgreSQL uses an advisory lock held
-- to commit; MySQL's `GET_LOCK` lasts as long as the session).
CREATE TABLE IF NOT EXISTS outbox_limits (
    kind VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Workflows and batches by name.
CREATE TABLE IF NOT EXISTS outbox_workflows (
    id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL PRIMARY KEY,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- The edges: `child_id` waits for `parent_id`, which it knows as `parent_step`; `done` once the parent's outcome was
-- counted.
CREATE TABLE IF NOT EXISTS outbox_job_deps (
    parent_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL,
    child_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL,
    parent_step VARCHAR(255) NOT NULL,
    done BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (parent_id, child_id),
    KEY outbox_job_deps_child (child_id, parent_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;

-- Parents' outcomes to count, written by the triggers in the writer's transaction: a job with children finished
-- (`completed`, `failed`, `cancelled`; a job deleted while claimed, as a kind that keeps nothing completes, counts as
-- completed), or was put back to pending after a failure or cancel (`retried`). A trigger here cannot write the
-- children (error 1442): the store counts the notes in order, in a transaction of its own that holds
-- `outbox_workflow_turn` (`mysql/workflows.rs`), before every claim, after its outcomes and after a rescue.
CREATE TABLE IF NOT EXISTS outbox_workflow_notes (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    parent_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL,
    outcome VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    at BIGINT NOT NULL,
    KEY outbox_workflow_notes_parent (parent_id, id)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS outbox_workflow_turn (
    one TINYINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

INSERT INTO outbox_workflow_turn (one) VALUES (1) ON DUPLICATE KEY UPDATE one = one;

-- Wake-ups across processes. One job of every enqueue statement, and the first job a store lets go, is written into
-- this log, in MEMORY tables:
-- not transactional, so the write takes no lock that outlives its statement and concurrent enqueuers do not queue
-- behind one another's commit (a signal row in InnoDB cost 4 enqueuers a fifth of their rate; `outbox-bench
-- mariadb-wake`). The log is a ring of 32,768 slots, each job at the place a counter hands out: it never outgrows
-- the server's MEMORY table limit (`max_heap_table_size`, 16 MiB by default), and an enqueue never fails on it.
-- A process's watcher reads the places after the last it read (the B-tree on `seq`: a MEMORY table's default hash
-- index would make that read a scan), then reads those jobs' rows without a lock, and looks again shortly for
-- those whose enqueue has not committed yet: it never wakes its workers early, and a job committed after a later
-- one is not missed. A watcher that fell more than the ring behind, or finds the counter gone back (a restart
-- empties MEMORY tables), claims once instead.
CREATE TABLE IF NOT EXISTS outbox_wake_counter (
    id TINYINT NOT NULL PRIMARY KEY,
    n BIGINT NOT NULL
) ENGINE = MEMORY;

CREATE TABLE IF NOT EXISTS outbox_wake_log (
    slot INT NOT NULL,
    seq BIGINT NOT NULL,
    job_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL,
    PRIMARY KEY USING BTREE (slot),
    KEY outbox_wake_log_seq USING BTREE (seq)
) ENGINE = MEMORY;

-- No trigger on `outbox_jobs` writes the wake-up log: a statement takes the write lock of every MEMORY table its
-- triggers may write when it starts and holds it to its end, so an update waiting for another transaction's row
-- lock held the log's lock, and that transaction's next statement waited for it: two worker processes stalled each
-- other (found by `tests/tests/mariadb_fleet.rs`), and InnoDB cannot see such a cycle. The log is written by a
-- statement of its own, `DO outbox_wake(<job id>)`, which takes no InnoDB lock: after each enqueue statement, in the
-- enqueuer's transaction (one job of it: they commit together), and by a store after it commits jobs it let go.
-- The function takes the next place (`LAST_INSERT_ID(n + 1)`, which the server gives back to the caller's session
-- as it was once the function returns: checked) and writes the job into its slot.
CREATE OR REPLACE FUNCTION outbox_wake(job VARCHAR(26) CHARACTER SET ascii) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE place BIGINT;
    INSERT INTO outbox_wake_counter (id, n) VALUES (1, LAST_INSERT_ID(1))
        ON DUPLICATE KEY UPDATE n = LAST_INSERT_ID(n + 1);
    SET place = LAST_INSERT_ID();
    INSERT INTO outbox_wake_log (slot, seq, job_id) VALUES (place MOD 32768, place, job)
        ON DUPLICATE KEY UPDATE seq = VALUES(seq), job_id = VALUES(job_id);
    RETURN place;
END;

-- Stamps the feed's rows committed since the last stamp (see `outbox_feed_stamps`) and returns the last stamp.
-- A reader calls `SELECT outbox_feed_stamp(FALSE)` before it reads: it stamps up to 10,000 rows, and nothing when
-- another reader is stamping (the first `SELECT … SKIP LOCKED`: a function's statements on one table share one
-- lock type, so the waiting form below reads another table). The feed's head calls it with `TRUE`: it waits for
-- the stamps' row and stamps every committed row, so what it returns is after everything committed before it.
-- The rows to stamp are read without locks (a row whose insert has not committed is not seen, and not waited
-- for), then updated by id, each still unstamped: a stamp committed meanwhile is not stamped again.
CREATE OR REPLACE FUNCTION outbox_feed_stamp(everything BOOLEAN) RETURNS BIGINT
    NOT DETERMINISTIC MODIFIES SQL DATA
BEGIN
    DECLARE n BIGINT DEFAULT NULL;
    DECLARE free TINYINT DEFAULT NULL;
    DECLARE ids LONGTEXT DEFAULT NULL;
    DECLARE stamped BIGINT DEFAULT 1;
    -- Inside a transaction, nothing: its snapshot may predate a stamp another reader committed, whose rows it would
    -- not see beside its own later stamp. The last stamp as the snapshot sees it (a read without a lock here: the
    -- calling statement is a SELECT).
    IF @@in_transaction THEN
        RETURN (SELECT last FROM outbox_feed_stamps WHERE one = 1);
    END IF;
    IF NOT everything THEN
        SELECT JSON_ARRAYAGG(id) INTO ids
            FROM (SELECT id FROM outbox_job_events WHERE seq IS NULL ORDER BY id LIMIT 10000) w;
        IF ids IS NULL THEN
            RETURN NULL;
        END IF;
        SELECT one INTO free FROM outbox_feed_stamper WHERE one = 1 FOR UPDATE SKIP LOCKED;
        IF free IS NULL THEN
            RETURN NULL;
        END IF;
    END IF;
    SELECT last INTO n FROM outbox_feed_stamps WHERE one = 1 FOR UPDATE;
    WHILE stamped > 0 DO
        IF ids IS NULL THEN
            SELECT JSON_ARRAYAGG(id) INTO ids
                FROM (SELECT id FROM outbox_job_events WHERE seq IS NULL ORDER BY id LIMIT 10000) w;
        END IF;
        SET stamped = 0;
        IF ids IS NOT NULL THEN
            UPDATE JSON_TABLE(ids, '$[*]' COLUMNS (id BIGINT PATH '$')) w
                STRAIGHT_JOIN outbox_job_events e FORCE INDEX (PRIMARY) ON e.id = w.id
                SET e.seq = n + 1 WHERE e.seq IS NULL;
            SET stamped = ROW_COUNT();
            IF stamped > 0 THEN
                SET n = n + 1;
                UPDATE outbox_feed_stamps SET last = n WHERE one = 1;
            END IF;
        END IF;
        IF NOT everything THEN
            SET stamped = 0;
        END IF;
        SET ids = NULL;
    END WHILE;
    RETURN n;
END;

-- A sequenced job takes the next place in its sequence under the sequence's row, held to commit, and goes in waiting
-- whatever is ahead of it; its sequence is noted (`outbox_jobs_inserted`), and the store lets it go once nothing
-- ahead holds it. It does not look for a job ahead here: InnoDB reads with a shared lock in a writing statement's
-- trigger, and the lock on the job found would hold that job's completion until the enqueuer commits (checked).
CREATE OR REPLACE TRIGGER outbox_jobs_placed BEFORE INSERT ON outbox_jobs FOR EACH ROW
BEGIN
    IF NEW.sequence_key IS NOT NULL THEN
        INSERT INTO outbox_sequences (sequence_key, last_no) VALUES (NEW.sequence_key, 1)
            ON DUPLICATE KEY UPDATE last_no = last_no + 1;
        SET NEW.sequence_no = (SELECT last_no FROM outbox_sequences WHERE sequence_key = NEW.sequence_key);
        IF NEW.status = 'pending' THEN
            SET NEW.waiting = TRUE;
        END IF;
    END IF;
END;

-- A finished job of a sequence put back to pending rejoins it waiting, behind whatever runs or holds it; its
-- sequence is noted (`outbox_jobs_updated`). An update that reads its own table (a subquery of `outbox_jobs`) has its
-- stored generated columns computed before this trigger changes the row (MariaDB 10.11, checked): such an update
-- sets `waiting` itself, as the library's retries do.
CREATE OR REPLACE TRIGGER outbox_jobs_rejoining BEFORE UPDATE ON outbox_jobs FOR EACH ROW
BEGIN
    IF NEW.sequence_key IS NOT NULL AND NEW.status = 'pending'
            AND OLD.status IN ('completed', 'failed', 'cancelled') THEN
        SET NEW.waiting = TRUE;
    END IF;
END;

-- Every job inserted, by any writer:
-- - records its `enqueued` event (one row per job: there are no statement triggers);
-- - inserted claimed or finished (hand-written SQL), is listed in a claim or in the log of finished jobs;
-- - of a sequence, notes it.
CREATE OR REPLACE TRIGGER outbox_jobs_inserted AFTER INSERT ON outbox_jobs FOR EACH ROW
BEGIN
    IF NEW.sequence_key IS NOT NULL THEN
        INSERT INTO outbox_sequence_notes (sequence_key) VALUES (NEW.sequence_key);
    END IF;
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
        VALUES (NEW.id, NEW.kind, NEW.queue, NEW.created_at, 'enqueued', NEW.attempts);
    IF NEW.status = 'claimed' THEN
        INSERT INTO outbox_claims (worker, lease_expires_at, jobs)
            VALUES (COALESCE(NEW.locked_by, ''), COALESCE(NEW.lease_expires_at, 0), JSON_ARRAY(NEW.id));
    END IF;
    IF NEW.finished_at IS NOT NULL THEN
        INSERT INTO outbox_finished (at, jobs) VALUES (NEW.finished_at, JSON_ARRAY(NEW.id));
    END IF;
END;

-- Every job updated, by any writer:
-- - records every other transition, named as `storage/events.rs` describes (the same text as on the other
--   engines); the worker's claim and completion statements flip `event_flip` and record their jobs themselves;
-- - claimed, or its lease shortened, by another writer: is listed in a claim of its own;
-- - finished, or its finished time changed, by another writer: is listed in the log of finished jobs;
-- - of a sequence, stopping to hold it back or rejoining it: notes it;
-- - with children, finished or put back to pending after a failure or cancel: notes it for its children.
CREATE OR REPLACE TRIGGER outbox_jobs_updated AFTER UPDATE ON outbox_jobs FOR EACH ROW
BEGIN
    IF NEW.sequence_key IS NOT NULL AND ((NEW.status = 'pending' AND OLD.status IN ('completed', 'failed', 'cancelled'))
            OR ((OLD.status IN ('pending', 'claimed') OR (OLD.status IN ('failed', 'cancelled') AND OLD.sequence_hold = 1))
            AND NOT (NEW.status IN ('pending', 'claimed')
                OR (NEW.status IN ('failed', 'cancelled') AND NEW.sequence_hold = 1)))) THEN
        INSERT INTO outbox_sequence_notes (sequence_key) VALUES (NEW.sequence_key);
    END IF;
    IF (OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts) AND OLD.event_flip = NEW.event_flip THEN
        INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, error, claimed_at,
            completed_at)
        VALUES (NEW.id, NEW.kind, NEW.queue, NEW.updated_at,
            CASE
                WHEN NEW.status = 'claimed' THEN 'claimed'
                WHEN NEW.status = 'completed' THEN 'completed'
                WHEN NEW.status = 'cancelled' THEN 'cancelled'
                WHEN OLD.status IN ('failed', 'cancelled', 'completed') THEN 'retried_by_operator'
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
                AND NEW.attempts >= OLD.attempts THEN NEW.last_error END,
            CASE WHEN OLD.status IN ('claimed', 'completed') THEN OLD.claimed_at END,
            CASE WHEN OLD.status = 'completed' THEN OLD.completed_at END);
    END IF;
    IF NEW.status = 'claimed' AND ((OLD.status <> 'claimed' AND OLD.event_flip = NEW.event_flip)
            OR NEW.lease_expires_at < OLD.lease_expires_at) THEN
        INSERT INTO outbox_claims (worker, lease_expires_at, jobs)
            VALUES (COALESCE(NEW.locked_by, ''), COALESCE(NEW.lease_expires_at, 0), JSON_ARRAY(NEW.id));
    END IF;
    IF NEW.finished_at IS NOT NULL AND NOT (NEW.finished_at <=> OLD.finished_at)
            AND OLD.event_flip = NEW.event_flip THEN
        INSERT INTO outbox_finished (at, jobs) VALUES (NEW.finished_at, JSON_ARRAY(NEW.id));
    END IF;
    IF NEW.has_children AND OLD.status <> NEW.status THEN
        IF NEW.status IN ('completed', 'failed', 'cancelled') THEN
            INSERT INTO outbox_workflow_notes (parent_id, outcome, at) VALUES (NEW.id, NEW.status, NEW.updated_at);
        ELSEIF NEW.status = 'pending' AND OLD.status IN ('failed', 'cancelled') THEN
            INSERT INTO outbox_workflow_notes (parent_id, outcome, at) VALUES (NEW.id, 'retried', NEW.updated_at);
        END IF;
    END IF;
END;

-- A job deleted takes its history with it, unless it was deleted while claimed (a job of a kind that keeps
-- nothing, deleted by the statement that completes it: its events stay for the feed's readers, and it is listed in
-- `outbox_outlived` for retention to delete them, and with children its completion is noted for them); a step takes
-- its edges to its parents; a job deleted while holding its sequence back notes it.
CREATE OR REPLACE TRIGGER outbox_jobs_deleted AFTER DELETE ON outbox_jobs FOR EACH ROW
BEGIN
    IF OLD.sequence_key IS NOT NULL AND (OLD.status IN ('pending', 'claimed')
            OR (OLD.status IN ('failed', 'cancelled') AND OLD.sequence_hold = 1)) THEN
        INSERT INTO outbox_sequence_notes (sequence_key) VALUES (OLD.sequence_key);
    END IF;
    IF OLD.status <> 'claimed' THEN
        DELETE FROM outbox_job_events WHERE job_id = OLD.id;
    ELSE
        -- As old as its last event (the completion its store wrote before the delete), not its claim.
        INSERT INTO outbox_outlived (job_id, at)
            VALUES (OLD.id, COALESCE((SELECT MAX(e.at) FROM outbox_job_events e WHERE e.job_id = OLD.id), OLD.updated_at))
            ON DUPLICATE KEY UPDATE at = VALUES(at);
    END IF;
    IF OLD.workflow_id IS NOT NULL THEN
        DELETE FROM outbox_job_deps WHERE child_id = OLD.id;
    END IF;
    IF OLD.has_children AND OLD.status = 'claimed' THEN
        INSERT INTO outbox_workflow_notes (parent_id, outcome, at) VALUES (OLD.id, 'completed', OLD.updated_at);
    END IF;
END;

-- An archived job deleted by hand (`delete`, `purge`) takes its history with it. A partition dropped whole fires no
-- trigger: its jobs' history goes with the feed rows that recorded their completions.
CREATE OR REPLACE TRIGGER outbox_jobs_done_purged AFTER DELETE ON outbox_jobs_done FOR EACH ROW
    DELETE FROM outbox_job_events WHERE job_id = OLD.id;
