-- Subjects and traces: the domain row a job is about (`order:42`), and the trace context of the code that enqueued
-- it (a W3C `traceparent`, then a space and the `tracestate` when there is one).
ALTER TABLE outbox_jobs ADD COLUMN subject TEXT;
ALTER TABLE outbox_jobs ADD COLUMN trace TEXT;
-- The jobs of one subject, newest first.
CREATE INDEX outbox_jobs_subject ON outbox_jobs (subject, id) WHERE subject IS NOT NULL;
-- The template of a kind's subjects, for producers and tools without the Rust type.
ALTER TABLE outbox_kinds ADD COLUMN subject TEXT;
