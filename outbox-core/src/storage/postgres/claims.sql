-- Leases are found through the claims, not through an index of the jobs table. A claim records its jobs and
-- their lease in one row here (`store/claim.rs`), which the worker's writer deletes in the statement that writes
-- the outcome of the claim's last job (`store/complete.rs`). The partial lease index of `outbox_jobs` named the
-- job's status: every claim wrote an entry into it, and it kept claims and completions from updating the job row in
-- place (heap-only). A claim of 100 jobs now writes one row and two index entries here instead of 100 entries
-- there: the drain wrote 60 bytes of WAL per job fewer (`outbox-bench/shapes/wal.py`, shape `lease_index` against
-- the shape of this step).
--
-- The job row stays what a lease is: a job is claimed until `lease_expires_at`, renewals move that alone, and
-- every claimed job is listed by a claim whose `lease_expires_at` is at or before its own. Rescuers read the
-- claims whose lease ran out, put back those of their jobs whose own lease ran out too, and then delete each such
-- claim or move it on to the earliest lease among its jobs still running. A claim left behind (a worker that
-- died, an outcome given up on, a remote worker's claim) is deleted that way once its lease runs out.
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
-- The jobs claimed before this step, a claim per worker.
INSERT INTO outbox_claims (worker, lease_expires_at, jobs)
    SELECT COALESCE(locked_by, ''), min(COALESCE(lease_expires_at, TIMESTAMPTZ 'epoch')), array_agg(id ORDER BY id)
    FROM outbox_jobs WHERE status = 'claimed' GROUP BY 1;
DROP INDEX outbox_jobs_lease;
