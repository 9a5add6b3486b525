-- The outbox schema on PostgreSQL, whole: what the migrations (`migrations/`) make of an empty schema, held equal
-- to them by a test (`schema_file_is_what_the_migrations_make`). The same tables as on SQLite, in PostgreSQL's own
-- types (`timestamptz`, `jsonb`); identifiers compare bytewise (`COLLATE "C"`), as they do on SQLite.
--
-- "Blocking" below means: a job that holds back the later jobs of its sequence, because it has not run yet, is
-- running, or failed for good or was cancelled under the hold policy (`sequence_hold` 1; 0 is the continue policy,
-- 2 a hold an operator released).

-- Jobs. The columns come in the order of what changes them, so that an update logs few bytes: first what neither a
-- claim nor a completion changes, then what a completion leaves as the claim set it, then what a completion changes
-- (an update whose new version stays on the row's page is logged as the bytes between its first and last changed
-- column). No index reads a column a claim changes, so a claim updates its rows in place (heap-only): the indexes
-- read stored generated columns that stay as they are while a job goes from pending to claimed. 60 % of each page
-- stays free as rows are inserted, room for a job's claimed and completed versions on its own page (a job's life
-- writes about 1,040 bytes of WAL at claims of 1,000: `outbox-bench --case process`).
CREATE TABLE outbox_jobs (
    id text COLLATE "C" PRIMARY KEY,
    kind text COLLATE "C" NOT NULL,
    queue text COLLATE "C" NOT NULL DEFAULT 'default',
    payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 3 CONSTRAINT outbox_jobs_max_attempts_check CHECK (max_attempts >= 1),
    idempotency_key text COLLATE "C",
    schema_hash text NOT NULL,
    created_at timestamptz NOT NULL,
    -- The sequence the job runs in, its place in it (from one database sequence, writers of a sequence serialized
    -- by an advisory lock), its failure policy, and whether something earlier in it holds it back.
    sequence_key text COLLATE "C",
    sequence_no bigint,
    sequence_hold smallint NOT NULL DEFAULT 1,
    waiting boolean NOT NULL DEFAULT false,
    -- A job later jobs of its sequence were enqueued behind no longer takes duplicates of its key: they go to the
    -- sequence's tail (a duplicate never reorders intents).
    superseded boolean NOT NULL DEFAULT false,
    -- Due later (a delay, a retry's backoff, a snooze): off the ready index until a claim finds it due and lets it
    -- in (`store/claim.rs`).
    scheduled boolean NOT NULL DEFAULT false,
    run_at timestamptz NOT NULL,
    last_error text,
    output jsonb,
    attempts integer NOT NULL DEFAULT 0,
    runs integer NOT NULL DEFAULT 0,
    locked_by text,
    locked_at timestamptz,
    claimed_at timestamptz,
    status text COLLATE "C" NOT NULL DEFAULT 'pending' CONSTRAINT outbox_jobs_status_check
        CHECK (status IN ('pending', 'claimed', 'completed', 'failed', 'cancelled')),
    completed_at timestamptz,
    lease_expires_at timestamptz,
    updated_at timestamptz NOT NULL,
    -- Flipped by the worker's claim and completion statements, which record their jobs in one feed row of their
    -- own: the transition trigger records only changes that leave it as it was.
    event_flip boolean NOT NULL DEFAULT false,
    -- The key an active job holds, which the unique index of keys reads: an unkeyed job's stays NULL and a keyed
    -- job's stays its key from enqueue to claim, so neither update changes what the index reads.
    active_key text COLLATE "C"
        GENERATED ALWAYS AS (CASE WHEN status IN ('pending', 'claimed') AND NOT superseded THEN idempotency_key END) STORED,
    -- Pending or claimed, neither waiting in its sequence nor due later: in the ready index until it finishes, a
    -- claim reading past the claimed ones by their status.
    open boolean GENERATED ALWAYS AS (status IN ('pending', 'claimed') AND NOT waiting AND NOT scheduled) STORED,
    -- A scheduled job's run time, which the claim's promotion reads.
    due_at timestamptz GENERATED ALWAYS AS (CASE WHEN status = 'pending' AND scheduled THEN run_at END) STORED,
    -- A finished job's last change (retention and the readers of recent work, through `outbox_finished`).
    finished_at timestamptz
        GENERATED ALWAYS AS (CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN updated_at END) STORED,
    -- Whether a job of a sequence holds back the later ones (true, or NULL).
    blocks boolean GENERATED ALWAYS AS (CASE WHEN sequence_key IS NOT NULL AND (status IN ('pending', 'claimed')
        OR (status IN ('failed', 'cancelled') AND sequence_hold = 1)) THEN true END) STORED,
    -- The job's key for its kind's per-key rate, pauses and fair share, and its cost under a rate (NULL: 1).
    -- Neither changes after enqueue, so claims and completions still update rows in place.
    flow_key text COLLATE "C",
    cost integer CONSTRAINT outbox_jobs_cost_check CHECK (cost >= 0),
    -- The domain row the job is about (`order:42`), and the trace context of the code that enqueued it (a W3C
    -- `traceparent`, then a space and the `tracestate` when there is one). Neither changes after enqueue either.
    subject text COLLATE "C",
    trace text,
    -- Workflows: the step's workflow and name, how many of its parents are still to finish, what a parent that fails
    -- for good or is cancelled does to it (0 cancels it, 1 lets it run, 2 runs it on the first such parent and
    -- cancels it once every parent completed), and whether it has children (the workflow triggers fire for no other
    -- job). A step waits (`waiting`) while a parent is left. Only `workflow_id` is indexed, and it never changes.
    workflow_id text COLLATE "C",
    step text,
    parents_left integer NOT NULL DEFAULT 0,
    on_parent_failure smallint NOT NULL DEFAULT 0,
    has_children boolean NOT NULL DEFAULT false
) WITH (fillfactor = 40);
CREATE SEQUENCE outbox_jobs_sequence_no;

-- One index of ready jobs, led by the queue: a worker of every queue reads it once per queue that holds ready
-- jobs, which it lists every second through a walk that visits one entry per queue (`store/claim.rs`). Jobs of
-- kinds a worker does not serve are never read by its claims.
CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, kind, priority DESC, run_at, id) WHERE open;
CREATE INDEX outbox_jobs_scheduled ON outbox_jobs (due_at) WHERE due_at IS NOT NULL;
-- The ready jobs of a keyed kind, key by key: a claim walks the keys that have some and reads each one's head.
CREATE INDEX outbox_jobs_flow_keys ON outbox_jobs (kind, flow_key, priority DESC, run_at, id)
    WHERE open AND flow_key IS NOT NULL;
-- The jobs of one subject, newest first.
CREATE INDEX outbox_jobs_subject ON outbox_jobs (subject, id) WHERE subject IS NOT NULL;
-- The steps of one workflow.
CREATE INDEX outbox_jobs_workflow ON outbox_jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;
CREATE UNIQUE INDEX outbox_jobs_active_key ON outbox_jobs (kind, active_key) WHERE active_key IS NOT NULL;
CREATE INDEX outbox_jobs_sequence ON outbox_jobs (sequence_key, sequence_no) WHERE sequence_key IS NOT NULL;
CREATE INDEX outbox_jobs_sequence_blocking ON outbox_jobs (sequence_key, sequence_no) WHERE blocks;

-- One notification per inserting statement, delivered at commit (identical ones of a transaction fold into one):
-- every writer wakes the workers. The payload is the schema, so workers of other schemas ignore it.
CREATE FUNCTION outbox_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_notify AFTER INSERT ON outbox_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_notify();

-- A sequenced job takes its place under the sequence's transaction-scoped advisory lock: two transactions
-- enqueuing onto one sequence commit in the order of their places in it. Under `READ COMMITTED` the read of what
-- holds the sequence back takes a snapshot of its own, after the lock. A transaction that reads one snapshot
-- throughout (`REPEATABLE READ`, `SERIALIZABLE`) cannot see a job committed after it began, so its job goes in
-- waiting whatever it sees, and at its commit asks the workers, on the wake-up channel (`<schema>`, the record
-- separator, `<sequence key>`), to let the sequence's first job go once nothing of it runs or is free to run
-- (`wake.rs`); the rescuers' sweep does it otherwise (`store/rescue.rs`).
CREATE FUNCTION outbox_jobs_sequence_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || NEW.sequence_key, 0));
    NEW.sequence_no := nextval('outbox_jobs_sequence_no');
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        NEW.waiting := true;
        -- A notification's payload stays under 8,000 bytes; a longer key (written by hand: the library's keys
        -- stop at 512 bytes) is left to the sweep.
        IF octet_length(NEW.sequence_key) <= 7000 THEN
            PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA || chr(30) || NEW.sequence_key);
        END IF;
    ELSE
        NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key AND b.blocks);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_jobs_sequence_insert BEFORE INSERT ON outbox_jobs
    FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL) EXECUTE FUNCTION outbox_jobs_sequence_insert();

-- A job that stops blocking its sequence, or is deleted while blocking, notes the sequence in the transaction's
-- `outbox.sequences` setting (separated by the record separator)...
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

-- ...and once per statement, for every noted sequence whose lock is free, the first job goes when it waits, and
-- the workers are woken when any went. A sequence an enqueuing transaction holds is not waited for (a slow
-- application transaction would stall the worker's completions): the workers' sweep lets its next job go once that
-- transaction has ended. The lookups are planned once per transaction where the session would plan them afresh
-- (`force_custom_plan`).
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
        WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = s.k AND h.blocks
            ORDER BY h.sequence_no LIMIT 1)
        AND w.status = 'pending' AND w.waiting AND w.parents_left = 0;
    GET DIAGNOSTICS released = ROW_COUNT;
    IF released > 0 THEN PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_sequence_next AFTER UPDATE OR DELETE ON outbox_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_sequence_next();

-- A finished job put back to pending rejoins its sequence behind whatever blocks it, and behind a later job that
-- is running or free to run: it waits, and goes at once when it is the first of its sequence still to run and none
-- runs or is free to run (the workers are woken). It runs after the row is written: a BEFORE UPDATE row trigger
-- makes PostgreSQL lock every row any update of the table changes before changing it, one WAL record each. When
-- one statement puts back several jobs of a sequence, each finds the others pending: the last one's trigger lets
-- the first go.
CREATE FUNCTION outbox_jobs_sequence_rejoined() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || NEW.sequence_key, 0));
    UPDATE outbox_jobs SET waiting = true WHERE id = NEW.id AND status = 'pending' AND NOT waiting;
    UPDATE outbox_jobs w SET waiting = false
        WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = NEW.sequence_key AND h.blocks
            ORDER BY h.sequence_no LIMIT 1)
        AND w.status = 'pending' AND w.waiting AND w.parents_left = 0
        AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = NEW.sequence_key
            AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting)));
    IF FOUND THEN PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_sequence_rejoin AFTER UPDATE OF status ON outbox_jobs
    FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL AND NEW.status = 'pending'
        AND OLD.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION outbox_jobs_sequence_rejoined();

-- The history of every job and the event feed (see `storage/events.rs`). Identity values are handed out before
-- commit, so each event also records its transaction id, and the feed reads in (transaction, id) order only events
-- of transactions older than every one still running. A worker's feed row lists up to a claim's worth of jobs: up
-- to one 8 kB page it stays inline and uncompressed.
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

-- One `enqueued` row per inserting statement. A statement of many jobs lists them in one row, as a worker's claim
-- does (`job_id` empty, the jobs in `jobs` as `[id, kind, queue, attempt]` arrays); a statement of one job keeps a
-- row of its own. A job's history shows its enqueue from the job row when no row of its own records it.
CREATE FUNCTION outbox_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, jobs)
    SELECT CASE WHEN count(*) = 1 THEN min(id) ELSE '' END, CASE WHEN count(*) = 1 THEN min(kind) ELSE '' END,
        CASE WHEN count(*) = 1 THEN min(queue) ELSE '' END, min(created_at), 'enqueued',
        CASE WHEN count(*) = 1 THEN min(attempts) ELSE 0 END,
        CASE WHEN count(*) > 1 THEN json_agg(json_build_array(id, kind, queue, attempts) ORDER BY id) END
    FROM inserted HAVING count(*) > 0;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_enqueued AFTER INSERT ON outbox_jobs REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_enqueued();

-- A finished job deleted (retention, `purge`) takes its history with it. A job of a kind that keeps nothing is
-- deleted by the statement that completes it, while still claimed: its events stay for the feed's readers (a
-- reader resuming from `Last-Event-ID` must not miss them), and retention prunes them with the feed.
CREATE FUNCTION outbox_jobs_purged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM outbox_job_events WHERE job_id = OLD.id;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_purged AFTER DELETE ON outbox_jobs FOR EACH ROW WHEN (OLD.status <> 'claimed')
    EXECUTE FUNCTION outbox_jobs_purged();

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

-- Leases are found through the claims, not through an index of the jobs (which would name their status and keep
-- claims from updating rows in place). A claim records its jobs and their lease in one row (`store/claim.rs`),
-- which the worker's writer deletes in the statement that writes the outcome of the claim's last job
-- (`store/complete.rs`). The job row stays what a lease is: a job is claimed until `lease_expires_at`, renewals
-- move that alone, and every claimed job is listed by a claim whose `lease_expires_at` is at or before its own.
-- Rescuers read the claims whose lease ran out, put back those of their jobs whose own lease ran out too, and then
-- delete each such claim or move it on to the earliest lease among its jobs still running.
CREATE TABLE outbox_claims (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker text NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    jobs text[] NOT NULL
);
CREATE INDEX outbox_claims_lease ON outbox_claims (lease_expires_at);

-- Any other writer that claims a job (hand-written SQL, a build's tests), or shortens a claimed job's lease, lists
-- the job in a claim of its own, so that what the rescuers find stays what the jobs' own leases say. The worker's
-- claim statements flip `event_flip` and record their claims themselves; renewals only lengthen leases.
CREATE FUNCTION outbox_jobs_claimed_elsewhere() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_claims (worker, lease_expires_at, jobs)
    VALUES (COALESCE(NEW.locked_by, ''), COALESCE(NEW.lease_expires_at, TIMESTAMPTZ 'epoch'), ARRAY[NEW.id]);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_claimed_elsewhere AFTER UPDATE OF status, lease_expires_at ON outbox_jobs
    FOR EACH ROW WHEN (NEW.status = 'claimed' AND ((OLD.status <> 'claimed' AND OLD.event_flip = NEW.event_flip)
        OR NEW.lease_expires_at < OLD.lease_expires_at))
    EXECUTE FUNCTION outbox_jobs_claimed_elsewhere();
CREATE TRIGGER outbox_jobs_inserted_claimed AFTER INSERT ON outbox_jobs
    FOR EACH ROW WHEN (NEW.status = 'claimed') EXECUTE FUNCTION outbox_jobs_claimed_elsewhere();

-- Finished jobs are found through a log of when they finished, not through an index of the jobs. A worker's
-- completion statement writes one row listing the jobs it completed (`store/complete.rs`), as its feed row does. A
-- row lists jobs that finished, or last changed while finished, at `at` (or, listed again by retention, earlier):
-- every job whose status is finished is listed by a row whose `at` is at or after its `finished_at`. Retention
-- (`retention.rs`) reads the rows older than its latest cutoff, oldest first, deletes each row and the jobs it lists
-- that are due, and lists the ones it keeps again in a new row, so that a job kept longer is looked at once per
-- age, not at every pass. The readers of recent work read the rows since their window opened.
CREATE TABLE outbox_finished (
    at timestamptz NOT NULL,
    jobs text[] NOT NULL
);
CREATE INDEX outbox_finished_at ON outbox_finished (at);

-- Every other writer that finishes a job, or changes a finished job's time (a single outcome, a failed attempt, a
-- rescue, a cancellation, hand-written SQL), lists it in a row of its own. The worker's completion statements flip
-- `event_flip` and list their completions themselves.
CREATE FUNCTION outbox_jobs_finished_elsewhere() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_finished (at, jobs) VALUES (NEW.finished_at, ARRAY[NEW.id]);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_finished_elsewhere AFTER UPDATE OF status, updated_at ON outbox_jobs
    FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL AND NEW.finished_at IS DISTINCT FROM OLD.finished_at
        AND OLD.event_flip = NEW.event_flip)
    EXECUTE FUNCTION outbox_jobs_finished_elsewhere();
CREATE TRIGGER outbox_jobs_inserted_finished AFTER INSERT ON outbox_jobs
    FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL) EXECUTE FUNCTION outbox_jobs_finished_elsewhere();

-- The archive: completed jobs of kinds kept in time partitions (`Retention::kind_in_partitions`) leave `outbox_jobs`
-- in the statement that completes them and land here, in partitions by time of completion (the key is
-- `updated_at`, which equals `completed_at` here, so the readers' "finished since" conditions skip old partitions)
-- that retention makes ahead and drops whole once every job in them is older than the completed jobs' age. Rows
-- whose time no partition covers go to the default partition, which retention prunes row by row. The columns are
-- the jobs table's, less its feed flag and its generated columns; an archived job is always `completed`.
CREATE TABLE outbox_jobs_done (
    id text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    queue text COLLATE "C" NOT NULL,
    payload jsonb NOT NULL,
    priority integer NOT NULL,
    max_attempts integer NOT NULL,
    idempotency_key text COLLATE "C",
    schema_hash text NOT NULL,
    created_at timestamptz NOT NULL,
    sequence_key text COLLATE "C",
    sequence_no bigint,
    sequence_hold smallint NOT NULL,
    waiting boolean NOT NULL,
    superseded boolean NOT NULL,
    scheduled boolean NOT NULL,
    run_at timestamptz NOT NULL,
    last_error text,
    output jsonb,
    attempts integer NOT NULL,
    runs integer NOT NULL,
    locked_by text,
    locked_at timestamptz,
    claimed_at timestamptz,
    status text COLLATE "C" NOT NULL CHECK (status = 'completed'),
    completed_at timestamptz NOT NULL,
    lease_expires_at timestamptz,
    updated_at timestamptz NOT NULL
) PARTITION BY RANGE (updated_at);
CREATE TABLE outbox_jobs_done_default PARTITION OF outbox_jobs_done DEFAULT;
-- Found by id (`get`, `wait`, listings); ids are unique across both tables because a job is in one at a time.
CREATE INDEX outbox_jobs_done_id ON outbox_jobs_done (id);
-- An archived job deleted by hand (`delete`, `purge`) takes its history with it. A partition dropped whole fires no
-- trigger: its jobs' history goes with the feed rows that recorded their completions, which retention prunes by the
-- feed's age.
CREATE TRIGGER outbox_jobs_done_purged AFTER DELETE ON outbox_jobs_done
    FOR EACH ROW EXECUTE FUNCTION outbox_jobs_purged();
-- What readers name: the same on both engines (on SQLite the union of the archive's tables).
CREATE VIEW outbox_jobs_archive AS SELECT * FROM outbox_jobs_done;

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
    concurrency bigint,
    -- Flow control: the rate (`50/1m burst 5`), the templates of the per-key rate's and fair share's key, the cost.
    rate text,
    rate_key text,
    fair text,
    cost text,
    -- The template of its jobs' subjects (`order:{orderId}`).
    subject text
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

-- Pauses and holds: work of a queue, a kind, or one key of a kind that no claim takes. A pause lasts until resumed
-- (`ends_at` NULL); a hold (a handler's "rate limited until") ends by itself. An empty key is the whole kind.
CREATE TABLE outbox_pauses (
    scope text COLLATE "C" NOT NULL CONSTRAINT outbox_pauses_scope_check CHECK (scope IN ('queue', 'kind')),
    name text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL DEFAULT '',
    ends_at timestamptz,
    reason text,
    paused_at timestamptz NOT NULL,
    PRIMARY KEY (scope, name, key)
);

-- A pause or hold ended by an operator wakes the workers of the schema, as an enqueue does.
CREATE TRIGGER outbox_pauses_resumed AFTER DELETE ON outbox_pauses
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_notify();

-- Rate limits by name (a kind's name, or any name code shares a budget under): the rate, and a token bucket per key
-- (an empty key: the name's own). `level` units at `at` (ms); it refills at amount / window_ms up to burst.
CREATE TABLE outbox_rates (
    name text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL DEFAULT '',
    amount bigint NOT NULL CONSTRAINT outbox_rates_amount_check CHECK (amount > 0),
    window_ms bigint NOT NULL CONSTRAINT outbox_rates_window_ms_check CHECK (window_ms > 0),
    burst bigint NOT NULL CONSTRAINT outbox_rates_burst_check CHECK (burst > 0),
    level double precision NOT NULL,
    at bigint NOT NULL,
    PRIMARY KEY (name, key)
);

-- Fair share by kind: each key's weight and pass (the virtual time of its next claim); the empty key holds the
-- kind's clock, the pass of the last job taken.
CREATE TABLE outbox_fair (
    name text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    weight integer NOT NULL DEFAULT 1 CONSTRAINT outbox_fair_weight_check CHECK (weight > 0),
    pass double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (name, key)
);

-- Workflows and batches by name.
CREATE TABLE outbox_workflows (
    id text COLLATE "C" PRIMARY KEY,
    name text NOT NULL,
    created_at timestamptz NOT NULL
);

-- The edges: `child_id` waits for `parent_id`, which it knows as `parent_step`. `done` once the parent's outcome
-- was counted (a completion; a failure or cancellation the child goes on after).
CREATE TABLE outbox_job_deps (
    parent_id text COLLATE "C" NOT NULL,
    child_id text COLLATE "C" NOT NULL,
    parent_step text NOT NULL,
    done boolean NOT NULL DEFAULT false,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX outbox_job_deps_child ON outbox_job_deps (child_id, parent_id);

-- A parent finished: each child counts it. A completion counts for every child but a first-failure one, which it
-- cancels once every parent completed; a failure or cancellation counts for the children that go on, lets a
-- first-failure child go, and cancels the other children that wait and the steps below them. A
-- child that counted its last parent goes, recorded as its `ready` event: at once without a sequence (the workers
-- are woken), through its sequence's head with one (noted for `outbox_jobs_sequence_next`, which runs at the end of
-- the statement). A parent of a kind that keeps nothing (or keeps in the archive) leaves in the statement that
-- completes it, still claimed: that counts as a completion. A parent deleted otherwise is not counted: its children
-- wait until the workflow is cancelled.
CREATE FUNCTION outbox_jobs_workflow_done() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE parent text; outcome text; at timestamptz; noted text; released boolean;
BEGIN
    IF TG_OP = 'DELETE' THEN
        parent := OLD.id; outcome := 'completed'; at := OLD.updated_at;
    ELSE
        parent := NEW.id; outcome := NEW.status; at := NEW.updated_at;
    END IF;
    WITH counted AS (
        UPDATE outbox_jobs c SET
            parents_left = CASE WHEN c.on_parent_failure = 2 AND outcome <> 'completed' THEN 0
                ELSE c.parents_left - 1 END,
            waiting = CASE WHEN c.sequence_key IS NULL AND c.status = 'pending'
                AND ((c.parents_left = 1 AND c.on_parent_failure <> 2)
                    OR (c.on_parent_failure = 2 AND outcome <> 'completed')) THEN false ELSE c.waiting END,
            -- Ready from its release: it sorts among the ready jobs by when it became ready, as a job enqueued then
            -- would (a claim reading on from where the last one ended finds it).
            run_at = CASE WHEN c.status = 'pending' AND ((c.parents_left = 1 AND c.on_parent_failure <> 2)
                    OR (c.on_parent_failure = 2 AND outcome <> 'completed')) THEN GREATEST(c.run_at, at)
                ELSE c.run_at END,
            status = CASE WHEN c.on_parent_failure = 2 AND outcome = 'completed' AND c.parents_left = 1
                THEN 'cancelled' ELSE c.status END,
            last_error = CASE WHEN c.on_parent_failure = 2 AND outcome = 'completed' AND c.parents_left = 1
                THEN 'not run: every parent completed' ELSE c.last_error END,
            updated_at = CASE WHEN c.on_parent_failure = 2 AND outcome = 'completed' AND c.parents_left = 1
                THEN at ELSE c.updated_at END
        FROM outbox_job_deps d
        WHERE d.parent_id = parent AND NOT d.done AND c.id = d.child_id AND c.parents_left > 0
            AND (outcome = 'completed' OR c.on_parent_failure <> 0)
            AND (c.on_parent_failure <> 2 OR c.status = 'pending')
        RETURNING c.id, c.kind, c.queue, c.sequence_key, c.parents_left, c.status, c.waiting)
    , ready AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
        SELECT id, kind, queue, at, 'ready', 0 FROM counted WHERE parents_left = 0 AND status = 'pending')
    SELECT string_agg(sequence_key || chr(30), '')
            FILTER (WHERE sequence_key IS NOT NULL AND parents_left = 0 AND status = 'pending'),
        bool_or(parents_left = 0 AND status = 'pending' AND NOT waiting)
        INTO noted, released FROM counted;
    UPDATE outbox_job_deps d SET done = true FROM outbox_jobs c
        WHERE d.parent_id = parent AND NOT d.done AND c.id = d.child_id
            AND (outcome = 'completed' OR c.on_parent_failure <> 0);
    -- The children that cannot run without this parent, and every step below them that cannot either, in one
    -- statement (their own triggers, one level down, count them for their children that run anyway and find the
    -- rest cancelled: the nesting stays two deep whatever the graph's depth). Their edges stay, for a retry.
    IF outcome <> 'completed' THEN
        UPDATE outbox_jobs c SET status = 'cancelled', updated_at = at,
            last_error = 'cancelled: parent ' || parent || ' ' || outcome
        WHERE c.id IN (WITH RECURSIVE doomed(id) AS (
                SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs k ON k.id = d.child_id
                    WHERE d.parent_id = parent AND NOT d.done AND k.on_parent_failure = 0 AND k.status = 'pending'
                        AND k.parents_left > 0
                UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                    JOIN outbox_jobs k ON k.id = d.child_id
                    WHERE NOT d.done AND k.on_parent_failure = 0 AND k.status = 'pending' AND k.parents_left > 0)
            SELECT id FROM doomed);
    END IF;
    IF noted IS NOT NULL THEN
        PERFORM set_config('outbox.sequences', COALESCE(current_setting('outbox.sequences', true), '') || noted, true);
    END IF;
    IF released THEN PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA); END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_workflow_done AFTER UPDATE OF status ON outbox_jobs
    FOR EACH ROW WHEN (NEW.has_children AND OLD.status <> NEW.status
        AND NEW.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION outbox_jobs_workflow_done();
CREATE TRIGGER outbox_jobs_workflow_gone AFTER DELETE ON outbox_jobs
    FOR EACH ROW WHEN (OLD.has_children AND OLD.status = 'claimed')
    EXECUTE FUNCTION outbox_jobs_workflow_done();

-- An operator's retry of a parent that failed or was cancelled brings back the steps its failure cancelled, which
-- wait for it again (their edges to it were left as they were), and the steps below them, in one statement; not a
-- step another parent that failed or was cancelled still holds (its retry brings the step back).
CREATE FUNCTION outbox_jobs_workflow_retried() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE outbox_jobs c SET status = 'pending', waiting = true, last_error = NULL, attempts = 0,
        updated_at = NEW.updated_at
    WHERE c.id IN (WITH RECURSIVE revived(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs k ON k.id = d.child_id
                WHERE d.parent_id = NEW.id AND NOT d.done AND k.status = 'cancelled'
                    AND k.last_error LIKE 'cancelled: parent %'
                        AND NOT EXISTS (SELECT 1 FROM outbox_job_deps o JOIN outbox_jobs q ON q.id = o.parent_id
                            WHERE o.child_id = k.id AND NOT o.done AND o.parent_id <> d.parent_id
                                AND q.status IN ('failed', 'cancelled'))
            UNION SELECT d.child_id FROM revived JOIN outbox_job_deps d ON d.parent_id = revived.id
                JOIN outbox_jobs k ON k.id = d.child_id
                WHERE NOT d.done AND k.status = 'cancelled' AND k.last_error LIKE 'cancelled: parent %'
                        AND NOT EXISTS (SELECT 1 FROM outbox_job_deps o JOIN outbox_jobs q ON q.id = o.parent_id
                            WHERE o.child_id = k.id AND NOT o.done AND o.parent_id <> d.parent_id
                                AND q.status IN ('failed', 'cancelled')))
        SELECT id FROM revived);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_workflow_retried AFTER UPDATE OF status ON outbox_jobs
    FOR EACH ROW WHEN (NEW.has_children AND NEW.status = 'pending' AND OLD.status IN ('failed', 'cancelled'))
    EXECUTE FUNCTION outbox_jobs_workflow_retried();

-- A step deleted takes its edges to its parents with it.
CREATE FUNCTION outbox_jobs_workflow_purged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM outbox_job_deps WHERE child_id = OLD.id;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_workflow_purged AFTER DELETE ON outbox_jobs
    FOR EACH ROW WHEN (OLD.workflow_id IS NOT NULL) EXECUTE FUNCTION outbox_jobs_workflow_purged();
