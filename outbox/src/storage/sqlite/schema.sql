-- The outbox schema on SQLite, whole: what the migrations (`migrations/`) make of an empty database, held equal to
-- them by a test (`schema_file_is_what_the_migrations_make`). Times are integer milliseconds since the Unix
-- epoch, JSON is text. "Blocking" below means: a job that holds back the later jobs of its sequence, because
-- it has not run yet, is running, or failed for good or was cancelled under the hold policy
-- (`sequence_hold` 1; 0 is the continue policy, 2 a hold an operator released).

-- Jobs. STRICT: the database refuses a value of the wrong type from any writer (a BLOB payload, text in
-- `attempts`); JSON columns are `ANY` so a number stays a number, and must hold text. Attempt counts are
-- bounded so a claim's `attempts + 1` cannot overflow.
CREATE TABLE outbox_jobs (
    id TEXT PRIMARY KEY NOT NULL,
    kind TEXT NOT NULL,
    queue TEXT NOT NULL DEFAULT 'default',
    payload ANY NOT NULL,
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
    output ANY,
    created_at INTEGER NOT NULL,
    claimed_at INTEGER,
    completed_at INTEGER,
    updated_at INTEGER NOT NULL,
    -- The sequence the job runs in, its place in it (taken at insert, in commit order: one writer at a
    -- time), and whether something earlier in it holds it back. Waiting jobs are left out of the claim
    -- indexes, so a claim never reads them; the triggers below keep `waiting` right for every writer.
    sequence_key TEXT,
    sequence_no INTEGER,
    waiting INTEGER NOT NULL DEFAULT 0,
    sequence_hold INTEGER NOT NULL DEFAULT 1,
    -- Flipped by the worker's claim and completion statements, which record their jobs in one feed row of
    -- their own: the transition trigger records only changes that leave it as it was.
    event_flip INTEGER NOT NULL DEFAULT 0,
    -- Due later (a delay, a retry's backoff, a snooze): off the ready indexes, in an index of its own until a
    -- claim finds it due and lets it in (`store/claim.rs`).
    scheduled INTEGER NOT NULL DEFAULT 0,
    -- A job later jobs of its sequence were enqueued behind no longer takes duplicates of its key: they go to the
    -- sequence's tail (a duplicate never reorders intents).
    superseded INTEGER NOT NULL DEFAULT 0,
    -- The job's key for its kind's per-key rate, pauses and fair share, and its cost under a rate (NULL: 1).
    flow_key TEXT,
    cost INTEGER CHECK (cost IS NULL OR cost >= 0),
    -- The domain row the job is about (`order:42`), and the trace context of the code that enqueued it (a W3C
    -- `traceparent`, then a space and the `tracestate` when there is one).
    subject TEXT,
    trace TEXT,
    -- Workflows: the step's workflow and name, how many of its parents are still to finish, what a parent that
    -- fails for good or is cancelled does to it (0 cancels it, 1 lets it run, 2 runs it on the first such parent
    -- and cancels it once every parent completed), and whether it has children (the workflow triggers fire for
    -- no other job). A step waits (`waiting` 1) while a parent is left.
    workflow_id TEXT,
    step TEXT,
    parents_left INTEGER NOT NULL DEFAULT 0,
    on_parent_failure INTEGER NOT NULL DEFAULT 0,
    has_children INTEGER NOT NULL DEFAULT 0,
    CHECK (typeof(payload) = 'text'),
    CHECK (output IS NULL OR typeof(output) = 'text'),
    CHECK (attempts BETWEEN 0 AND 1000000000 AND runs BETWEEN 0 AND 1000000000)
) STRICT;

-- Claims read due jobs in (priority, run_at, id) order straight off these, restricted workers by queue. They lead
-- with the kind, so jobs of kinds a worker does not serve are never read by its claims.
CREATE INDEX outbox_jobs_ready ON outbox_jobs (kind, priority DESC, run_at, id)
    WHERE status = 'pending' AND waiting = 0 AND scheduled = 0;
CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, kind, priority DESC, run_at, id)
    WHERE status = 'pending' AND waiting = 0 AND scheduled = 0;
CREATE INDEX outbox_jobs_scheduled ON outbox_jobs (run_at) WHERE status = 'pending' AND scheduled = 1;
-- The ready jobs of a keyed kind, key by key: a claim walks the keys that have some and reads each one's head.
CREATE INDEX outbox_jobs_flow_keys ON outbox_jobs (kind, flow_key, priority DESC, run_at, id)
    WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND flow_key IS NOT NULL;
-- The jobs of one subject, newest first.
CREATE INDEX outbox_jobs_subject ON outbox_jobs (subject, id) WHERE subject IS NOT NULL;
-- The steps of one workflow.
CREATE INDEX outbox_jobs_workflow ON outbox_jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;
CREATE UNIQUE INDEX outbox_jobs_active_key ON outbox_jobs (kind, idempotency_key)
    WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL AND superseded = 0;
CREATE INDEX outbox_jobs_lease ON outbox_jobs (lease_expires_at) WHERE status = 'claimed';
CREATE INDEX outbox_jobs_finished
    ON outbox_jobs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX outbox_jobs_sequence
    ON outbox_jobs (sequence_key, sequence_no) WHERE sequence_key IS NOT NULL;
CREATE INDEX outbox_jobs_sequence_blocking ON outbox_jobs (sequence_key, sequence_no)
    WHERE sequence_key IS NOT NULL AND (outbox_jobs.status IN ('pending', 'claimed')
        OR (outbox_jobs.status IN ('failed', 'cancelled') AND outbox_jobs.sequence_hold = 1));

-- A job that stops blocking its sequence (completed, failed or cancelled under the continue policy,
-- released by an operator) or is deleted while blocking lets the first blocking job of its sequence go.
CREATE TRIGGER outbox_jobs_sequence_next AFTER UPDATE OF status, sequence_hold ON outbox_jobs
    WHEN NEW.sequence_key IS NOT NULL
        AND (OLD.status IN ('pending', 'claimed') OR (OLD.status IN ('failed', 'cancelled') AND OLD.sequence_hold = 1))
        AND NOT (NEW.status IN ('pending', 'claimed') OR (NEW.status IN ('failed', 'cancelled') AND NEW.sequence_hold = 1))
BEGIN
    UPDATE outbox_jobs SET waiting = 0 WHERE id = (SELECT h.id FROM outbox_jobs h
        WHERE h.sequence_key = OLD.sequence_key
            AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
        ORDER BY h.sequence_no LIMIT 1) AND status = 'pending' AND waiting = 1 AND parents_left = 0;
END;
CREATE TRIGGER outbox_jobs_sequence_purged AFTER DELETE ON outbox_jobs
    WHEN OLD.sequence_key IS NOT NULL
        AND (OLD.status IN ('pending', 'claimed') OR (OLD.status IN ('failed', 'cancelled') AND OLD.sequence_hold = 1))
BEGIN
    UPDATE outbox_jobs SET waiting = 0 WHERE id = (SELECT h.id FROM outbox_jobs h
        WHERE h.sequence_key = OLD.sequence_key
            AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
        ORDER BY h.sequence_no LIMIT 1) AND status = 'pending' AND waiting = 1 AND parents_left = 0;
END;
-- A finished job put back to pending rejoins its sequence behind whatever blocks it, and behind a later job
-- that is running or free to run (a job retried after its sequence went on never runs beside another); a step
-- waits for its parents as well.
CREATE TRIGGER outbox_jobs_sequence_rejoin AFTER UPDATE OF status ON outbox_jobs
    WHEN NEW.sequence_key IS NOT NULL AND NEW.status = 'pending'
        AND OLD.status IN ('completed', 'failed', 'cancelled')
BEGIN
    UPDATE outbox_jobs SET waiting = parents_left > 0 OR EXISTS (SELECT 1 FROM outbox_jobs b
        WHERE b.sequence_key = NEW.sequence_key AND b.id <> NEW.id
            AND ((b.sequence_no < NEW.sequence_no
                    AND (b.status IN ('pending', 'claimed') OR (b.status IN ('failed', 'cancelled') AND b.sequence_hold = 1)))
                OR b.status = 'claimed' OR (b.status = 'pending' AND b.waiting = 0)))
    WHERE id = NEW.id;
END;

-- The history of every job and the event feed (see `storage/events.rs`). Ids come from AUTOINCREMENT, so
-- one is never handed out twice even after the newest events are purged; one writer at a time means they
-- grow in commit order. A worker's claim or completion statement writes one row for all its jobs (`job_id`
-- empty, the jobs in `jobs` as `[id, kind, queue, attempt]` arrays).
CREATE TABLE outbox_job_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT '',
    queue TEXT NOT NULL DEFAULT '',
    at INTEGER NOT NULL,
    event TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    worker TEXT,
    error TEXT,
    jobs TEXT,
    claimed_at INTEGER,
    completed_at INTEGER
) STRICT;
CREATE INDEX outbox_job_events_job ON outbox_job_events (job_id, id);

CREATE TRIGGER outbox_jobs_enqueued AFTER INSERT ON outbox_jobs BEGIN
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
    VALUES (NEW.id, NEW.kind, NEW.queue, NEW.created_at, 'enqueued', NEW.attempts);
END;
-- A finished job deleted (retention, `purge`) takes its history with it. A job of a kind that keeps nothing is
-- deleted by the statement that completes it, while still claimed: its events stay for the feed's readers (a
-- reader resuming from `Last-Event-ID` must not miss them), and retention prunes them with the feed.
CREATE TRIGGER outbox_jobs_purged AFTER DELETE ON outbox_jobs WHEN OLD.status <> 'claimed' BEGIN
    DELETE FROM outbox_job_events WHERE job_id = OLD.id;
END;
-- Every other transition, by any writer, named as `storage/events.rs` describes; the same text on PostgreSQL.
CREATE TRIGGER outbox_jobs_transition AFTER UPDATE OF status, attempts ON outbox_jobs
    WHEN (OLD.status <> NEW.status OR OLD.attempts <> NEW.attempts) AND OLD.event_flip = NEW.event_flip
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
END;

-- The kinds workers have registered, with their JSON Schemas, for tools without the Rust types.
CREATE TABLE outbox_kinds (
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
    updated_at INTEGER NOT NULL,
    sequence TEXT,
    on_sequence_failure TEXT NOT NULL DEFAULT 'hold',
    concurrency INTEGER,
    -- Flow control: the rate (`50/1m burst 5`), the templates of the per-key rate's and fair share's key, the cost.
    rate TEXT,
    rate_key TEXT,
    fair TEXT,
    cost TEXT,
    -- The template of its jobs' subjects (`order:{orderId}`).
    subject TEXT
);

-- The worker registry: one row per live worker, in this process or remote.
CREATE TABLE outbox_workers (
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
) STRICT;

-- Periodic schedules: the tick last enqueued, moved by compare-and-set so one process enqueues each tick.
CREATE TABLE outbox_schedules (
    name TEXT PRIMARY KEY NOT NULL,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    time_zone TEXT NOT NULL,
    missed TEXT NOT NULL,
    last_tick INTEGER,
    last_job_id TEXT,
    updated_at INTEGER NOT NULL
) STRICT;

-- Named leases of fleet-wide chores (retention runs in one process at a time).
CREATE TABLE outbox_locks (
    name TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

-- The latest report of each reconciler.
CREATE TABLE outbox_reconciliations (
    reconciler TEXT PRIMARY KEY NOT NULL,
    at INTEGER NOT NULL,
    worker TEXT,
    report TEXT NOT NULL
) STRICT;

-- The archive: completed jobs of kinds kept in time partitions (`Retention::kind_in_partitions`) leave
-- `outbox_jobs` in the statement that completes them and land in `outbox_jobs_done`. SQLite has no
-- partitions: retention renames that table once per span to `outbox_jobs_done_<from>_<to>` (milliseconds),
-- makes a new empty one, and drops a renamed table whole once every job in it is older than the completed jobs'
-- age. Readers name the view `outbox_jobs_archive`, which retention makes again over whichever tables exist.
-- The columns are the jobs table's, less its feed flag; an archived job is always `completed`.
CREATE TABLE outbox_jobs_done (
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    queue TEXT NOT NULL,
    payload ANY NOT NULL,
    priority INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    idempotency_key TEXT,
    schema_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    sequence_key TEXT,
    sequence_no INTEGER,
    sequence_hold INTEGER NOT NULL,
    waiting INTEGER NOT NULL,
    superseded INTEGER NOT NULL,
    scheduled INTEGER NOT NULL,
    run_at INTEGER NOT NULL,
    last_error TEXT,
    output ANY,
    attempts INTEGER NOT NULL,
    runs INTEGER NOT NULL,
    locked_by TEXT,
    locked_at INTEGER,
    claimed_at INTEGER,
    status TEXT NOT NULL CHECK (status = 'completed'),
    completed_at INTEGER NOT NULL,
    lease_expires_at INTEGER,
    updated_at INTEGER NOT NULL
) STRICT;
-- Names end in the time they were made, so the tables retention renames keep theirs and a new table can take
-- the same kind of name.
CREATE INDEX outbox_jobs_done_id_0 ON outbox_jobs_done (id);
CREATE TRIGGER outbox_jobs_done_purged_0 AFTER DELETE ON outbox_jobs_done BEGIN
    DELETE FROM outbox_job_events WHERE job_id = OLD.id;
END;
CREATE VIEW outbox_jobs_archive AS SELECT * FROM outbox_jobs_done;

-- Pauses and holds: work of a queue, a kind, or one key of a kind that no claim takes. A pause lasts until resumed
-- (`ends_at` NULL); a hold (a handler's "rate limited until") ends by itself. An empty key is the whole kind.
CREATE TABLE outbox_pauses (
    scope TEXT NOT NULL CHECK (scope IN ('queue', 'kind')),
    name TEXT NOT NULL,
    key TEXT NOT NULL DEFAULT '',
    ends_at INTEGER,
    reason TEXT,
    paused_at INTEGER NOT NULL,
    PRIMARY KEY (scope, name, key)
) STRICT;

-- Rate limits by name (a kind's name, or any name code shares a budget under): the rate, and a token bucket per key
-- (an empty key: the name's own). `level` units at `at` (ms); it refills at amount / window_ms up to burst.
CREATE TABLE outbox_rates (
    name TEXT NOT NULL,
    key TEXT NOT NULL DEFAULT '',
    amount INTEGER NOT NULL CHECK (amount > 0),
    window_ms INTEGER NOT NULL CHECK (window_ms > 0),
    burst INTEGER NOT NULL CHECK (burst > 0),
    level REAL NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (name, key)
) STRICT;

-- Fair share by kind: each key's weight and pass (the virtual time of its next claim); the empty key holds the
-- kind's clock, the pass of the last job taken.
CREATE TABLE outbox_fair (
    name TEXT NOT NULL,
    key TEXT NOT NULL,
    weight INTEGER NOT NULL DEFAULT 1 CHECK (weight > 0),
    pass REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (name, key)
) STRICT;

-- Workflows and batches by name.
CREATE TABLE outbox_workflows (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- The edges: `child_id` waits for `parent_id`, which it knows as `parent_step`. `done` once the parent's outcome
-- was counted (a completion; a failure or cancellation the child goes on after).
CREATE TABLE outbox_job_deps (
    parent_id TEXT NOT NULL,
    child_id TEXT NOT NULL,
    parent_step TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (parent_id, child_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX outbox_job_deps_child ON outbox_job_deps (child_id, parent_id);

-- A parent completed: each child counts it, and a child that counted its last goes (through its sequence's head
-- when it has a sequence: the rule of `outbox_jobs_sequence_next`), due from then on: it is ready from its release,
-- so it sorts among the ready jobs by when it became ready, as a job enqueued then would.
CREATE TRIGGER outbox_jobs_workflow_done AFTER UPDATE OF status ON outbox_jobs
    WHEN NEW.has_children = 1 AND OLD.status <> NEW.status AND NEW.status = 'completed'
BEGIN
    -- The event feed's `ready` for each child whose last parent this is.
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
    SELECT c.id, c.kind, c.queue, NEW.updated_at, 'ready', 0 FROM outbox_jobs c
    WHERE c.id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = NEW.id) AND c.on_parent_failure IN (0, 1) AND c.parents_left = 1 AND c.status = 'pending';
    UPDATE outbox_jobs SET parents_left = parents_left - 1
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = NEW.id) AND on_parent_failure IN (0, 1) AND parents_left > 0;
    -- A first-failure child that counted its last parent is not run: every parent completed.
    UPDATE outbox_jobs SET parents_left = parents_left - 1,
        status = CASE WHEN parents_left = 1 THEN 'cancelled' ELSE status END,
        last_error = CASE WHEN parents_left = 1 THEN 'not run: every parent completed' ELSE last_error END,
        updated_at = NEW.updated_at
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = NEW.id) AND on_parent_failure = 2 AND status = 'pending' AND parents_left > 0;
    UPDATE outbox_jobs SET waiting = 0, run_at = MAX(run_at, NEW.updated_at)
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = NEW.id) AND parents_left = 0 AND status = 'pending' AND waiting = 1 AND sequence_key IS NULL;
    UPDATE outbox_jobs SET waiting = 0 WHERE id IN (SELECT (SELECT h.id FROM outbox_jobs h
            WHERE h.sequence_key = c.sequence_key
                AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
            ORDER BY h.sequence_no LIMIT 1)
        FROM outbox_jobs c WHERE c.id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = NEW.id) AND c.sequence_key IS NOT NULL AND c.parents_left = 0)
        AND status = 'pending' AND waiting = 1 AND parents_left = 0;
    UPDATE outbox_job_deps SET done = 1 WHERE parent_id = NEW.id AND done = 0;
END;
-- A parent failed for good or was cancelled: the children that run anyway count it, a first-failure child goes, and
-- the children that cannot run without it are cancelled, with every step below them that is cancelled in turn
-- (`doomed`: SQLite fires no trigger from inside itself, so this one reaches down the graph, and counts the doomed
-- steps for their own children that run anyway).
CREATE TRIGGER outbox_jobs_workflow_failed AFTER UPDATE OF status ON outbox_jobs
    WHEN NEW.has_children = 1 AND OLD.status <> NEW.status AND NEW.status IN ('failed', 'cancelled')
BEGIN
    -- The event feed's `ready` for each child this lets go: one that runs anyway and counts its last parents here,
    -- or a first-failure child still waiting.
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
    SELECT c.id, c.kind, c.queue, NEW.updated_at, 'ready', 0 FROM outbox_jobs c
    WHERE c.id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT NEW.id UNION SELECT id FROM doomed)) AND c.status = 'pending' AND c.parents_left > 0
        AND (c.on_parent_failure = 2 OR (c.on_parent_failure = 1 AND c.parents_left = (SELECT COUNT(*)
            FROM outbox_job_deps d WHERE d.child_id = c.id AND d.done = 0 AND d.parent_id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT NEW.id UNION SELECT id FROM doomed))));
    UPDATE outbox_jobs SET parents_left = parents_left - (SELECT COUNT(*) FROM outbox_job_deps d
        WHERE d.child_id = outbox_jobs.id AND d.done = 0 AND d.parent_id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT NEW.id UNION SELECT id FROM doomed))
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT NEW.id UNION SELECT id FROM doomed)) AND on_parent_failure = 1 AND parents_left > 0;
    UPDATE outbox_jobs SET parents_left = 0
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT NEW.id UNION SELECT id FROM doomed)) AND on_parent_failure = 2 AND status = 'pending' AND parents_left > 0;
    UPDATE outbox_jobs SET waiting = 0, run_at = MAX(run_at, NEW.updated_at)
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT NEW.id UNION SELECT id FROM doomed)) AND parents_left = 0 AND status = 'pending' AND waiting = 1 AND sequence_key IS NULL;
    UPDATE outbox_jobs SET waiting = 0 WHERE id IN (SELECT (SELECT h.id FROM outbox_jobs h
            WHERE h.sequence_key = c.sequence_key
                AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
            ORDER BY h.sequence_no LIMIT 1)
        FROM outbox_jobs c WHERE c.id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT NEW.id UNION SELECT id FROM doomed)) AND c.sequence_key IS NOT NULL AND c.parents_left = 0)
        AND status = 'pending' AND waiting = 1 AND parents_left = 0;
    -- The edges counted are done; those of the children cancelled below stay, for a retry of the parent.
    UPDATE outbox_job_deps SET done = 1 WHERE done = 0 AND parent_id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT NEW.id UNION SELECT id FROM doomed)
        AND (SELECT c.on_parent_failure FROM outbox_jobs c WHERE c.id = outbox_job_deps.child_id) <> 0;
    UPDATE outbox_jobs SET status = 'cancelled', updated_at = NEW.updated_at,
        last_error = 'cancelled: parent ' || NEW.id || ' ' || NEW.status
    WHERE id IN (WITH RECURSIVE doomed(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0
                    AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0
            UNION SELECT d.child_id FROM doomed JOIN outbox_job_deps d ON d.parent_id = doomed.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.on_parent_failure = 0 AND c.status = 'pending' AND c.parents_left > 0)
        SELECT id FROM doomed);
END;
-- A parent a kind that keeps nothing (or keeps in the archive) completed leaves in the statement that completes it,
-- still claimed: its children count it as a completion. A parent deleted otherwise is not counted: its children wait
-- until the workflow is cancelled.
CREATE TRIGGER outbox_jobs_workflow_gone AFTER DELETE ON outbox_jobs
    WHEN OLD.has_children = 1 AND OLD.status = 'claimed'
BEGIN
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
    SELECT c.id, c.kind, c.queue, OLD.updated_at, 'ready', 0 FROM outbox_jobs c
    WHERE c.id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = OLD.id) AND c.on_parent_failure IN (0, 1) AND c.parents_left = 1 AND c.status = 'pending';
    UPDATE outbox_jobs SET parents_left = parents_left - 1
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = OLD.id) AND on_parent_failure IN (0, 1) AND parents_left > 0;
    UPDATE outbox_jobs SET parents_left = parents_left - 1,
        status = CASE WHEN parents_left = 1 THEN 'cancelled' ELSE status END,
        last_error = CASE WHEN parents_left = 1 THEN 'not run: every parent completed' ELSE last_error END,
        updated_at = OLD.updated_at
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = OLD.id) AND on_parent_failure = 2 AND status = 'pending' AND parents_left > 0;
    UPDATE outbox_jobs SET waiting = 0, run_at = MAX(run_at, OLD.updated_at)
    WHERE id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = OLD.id) AND parents_left = 0 AND status = 'pending' AND waiting = 1 AND sequence_key IS NULL;
    UPDATE outbox_jobs SET waiting = 0 WHERE id IN (SELECT (SELECT h.id FROM outbox_jobs h
            WHERE h.sequence_key = c.sequence_key
                AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
            ORDER BY h.sequence_no LIMIT 1)
        FROM outbox_jobs c WHERE c.id IN (SELECT d.child_id FROM outbox_job_deps d WHERE d.done = 0 AND d.parent_id = OLD.id) AND c.sequence_key IS NOT NULL AND c.parents_left = 0)
        AND status = 'pending' AND waiting = 1 AND parents_left = 0;
    UPDATE outbox_job_deps SET done = 1 WHERE parent_id = OLD.id AND done = 0;
END;
-- An operator's retry of a parent that failed or was cancelled brings back the steps its failure cancelled, which
-- wait for it again (their edges to it were left as they were), and the steps below them; not a step another parent
-- that failed or was cancelled still holds (its retry brings the step back).
CREATE TRIGGER outbox_jobs_workflow_retried AFTER UPDATE OF status ON outbox_jobs
    WHEN NEW.has_children = 1 AND NEW.status = 'pending' AND OLD.status IN ('failed', 'cancelled')
BEGIN
    UPDATE outbox_jobs SET status = 'pending', waiting = 1, last_error = NULL, attempts = 0, updated_at = NEW.updated_at
    WHERE id IN (WITH RECURSIVE revived(id) AS (
            SELECT d.child_id FROM outbox_job_deps d JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.parent_id = NEW.id AND d.done = 0 AND c.status = 'cancelled'
                    AND c.last_error LIKE 'cancelled: parent %' AND NOT EXISTS (SELECT 1 FROM outbox_job_deps o
                        JOIN outbox_jobs q ON q.id = o.parent_id
                        WHERE o.child_id = c.id AND o.done = 0 AND o.parent_id <> d.parent_id
                            AND q.status IN ('failed', 'cancelled'))
            UNION SELECT d.child_id FROM revived JOIN outbox_job_deps d ON d.parent_id = revived.id
                JOIN outbox_jobs c ON c.id = d.child_id
                WHERE d.done = 0 AND c.status = 'cancelled' AND c.last_error LIKE 'cancelled: parent %' AND NOT EXISTS (SELECT 1 FROM outbox_job_deps o
                        JOIN outbox_jobs q ON q.id = o.parent_id
                        WHERE o.child_id = c.id AND o.done = 0 AND o.parent_id <> d.parent_id
                            AND q.status IN ('failed', 'cancelled')))
        SELECT id FROM revived);
END;
-- A step deleted takes its edges to its parents with it.
CREATE TRIGGER outbox_jobs_workflow_purged AFTER DELETE ON outbox_jobs WHEN OLD.workflow_id IS NOT NULL BEGIN
    DELETE FROM outbox_job_deps WHERE child_id = OLD.id;
END;
