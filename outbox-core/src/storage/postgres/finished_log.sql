-- Finished jobs are found through a log of when they finished, not through an index of the jobs table. The index
-- of finished jobs (`hot_claim.sql`) took an entry for every job at its completion: 64 of the 1,042 bytes of WAL a
-- job's life wrote at claims of 500 (`outbox-bench --case process`, WAL by relation). A worker's completion
-- statement now writes one row here listing the jobs it completed (`store/complete.rs`), as its feed row does.
--
-- A row lists jobs that finished, or last changed while finished, at `at` (or, listed again by retention, earlier):
-- every job whose status is finished is listed by a row whose `at` is at or after its `finished_at`. Retention
-- (`storage/retention.rs`) reads the rows older than its latest cutoff, oldest first, deletes each row and the jobs
-- it lists that are due, and lists the ones it keeps again in a new row: a job of a kind or status kept longer at
-- the time it comes due, the latest completed job of a sequence and a job holding its sequence at the time of the
-- pass, so that a job kept longer is looked at once per age, not at every pass. A job listed more than once
-- (finished, retried, finished again) is looked at for each listing; a listing of a job that is gone, or no longer
-- finished, is dropped. The readers of recent work read the rows since their window opened.
CREATE TABLE outbox_finished (
    at timestamptz NOT NULL,
    jobs text[] NOT NULL
);
CREATE INDEX outbox_finished_at ON outbox_finished (at);
-- Every other writer that finishes a job, or changes a finished job's time (a single outcome, a failed attempt,
-- a rescue, a cancellation, hand-written SQL), lists it in a row of its own. The worker's completion statements
-- flip `event_flip` and list their completions themselves.
CREATE FUNCTION outbox_jobs_finished_elsewhere() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_finished (at, jobs) VALUES (NEW.finished_at, ARRAY[NEW.id]);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_jobs_finished_elsewhere AFTER UPDATE OF status, updated_at ON outbox_jobs
    FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL AND NEW.finished_at IS DISTINCT FROM OLD.finished_at
        AND OLD.event_flip = NEW.event_flip)
    EXECUTE FUNCTION outbox_jobs_finished_elsewhere();
CREATE TRIGGER outbox_jobs_inserted_finished AFTER INSERT ON outbox_jobs
    FOR EACH ROW WHEN (NEW.finished_at IS NOT NULL) EXECUTE FUNCTION outbox_jobs_finished_elsewhere();
-- The jobs finished before this step, a row per time.
INSERT INTO outbox_finished (at, jobs)
    SELECT finished_at, array_agg(id ORDER BY id) FROM outbox_jobs WHERE finished_at IS NOT NULL GROUP BY finished_at;
DROP INDEX outbox_jobs_finished;
