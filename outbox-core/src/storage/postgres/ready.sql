-- Claims read only what can run now. A job due later (a delay, a retry's backoff, a snooze) is `scheduled`
-- and sits in an index of its own until a claim finds it due and lets it in (`store/claim.rs`); the ready
-- indexes lead with the kind, so jobs of kinds a worker does not serve are never read by its claims, whatever
-- their number or priority.
ALTER TABLE outbox_jobs ADD COLUMN scheduled boolean NOT NULL DEFAULT false;
-- A job later jobs of its sequence were enqueued behind no longer takes duplicates of its key: they go to the
-- sequence's tail (a duplicate never reorders intents).
ALTER TABLE outbox_jobs ADD COLUMN superseded boolean NOT NULL DEFAULT false;
UPDATE outbox_jobs SET scheduled = true WHERE status = 'pending' AND run_at > now();

DROP INDEX outbox_jobs_ready;
DROP INDEX outbox_jobs_ready_queue;
DROP INDEX outbox_jobs_active_key;
CREATE INDEX outbox_jobs_ready ON outbox_jobs (kind, priority DESC, run_at, id)
    WHERE status = 'pending' AND NOT waiting AND NOT scheduled;
CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, kind, priority DESC, run_at, id)
    WHERE status = 'pending' AND NOT waiting AND NOT scheduled;
CREATE INDEX outbox_jobs_scheduled ON outbox_jobs (run_at) WHERE status = 'pending' AND scheduled;
CREATE UNIQUE INDEX outbox_jobs_active_key ON outbox_jobs (kind, idempotency_key)
    WHERE status IN ('pending', 'claimed') AND idempotency_key IS NOT NULL AND NOT superseded;
