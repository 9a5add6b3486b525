-- Workflows: jobs that wait for other jobs. A step knows its workflow and name, how many of its parents are still
-- to finish (`parents_left`), what a parent that fails for good or is cancelled does to it (`on_parent_failure`:
-- 0 cancels it, 1 lets it run, 2 runs it on the first such parent and cancels it once every parent completed), and
-- whether it has children (the workflow triggers fire for no other job). A step waits (`waiting`, off the ready
-- index) while a parent is left; the triggers below let it go in the statement that finishes its last parent.
-- None of these columns is indexed but `workflow_id`, which never changes: claims still update rows in place.
ALTER TABLE outbox_jobs ADD COLUMN workflow_id text COLLATE "C", ADD COLUMN step text,
    ADD COLUMN parents_left integer NOT NULL DEFAULT 0, ADD COLUMN on_parent_failure smallint NOT NULL DEFAULT 0,
    ADD COLUMN has_children boolean NOT NULL DEFAULT false;
-- The steps of one workflow.
CREATE INDEX outbox_jobs_workflow ON outbox_jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

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

-- The sequence functions of `001_schema`, made to let a step go only once it has no parent left.
CREATE OR REPLACE FUNCTION outbox_jobs_sequence_next() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE OR REPLACE FUNCTION outbox_jobs_sequence_rejoined() RETURNS trigger LANGUAGE plpgsql AS $$
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
