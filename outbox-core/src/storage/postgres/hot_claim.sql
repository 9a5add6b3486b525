-- A claim updates its jobs' rows in place (heap-only): no index of `outbox_jobs` reads a column a claim changes.
-- A claimed job stays in the ready index until it finishes, so the claim reads past the claimed ones by their
-- status; the other indexes read stored generated columns that stay as they are while a job goes from pending
-- to claimed. A claim of 100 jobs used to write a new version of each row and an entry for it in the primary
-- key; now it writes only the changed bytes of each row, on its own page.
--
-- The generated columns: `open`, whether the job is pending or claimed and neither waiting in its sequence nor
-- due later (the ready index); `due_at`, a scheduled job's run time (the index the claim's promotion reads);
-- `finished_at`, a finished job's last change (retention and the readers of recent work); `blocks`, whether a
-- job of a sequence holds back the later ones (true, or NULL). Adding them rewrites the table under its lock,
-- as long as a copy of it takes.
ALTER TABLE outbox_jobs
    ADD COLUMN open boolean
        GENERATED ALWAYS AS (status IN ('pending', 'claimed') AND NOT waiting AND NOT scheduled) STORED,
    ADD COLUMN due_at timestamptz GENERATED ALWAYS AS (CASE WHEN status = 'pending' AND scheduled THEN run_at END) STORED,
    ADD COLUMN finished_at timestamptz
        GENERATED ALWAYS AS (CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN updated_at END) STORED,
    ADD COLUMN blocks boolean GENERATED ALWAYS AS (CASE WHEN sequence_key IS NOT NULL AND (status IN ('pending', 'claimed')
        OR (status IN ('failed', 'cancelled') AND sequence_hold = 1)) THEN true END) STORED;
DROP INDEX outbox_jobs_ready_queue, outbox_jobs_scheduled, outbox_jobs_finished, outbox_jobs_sequence_blocking;
CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, kind, priority DESC, run_at, id) WHERE open;
CREATE INDEX outbox_jobs_scheduled ON outbox_jobs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX outbox_jobs_finished ON outbox_jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX outbox_jobs_sequence_blocking ON outbox_jobs (sequence_key, sequence_no) WHERE blocks;
-- The sequence triggers read the jobs that hold a sequence through `blocks`, so through its index.
CREATE OR REPLACE FUNCTION outbox_jobs_sequence_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || NEW.sequence_key, 0));
    NEW.sequence_no := nextval('outbox_jobs_sequence_no');
    NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key AND b.blocks);
    RETURN NEW;
END $$;

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
