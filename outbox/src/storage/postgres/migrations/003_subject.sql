-- Subjects and traces: the domain row a job is about (`order:42`), and the trace context of the code that enqueued
-- it (a W3C `traceparent`, then a space and the `tracestate` when there is one). Neither changes after enqueue, so
-- claims and completions still update rows in place.
ALTER TABLE outbox_jobs ADD COLUMN IF NOT EXISTS subject text COLLATE "C", ADD COLUMN IF NOT EXISTS trace text;
-- The jobs of one subject, newest first. `IF NOT EXISTS` here and above: an operator of a large queue may add the
-- columns and build the index beforehand with `CREATE INDEX CONCURRENTLY`, as this statement holds off writes to
-- the table while it reads it.
CREATE INDEX IF NOT EXISTS outbox_jobs_subject ON outbox_jobs (subject, id) WHERE subject IS NOT NULL;
-- The template of a kind's subjects, for producers and tools without the Rust type.
ALTER TABLE outbox_kinds ADD COLUMN IF NOT EXISTS subject text;
