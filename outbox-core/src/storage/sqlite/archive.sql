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
