-- Every statement outbox sends to PostgreSQL, rendered by the conformance suite's `catalogue.rs` (run it with
-- OUTBOX_BLESS=1 to write this file again). Sections name the operation and its variant; a batch shows two
-- rows where it repeats one per job. The worker's own statements are at the end.

-- enqueue: one job
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled)
VALUES ($1, $2, $3, $4::jsonb, 'pending', $5, 0, $6, (TIMESTAMPTZ 'epoch' + ($7)::int8 * INTERVAL '1 millisecond'), $8, $9, (TIMESTAMPTZ 'epoch' + ($10)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + ($11)::int8 * INTERVAL '1 millisecond'), $12, $13, $14, $15, $16, $17, FALSE);

-- enqueue: one job with an idempotency key
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled)
VALUES ($1, $2, $3, $4::jsonb, 'pending', $5, 0, $6, (TIMESTAMPTZ 'epoch' + ($7)::int8 * INTERVAL '1 millisecond'), $8, $9, (TIMESTAMPTZ 'epoch' + ($10)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + ($11)::int8 * INTERVAL '1 millisecond'), $12, $13, $14, $15, $16, $17, FALSE)
ON CONFLICT DO NOTHING;

-- enqueue: a batch
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled)
SELECT r.i, r.k, r.q, r.p, 'pending', r.r, 0, r.m, (TIMESTAMPTZ 'epoch' + (r.t)::int8 * INTERVAL '1 millisecond'), r.y, r.h, (TIMESTAMPTZ 'epoch' + (r.c)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + (r.c)::int8 * INTERVAL '1 millisecond'), r.s, r.o, r.f, r.w, r.u, r.x, r.d
FROM ROWS
FROM (json_to_recordset($1::json) AS (i text, k text, q text, p jsonb, r int4, m int4, t int8, y text, h text, c int8, s text, o int2, f text, w int4, u text, x text, d bool)) WITH ORDINALITY AS r(i, k, q, p, r, m, t, y, h, c, s, o, f, w, u, x, d, n)
ORDER BY r.n;

-- enqueue: a batch with idempotency keys
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled)
SELECT r.i, r.k, r.q, r.p, 'pending', r.r, 0, r.m, (TIMESTAMPTZ 'epoch' + (r.t)::int8 * INTERVAL '1 millisecond'), r.y, r.h, (TIMESTAMPTZ 'epoch' + (r.c)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + (r.c)::int8 * INTERVAL '1 millisecond'), r.s, r.o, r.f, r.w, r.u, r.x, r.d
FROM ROWS
FROM (json_to_recordset($1::json) AS (i text, k text, q text, p jsonb, r int4, m int4, t int8, y text, h text, c int8, s text, o int2, f text, w int4, u text, x text, d bool)) WITH ORDINALITY AS r(i, k, q, p, r, m, t, y, h, c, s, o, f, w, u, x, d, n)
ORDER BY r.n
ON CONFLICT DO NOTHING;

-- enqueue: a batch of sequenced jobs
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled)
SELECT r.i, r.k, r.q, r.p, 'pending', r.r, 0, r.m, (TIMESTAMPTZ 'epoch' + (r.t)::int8 * INTERVAL '1 millisecond'), r.y, r.h, (TIMESTAMPTZ 'epoch' + (r.c)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + (r.c)::int8 * INTERVAL '1 millisecond'), r.s, r.o, r.f, r.w, r.u, r.x, r.d
FROM ROWS
FROM (json_to_recordset($1::json) AS (i text, k text, q text, p jsonb, r int4, m int4, t int8, y text, h text, c int8, s text, o int2, f text, w int4, u text, x text, d bool)) WITH ORDINALITY AS r(i, k, q, p, r, m, t, y, h, c, s, o, f, w, u, x, d, n)
ORDER BY r.n;

-- enqueue: a batch a duplicate key cut short (the rows read back)
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled)
SELECT r.i, r.k, r.q, r.p, 'pending', r.r, 0, r.m, (TIMESTAMPTZ 'epoch' + (r.t)::int8 * INTERVAL '1 millisecond'), r.y, r.h, (TIMESTAMPTZ 'epoch' + (r.c)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + (r.c)::int8 * INTERVAL '1 millisecond'), r.s, r.o, r.f, r.w, r.u, r.x, r.d
FROM ROWS
FROM (json_to_recordset($1::json) AS (i text, k text, q text, p jsonb, r int4, m int4, t int8, y text, h text, c int8, s text, o int2, f text, w int4, u text, x text, d bool)) WITH ORDINALITY AS r(i, k, q, p, r, m, t, y, h, c, s, o, f, w, u, x, d, n)
ORDER BY r.n
ON CONFLICT DO NOTHING;
SELECT id
FROM outbox_jobs
WHERE id IN ($1, $2)
UNION
SELECT id
FROM outbox_jobs_done
WHERE id IN ($1, $2)
UNION
SELECT job_id
FROM outbox_job_events
WHERE job_id IN ($1, $2);

-- enqueue: the active job holding a key
SELECT t.id, COALESCE(t.sequence_key = $3 AND EXISTS (SELECT 1 FROM outbox_jobs l WHERE l.sequence_key = t.sequence_key AND l.sequence_no > t.sequence_no), FALSE)
FROM outbox_jobs t
WHERE t.kind = $1 AND t.active_key = $2
LIMIT 1;

-- enqueue: a job superseded by later jobs of its sequence
UPDATE outbox_jobs
SET superseded = TRUE
WHERE id = $1 AND status IN ('pending', 'claimed') AND NOT superseded;

-- jobs: one job
SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE id = $1
UNION ALL
SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), NULL AS subject, NULL AS trace
FROM outbox_jobs_archive outbox_jobs
WHERE id = $1;

-- jobs: a list
SELECT *
FROM (SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace FROM outbox_jobs WHERE TRUE ORDER BY id DESC LIMIT $1) j
UNION ALL
SELECT *
FROM (SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), NULL AS subject, NULL AS trace FROM outbox_jobs_archive outbox_jobs WHERE TRUE ORDER BY id DESC LIMIT $1) a
ORDER BY 1 DESC
LIMIT $1;

-- jobs: a list by status, kind, queue and sequence
SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE TRUE AND status = $1 AND kind = $2 AND queue = $3 AND sequence_key = $4
ORDER BY sequence_no DESC
LIMIT $5;

-- jobs: a page of a list by key, finished since a time
SELECT *
FROM (SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace FROM outbox_jobs WHERE TRUE AND updated_at >= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND idempotency_key = $2 AND id < $3 ORDER BY id DESC LIMIT $4) j
UNION ALL
SELECT *
FROM (SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), NULL AS subject, NULL AS trace FROM outbox_jobs_archive outbox_jobs WHERE TRUE AND updated_at >= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND idempotency_key = $2 AND id < $3 ORDER BY id DESC LIMIT $4) a
ORDER BY 1 DESC
LIMIT $4;

-- jobs: stuck claims
SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_claims WHERE lease_expires_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond'))) AND status = 'claimed' AND lease_expires_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond')
ORDER BY lease_expires_at;

-- jobs: retry one
UPDATE outbox_jobs
SET status = 'pending', attempts = 0, scheduled = FALSE, superseded = FALSE, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, lease_expires_at = NULL, waiting = CASE WHEN sequence_key IS NULL THEN parents_left > 0 ELSE TRUE END, run_at = (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond')
WHERE id = $2 AND status IN ('failed', 'cancelled') AND (outbox_jobs.idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = outbox_jobs.kind AND a.active_key = outbox_jobs.idempotency_key));

-- jobs: retry the failed jobs of a kind and error
UPDATE outbox_jobs
SET status = 'pending', attempts = 0, scheduled = FALSE, superseded = FALSE, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, lease_expires_at = NULL, waiting = CASE WHEN sequence_key IS NULL THEN parents_left > 0 ELSE TRUE END, run_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond')
WHERE status IN ('failed') AND id IN ( SELECT id FROM (SELECT f.id, ROW_NUMBER() OVER ( PARTITION BY f.kind, f.idempotency_key IS NULL, COALESCE(f.idempotency_key, f.id) ORDER BY f.updated_at DESC, f.id DESC) AS rn FROM outbox_jobs f WHERE f.status IN ('failed') AND f.kind = $1 AND f.last_error = $2 AND (f.idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = f.kind AND a.active_key = f.idempotency_key))) r WHERE rn = 1);

-- jobs: cancel
UPDATE outbox_jobs
SET sequence_hold = CASE WHEN status = 'pending' THEN sequence_hold ELSE 2 END, status = 'cancelled', updated_at = (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond')
WHERE id = $2 AND (status = 'pending' OR (status IN ('failed', 'cancelled') AND sequence_key IS NOT NULL AND sequence_hold = 1));

-- jobs: a list by subject
SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE TRUE AND subject = $1
ORDER BY id DESC
LIMIT $2;

-- jobs: cancel the jobs of a subject
UPDATE outbox_jobs
SET status = 'cancelled', updated_at = (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond')
WHERE subject = $2 AND status = 'pending';

-- jobs: retry the jobs of a subject
UPDATE outbox_jobs
SET status = 'pending', attempts = 0, scheduled = FALSE, superseded = FALSE, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, lease_expires_at = NULL, waiting = CASE WHEN sequence_key IS NULL THEN parents_left > 0 ELSE TRUE END, run_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond')
WHERE status IN ('failed', 'cancelled') AND id IN ( SELECT id FROM (SELECT f.id, ROW_NUMBER() OVER ( PARTITION BY f.kind, f.idempotency_key IS NULL, COALESCE(f.idempotency_key, f.id) ORDER BY f.updated_at DESC, f.id DESC) AS rn FROM outbox_jobs f WHERE f.status IN ('failed', 'cancelled') AND f.subject = $1 AND (f.idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = f.kind AND a.active_key = f.idempotency_key))) r WHERE rn = 1);

-- jobs: delete
DELETE
FROM outbox_jobs
WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled') AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled'));

-- jobs: purge completed jobs
DELETE
FROM outbox_jobs
WHERE status IN ($2) AND updated_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled'));
DELETE
FROM outbox_finished f
WHERE f.at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = ANY(f.jobs));
DELETE
FROM "outbox_jobs_done"
WHERE updated_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond');
WITH w AS (SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') ORDER BY id LIMIT $2) DELETE
FROM outbox_job_events
WHERE job_id IN (SELECT x ->> 0 FROM w, json_array_elements(w.jobs) AS x WHERE w.event = 'completed') AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = outbox_job_events.job_id);
WITH w AS (SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') ORDER BY id LIMIT $2) DELETE
FROM outbox_job_events
WHERE id IN (SELECT id FROM w);

-- jobs: purge failed and cancelled jobs
DELETE
FROM outbox_jobs
WHERE status IN ($2, $3) AND updated_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled'));
DELETE
FROM outbox_finished f
WHERE f.at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = ANY(f.jobs));
DELETE
FROM outbox_job_events
WHERE job_id = '' AND at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond');

-- stats: counts by status
SELECT kind, status, COUNT(*), (EXTRACT(EPOCH FROM MIN(created_at)) * 1000)::int8
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
GROUP BY kind, status
ORDER BY kind, status;

-- stats: finished since
SELECT kind, status, COUNT(*), (EXTRACT(EPOCH FROM MIN(created_at)) * 1000)::int8
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_finished WHERE at >= (TIMESTAMPTZ 'epoch' + (1700000000000)::int8 * INTERVAL '1 millisecond'))) AND finished_at >= (TIMESTAMPTZ 'epoch' + (1700000000000)::int8 * INTERVAL '1 millisecond') UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond')
GROUP BY kind, status
ORDER BY kind, status;

-- stats: activity by minute
SELECT ((EXTRACT(EPOCH FROM updated_at) * 1000)::int8 / $1) * $1, COUNT(CASE WHEN status = 'completed' THEN 1 END), COUNT(CASE WHEN status = 'failed' THEN 1 END)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_finished WHERE at >= (TIMESTAMPTZ 'epoch' + (1700000000000)::int8 * INTERVAL '1 millisecond'))) AND finished_at >= (TIMESTAMPTZ 'epoch' + (1700000000000)::int8 * INTERVAL '1 millisecond') UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond')
GROUP BY 1
ORDER BY 1;

-- stats: failures grouped by error
SELECT kind, last_error, COUNT(*), (EXTRACT(EPOCH FROM MAX(updated_at)) * 1000)::int8, MAX(id)
FROM outbox_jobs
WHERE status = 'failed'
GROUP BY kind, last_error
ORDER BY COUNT(*) DESC, MAX(updated_at) DESC
LIMIT $1;

-- stats: durations by kind
SELECT kind, COUNT(*), CAST(AVG((EXTRACT(EPOCH FROM completed_at - claimed_at) * 1000)::int8) AS DOUBLE PRECISION), MAX((EXTRACT(EPOCH FROM completed_at - claimed_at) * 1000)::int8), CAST(AVG((EXTRACT(EPOCH FROM claimed_at - created_at) * 1000)::int8) AS DOUBLE PRECISION)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_finished WHERE at >= (TIMESTAMPTZ 'epoch' + (1700000000000)::int8 * INTERVAL '1 millisecond'))) AND finished_at >= (TIMESTAMPTZ 'epoch' + (1700000000000)::int8 * INTERVAL '1 millisecond') UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
WHERE status = 'completed' AND updated_at >= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond')
GROUP BY kind
ORDER BY kind;

-- stats: duplicate keys
SELECT kind, idempotency_key, COUNT(*), COUNT(CASE WHEN status IN ('pending', 'claimed') THEN 1 END), COUNT(CASE WHEN status = 'completed' THEN 1 END)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
WHERE idempotency_key IS NOT NULL
GROUP BY kind, idempotency_key
HAVING COUNT(*) > 1
ORDER BY COUNT(*) DESC, kind
LIMIT $1;

-- stats: queues
SELECT queue, COUNT(CASE WHEN status = 'pending' AND NOT waiting AND run_at <= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') THEN 1 END), COUNT(CASE WHEN status = 'pending' AND NOT waiting AND run_at > (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') THEN 1 END), COUNT(CASE WHEN status = 'claimed' THEN 1 END), COUNT(CASE WHEN status = 'claimed' AND lease_expires_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') THEN 1 END), COUNT(CASE WHEN status = 'completed' THEN 1 END), COUNT(CASE WHEN status = 'failed' THEN 1 END), COUNT(CASE WHEN status = 'cancelled' THEN 1 END), (EXTRACT(EPOCH FROM MIN(CASE WHEN status = 'pending' AND NOT waiting AND run_at <= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') THEN run_at END)) * 1000)::int8, COUNT(CASE WHEN status = 'pending' AND waiting THEN 1 END)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
GROUP BY queue
ORDER BY queue;

-- stats: blocked sequences
SELECT COUNT(*)
FROM outbox_jobs
WHERE sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1 AND NOT EXISTS (SELECT 1 FROM outbox_jobs e WHERE e.sequence_key = outbox_jobs.sequence_key AND e.sequence_no < outbox_jobs.sequence_no AND (e.status IN ('pending', 'claimed') OR (e.status IN ('failed', 'cancelled') AND e.sequence_hold = 1)));
SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace, (SELECT COUNT(*) FROM outbox_jobs w WHERE w.sequence_key = outbox_jobs.sequence_key AND w.status = 'pending' AND w.waiting)
FROM outbox_jobs
WHERE sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1 AND NOT EXISTS (SELECT 1 FROM outbox_jobs e WHERE e.sequence_key = outbox_jobs.sequence_key AND e.sequence_no < outbox_jobs.sequence_no AND (e.status IN ('pending', 'claimed') OR (e.status IN ('failed', 'cancelled') AND e.sequence_hold = 1)))
ORDER BY updated_at
LIMIT $1;

-- events: a job's history
SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE id = $1
UNION ALL
SELECT id, kind, queue, payload::text, status, priority, attempts, max_attempts, (EXTRACT(EPOCH FROM run_at) * 1000)::int8, locked_by, (EXTRACT(EPOCH FROM locked_at) * 1000)::int8, (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8, last_error, idempotency_key, schema_hash, output::text, (EXTRACT(EPOCH FROM created_at) * 1000)::int8, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), NULL AS subject, NULL AS trace
FROM outbox_jobs_archive outbox_jobs
WHERE id = $1;
SELECT (EXTRACT(EPOCH FROM at) * 1000)::int8, event, attempt, worker, error, (EXTRACT(EPOCH FROM claimed_at) * 1000)::int8, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8
FROM outbox_job_events
WHERE job_id = $1
ORDER BY id;

-- events: whether a job outlived its row
SELECT 1
FROM outbox_job_events
WHERE job_id = $1
LIMIT 1;

-- events: the feed's end
SELECT pg_snapshot_xmin(pg_current_snapshot())::text || '-0';

-- events: the feed after a position
SELECT txid::text || '-' || id::text, job_id, kind, queue, event, attempt, worker, error, (EXTRACT(EPOCH FROM at) * 1000)::int8, jobs::text
FROM outbox_job_events
WHERE (txid, id) >= ($1::text::xid8, $2::int8) AND txid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY txid, id
LIMIT $3;

-- kinds: record
INSERT INTO outbox_kinds (name, "schema", schema_hash, queue, priority, max_attempts, is_unique, key_fields, recorded_by, first_seen_at, updated_at, sequence, on_sequence_failure, concurrency, rate, rate_key, fair, cost, subject)
VALUES ($1, $2::jsonb, $3, $4, $5, $6, $7, $8::jsonb, $9, (TIMESTAMPTZ 'epoch' + ($10)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + ($10)::int8 * INTERVAL '1 millisecond'), $11, $12, $13, $14, $15, $16, $17, $18)
ON CONFLICT (name) DO UPDATE
SET "schema" = excluded."schema", schema_hash = excluded.schema_hash, queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts, is_unique = excluded.is_unique, key_fields = excluded.key_fields, recorded_by = excluded.recorded_by, updated_at = excluded.updated_at, sequence = excluded.sequence, on_sequence_failure = excluded.on_sequence_failure, concurrency = excluded.concurrency, rate = excluded.rate, rate_key = excluded.rate_key, fair = excluded.fair, cost = excluded.cost, subject = excluded.subject;

-- kinds: list
SELECT name, "schema"::text, schema_hash, queue, priority, max_attempts, is_unique, key_fields::text, recorded_by, (EXTRACT(EPOCH FROM first_seen_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, sequence, on_sequence_failure, concurrency, rate, rate_key, fair, cost, subject
FROM outbox_kinds
ORDER BY name;

-- kinds: one
SELECT name, "schema"::text, schema_hash, queue, priority, max_attempts, is_unique, key_fields::text, recorded_by, (EXTRACT(EPOCH FROM first_seen_at) * 1000)::int8, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8, sequence, on_sequence_failure, concurrency, rate, rate_key, fair, cost, subject
FROM outbox_kinds
WHERE name = $1
ORDER BY name;

-- workers: register or renew
INSERT INTO outbox_workers (id, host, pid, queues, kinds, concurrency, running, remote, started_at, last_seen_at, expires_at)
VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7, $8, (TIMESTAMPTZ 'epoch' + ($9)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + ($9)::int8 * INTERVAL '1 millisecond'), (TIMESTAMPTZ 'epoch' + ($10)::int8 * INTERVAL '1 millisecond'))
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, queues = excluded.queues, kinds = excluded.kinds, concurrency = excluded.concurrency, running = excluded.running, remote = excluded.remote, last_seen_at = excluded.last_seen_at, expires_at = excluded.expires_at;
DELETE
FROM outbox_workers
WHERE expires_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond');

-- workers: list
SELECT id, host, pid, queues::text, kinds::text, concurrency, running, remote, (EXTRACT(EPOCH FROM started_at) * 1000)::int8, (EXTRACT(EPOCH FROM last_seen_at) * 1000)::int8, (EXTRACT(EPOCH FROM expires_at) * 1000)::int8
FROM outbox_workers
WHERE expires_at > (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond')
ORDER BY started_at, id;

-- workers: remove
DELETE
FROM outbox_workers
WHERE id = $1;

-- schedules: register
INSERT INTO outbox_schedules (name, kind, spec, time_zone, missed, updated_at)
VALUES ($1, $2, $3, $4, $5, (TIMESTAMPTZ 'epoch' + ($6)::int8 * INTERVAL '1 millisecond'))
ON CONFLICT (name) DO UPDATE
SET kind = excluded.kind, spec = excluded.spec, time_zone = excluded.time_zone, missed = excluded.missed, updated_at = excluded.updated_at;
SELECT (EXTRACT(EPOCH FROM last_tick) * 1000)::int8
FROM outbox_schedules
WHERE name = $1;

-- schedules: claim a tick
UPDATE outbox_schedules
SET last_tick = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), last_job_id = NULL, updated_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond')
WHERE name = $1 AND (last_tick IS NULL OR last_tick < (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'));

-- schedules: the tick's job
UPDATE outbox_schedules
SET last_job_id = $1
WHERE name = $2;

-- schedules: list
SELECT name, kind, spec, time_zone, missed, (EXTRACT(EPOCH FROM last_tick) * 1000)::int8, last_job_id, (EXTRACT(EPOCH FROM updated_at) * 1000)::int8
FROM outbox_schedules
ORDER BY name;

-- locks: take or renew
UPDATE outbox_locks
SET holder = $2, expires_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond')
WHERE name = $1 AND (holder = $2 OR expires_at < (TIMESTAMPTZ 'epoch' + ($4)::int8 * INTERVAL '1 millisecond'));
INSERT INTO outbox_locks (name, holder, expires_at)
VALUES ($1, $2, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'))
ON CONFLICT DO NOTHING;

-- locks: held by another
SELECT COUNT(*)
FROM outbox_locks
WHERE name = $1 AND holder <> $2 AND expires_at >= (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond');

-- locks: release
DELETE
FROM outbox_locks
WHERE name = $1 AND holder = $2;

-- reconciliations: record
INSERT INTO outbox_reconciliations (reconciler, at, worker, report)
VALUES ($1, (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), $3, $4::jsonb)
ON CONFLICT (reconciler) DO UPDATE
SET at = excluded.at, worker = excluded.worker, report = excluded.report;

-- reconciliations: list
SELECT reconciler, (EXTRACT(EPOCH FROM at) * 1000)::int8, worker, report::text
FROM outbox_reconciliations
ORDER BY reconciler;

-- retention: prune finished jobs
WITH r AS (DELETE FROM outbox_finished WHERE ctid = ANY(ARRAY(SELECT ctid FROM (SELECT ctid, sum(cardinality(jobs)) OVER (ORDER BY at, ctid) - cardinality(jobs) AS before FROM (SELECT ctid, at, jobs FROM outbox_finished WHERE at < (TIMESTAMPTZ 'epoch' + ($6)::int8 * INTERVAL '1 millisecond') ORDER BY at LIMIT $7) w) t WHERE before < $7)) RETURNING jobs),
listed AS (SELECT DISTINCT unnest(jobs) AS id FROM r),
d AS (DELETE FROM outbox_jobs j WHERE j.id = ANY(ARRAY(SELECT id FROM listed)) AND j.status IN ('completed', 'failed', 'cancelled') AND ((j.status = $1 AND j.updated_at < (TIMESTAMPTZ 'epoch' + (CASE j.kind WHEN $2 THEN $3 ELSE $4 END)::int8 * INTERVAL '1 millisecond'))) AND j.updated_at < (TIMESTAMPTZ 'epoch' + ($5)::int8 * INTERVAL '1 millisecond') AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled')) AND NOT (j.status = 'completed' AND j.sequence_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM outbox_jobs l WHERE l.sequence_key = j.sequence_key AND l.sequence_no > j.sequence_no AND l.status = 'completed')) RETURNING j.id),
k AS (SELECT j.id, CASE WHEN j.finished_at < (TIMESTAMPTZ 'epoch' + ((CASE j.status WHEN $9 THEN CASE j.kind WHEN $10 THEN $11 ELSE $12 END ELSE 0 END)::int8)::int8 * INTERVAL '1 millisecond') THEN (TIMESTAMPTZ 'epoch' + ($8)::int8 * INTERVAL '1 millisecond') ELSE LEAST((TIMESTAMPTZ 'epoch' + ($8)::int8 * INTERVAL '1 millisecond'), j.finished_at + ($6 - (CASE j.status WHEN $9 THEN CASE j.kind WHEN $10 THEN $11 ELSE $12 END ELSE 0 END)::int8) * INTERVAL '1 millisecond') END AS at FROM outbox_jobs j WHERE j.id = ANY(ARRAY(SELECT id FROM listed)) AND j.finished_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM d WHERE d.id = j.id)),
a AS (INSERT INTO outbox_finished (at, jobs) SELECT at, array_agg(id ORDER BY id) FROM k GROUP BY at)
SELECT (SELECT count(*) FROM d), (SELECT COALESCE(sum(cardinality(jobs)), 0) FROM r)::int8;

-- retention: prune the feed
WITH w AS (SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') ORDER BY id LIMIT $2) DELETE
FROM outbox_job_events
WHERE job_id IN (SELECT x ->> 0 FROM w, json_array_elements(w.jobs) AS x WHERE w.event = 'completed') AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = outbox_job_events.job_id);
WITH w AS (SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') ORDER BY id LIMIT $2) DELETE
FROM outbox_job_events
WHERE id IN (SELECT id FROM w);

-- archive: upkeep
SELECT c.relname::text
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'outbox_jobs_done'::regclass;
SET LOCAL lock_timeout = '2s';
SELECT EXISTS (SELECT 1 FROM outbox_jobs_done_default WHERE updated_at >= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND updated_at < (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'));
CREATE TABLE "outbox_jobs_done_1699999200000_1700002800000" PARTITION OF outbox_jobs_done FOR
VALUES
FROM ((TIMESTAMPTZ 'epoch' + (1699999200000)::int8 * INTERVAL '1 millisecond')) TO ((TIMESTAMPTZ 'epoch' + (1700002800000)::int8 * INTERVAL '1 millisecond'));
SELECT EXISTS (SELECT 1 FROM outbox_jobs_done_default WHERE updated_at >= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND updated_at < (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'));
CREATE TABLE "outbox_jobs_done_1700002800000_1700006400000" PARTITION OF outbox_jobs_done FOR
VALUES
FROM ((TIMESTAMPTZ 'epoch' + (1700002800000)::int8 * INTERVAL '1 millisecond')) TO ((TIMESTAMPTZ 'epoch' + (1700006400000)::int8 * INTERVAL '1 millisecond'));
SELECT EXISTS (SELECT 1 FROM outbox_jobs_done_default WHERE updated_at >= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') AND updated_at < (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'));
CREATE TABLE "outbox_jobs_done_1700006400000_1700010000000" PARTITION OF outbox_jobs_done FOR
VALUES
FROM ((TIMESTAMPTZ 'epoch' + (1700006400000)::int8 * INTERVAL '1 millisecond')) TO ((TIMESTAMPTZ 'epoch' + (1700010000000)::int8 * INTERVAL '1 millisecond'));
DELETE
FROM outbox_jobs_done_default
WHERE id IN (SELECT id FROM outbox_jobs_done_default WHERE updated_at <= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') LIMIT $2);

-- archive: whether it holds jobs
SELECT EXISTS (SELECT 1 FROM outbox_jobs_archive);

-- archive: the jobs and the archive finished since a time, a relation other statements read
(SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_finished WHERE at >= (TIMESTAMPTZ 'epoch' + (1700000000000)::int8 * INTERVAL '1 millisecond'))) AND finished_at >= (TIMESTAMPTZ 'epoch' + (1700000000000)::int8 * INTERVAL '1 millisecond') UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs;

-- scan: the latest completed job of every path
DROP TABLE IF EXISTS pg_temp.outbox_path_scan;
CREATE TEMPORARY TABLE outbox_path_scan (seq BIGINT PRIMARY KEY, path TEXT, job_id TEXT NOT NULL, kind TEXT NOT NULL, output TEXT, completed_at BIGINT, jobs BIGINT NOT NULL) ON COMMIT DROP;
INSERT INTO pg_temp.outbox_path_scan (seq, path, job_id, kind, output, completed_at, jobs)
SELECT ROW_NUMBER() OVER (ORDER BY (path IS NULL) DESC, path COLLATE "C"), path, id, kind, output, completed_at, jobs
FROM (SELECT path, id, kind, output::text AS output, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8 AS completed_at, ROW_NUMBER() OVER (PARTITION BY path ORDER BY (sequence_no IS NULL), sequence_no DESC, completed_at DESC, id DESC) AS rn, COUNT(*) OVER (PARTITION BY path) AS jobs FROM (SELECT id, kind, output, completed_at, sequence_no, CASE kind WHEN $1 THEN (payload #>> string_to_array($2, '.')) END AS path FROM outbox_jobs WHERE status = 'completed' AND kind IN ($3)) s) r
WHERE rn = 1;
SELECT CAST(COALESCE(SUM(jobs), 0) AS BIGINT), COUNT(*)
FROM pg_temp.outbox_path_scan;

-- scan: a page
SELECT seq, path, job_id, kind, output, completed_at, jobs
FROM pg_temp.outbox_path_scan
WHERE seq > $1
ORDER BY seq
LIMIT $2;

-- scan: the latest completed job of every key
DROP TABLE IF EXISTS pg_temp.outbox_path_scan;
CREATE TEMPORARY TABLE outbox_path_scan (seq BIGINT PRIMARY KEY, path TEXT, job_id TEXT NOT NULL, kind TEXT NOT NULL, output TEXT, completed_at BIGINT, jobs BIGINT NOT NULL) ON COMMIT DROP;
INSERT INTO pg_temp.outbox_path_scan (seq, path, job_id, kind, output, completed_at, jobs)
SELECT ROW_NUMBER() OVER (ORDER BY (path IS NULL) DESC, path COLLATE "C"), path, id, kind, output, completed_at, jobs
FROM (SELECT path, id, kind, output::text AS output, (EXTRACT(EPOCH FROM completed_at) * 1000)::int8 AS completed_at, ROW_NUMBER() OVER (PARTITION BY path ORDER BY (sequence_no IS NULL), sequence_no DESC, completed_at DESC, id DESC) AS rn, COUNT(*) OVER (PARTITION BY path) AS jobs FROM (SELECT id, kind, output, completed_at, sequence_no, ('[' || concat_ws(',', COALESCE((payload #> string_to_array($1, '.'))::text, 'null'), COALESCE((payload #> string_to_array($2, '.'))::text, 'null')) || ']') AS path FROM outbox_jobs WHERE status = 'completed' AND kind IN ($3)) s) r
WHERE rn = 1;
SELECT CAST(COALESCE(SUM(jobs), 0) AS BIGINT), COUNT(*)
FROM pg_temp.outbox_path_scan;

-- remote: renew one lease
UPDATE outbox_jobs
SET lease_expires_at = GREATEST(COALESCE(lease_expires_at, (TIMESTAMPTZ 'epoch' + (0)::int8 * INTERVAL '1 millisecond')), (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond'))
WHERE id = $2 AND (status || '') = 'claimed' AND locked_by = $3 AND runs = $4;
SELECT (EXTRACT(EPOCH FROM lease_expires_at) * 1000)::int8
FROM outbox_jobs
WHERE id = $1 AND (status || '') = 'claimed' AND locked_by = $2 AND runs = $3;

-- schema: the applied migrations
SELECT COUNT(*)
FROM pg_tables
WHERE schemaname = current_schema() AND tablename = 'outbox_migrations';
SELECT version
FROM outbox_migrations
WHERE version IN ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23);
CREATE TABLE IF NOT EXISTS "outbox_migrations" ( "version" varchar NOT NULL PRIMARY KEY, "applied_at" bigint NOT NULL );
SELECT "version", "applied_at"
FROM "outbox_migrations"
ORDER BY "version" ASC;

-- worker: claim: let in due scheduled jobs
UPDATE outbox_jobs
SET scheduled = false
WHERE id = ANY(ARRAY(SELECT id FROM outbox_jobs WHERE due_at <= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED)) AND status = 'pending' AND scheduled;

-- worker: claim: the queues with ready jobs
WITH RECURSIVE q(queue) AS ((SELECT queue FROM outbox_jobs WHERE open ORDER BY queue DESC LIMIT 1) UNION ALL SELECT (SELECT j.queue FROM outbox_jobs j WHERE j.open AND j.queue < q.queue ORDER BY j.queue DESC LIMIT 1) FROM q WHERE q.queue IS NOT NULL)
SELECT queue
FROM q
WHERE queue IS NOT NULL
UNION
SELECT queue
FROM outbox_kinds
WHERE name = ANY($1)
ORDER BY 1;

-- worker: claim: the lock of a limited kind
SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ' outbox limit ' || $1, 0));

-- worker: claim: the running jobs of a limited kind
SELECT count(*)
FROM outbox_jobs
WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_claims)) AND (status || '') = 'claimed' AND kind = $1;

-- worker: claim: kinds from every queue
WITH c AS MATERIALIZED (SELECT ctid FROM outbox_jobs WHERE open AND status = 'pending' AND queue = ($6::text[])[1] AND kind = ($4::text[])[1] AND NOT EXISTS (SELECT FROM outbox_pauses x WHERE (x.scope = 'queue' AND x.name = ($6::text[])[1] OR x.scope = 'kind' AND x.name = ($4::text[])[1] AND x.key = '') AND (x.ends_at IS NULL OR x.ends_at > (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'))) AND run_at <= (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond') ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED),
u AS (UPDATE outbox_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = $1, locked_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), claimed_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), lease_expires_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), event_flip = NOT j.event_flip WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts, j.schema_hash, j.runs, j.sequence_key IS NOT NULL AS sequenced, j.priority, (EXTRACT(EPOCH FROM j.run_at) * 1000)::int8 AS run_at_ms, j.trace, j.has_children),
l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT $1, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), array_agg(id) FROM u HAVING count(*) > 0 RETURNING id),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(queue) ELSE '' END AS queue FROM u) SELECT '', s.kind, s.queue, (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), 'claimed', 0, $1, json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) FROM s, u GROUP BY s.kind, s.queue HAVING count(*) > 0)
SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequenced, priority, run_at_ms, (SELECT id FROM l) AS claim, trace, has_children
FROM u;

-- worker: claim: kinds from every queue, after the last claim's end
WITH c AS MATERIALIZED (SELECT ctid FROM outbox_jobs WHERE open AND status = 'pending' AND queue = ($6::text[])[1] AND kind = ($4::text[])[1] AND NOT EXISTS (SELECT FROM outbox_pauses x WHERE (x.scope = 'queue' AND x.name = ($6::text[])[1] OR x.scope = 'kind' AND x.name = ($4::text[])[1] AND x.key = '') AND (x.ends_at IS NULL OR x.ends_at > (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'))) AND run_at <= (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond') AND priority = $7 AND (run_at, id) > ((TIMESTAMPTZ 'epoch' + ($8)::int8 * INTERVAL '1 millisecond'), $9) ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED),
u AS (UPDATE outbox_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = $1, locked_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), claimed_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), lease_expires_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), event_flip = NOT j.event_flip WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts, j.schema_hash, j.runs, j.sequence_key IS NOT NULL AS sequenced, j.priority, (EXTRACT(EPOCH FROM j.run_at) * 1000)::int8 AS run_at_ms, j.trace, j.has_children),
l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT $1, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), array_agg(id) FROM u HAVING count(*) > 0 RETURNING id),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(queue) ELSE '' END AS queue FROM u) SELECT '', s.kind, s.queue, (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), 'claimed', 0, $1, json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) FROM s, u GROUP BY s.kind, s.queue HAVING count(*) > 0)
SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequenced, priority, run_at_ms, (SELECT id FROM l) AS claim, trace, has_children
FROM u;

-- worker: claim: kinds from some queues
WITH c AS MATERIALIZED (SELECT p.ctid FROM unnest($4::text[]) AS k(kind) CROSS JOIN unnest($6::text[]) AS q(queue) CROSS JOIN LATERAL (SELECT ctid, id, priority, run_at FROM outbox_jobs WHERE open AND status = 'pending' AND queue = q.queue AND kind = k.kind AND run_at <= (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond') ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) p WHERE NOT EXISTS (SELECT FROM outbox_pauses x WHERE (x.scope = 'queue' AND x.name = q.queue OR x.scope = 'kind' AND x.name = k.kind AND x.key = '') AND (x.ends_at IS NULL OR x.ends_at > (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'))) ORDER BY p.priority DESC, p.run_at, p.id LIMIT $5),
u AS (UPDATE outbox_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = $1, locked_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), claimed_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), lease_expires_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), event_flip = NOT j.event_flip WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts, j.schema_hash, j.runs, j.sequence_key IS NOT NULL AS sequenced, j.priority, (EXTRACT(EPOCH FROM j.run_at) * 1000)::int8 AS run_at_ms, j.trace, j.has_children),
l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT $1, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), array_agg(id) FROM u HAVING count(*) > 0 RETURNING id),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(queue) ELSE '' END AS queue FROM u) SELECT '', s.kind, s.queue, (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), 'claimed', 0, $1, json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) FROM s, u GROUP BY s.kind, s.queue HAVING count(*) > 0)
SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequenced, priority, run_at_ms, (SELECT id FROM l) AS claim, trace, has_children
FROM u;

-- worker: claim: kinds from some queues, after the last claim's end
WITH c AS MATERIALIZED (SELECT p.ctid FROM unnest($4::text[]) AS k(kind) CROSS JOIN unnest($6::text[]) AS q(queue) CROSS JOIN LATERAL (SELECT ctid, id, priority, run_at FROM outbox_jobs WHERE open AND status = 'pending' AND queue = q.queue AND kind = k.kind AND run_at <= (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond') AND priority = $7 AND (run_at, id) > ((TIMESTAMPTZ 'epoch' + ($8)::int8 * INTERVAL '1 millisecond'), $9) ORDER BY priority DESC, run_at, id LIMIT $5 FOR UPDATE SKIP LOCKED) p WHERE NOT EXISTS (SELECT FROM outbox_pauses x WHERE (x.scope = 'queue' AND x.name = q.queue OR x.scope = 'kind' AND x.name = k.kind AND x.key = '') AND (x.ends_at IS NULL OR x.ends_at > (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'))) ORDER BY p.priority DESC, p.run_at, p.id LIMIT $5),
u AS (UPDATE outbox_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = $1, locked_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), claimed_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), lease_expires_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), event_flip = NOT j.event_flip WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts, j.schema_hash, j.runs, j.sequence_key IS NOT NULL AS sequenced, j.priority, (EXTRACT(EPOCH FROM j.run_at) * 1000)::int8 AS run_at_ms, j.trace, j.has_children),
l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT $1, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), array_agg(id) FROM u HAVING count(*) > 0 RETURNING id),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(queue) ELSE '' END AS queue FROM u) SELECT '', s.kind, s.queue, (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), 'claimed', 0, $1, json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) FROM s, u GROUP BY s.kind, s.queue HAVING count(*) > 0)
SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequenced, priority, run_at_ms, (SELECT id FROM l) AS claim, trace, has_children
FROM u;

-- worker: flow: the pauses and holds in force
SELECT scope, name, key, (EXTRACT(EPOCH FROM ends_at) * 1000)::int8
FROM outbox_pauses
WHERE ends_at IS NULL OR ends_at > (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond')
UNION ALL
SELECT '', k, '', NULL
FROM unnest($2::text[]) AS k
WHERE EXISTS (SELECT 1 FROM outbox_jobs WHERE queue = ANY($3) AND kind = k AND open AND status = 'pending' AND run_at <= (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond'))
UNION ALL
SELECT 'keys', k, '', ((SELECT flow_key FROM outbox_jobs WHERE open AND flow_key IS NOT NULL AND kind = k AND flow_key < (SELECT flow_key FROM outbox_jobs WHERE open AND flow_key IS NOT NULL AND kind = k ORDER BY flow_key DESC LIMIT 1) ORDER BY flow_key DESC LIMIT 1) IS NOT NULL)::int::int8
FROM unnest($4::text[]) AS k;

-- worker: flow: a controlled kind's state
SELECT (SELECT COALESCE(json_agg(json_build_array(b.key, b.level, b.at)), '[]') FROM (SELECT key, level, at FROM outbox_rates WHERE name = $1 FOR UPDATE) b)::text, (SELECT COALESCE(json_agg(json_build_array(f.key, f.weight, f.pass)), '[]') FROM outbox_fair f WHERE f.name = $1)::text, (WITH RECURSIVE k(key) AS ((SELECT flow_key FROM outbox_jobs WHERE $2 AND open AND flow_key IS NOT NULL AND kind = $1 ORDER BY flow_key LIMIT 1) UNION ALL SELECT (SELECT j.flow_key FROM outbox_jobs j WHERE j.open AND j.flow_key IS NOT NULL AND j.kind = $1 AND j.flow_key > k.key ORDER BY j.flow_key LIMIT 1) FROM k WHERE k.key IS NOT NULL) SELECT COALESCE(json_agg(key), '[]') FROM k WHERE key IS NOT NULL)::text, CASE WHEN $3 THEN (SELECT count(*) FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM outbox_claims)) AND (status || '') = 'claimed' AND kind = $1) ELSE 0 END;

-- worker: flow: a kind's next jobs
SELECT id, flow_key, COALESCE(cost, 1)::int8, priority, (EXTRACT(EPOCH FROM run_at) * 1000)::int8
FROM outbox_jobs
WHERE open AND status = 'pending' AND kind = $1 AND queue = ANY($4) AND run_at <= (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond') AND ($5 = false OR flow_key IS NULL)
ORDER BY priority DESC, run_at, id
LIMIT $3;

-- worker: flow: each key's next jobs
SELECT id, flow_key, cost, priority, run_ms
FROM (SELECT p.* FROM unnest($5::text[], $6::int8[]) AS k(key, n) CROSS JOIN LATERAL (SELECT id, flow_key, COALESCE(cost, 1)::int8 AS cost, priority, (EXTRACT(EPOCH FROM run_at) * 1000)::int8 AS run_ms FROM outbox_jobs WHERE open AND status = 'pending' AND kind = $1 AND flow_key = k.key AND queue = ANY($4) AND run_at <= (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond') ORDER BY priority DESC, run_at, id LIMIT k.n) p UNION ALL SELECT p.* FROM unnest($7::text[], $8::int8[], $9::int4[], $10::int8[], $11::text[]) AS k(key, n, pr, ra, after) CROSS JOIN LATERAL (SELECT id, flow_key, COALESCE(cost, 1)::int8 AS cost, priority, (EXTRACT(EPOCH FROM run_at) * 1000)::int8 AS run_ms FROM outbox_jobs WHERE open AND status = 'pending' AND kind = $1 AND flow_key = k.key AND queue = ANY($4) AND run_at <= (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond') AND priority = k.pr AND (run_at, id) > ((TIMESTAMPTZ 'epoch' + (k.ra)::int8 * INTERVAL '1 millisecond'), k.after) ORDER BY priority DESC, run_at, id LIMIT k.n) p) c
ORDER BY priority DESC, run_ms, id
LIMIT $3;

-- worker: claim: jobs a controlled kind's plan chose, its buckets and passes written back
WITH c AS MATERIALIZED (SELECT ctid FROM outbox_jobs WHERE id = ANY($4::text[]) AND status = 'pending' FOR UPDATE),
sb AS (INSERT INTO outbox_rates (name, key, amount, window_ms, burst, level, at) SELECT $5, k, $6, $7, $8, l, a FROM unnest($9::text[], $10::float8[], $11::int8[]) AS b(k, l, a) ON CONFLICT (name, key) DO UPDATE SET level = excluded.level, at = excluded.at),
sf AS (INSERT INTO outbox_fair (name, key, weight, pass) SELECT $5, k, 1, p FROM unnest($12::text[], $13::float8[]) AS f(k, p) ON CONFLICT (name, key) DO UPDATE SET pass = excluded.pass),
u AS (UPDATE outbox_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = $1, locked_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), claimed_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), lease_expires_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), event_flip = NOT j.event_flip WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM c)) RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts, j.max_attempts, j.schema_hash, j.runs, j.sequence_key IS NOT NULL AS sequenced, j.priority, (EXTRACT(EPOCH FROM j.run_at) * 1000)::int8 AS run_at_ms, j.trace, j.has_children),
l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT $1, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), array_agg(id) FROM u HAVING count(*) > 0 RETURNING id),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(queue) ELSE '' END AS queue FROM u) SELECT '', s.kind, s.queue, (TIMESTAMPTZ 'epoch' + ($2)::int8 * INTERVAL '1 millisecond'), 'claimed', 0, $1, json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) FROM s, u GROUP BY s.kind, s.queue HAVING count(*) > 0)
SELECT id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequenced, priority, run_at_ms, (SELECT id FROM l) AS claim, trace, has_children
FROM u;

-- worker: complete: a batch of outcomes
WITH u AS (UPDATE outbox_jobs j SET status = (($2::jsonb -> j.id) ->> 1), attempts = j.attempts - (($2::jsonb -> j.id) ->> 5)::int4, output = CASE WHEN (($2::jsonb -> j.id) ->> 1) = 'completed' THEN (($2::jsonb -> j.id) ->> 2)::jsonb ELSE j.output END, completed_at = CASE WHEN (($2::jsonb -> j.id) ->> 1) = 'completed' THEN (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond') ELSE j.completed_at END, last_error = COALESCE((($2::jsonb -> j.id) ->> 3), j.last_error), run_at = COALESCE(TIMESTAMPTZ 'epoch' + (($2::jsonb -> j.id) ->> 4)::int8 * INTERVAL '1 millisecond', j.run_at), scheduled = COALESCE((($2::jsonb -> j.id) ->> 4)::int8 > ($3)::int8, false), lease_expires_at = NULL, updated_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), event_flip = (j.event_flip <> ((($2::jsonb -> j.id) ->> 1) = 'completed')) WHERE j.id = ANY($1::text[]) AND (j.status || '') = 'claimed' AND j.locked_by = $4 AND j.runs = (($2::jsonb -> j.id) ->> 0)::int4 RETURNING j.id, j.kind, j.queue, j.status, j.attempts),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(queue) ELSE '' END AS queue FROM u WHERE status = 'completed') SELECT '', s.kind, s.queue, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), 'completed', 0, $4, json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) FROM s, u WHERE status = 'completed' GROUP BY s.kind, s.queue HAVING count(*) > 0),
f AS (INSERT INTO outbox_finished (at, jobs) SELECT (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), array_agg(id) FROM u WHERE status = 'completed' HAVING count(*) > 0),
x AS (DELETE FROM outbox_claims c WHERE c.id = ANY($5::int8[]))
SELECT id
FROM u;

-- worker: complete: a batch of plain completions
WITH u AS (UPDATE outbox_jobs j SET status = 'completed', output = NULL, completed_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), scheduled = false, lease_expires_at = NULL, updated_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), event_flip = NOT j.event_flip WHERE j.id = ANY($1::text[]) AND (j.status || '') = 'claimed' AND j.locked_by = $4 AND j.runs = ($2::jsonb ->> j.id)::int4 RETURNING j.id, j.kind, j.queue, j.status, j.attempts),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(queue) ELSE '' END AS queue FROM u) SELECT '', s.kind, s.queue, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), 'completed', 0, $4, json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) FROM s, u GROUP BY s.kind, s.queue HAVING count(*) > 0),
f AS (INSERT INTO outbox_finished (at, jobs) SELECT (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), array_agg(id) FROM u WHERE status = 'completed' HAVING count(*) > 0),
x AS (DELETE FROM outbox_claims c WHERE c.id = ANY($5::int8[]))
SELECT id
FROM u;

-- worker: complete: a batch of completions kept nowhere or archived
WITH d AS (DELETE FROM outbox_jobs j WHERE j.id = ANY($1::text[]) AND (j.status || '') = 'claimed' AND j.locked_by = $4 AND j.runs = (($2::jsonb -> j.id) ->> 0)::int4 AND (($2::jsonb -> j.id) ->> 6)::bool AND (($2::jsonb -> j.id) ->> 1) = 'completed' AND j.sequence_key IS NULL RETURNING j.*, (($2::jsonb -> j.id) ->> 2) AS done_output, (($2::jsonb -> j.id) ->> 7)::bool AS archived),
a AS (INSERT INTO outbox_jobs_done (id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at) SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, done_output::jsonb, attempts, runs, locked_by, locked_at, claimed_at, 'completed', (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), NULL, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond') FROM d WHERE archived),
k AS (UPDATE outbox_jobs j SET status = (($2::jsonb -> j.id) ->> 1), attempts = j.attempts - (($2::jsonb -> j.id) ->> 5)::int4, output = CASE WHEN (($2::jsonb -> j.id) ->> 1) = 'completed' THEN (($2::jsonb -> j.id) ->> 2)::jsonb ELSE j.output END, completed_at = CASE WHEN (($2::jsonb -> j.id) ->> 1) = 'completed' THEN (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond') ELSE j.completed_at END, last_error = COALESCE((($2::jsonb -> j.id) ->> 3), j.last_error), run_at = COALESCE(TIMESTAMPTZ 'epoch' + (($2::jsonb -> j.id) ->> 4)::int8 * INTERVAL '1 millisecond', j.run_at), scheduled = COALESCE((($2::jsonb -> j.id) ->> 4)::int8 > ($3)::int8, false), lease_expires_at = NULL, updated_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), event_flip = (j.event_flip <> ((($2::jsonb -> j.id) ->> 1) = 'completed')) WHERE j.id = ANY($1::text[]) AND (j.status || '') = 'claimed' AND j.locked_by = $4 AND j.runs = (($2::jsonb -> j.id) ->> 0)::int4 AND NOT ((($2::jsonb -> j.id) ->> 6)::bool AND (($2::jsonb -> j.id) ->> 1) = 'completed' AND j.sequence_key IS NULL) RETURNING j.id, j.kind, j.queue, j.status, j.attempts),
u AS (SELECT * FROM k UNION ALL SELECT id, kind, queue, 'completed'::text COLLATE "C", attempts FROM d),
m AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) SELECT id, kind, queue, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), 'completed', attempts, $4, '[]' FROM d WHERE NOT archived),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs) WITH s AS MATERIALIZED (SELECT CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(kind) ELSE '' END AS kind, CASE WHEN min(kind) = max(kind) AND min(queue) = max(queue) THEN min(queue) ELSE '' END AS queue FROM u WHERE status = 'completed') SELECT '', s.kind, s.queue, (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), 'completed', 0, $4, json_agg(CASE WHEN u.kind = s.kind AND u.queue = s.queue THEN json_build_array(u.id, u.attempts) ELSE json_build_array(u.id, u.kind, u.queue, u.attempts) END) FROM s, u WHERE status = 'completed' GROUP BY s.kind, s.queue HAVING count(*) > 0),
f AS (INSERT INTO outbox_finished (at, jobs) SELECT (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond'), array_agg(id) FROM k WHERE status = 'completed' HAVING count(*) > 0),
x AS (DELETE FROM outbox_claims c WHERE c.id = ANY($5::int8[]))
SELECT id
FROM u;

-- worker: complete: one outcome
WITH u AS (UPDATE outbox_jobs j SET status = (($2::jsonb -> j.id) ->> 1), attempts = j.attempts - (($2::jsonb -> j.id) ->> 5)::int4, output = CASE WHEN (($2::jsonb -> j.id) ->> 1) = 'completed' THEN (($2::jsonb -> j.id) ->> 2)::jsonb ELSE j.output END, completed_at = CASE WHEN (($2::jsonb -> j.id) ->> 1) = 'completed' THEN (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond') ELSE j.completed_at END, last_error = COALESCE((($2::jsonb -> j.id) ->> 3), j.last_error), run_at = COALESCE(TIMESTAMPTZ 'epoch' + (($2::jsonb -> j.id) ->> 4)::int8 * INTERVAL '1 millisecond', j.run_at), scheduled = COALESCE((($2::jsonb -> j.id) ->> 4)::int8 > ($3)::int8, false), lease_expires_at = NULL, updated_at = (TIMESTAMPTZ 'epoch' + ($3)::int8 * INTERVAL '1 millisecond') WHERE j.id = ANY($1::text[]) AND (j.status || '') = 'claimed' AND j.locked_by = $4 AND j.runs = (($2::jsonb -> j.id) ->> 0)::int4 RETURNING j.id),
x AS (DELETE FROM outbox_claims c WHERE c.id = ANY($5::int8[]))
SELECT id
FROM u;

-- worker: renew: leases
WITH l AS (SELECT id FROM outbox_jobs WHERE (status || '') = 'claimed' AND locked_by = $2 AND id = ANY($3) FOR UPDATE SKIP LOCKED) UPDATE outbox_jobs j
SET lease_expires_at = GREATEST(COALESCE(j.lease_expires_at, TIMESTAMPTZ 'epoch'), (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond'))
WHERE j.id = ANY(ARRAY(SELECT id FROM l));

-- worker: renew: one lease
UPDATE outbox_jobs
SET lease_expires_at = GREATEST(COALESCE(lease_expires_at, TIMESTAMPTZ 'epoch'), (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond'))
WHERE (status || '') = 'claimed' AND locked_by = $2 AND id = ($3::text[])[1];

-- worker: rescue: the sequences to let go, locked
SELECT array_agg(k)
FROM (SELECT DISTINCT w.sequence_key AS k FROM outbox_jobs w WHERE w.blocks AND w.status = 'pending' AND w.waiting AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = w.sequence_key AND c.blocks AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting))) ORDER BY 1) s
WHERE pg_try_advisory_xact_lock(hashtextextended($1 || ' outbox sequence ' || k, 0));

-- worker: rescue: let go locked sequences
UPDATE outbox_jobs w
SET waiting = false
FROM unnest($1::text[]) AS s(k)
WHERE w.id = (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = s.k AND h.blocks ORDER BY h.sequence_no LIMIT 1) AND w.status = 'pending' AND w.waiting AND w.parents_left = 0 AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = s.k AND c.blocks AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting)));

-- worker: rescue: expired claims
WITH x AS (SELECT id, jobs FROM outbox_claims WHERE lease_expires_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') FOR UPDATE SKIP LOCKED),
r AS (SELECT id FROM outbox_jobs WHERE id = ANY(ARRAY(SELECT unnest(jobs) FROM x)) AND (status || '') = 'claimed' AND lease_expires_at < (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') FOR UPDATE SKIP LOCKED),
u AS (UPDATE outbox_jobs j SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END, last_error = 'lease expired while claimed by ' || COALESCE(j.locked_by, 'an unknown worker') || CASE WHEN j.attempts >= j.max_attempts THEN '; no attempts left' ELSE '' END, lease_expires_at = NULL, run_at = (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond'), updated_at = (TIMESTAMPTZ 'epoch' + ($1)::int8 * INTERVAL '1 millisecond') WHERE j.id = ANY(ARRAY(SELECT id FROM r)) RETURNING j.id, j.kind, j.queue, j.attempts, j.status, j.locked_by),
k AS (SELECT x.id, (SELECT min(COALESCE(j.lease_expires_at, TIMESTAMPTZ 'epoch')) FROM outbox_jobs j WHERE j.id = ANY(x.jobs) AND (j.status || '') = 'claimed' AND j.id <> ALL(ARRAY(SELECT id FROM r))) AS next FROM x),
d AS (DELETE FROM outbox_claims c USING k WHERE c.id = k.id AND k.next IS NULL),
m AS (UPDATE outbox_claims c SET lease_expires_at = k.next FROM k WHERE c.id = k.id AND k.next IS NOT NULL)
SELECT id, kind, queue, attempts, status, locked_by
FROM u;

-- worker: listener: lock sequences enqueued onto under a snapshot
SELECT array_agg(k) FILTER (WHERE locked), array_agg(k) FILTER (WHERE NOT locked)
FROM (SELECT k, pg_try_advisory_xact_lock(hashtextextended($1 || ' outbox sequence ' || k, 0)) AS locked FROM (SELECT DISTINCT u.k FROM unnest($2::text[]) AS u(k) WHERE EXISTS (SELECT 1 FROM outbox_jobs w WHERE w.sequence_key = u.k AND w.blocks AND w.status = 'pending' AND w.waiting) AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = u.k AND c.blocks AND (c.status = 'claimed' OR (c.status = 'pending' AND NOT c.waiting))) ORDER BY 1) s) t;

-- worker: wake: the workers of a schema
SELECT pg_notify('outbox_jobs', $1);
