-- The outbox schema on MariaDB (10.6 and later), as far as it is built: the jobs table, its indexes and the wake-up
-- log. This is step 2 of the third engine (`docs/internals/mariadb.md`): no migration applies it yet, and
-- `tests/tests/mariadb.rs` holds what the engine will rest on (the claims read their indexes with no sort; a key
-- is unique per kind while its job is active; a payload must be JSON; the wake-up log is written before the enqueue
-- commits, also for a job an update lets go, stays a bounded ring, and leaves the session's LAST_INSERT_ID alone).
--
-- Against the PostgreSQL schema (`storage/postgres/schema.sql`), the same columns in MariaDB's types:
-- - Times are BIGINT milliseconds, as on SQLite: a DATETIME difference is digit arithmetic, and DATETIME and
--   FROM_UNIXTIME read the session's time zone, which the caller's connection owns.
-- - Identifiers and keys compare bytewise without padding (`utf8mb4_nopad_bin`): under `utf8mb4_bin`, 'a ' = 'a'.
-- - JSON is MariaDB's JSON type: LONGTEXT with a JSON_VALID check, the text kept as written.
-- - Partial indexes become stored generated columns that are NULL outside the predicate, indexed: InnoDB keeps an
--   entry for every row, NULL keys included, but a claim (pending to claimed) changes none of the values an index
--   reads.

CREATE TABLE outbox_jobs (
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
    KEY outbox_jobs_ready_queue (ready_queue, kind, priority DESC, run_at, id),
    KEY outbox_jobs_scheduled (due_at),
    KEY outbox_jobs_flow_keys (ready_flow_kind, flow_key),
    KEY outbox_jobs_flow_heads (ready_flow_head, priority DESC, run_at, id),
    KEY outbox_jobs_subject (subject, id),
    KEY outbox_jobs_workflow (workflow_id, id),
    UNIQUE KEY outbox_jobs_active_key (kind, active_key),
    KEY outbox_jobs_sequence (sequence_key, sequence_no),
    KEY outbox_jobs_sequence_blocking (blocking_key, sequence_no),
    CONSTRAINT outbox_jobs_max_attempts_check CHECK (max_attempts >= 1),
    CONSTRAINT outbox_jobs_status_check CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
    CONSTRAINT outbox_jobs_cost_check CHECK (cost >= 0)
) ENGINE = InnoDB;

-- Wake-ups across processes. Every job inserted is written into this log by the trigger below, in MEMORY tables:
-- not transactional, so the write takes no lock that outlives its statement and concurrent enqueuers do not queue
-- behind one another's commit (a signal row in InnoDB cost 4 enqueuers a fifth of their rate; `outbox-bench
-- mariadb-wake`). The log is a ring of 32,768 slots, each job at the place a counter hands out: it never outgrows
-- the server's MEMORY table limit (`max_heap_table_size`, 16 MiB by default), and an enqueue never fails on it.
-- A process's watcher reads the places after the last it read (the B-tree on `seq`: a MEMORY table's default hash
-- index would make that read a scan), then reads those jobs' rows without a lock, and looks again shortly for
-- those whose enqueue has not committed yet: it never wakes its workers early, and a job committed after a later
-- one is not missed. A watcher that fell more than the ring behind, or finds the counter gone back (a restart
-- empties MEMORY tables), claims once instead.
CREATE TABLE outbox_wake_counter (
    id TINYINT NOT NULL PRIMARY KEY,
    n BIGINT NOT NULL
) ENGINE = MEMORY;

CREATE TABLE outbox_wake_log (
    slot INT NOT NULL,
    seq BIGINT NOT NULL,
    job_id VARCHAR(26) CHARACTER SET ascii COLLATE ascii_nopad_bin NOT NULL,
    PRIMARY KEY USING BTREE (slot),
    KEY outbox_wake_log_seq USING BTREE (seq)
) ENGINE = MEMORY;

-- The counter's value reaches the second statement through LAST_INSERT_ID(expr), which the server gives back to
-- the enqueuing session as it was once the trigger ends.
CREATE TRIGGER outbox_jobs_wake AFTER INSERT ON outbox_jobs FOR EACH ROW
BEGIN
    INSERT INTO outbox_wake_counter (id, n) VALUES (1, LAST_INSERT_ID(1))
        ON DUPLICATE KEY UPDATE n = LAST_INSERT_ID(n + 1);
    INSERT INTO outbox_wake_log (slot, seq, job_id) VALUES (LAST_INSERT_ID() % 32768, LAST_INSERT_ID(), NEW.id)
        ON DUPLICATE KEY UPDATE seq = VALUES(seq), job_id = VALUES(job_id);
END;

-- A job an update makes ready (a sequence's next job, a workflow's step, a retry, a job whose pause ended) is logged
-- as an inserted one is, whoever wrote the update: its ready queue goes from NULL to its queue.
CREATE TRIGGER outbox_jobs_woken AFTER UPDATE ON outbox_jobs FOR EACH ROW
BEGIN
    IF OLD.ready_queue IS NULL AND NEW.ready_queue IS NOT NULL THEN
        INSERT INTO outbox_wake_counter (id, n) VALUES (1, LAST_INSERT_ID(1))
            ON DUPLICATE KEY UPDATE n = LAST_INSERT_ID(n + 1);
        INSERT INTO outbox_wake_log (slot, seq, job_id) VALUES (LAST_INSERT_ID() % 32768, LAST_INSERT_ID(), NEW.id)
            ON DUPLICATE KEY UPDATE seq = VALUES(seq), job_id = VALUES(job_id);
    END IF;
END;
