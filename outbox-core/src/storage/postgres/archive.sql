-- The archive: completed jobs of kinds kept in time partitions (`Retention::kind_in_partitions`) leave
-- `outbox_jobs` in the statement that completes them and land here, in partitions by time of completion (the
-- key is `updated_at`, which equals `completed_at` here, so the readers' "finished since" conditions skip old
-- partitions) that
-- retention creates ahead and drops whole once every job in them is older than the completed jobs' age. Claims
-- never read it, and pruning it deletes no rows. Rows whose time no partition covers go to the default
-- partition, which retention prunes row by row. The columns are the jobs table's, less its feed flag and its
-- generated key; an archived job is always `completed`.
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
-- An archived job deleted by hand (`delete`, `purge`) takes its history with it. A partition dropped whole
-- fires no trigger: its jobs' history goes with the feed rows that recorded their completions, which retention
-- prunes by the feed's age (`retention::prune_feed`).
CREATE TRIGGER outbox_jobs_done_purged AFTER DELETE ON outbox_jobs_done
    FOR EACH ROW EXECUTE FUNCTION outbox_jobs_purged();
-- What readers name: the same on both backends (on SQLite the union of the archive's tables).
CREATE VIEW outbox_jobs_archive AS SELECT * FROM outbox_jobs_done;
