-- The outbox schema on PostgreSQL, as one migration creates it: the same tables as on SQLite, in PostgreSQL's
-- own types (`timestamptz`, `jsonb`). Identifiers compare bytewise (`COLLATE "C"`), as they do on SQLite.
-- "Blocking" below means: a job that holds back the later jobs of its sequence, because it has not run yet,
-- is running, or failed for good or was cancelled under the hold policy (`sequence_hold` 1; 0 is the continue
-- policy, 2 a hold an operator released).

CREATE TABLE outbox_jobs (
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
    updated_at timestamptz NOT NULL,
    -- The sequence the job runs in, its place in it (from one database sequence, writers of a sequence
    -- serialized by an advisory lock), and whether something earlier in it holds it back.
    sequence_key text COLLATE "C",
    sequence_no bigint,
    waiting boolean NOT NULL DEFAULT false,
    sequence_hold smallint NOT NULL DEFAULT 1,
    -- Flipped by the worker's claim and completion statements, which record their jobs in one feed row of
    -- their own: the transition trigger records only changes that leave it as it was.
    event_flip boolean NOT NULL DEFAULT false
);
CREATE SEQUENCE outbox_jobs_sequence_no;

CREATE INDEX outbox_jobs_ready
    ON outbox_jobs (priority DESC, run_at, id) WHERE status = 'pending' AND NOT waiting;
CREATE INDEX outbox_jobs_ready_queue
    ON outbox_jobs (queue, priority DESC, run_at, id) WHERE status = 'pending' AND NOT waiting;
CREATE UNIQUE INDEX outbox_jobs_active_key
    ON outbox_jobs (kind, idempotency_key)
    WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL;
CREATE INDEX outbox_jobs_lease ON outbox_jobs (lease_expires_at) WHERE status = 'claimed';
CREATE INDEX outbox_jobs_finished
    ON outbox_jobs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX outbox_jobs_sequence
    ON outbox_jobs (sequence_key, sequence_no) WHERE sequence_key IS NOT NULL;
CREATE INDEX outbox_jobs_sequence_blocking ON outbox_jobs (sequence_key, sequence_no)
    WHERE sequence_key IS NOT NULL AND (outbox_jobs.status IN ('pending', 'claimed')
        OR (outbox_jobs.status IN ('failed', 'cancelled') AND outbox_jobs.sequence_hold = 1));

-- One notification per inserting statement, delivered at commit (identical ones of a transaction fold into
-- one): every writer wakes the workers. The payload is the schema, so workers of other schemas ignore it.
CREATE FUNCTION outbox_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_notify AFTER INSERT ON outbox_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_notify();

-- A sequenced job takes its place under the sequence's transaction-scoped advisory lock: two transactions
-- enqueuing onto one sequence commit in the order of their places in it.
CREATE FUNCTION outbox_jobs_sequence_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || NEW.sequence_key, 0));
    NEW.sequence_no := nextval('outbox_jobs_sequence_no');
    NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key
        AND (b.status IN ('pending', 'claimed') OR (b.status IN ('failed', 'cancelled') AND b.sequence_hold = 1)));
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_jobs_sequence_insert BEFORE INSERT ON outbox_jobs
    FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL) EXECUTE FUNCTION outbox_jobs_sequence_insert();

-- A job that stops blocking its sequence, or is deleted while blocking, notes the sequence in the
-- transaction's `outbox.sequences` setting (separated by the record separator)...
CREATE FUNCTION outbox_jobs_sequence_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('outbox.sequences',
        COALESCE(current_setting('outbox.sequences', true), '') || OLD.sequence_key || chr(30), true);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_sequence_moved AFTER UPDATE OF status, sequence_hold ON outbox_jobs
    FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL
        AND (OLD.status IN ('pending', 'claimed') OR (OLD.status IN ('failed', 'cancelled') AND OLD.sequence_hold = 1))
        AND NOT (NEW.status IN ('pending', 'claimed') OR (NEW.status IN ('failed', 'cancelled') AND NEW.sequence_hold = 1)))
    EXECUTE FUNCTION outbox_jobs_sequence_note();
CREATE TRIGGER outbox_jobs_sequence_purged AFTER DELETE ON outbox_jobs
    FOR EACH ROW WHEN (OLD.sequence_key IS NOT NULL
        AND (OLD.status IN ('pending', 'claimed') OR (OLD.status IN ('failed', 'cancelled') AND OLD.sequence_hold = 1)))
    EXECUTE FUNCTION outbox_jobs_sequence_note();

-- ...and once per statement, for every noted sequence whose lock is free, the first job goes when it waits,
-- and the workers are woken when any went. A sequence an enqueuing transaction holds is not waited for (a slow
-- application transaction would stall the worker's completions): the workers' sweep (`store/mod.rs`) lets
-- its next job go once that transaction has ended. Per row, the release cost a third of the worker's
-- unsequenced completion rate; over transition tables a tenth of every claim and completion (measured). The
-- lookups are planned once per transaction where the session would plan them afresh (`force_custom_plan`).
CREATE FUNCTION outbox_jobs_sequence_next() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE noted text; released bigint; locked text[];
BEGIN
    noted := current_setting('outbox.sequences', true);
    IF noted IS NULL OR noted = '' THEN RETURN NULL; END IF;
    PERFORM set_config('outbox.sequences', '', true);
    IF current_setting('plan_cache_mode') = 'force_custom_plan' THEN
        PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
    END IF;
    SELECT array_agg(s.k) INTO locked
        FROM (SELECT DISTINCT k FROM unnest(string_to_array(noted, chr(30))) AS u(k) WHERE k <> '' ORDER BY 1) s
        WHERE pg_try_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || s.k, 0));
    IF locked IS NULL THEN RETURN NULL; END IF;
    UPDATE outbox_jobs w SET waiting = false FROM unnest(locked) AS s(k)
        WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = s.k
            AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
            ORDER BY h.sequence_no LIMIT 1)
        AND w.status = 'pending' AND w.waiting;
    GET DIAGNOSTICS released = ROW_COUNT;
    IF released > 0 THEN PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_sequence_next AFTER UPDATE OR DELETE ON outbox_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_sequence_next();

-- A finished job put back to pending rejoins its sequence behind whatever blocks it, and behind a later job
-- that is running or free to run.
CREATE FUNCTION outbox_jobs_sequence_rejoin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || NEW.sequence_key, 0));
    NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key AND b.id <> NEW.id
        AND ((b.sequence_no < NEW.sequence_no
                AND (b.status IN ('pending', 'claimed') OR (b.status IN ('failed', 'cancelled') AND b.sequence_hold = 1)))
            OR b.status = 'claimed' OR (b.status = 'pending' AND NOT b.waiting)));
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_jobs_sequence_rejoin BEFORE UPDATE OF status ON outbox_jobs
    FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL AND NEW.status = 'pending'
        AND OLD.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION outbox_jobs_sequence_rejoin();

-- The history of every job and the event feed (see `storage/events.rs`). Identity values are handed out
-- before commit, so each event also records its transaction id, and the feed reads in (transaction, id) order
-- only events of transactions older than every one still running. A worker's feed row lists up to a claim's
-- worth of jobs: up to one 8 kB page it stays inline and uncompressed (7-14 % faster drains, measured).
CREATE TABLE outbox_job_events (
    id bigint GENERATED ALWAYS AS IDENTITY,
    job_id text COLLATE "C" NOT NULL,
    kind text NOT NULL DEFAULT '',
    queue text NOT NULL DEFAULT '',
    at timestamptz NOT NULL,
    event text NOT NULL,
    attempt integer NOT NULL,
    worker text,
    error text,
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    jobs json,
    claimed_at timestamptz,
    completed_at timestamptz,
    PRIMARY KEY (txid, id)
) WITH (toast_tuple_target = 8160);
CREATE INDEX outbox_job_events_job ON outbox_job_events (job_id, id);

CREATE FUNCTION outbox_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
    SELECT id, kind, queue, created_at, 'enqueued', attempts FROM inserted ORDER BY id;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_enqueued AFTER INSERT ON outbox_jobs REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_enqueued();

CREATE FUNCTION outbox_jobs_purged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM outbox_job_events WHERE job_id = OLD.id;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_purged AFTER DELETE ON outbox_jobs FOR EACH ROW EXECUTE FUNCTION outbox_jobs_purged();

-- Every other transition, by any writer, named as `storage/events.rs` describes; the same text on SQLite.
CREATE FUNCTION outbox_jobs_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, error, claimed_at, completed_at)
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
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs
    FOR EACH ROW WHEN ((OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts)
        AND OLD.event_flip = NEW.event_flip)
    EXECUTE FUNCTION outbox_jobs_transition();

-- The kinds workers have registered, with their JSON Schemas.
CREATE TABLE outbox_kinds (
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
    updated_at timestamptz NOT NULL,
    sequence text,
    on_sequence_failure text NOT NULL DEFAULT 'hold',
    concurrency bigint
);

-- The worker registry: one row per live worker, in this process or remote.
CREATE TABLE outbox_workers (
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
);

-- Periodic schedules: the tick last enqueued, moved by compare-and-set so one process enqueues each tick.
CREATE TABLE outbox_schedules (
    name text COLLATE "C" PRIMARY KEY,
    kind text NOT NULL,
    spec text NOT NULL,
    time_zone text NOT NULL,
    missed text NOT NULL,
    last_tick timestamptz,
    last_job_id text,
    updated_at timestamptz NOT NULL
);

-- Named leases of fleet-wide chores (retention runs in one process at a time).
CREATE TABLE outbox_locks (
    name text COLLATE "C" PRIMARY KEY,
    holder text NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The latest report of each reconciler.
CREATE TABLE outbox_reconciliations (
    reconciler text COLLATE "C" PRIMARY KEY,
    at timestamptz NOT NULL,
    worker text,
    report jsonb NOT NULL
);
