-- Undoes `hot_claim.sql`: the generated columns go (their indexes with them), the earlier indexes and the sequence
-- triggers' earlier forms come back.
ALTER TABLE outbox_jobs DROP COLUMN open, DROP COLUMN due_at, DROP COLUMN finished_at, DROP COLUMN blocks;
CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, kind, priority DESC, run_at, id)
    WHERE status = 'pending' AND NOT waiting AND NOT scheduled;
CREATE INDEX outbox_jobs_scheduled ON outbox_jobs (run_at) WHERE status = 'pending' AND scheduled;
CREATE INDEX outbox_jobs_finished
    ON outbox_jobs (updated_at) WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX outbox_jobs_sequence_blocking ON outbox_jobs (sequence_key, sequence_no)
    WHERE sequence_key IS NOT NULL AND (outbox_jobs.status IN ('pending', 'claimed')
        OR (outbox_jobs.status IN ('failed', 'cancelled') AND outbox_jobs.sequence_hold = 1));

CREATE OR REPLACE FUNCTION outbox_jobs_sequence_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || NEW.sequence_key, 0));
    NEW.sequence_no := nextval('outbox_jobs_sequence_no');
    NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key
        AND (b.status IN ('pending', 'claimed') OR (b.status IN ('failed', 'cancelled') AND b.sequence_hold = 1)));
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
        WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = s.k
            AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
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
        WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = NEW.sequence_key
            AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
            ORDER BY h.sequence_no LIMIT 1)
        AND w.status = 'pending' AND w.waiting
        AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = NEW.sequence_key
            AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting)));
    IF FOUND THEN PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA); END IF;
    RETURN NULL;
END $$;
