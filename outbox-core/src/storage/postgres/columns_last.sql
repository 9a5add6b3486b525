-- `outbox_jobs` rewritten with its columns in a new order: first what neither a claim nor a completion changes,
-- then what a completion leaves as the claim set it (attempts, runs, the claimer), then what a completion
-- changes. An update whose new row version stays on the job's page (`fewer_writes.sql`) is logged as the bytes
-- that differ between the first and the last changed column, so a claim used to log the whole row from `status`
-- (column 5) on, the 64-character schema hash and the times in between included, and a completion as much. The
-- table is rebuilt in one transaction: its rows are copied before its triggers exist (the history already has
-- them), and a large table takes as long as a copy of it, holding its lock. Its rejoin trigger now runs after
-- the update (below).
CREATE TABLE outbox_jobs_reordered (
    id text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    queue text COLLATE "C" NOT NULL DEFAULT 'default',
    payload jsonb NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 3 CONSTRAINT outbox_jobs_max_attempts_check CHECK (max_attempts >= 1),
    idempotency_key text COLLATE "C",
    schema_hash text NOT NULL,
    created_at timestamptz NOT NULL,
    sequence_key text COLLATE "C",
    sequence_no bigint,
    sequence_hold smallint NOT NULL DEFAULT 1,
    waiting boolean NOT NULL DEFAULT false,
    superseded boolean NOT NULL DEFAULT false,
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
    event_flip boolean NOT NULL DEFAULT false,
    active_key text COLLATE "C"
        GENERATED ALWAYS AS (CASE WHEN status IN ('pending', 'claimed') AND NOT superseded THEN idempotency_key END) STORED
) WITH (fillfactor = 50);
INSERT INTO outbox_jobs_reordered (id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash,
        created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output,
        attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at, event_flip)
    SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash,
        created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output,
        attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at, event_flip
    FROM outbox_jobs;
-- Privileges granted on the table go to its rebuilt form; settings made on it by hand (publications, row
-- security policies, storage parameters other than the fill factor) do not, and must be made again.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT a.privilege_type, a.grantee, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'outbox_jobs'::regclass AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON outbox_jobs_reordered TO %s%s', g.privilege_type,
            CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
            CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END $$;
-- The old table's indexes and triggers, as the earlier migrations (or an operator) left them, are made again on
-- the new one from their own definitions; the primary key and the rejoin trigger are made below.
CREATE TEMPORARY TABLE outbox_jobs_definitions AS
    SELECT pg_get_indexdef(indexrelid) AS definition FROM pg_index
        WHERE indrelid = 'outbox_jobs'::regclass AND NOT indisprimary
    UNION ALL SELECT pg_get_triggerdef(oid) FROM pg_trigger
        WHERE tgrelid = 'outbox_jobs'::regclass AND NOT tgisinternal AND tgname <> 'outbox_jobs_sequence_rejoin';
DROP TABLE outbox_jobs;
ALTER TABLE outbox_jobs_reordered RENAME TO outbox_jobs;
ALTER TABLE outbox_jobs ADD PRIMARY KEY (id);

-- A finished job put back to pending rejoins its sequence behind whatever blocks it, and behind a later job that
-- is running or free to run: it waits, and goes at once when it is the first of its sequence still to run and none
-- runs or is free to run (the workers are woken). This runs after the row is written; it ran before, setting
-- `waiting` on the new row, but a BEFORE UPDATE row trigger makes PostgreSQL lock every row any UPDATE of the table
-- changes before changing it, one WAL record each: a completion wrote 56 more bytes per job (measured with
-- `outbox-bench/shapes/wal.py`). When one statement puts back several jobs of a sequence, each finds the others
-- pending: the last one's trigger lets the first go. `outbox_jobs_sequence_rejoin()` stays for the undo.
CREATE FUNCTION outbox_jobs_sequence_rejoined() RETURNS trigger LANGUAGE plpgsql AS $$
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

DO $$
DECLARE d text;
BEGIN
    FOR d IN SELECT definition FROM outbox_jobs_definitions LOOP
        EXECUTE d;
    END LOOP;
END $$;
DROP TABLE outbox_jobs_definitions;
CREATE TRIGGER outbox_jobs_sequence_rejoin AFTER UPDATE OF status ON outbox_jobs
    FOR EACH ROW WHEN (NEW.sequence_key IS NOT NULL AND NEW.status = 'pending'
        AND OLD.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION outbox_jobs_sequence_rejoined();
