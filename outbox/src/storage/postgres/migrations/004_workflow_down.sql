-- Undoes `004_workflow.sql`: the workflow triggers, functions, tables, index and columns go, and the sequence
-- functions are those of `001_schema` again.
DROP TRIGGER IF EXISTS outbox_jobs_workflow_purged ON outbox_jobs;
DROP TRIGGER IF EXISTS outbox_jobs_workflow_retried ON outbox_jobs;
DROP TRIGGER IF EXISTS outbox_jobs_workflow_gone ON outbox_jobs;
DROP TRIGGER IF EXISTS outbox_jobs_workflow_done ON outbox_jobs;
DROP FUNCTION IF EXISTS outbox_jobs_workflow_purged();
DROP FUNCTION IF EXISTS outbox_jobs_workflow_retried();
DROP FUNCTION IF EXISTS outbox_jobs_workflow_done();
DROP TABLE IF EXISTS outbox_job_deps, outbox_workflows;
DROP INDEX IF EXISTS outbox_jobs_workflow;
ALTER TABLE outbox_jobs DROP COLUMN IF EXISTS has_children, DROP COLUMN IF EXISTS on_parent_failure,
    DROP COLUMN IF EXISTS parents_left, DROP COLUMN IF EXISTS step, DROP COLUMN IF EXISTS workflow_id;
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
        AND w.status = 'pending' AND w.waiting;
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
        AND w.status = 'pending' AND w.waiting
        AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = NEW.sequence_key
            AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting)));
    IF FOUND THEN PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA); END IF;
    RETURN NULL;
END $$;
