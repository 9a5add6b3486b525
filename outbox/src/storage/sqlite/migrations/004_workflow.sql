-- Workflows: jobs that wait for other jobs. A step knows its workflow and name, how many of its parents are still
-- to finish (`parents_left`), and what a parent that fails for good or is cancelled does to it
-- (`on_parent_failure`: 0 cancels it, 1 lets it run, 2 runs it on the first such parent and cancels it when every
-- parent completed). A step waits (`waiting` 1, off the claim indexes) while a parent is left; the triggers below
-- let it go in the statement that finishes its last parent. `has_children` keeps them off every other job.
ALTER TABLE outbox_jobs ADD COLUMN workflow_id TEXT;
ALTER TABLE outbox_jobs ADD COLUMN step TEXT;
ALTER TABLE outbox_jobs ADD COLUMN parents_left INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox_jobs ADD COLUMN on_parent_failure INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox_jobs ADD COLUMN has_children INTEGER NOT NULL DEFAULT 0;
-- The steps of one workflow.
CREATE INDEX outbox_jobs_workflow ON outbox_jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

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

-- The sequence triggers of `001_schema`, made to let a step go only once it has no parent left.
DROP TRIGGER outbox_jobs_sequence_next;
DROP TRIGGER outbox_jobs_sequence_purged;
DROP TRIGGER outbox_jobs_sequence_rejoin;
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

