-- Claims read only what can run now. A job due later (a delay, a retry's backoff, a snooze) is `scheduled`
-- and sits in an index of its own until a claim finds it due and lets it in (`store/claim.rs`); the ready
-- indexes lead with the kind, so jobs of kinds a worker does not serve are never read by its claims, whatever
-- their number or priority.
ALTER TABLE outbox_jobs ADD COLUMN scheduled INTEGER NOT NULL DEFAULT 0;
-- A job later jobs of its sequence were enqueued behind no longer takes duplicates of its key: they go to the
-- sequence's tail (a duplicate never reorders intents).
ALTER TABLE outbox_jobs ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
UPDATE outbox_jobs SET scheduled = 1
    WHERE status = 'pending' AND run_at > CAST(unixepoch('subsec') * 1000 AS INTEGER);

DROP INDEX outbox_jobs_ready;
DROP INDEX outbox_jobs_ready_queue;
DROP INDEX outbox_jobs_active_key;
CREATE INDEX outbox_jobs_ready ON outbox_jobs (kind, priority DESC, run_at, id)
    WHERE status = 'pending' AND waiting = 0 AND scheduled = 0;
CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, kind, priority DESC, run_at, id)
    WHERE status = 'pending' AND waiting = 0 AND scheduled = 0;
CREATE INDEX outbox_jobs_scheduled ON outbox_jobs (run_at) WHERE status = 'pending' AND scheduled = 1;
CREATE UNIQUE INDEX outbox_jobs_active_key ON outbox_jobs (kind, idempotency_key)
    WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL AND superseded = 0;
