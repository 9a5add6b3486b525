-- Every statement outbox sends to SQLite, rendered by the conformance suite's `catalogue.rs` (run it with
-- OUTBOX_BLESS=1 to write this file again). Sections name the operation and its variant; a batch shows two
-- rows where it repeats one per job. The worker's own statements are at the end.

-- enqueue: one job
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled, sequence_no, waiting)
VALUES (?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, FALSE, NULL, 0);

-- enqueue: one job with an idempotency key
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled, sequence_no, waiting)
VALUES (?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, FALSE, NULL, 0)
ON CONFLICT DO NOTHING;

-- enqueue: a batch
WITH s AS (SELECT 0 AS none, ? AS c1, ? AS c2, ? AS c3, ? AS c4, ? AS c5, ? AS c6, ? AS c7, ? AS c8, ? AS c9, ? AS c10, ? AS c11, ? AS c12, ? AS c13, ? AS c14, ? AS c15, ? AS c16) INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled, sequence_no, waiting)
SELECT v.column1, s.c1, s.c2, s.c3, 'pending', s.c4, 0, s.c5, s.c6, s.c7, s.c8, s.c9, s.c10, s.c11, s.c12, s.c13, s.c14, s.c15, s.c16, FALSE, NULL, 0
FROM s, (VALUES (?), (?)) AS v
WHERE TRUE;

-- enqueue: a batch with idempotency keys
WITH s AS (SELECT 0 AS none, ? AS c1, ? AS c2, ? AS c3, ? AS c4, ? AS c5, ? AS c6, ? AS c8, ? AS c9, ? AS c10, ? AS c11, ? AS c12, ? AS c13, ? AS c14, ? AS c15, ? AS c16) INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled, sequence_no, waiting)
SELECT v.column1, s.c1, s.c2, s.c3, 'pending', s.c4, 0, s.c5, s.c6, v.column2, s.c8, s.c9, s.c10, s.c11, s.c12, s.c13, s.c14, s.c15, s.c16, FALSE, NULL, 0
FROM s, (VALUES (?, ?), (?, ?)) AS v
WHERE TRUE
ON CONFLICT DO NOTHING;

-- enqueue: a batch of sequenced jobs
INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled, sequence_no, waiting)
VALUES (?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, FALSE, (SELECT COALESCE(MAX(sequence_no), 0) + 1 FROM outbox_jobs WHERE sequence_key = ?), EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = ? AND (b.status IN ('pending', 'claimed') OR (b.status IN ('failed', 'cancelled') AND b.sequence_hold = 1))));

-- enqueue: a batch a duplicate key cut short (the rows read back)
WITH s AS (SELECT 0 AS none, ? AS c1, ? AS c2, ? AS c3, ? AS c4, ? AS c5, ? AS c6, ? AS c8, ? AS c9, ? AS c10, ? AS c11, ? AS c12, ? AS c13, ? AS c14, ? AS c15, ? AS c16) INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, flow_key, cost, subject, trace, scheduled, sequence_no, waiting)
SELECT v.column1, s.c1, s.c2, s.c3, 'pending', s.c4, 0, s.c5, s.c6, v.column2, s.c8, s.c9, s.c10, s.c11, s.c12, s.c13, s.c14, s.c15, s.c16, FALSE, NULL, 0
FROM s, (VALUES (?, ?), (?, ?)) AS v
WHERE TRUE
ON CONFLICT DO NOTHING;
SELECT id
FROM outbox_jobs
WHERE id IN (?, ?)
UNION
SELECT id
FROM outbox_jobs_done
WHERE id IN (?, ?)
UNION
SELECT job_id
FROM outbox_job_events
WHERE job_id IN (?, ?);

-- enqueue: the active job holding a key
SELECT t.id, COALESCE(t.sequence_key = ? AND EXISTS (SELECT 1 FROM outbox_jobs l WHERE l.sequence_key = t.sequence_key AND l.sequence_no > t.sequence_no), FALSE)
FROM outbox_jobs t
WHERE t.kind = ? AND t.idempotency_key = ? AND t.status IN ('pending', 'claimed') AND NOT t.superseded
LIMIT 1;

-- enqueue: a job superseded by later jobs of its sequence
UPDATE outbox_jobs
SET superseded = TRUE
WHERE id = ? AND status IN ('pending', 'claimed') AND NOT superseded;

-- jobs: one job
SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE id = ?
UNION ALL
SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), NULL AS subject, NULL AS trace
FROM outbox_jobs_archive outbox_jobs
WHERE id = ?;

-- jobs: a list
SELECT *
FROM (SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace FROM outbox_jobs WHERE TRUE ORDER BY id DESC LIMIT ?) j
UNION ALL
SELECT *
FROM (SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), NULL AS subject, NULL AS trace FROM outbox_jobs_archive outbox_jobs WHERE TRUE ORDER BY id DESC LIMIT ?) a
ORDER BY 1 DESC
LIMIT ?;

-- jobs: a list by status, kind, queue and sequence
SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE TRUE AND status = ? AND kind = ? AND queue = ? AND sequence_key = ?
ORDER BY sequence_no DESC
LIMIT ?;

-- jobs: a page of a list by key, finished since a time
SELECT *
FROM (SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace FROM outbox_jobs WHERE TRUE AND updated_at >= ? AND idempotency_key = ? AND id < ? ORDER BY id DESC LIMIT ?) j
UNION ALL
SELECT *
FROM (SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), NULL AS subject, NULL AS trace FROM outbox_jobs_archive outbox_jobs WHERE TRUE AND updated_at >= ? AND idempotency_key = ? AND id < ? ORDER BY id DESC LIMIT ?) a
ORDER BY 1 DESC
LIMIT ?;

-- jobs: stuck claims
SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE status = 'claimed' AND lease_expires_at < ?
ORDER BY lease_expires_at;

-- jobs: retry one
UPDATE outbox_jobs
SET status = 'pending', attempts = 0, scheduled = FALSE, superseded = FALSE, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, lease_expires_at = NULL, waiting = CASE WHEN sequence_key IS NULL THEN parents_left > 0 ELSE TRUE END, run_at = ?, updated_at = ?
WHERE id = ? AND status IN ('failed', 'cancelled') AND (outbox_jobs.idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = outbox_jobs.kind AND a.idempotency_key = outbox_jobs.idempotency_key AND a.status IN ('pending', 'claimed') AND NOT a.superseded));

-- jobs: retry the failed jobs of a kind and error
UPDATE outbox_jobs
SET status = 'pending', attempts = 0, scheduled = FALSE, superseded = FALSE, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, lease_expires_at = NULL, waiting = CASE WHEN sequence_key IS NULL THEN parents_left > 0 ELSE TRUE END, run_at = ?, updated_at = ?
WHERE status IN ('failed') AND id IN ( SELECT id FROM (SELECT f.id, ROW_NUMBER() OVER ( PARTITION BY f.kind, f.idempotency_key IS NULL, COALESCE(f.idempotency_key, f.id) ORDER BY f.updated_at DESC, f.id DESC) AS rn FROM outbox_jobs f WHERE f.status IN ('failed') AND f.kind = ? AND f.last_error = ? AND (f.idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = f.kind AND a.idempotency_key = f.idempotency_key AND a.status IN ('pending', 'claimed') AND NOT a.superseded))) r WHERE rn = 1);

-- jobs: cancel
UPDATE outbox_jobs
SET sequence_hold = CASE WHEN status = 'pending' THEN sequence_hold ELSE 2 END, status = 'cancelled', updated_at = ?
WHERE id = ? AND (status = 'pending' OR (status IN ('failed', 'cancelled') AND sequence_key IS NOT NULL AND sequence_hold = 1));

-- jobs: a list by subject
SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE TRUE AND subject = ?
ORDER BY id DESC
LIMIT ?;

-- jobs: cancel the jobs of a subject
UPDATE outbox_jobs
SET status = 'cancelled', updated_at = ?
WHERE subject = ? AND status = 'pending';

-- jobs: retry the jobs of a subject
UPDATE outbox_jobs
SET status = 'pending', attempts = 0, scheduled = FALSE, superseded = FALSE, sequence_hold = CASE WHEN sequence_hold = 2 THEN 1 ELSE sequence_hold END, lease_expires_at = NULL, waiting = CASE WHEN sequence_key IS NULL THEN parents_left > 0 ELSE TRUE END, run_at = ?, updated_at = ?
WHERE status IN ('failed', 'cancelled') AND id IN ( SELECT id FROM (SELECT f.id, ROW_NUMBER() OVER ( PARTITION BY f.kind, f.idempotency_key IS NULL, COALESCE(f.idempotency_key, f.id) ORDER BY f.updated_at DESC, f.id DESC) AS rn FROM outbox_jobs f WHERE f.status IN ('failed', 'cancelled') AND f.subject = ? AND (f.idempotency_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox_jobs a WHERE a.kind = f.kind AND a.idempotency_key = f.idempotency_key AND a.status IN ('pending', 'claimed') AND NOT a.superseded))) r WHERE rn = 1);

-- jobs: delete
DELETE
FROM outbox_jobs
WHERE id = ? AND status IN ('completed', 'failed', 'cancelled') AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled'));

-- jobs: purge completed jobs
DELETE
FROM outbox_jobs
WHERE status IN (?) AND updated_at < ? AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled'));
SELECT name
FROM sqlite_master
WHERE type = 'table' AND name LIKE 'outbox\_jobs\_done\_%' ESCAPE '\';
DELETE
FROM "outbox_jobs_done"
WHERE updated_at < ?;
WITH w AS (SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < ? ORDER BY id LIMIT ?) DELETE
FROM outbox_job_events
WHERE job_id IN (SELECT x.value ->> 0 FROM w, json_each(w.jobs) AS x WHERE w.event = 'completed') AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = outbox_job_events.job_id);
WITH w AS (SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < ? ORDER BY id LIMIT ?) DELETE
FROM outbox_job_events
WHERE id IN (SELECT id FROM w);

-- jobs: purge failed and cancelled jobs
DELETE
FROM outbox_jobs
WHERE status IN (?, ?) AND updated_at < ? AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled'));
DELETE
FROM outbox_job_events
WHERE job_id = '' AND at < ?;

-- stats: counts by status
SELECT kind, status, COUNT(*), MIN(created_at)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
GROUP BY kind, status
ORDER BY kind, status;

-- stats: finished since
SELECT name
FROM sqlite_master
WHERE type = 'table' AND name LIKE 'outbox\_jobs\_done\_%' ESCAPE '\';
SELECT kind, status, COUNT(*), MIN(created_at)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_done) outbox_jobs
WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= ?
GROUP BY kind, status
ORDER BY kind, status;

-- stats: activity by minute
SELECT name
FROM sqlite_master
WHERE type = 'table' AND name LIKE 'outbox\_jobs\_done\_%' ESCAPE '\';
SELECT (updated_at / ?) * ?, COUNT(CASE WHEN status = 'completed' THEN 1 END), COUNT(CASE WHEN status = 'failed' THEN 1 END)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_done) outbox_jobs
WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= ?
GROUP BY 1
ORDER BY 1;

-- stats: failures grouped by error
SELECT kind, last_error, COUNT(*), MAX(updated_at), MAX(id)
FROM outbox_jobs
WHERE status = 'failed'
GROUP BY kind, last_error
ORDER BY COUNT(*) DESC, MAX(updated_at) DESC
LIMIT ?;

-- stats: durations by kind
SELECT name
FROM sqlite_master
WHERE type = 'table' AND name LIKE 'outbox\_jobs\_done\_%' ESCAPE '\';
SELECT kind, COUNT(*), CAST(AVG(completed_at - claimed_at) AS DOUBLE PRECISION), MAX(completed_at - claimed_at), CAST(AVG(claimed_at - created_at) AS DOUBLE PRECISION)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_done) outbox_jobs
WHERE status = 'completed' AND updated_at >= ?
GROUP BY kind
ORDER BY kind;

-- stats: duplicate keys
SELECT kind, idempotency_key, COUNT(*), COUNT(CASE WHEN status IN ('pending', 'claimed') THEN 1 END), COUNT(CASE WHEN status = 'completed' THEN 1 END)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
WHERE idempotency_key IS NOT NULL
GROUP BY kind, idempotency_key
HAVING COUNT(*) > 1
ORDER BY COUNT(*) DESC, kind
LIMIT ?;

-- stats: queues
SELECT queue, COUNT(CASE WHEN status = 'pending' AND NOT waiting AND run_at <= ? THEN 1 END), COUNT(CASE WHEN status = 'pending' AND NOT waiting AND run_at > ? THEN 1 END), COUNT(CASE WHEN status = 'claimed' THEN 1 END), COUNT(CASE WHEN status = 'claimed' AND lease_expires_at < ? THEN 1 END), COUNT(CASE WHEN status = 'completed' THEN 1 END), COUNT(CASE WHEN status = 'failed' THEN 1 END), COUNT(CASE WHEN status = 'cancelled' THEN 1 END), MIN(CASE WHEN status = 'pending' AND NOT waiting AND run_at <= ? THEN run_at END), COUNT(CASE WHEN status = 'pending' AND waiting THEN 1 END)
FROM (SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_archive) outbox_jobs
GROUP BY queue
ORDER BY queue;

-- stats: blocked sequences
SELECT COUNT(*)
FROM outbox_jobs
WHERE sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1 AND NOT EXISTS (SELECT 1 FROM outbox_jobs e WHERE e.sequence_key = outbox_jobs.sequence_key AND e.sequence_no < outbox_jobs.sequence_no AND (e.status IN ('pending', 'claimed') OR (e.status IN ('failed', 'cancelled') AND e.sequence_hold = 1)));
SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace, (SELECT COUNT(*) FROM outbox_jobs w WHERE w.sequence_key = outbox_jobs.sequence_key AND w.status = 'pending' AND w.waiting)
FROM outbox_jobs
WHERE sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1 AND NOT EXISTS (SELECT 1 FROM outbox_jobs e WHERE e.sequence_key = outbox_jobs.sequence_key AND e.sequence_no < outbox_jobs.sequence_no AND (e.status IN ('pending', 'claimed') OR (e.status IN ('failed', 'cancelled') AND e.sequence_hold = 1)))
ORDER BY updated_at
LIMIT ?;

-- events: a job's history
SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), subject, trace
FROM outbox_jobs
WHERE id = ?
UNION ALL
SELECT id, kind, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, locked_at, lease_expires_at, last_error, idempotency_key, schema_hash, output, created_at, claimed_at, completed_at, updated_at, runs, sequence_key, sequence_no, CASE WHEN waiting AND status = 'pending' THEN (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = outbox_jobs.sequence_key AND h.id <> outbox_jobs.id AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) AND (h.sequence_no < outbox_jobs.sequence_no OR h.status = 'claimed' OR (h.status = 'pending' AND NOT h.waiting)) ORDER BY h.sequence_no LIMIT 1) END, (sequence_key IS NOT NULL AND status IN ('failed', 'cancelled') AND sequence_hold = 1), NULL AS subject, NULL AS trace
FROM outbox_jobs_archive outbox_jobs
WHERE id = ?;
SELECT at, event, attempt, worker, error, claimed_at, completed_at
FROM outbox_job_events
WHERE job_id = ?
ORDER BY id;

-- events: whether a job outlived its row
SELECT 1
FROM outbox_job_events
WHERE job_id = ?
LIMIT 1;

-- events: the feed's end
SELECT CAST(COALESCE(MAX(id), 0) AS TEXT)
FROM outbox_job_events;

-- events: the feed after a position
SELECT CAST(id AS TEXT), job_id, kind, queue, event, attempt, worker, error, at, jobs
FROM outbox_job_events
WHERE id >= ?
ORDER BY id
LIMIT ?;

-- kinds: record
INSERT INTO outbox_kinds (name, "schema", schema_hash, queue, priority, max_attempts, is_unique, key_fields, recorded_by, first_seen_at, updated_at, sequence, on_sequence_failure, concurrency, rate, rate_key, fair, cost, subject)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE
SET "schema" = excluded."schema", schema_hash = excluded.schema_hash, queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts, is_unique = excluded.is_unique, key_fields = excluded.key_fields, recorded_by = excluded.recorded_by, updated_at = excluded.updated_at, sequence = excluded.sequence, on_sequence_failure = excluded.on_sequence_failure, concurrency = excluded.concurrency, rate = excluded.rate, rate_key = excluded.rate_key, fair = excluded.fair, cost = excluded.cost, subject = excluded.subject;

-- kinds: list
SELECT name, "schema", schema_hash, queue, priority, max_attempts, is_unique, key_fields, recorded_by, first_seen_at, updated_at, sequence, on_sequence_failure, concurrency, rate, rate_key, fair, cost, subject
FROM outbox_kinds
ORDER BY name;

-- kinds: one
SELECT name, "schema", schema_hash, queue, priority, max_attempts, is_unique, key_fields, recorded_by, first_seen_at, updated_at, sequence, on_sequence_failure, concurrency, rate, rate_key, fair, cost, subject
FROM outbox_kinds
WHERE name = ?
ORDER BY name;

-- workers: register or renew
INSERT INTO outbox_workers (id, host, pid, queues, kinds, concurrency, running, remote, started_at, last_seen_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, queues = excluded.queues, kinds = excluded.kinds, concurrency = excluded.concurrency, running = excluded.running, remote = excluded.remote, last_seen_at = excluded.last_seen_at, expires_at = excluded.expires_at;
DELETE
FROM outbox_workers
WHERE expires_at < ?;

-- workers: list
SELECT id, host, pid, queues, kinds, concurrency, running, remote, started_at, last_seen_at, expires_at
FROM outbox_workers
WHERE expires_at > ?
ORDER BY started_at, id;

-- workers: remove
DELETE
FROM outbox_workers
WHERE id = ?;

-- schedules: register
INSERT INTO outbox_schedules (name, kind, spec, time_zone, missed, updated_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE
SET kind = excluded.kind, spec = excluded.spec, time_zone = excluded.time_zone, missed = excluded.missed, updated_at = excluded.updated_at;
SELECT last_tick
FROM outbox_schedules
WHERE name = ?;

-- schedules: claim a tick
UPDATE outbox_schedules
SET last_tick = ?, last_job_id = NULL, updated_at = ?
WHERE name = ? AND (last_tick IS NULL OR last_tick < ?);

-- schedules: the tick's job
UPDATE outbox_schedules
SET last_job_id = ?
WHERE name = ?;

-- schedules: list
SELECT name, kind, spec, time_zone, missed, last_tick, last_job_id, updated_at
FROM outbox_schedules
ORDER BY name;

-- locks: take or renew
UPDATE outbox_locks
SET holder = ?, expires_at = ?
WHERE name = ? AND (holder = ? OR expires_at < ?);
INSERT INTO outbox_locks (name, holder, expires_at)
VALUES (?, ?, ?)
ON CONFLICT DO NOTHING;

-- locks: held by another
SELECT COUNT(*)
FROM outbox_locks
WHERE name = ? AND holder <> ? AND expires_at >= ?;

-- locks: release
DELETE
FROM outbox_locks
WHERE name = ? AND holder = ?;

-- reconciliations: record
INSERT INTO outbox_reconciliations (reconciler, at, worker, report)
VALUES (?, ?, ?, ?)
ON CONFLICT (reconciler) DO UPDATE
SET at = excluded.at, worker = excluded.worker, report = excluded.report;

-- reconciliations: list
SELECT reconciler, at, worker, report
FROM outbox_reconciliations
ORDER BY reconciler;

-- retention: prune finished jobs
DELETE
FROM outbox_jobs
WHERE id IN (SELECT j.id FROM outbox_jobs j WHERE j.status IN ('completed', 'failed', 'cancelled') AND ((j.status = ? AND j.updated_at < CASE j.kind WHEN ? THEN ? ELSE ? END)) AND j.updated_at < ? AND NOT (sequence_key IS NOT NULL AND sequence_hold = 1 AND status IN ('failed', 'cancelled')) AND NOT (j.status = 'completed' AND j.sequence_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM outbox_jobs l WHERE l.sequence_key = j.sequence_key AND l.sequence_no > j.sequence_no AND l.status = 'completed')) LIMIT ?);

-- retention: prune the feed
WITH w AS (SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < ? ORDER BY id LIMIT ?) DELETE
FROM outbox_job_events
WHERE job_id IN (SELECT x.value ->> 0 FROM w, json_each(w.jobs) AS x WHERE w.event = 'completed') AND NOT EXISTS (SELECT 1 FROM outbox_jobs j WHERE j.id = outbox_job_events.job_id);
WITH w AS (SELECT id, event, jobs FROM outbox_job_events WHERE job_id = '' AND at < ? ORDER BY id LIMIT ?) DELETE
FROM outbox_job_events
WHERE id IN (SELECT id FROM w);

-- archive: upkeep
SELECT name
FROM sqlite_master
WHERE type = 'table' AND name LIKE 'outbox\_jobs\_done\_%' ESCAPE '\';
SELECT EXISTS (SELECT 1 FROM outbox_jobs_done);

-- archive: whether it holds jobs
SELECT EXISTS (SELECT 1 FROM outbox_jobs_archive);

-- archive: the jobs and the archive finished since a time, a relation other statements read
SELECT name
FROM sqlite_master
WHERE type = 'table' AND name LIKE 'outbox\_jobs\_done\_%' ESCAPE '\';
(SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs UNION ALL SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at FROM outbox_jobs_done) outbox_jobs;

-- scan: the latest completed job of every path
DROP TABLE IF EXISTS temp.outbox_path_scan;
CREATE TEMPORARY TABLE outbox_path_scan (seq INTEGER PRIMARY KEY, path TEXT, job_id TEXT NOT NULL, kind TEXT NOT NULL, output TEXT, completed_at INTEGER, jobs INTEGER NOT NULL);
INSERT INTO temp.outbox_path_scan (seq, path, job_id, kind, output, completed_at, jobs)
SELECT ROW_NUMBER() OVER (ORDER BY (path IS NULL) DESC, path), path, id, kind, output, completed_at, jobs
FROM (SELECT path, id, kind, output AS output, completed_at AS completed_at, ROW_NUMBER() OVER (PARTITION BY path ORDER BY (sequence_no IS NULL), sequence_no DESC, completed_at DESC, id DESC) AS rn, COUNT(*) OVER (PARTITION BY path) AS jobs FROM (SELECT id, kind, output, completed_at, sequence_no, CASE kind WHEN ? THEN CAST(json_extract(payload, ?) AS TEXT) END AS path FROM outbox_jobs WHERE status = 'completed' AND kind IN (?)) s) r
WHERE rn = 1;
SELECT CAST(COALESCE(SUM(jobs), 0) AS BIGINT), COUNT(*)
FROM temp.outbox_path_scan;

-- scan: a page
SELECT seq, path, job_id, kind, output, completed_at, jobs
FROM temp.outbox_path_scan
WHERE seq > ?
ORDER BY seq
LIMIT ?;

-- scan: the latest completed job of every key
DROP TABLE IF EXISTS temp.outbox_path_scan;
CREATE TEMPORARY TABLE outbox_path_scan (seq INTEGER PRIMARY KEY, path TEXT, job_id TEXT NOT NULL, kind TEXT NOT NULL, output TEXT, completed_at INTEGER, jobs INTEGER NOT NULL);
INSERT INTO temp.outbox_path_scan (seq, path, job_id, kind, output, completed_at, jobs)
SELECT ROW_NUMBER() OVER (ORDER BY (path IS NULL) DESC, path), path, id, kind, output, completed_at, jobs
FROM (SELECT path, id, kind, output AS output, completed_at AS completed_at, ROW_NUMBER() OVER (PARTITION BY path ORDER BY (sequence_no IS NULL), sequence_no DESC, completed_at DESC, id DESC) AS rn, COUNT(*) OVER (PARTITION BY path) AS jobs FROM (SELECT id, kind, output, completed_at, sequence_no, json_array(json_extract(payload, ?), json_extract(payload, ?)) AS path FROM outbox_jobs WHERE status = 'completed' AND kind IN (?)) s) r
WHERE rn = 1;
SELECT CAST(COALESCE(SUM(jobs), 0) AS BIGINT), COUNT(*)
FROM temp.outbox_path_scan;

-- remote: renew one lease
UPDATE outbox_jobs
SET lease_expires_at = MAX(COALESCE(lease_expires_at, 0), ?)
WHERE id = ? AND (status || '') = 'claimed' AND locked_by = ? AND runs = ?;
SELECT lease_expires_at
FROM outbox_jobs
WHERE id = ? AND (status || '') = 'claimed' AND locked_by = ? AND runs = ?;

-- schema: the applied migrations
SELECT COUNT(*)
FROM sqlite_master
WHERE type = 'table' AND name = 'outbox_migrations';
SELECT version
FROM outbox_migrations
WHERE version IN (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);
CREATE TABLE IF NOT EXISTS "outbox_migrations" ( "version" varchar NOT NULL PRIMARY KEY, "applied_at" integer NOT NULL );
SELECT "version", "applied_at"
FROM "outbox_migrations"
ORDER BY "version" ASC;

-- worker: claim: let in due scheduled jobs
UPDATE outbox_jobs
SET scheduled = 0
WHERE rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND scheduled = 1 AND run_at <= ?1 ORDER BY run_at LIMIT ?2);

-- worker: claim: the running jobs of a limited kind
SELECT COUNT(*)
FROM outbox_jobs
WHERE status = 'claimed' AND kind IN (SELECT value FROM json_each(?1));

-- worker: claim: one kind from every queue
UPDATE outbox_jobs
SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, event_flip = 1 - event_flip
WHERE rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = json_extract(?4, '$[0]') AND ?6 IS NULL AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT ?5 + 0)
RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequence_key IS NOT NULL, rowid, trace, has_children;

-- worker: claim: several kinds from every queue
UPDATE outbox_jobs
SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, event_flip = 1 - event_flip
WHERE rowid IN (SELECT j.rowid FROM json_each(?4) AS k CROSS JOIN outbox_jobs AS j WHERE j.rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = k.value AND ?6 IS NULL AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT ?5 + 0) ORDER BY j.priority DESC, j.run_at, j.id LIMIT ?5 + 0)
RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequence_key IS NOT NULL, rowid, trace, has_children;

-- worker: claim: kinds from some queues
UPDATE outbox_jobs
SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, event_flip = 1 - event_flip
WHERE rowid IN (SELECT j.rowid FROM json_each(?4) AS k CROSS JOIN json_each(?6) AS q CROSS JOIN outbox_jobs AS j WHERE j.rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = k.value AND queue = q.value AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT ?5 + 0) ORDER BY j.priority DESC, j.run_at, j.id LIMIT ?5 + 0)
RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequence_key IS NOT NULL, rowid, trace, has_children;

-- worker: claim: one kind from every queue, paused queues passed over
UPDATE outbox_jobs
SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, event_flip = 1 - event_flip
WHERE rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = json_extract(?4, '$[0]') AND ?6 IS NULL AND queue NOT IN (SELECT value FROM json_each(?7)) AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT ?5 + 0)
RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequence_key IS NOT NULL, rowid, trace, has_children;

-- worker: claim: several kinds from every queue, paused queues passed over
UPDATE outbox_jobs
SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, event_flip = 1 - event_flip
WHERE rowid IN (SELECT j.rowid FROM json_each(?4) AS k CROSS JOIN outbox_jobs AS j WHERE j.rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = k.value AND ?6 IS NULL AND queue NOT IN (SELECT value FROM json_each(?7)) AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT ?5 + 0) ORDER BY j.priority DESC, j.run_at, j.id LIMIT ?5 + 0)
RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequence_key IS NOT NULL, rowid, trace, has_children;

-- worker: claim: kinds from some queues, paused queues passed over
UPDATE outbox_jobs
SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, event_flip = 1 - event_flip
WHERE rowid IN (SELECT j.rowid FROM json_each(?4) AS k CROSS JOIN json_each(?6) AS q CROSS JOIN outbox_jobs AS j WHERE j.rowid IN (SELECT rowid FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = k.value AND queue = q.value AND queue NOT IN (SELECT value FROM json_each(?7)) AND run_at <= ?2 ORDER BY priority DESC, run_at, id LIMIT ?5 + 0) ORDER BY j.priority DESC, j.run_at, j.id LIMIT ?5 + 0)
RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequence_key IS NOT NULL, rowid, trace, has_children;

-- worker: claim: rows a controlled kind's plan chose
UPDATE outbox_jobs
SET status = 'claimed', attempts = attempts + 1, runs = runs + 1, locked_by = ?1, locked_at = ?2, claimed_at = ?2, lease_expires_at = ?3, updated_at = ?2, event_flip = 1 - event_flip
WHERE rowid IN (SELECT rowid FROM outbox_jobs WHERE rowid IN (SELECT value FROM json_each(?4)) AND status = 'pending' AND (?6 IS NULL OR TRUE) LIMIT ?5 + 0)
RETURNING id, kind, queue, payload, attempts, max_attempts, schema_hash, runs, sequence_key IS NOT NULL, rowid, trace, has_children;

-- worker: claim: fail a row that cannot be read
UPDATE outbox_jobs
SET status = 'failed', last_error = ?1, lease_expires_at = NULL, updated_at = ?2
WHERE rowid = ?3;

-- worker: flow: the pauses and holds in force
SELECT scope, name, key, ends_at
FROM outbox_pauses
WHERE ends_at IS NULL OR ends_at > ?1;

-- worker: flow: a rate's buckets
SELECT key, level, at
FROM outbox_rates
WHERE name = ?1;

-- worker: flow: a kind's fair shares
SELECT key, weight, pass
FROM outbox_fair
WHERE name = ?1;

-- worker: flow: the keys with ready jobs
WITH RECURSIVE k(key) AS (SELECT (SELECT flow_key FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND flow_key IS NOT NULL AND kind = ?1 ORDER BY flow_key LIMIT 1) UNION ALL SELECT (SELECT j.flow_key FROM outbox_jobs j WHERE j.status = 'pending' AND j.waiting = 0 AND j.scheduled = 0 AND j.flow_key IS NOT NULL AND j.kind = ?1 AND j.flow_key > k.key ORDER BY j.flow_key LIMIT 1) FROM k WHERE k.key IS NOT NULL)
SELECT key
FROM k
WHERE key IS NOT NULL;

-- worker: flow: whether a second key has pending jobs
SELECT EXISTS (SELECT 1 FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND flow_key IS NOT NULL AND kind = ?1 AND flow_key > (SELECT min(flow_key) FROM outbox_jobs WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND flow_key IS NOT NULL AND kind = ?1));

-- worker: flow: a kind's next jobs
SELECT rowid, flow_key, IFNULL(cost, 1), priority, run_at, id
FROM outbox_jobs
WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = ?1 AND run_at <= ?2 AND (?4 IS NULL OR queue IN (SELECT value FROM json_each(?4))) AND queue NOT IN (SELECT value FROM json_each(?5))
ORDER BY priority DESC, run_at, id
LIMIT ?3 + 0;

-- worker: flow: a key's next jobs
SELECT rowid, flow_key, IFNULL(cost, 1), priority, run_at, id
FROM outbox_jobs
WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = ?1 AND flow_key = ?6 AND run_at <= ?2 AND (?4 IS NULL OR queue IN (SELECT value FROM json_each(?4))) AND queue NOT IN (SELECT value FROM json_each(?5))
ORDER BY priority DESC, run_at, id
LIMIT ?3 + 0;

-- worker: flow: a kind's next jobs without a key
SELECT rowid, flow_key, IFNULL(cost, 1), priority, run_at, id
FROM outbox_jobs
WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND kind = ?1 AND flow_key IS NULL AND run_at <= ?2 AND (?4 IS NULL OR queue IN (SELECT value FROM json_each(?4))) AND queue NOT IN (SELECT value FROM json_each(?5))
ORDER BY priority DESC, run_at, id
LIMIT ?3 + 0;

-- worker: flow: write back a bucket
INSERT INTO outbox_rates (name, key, amount, window_ms, burst, level, at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (name, key) DO UPDATE
SET level = excluded.level, at = excluded.at;

-- worker: flow: write back a fair pass
INSERT INTO outbox_fair (name, key, weight, pass)
VALUES (?1, ?2, 1, ?3)
ON CONFLICT (name, key) DO UPDATE
SET pass = excluded.pass;

-- worker: complete: a batch of outcomes
UPDATE outbox_jobs
SET status = f.value ->> 's', attempts = attempts - (f.value ->> 'g'), output = CASE WHEN f.value ->> 's' = 'completed' THEN f.value ->> 'o' ELSE output END, completed_at = CASE WHEN f.value ->> 's' = 'completed' THEN ?3 ELSE completed_at END, last_error = COALESCE(f.value ->> 'e', last_error), run_at = COALESCE(f.value ->> 'r', run_at), scheduled = COALESCE(f.value ->> 'r' > ?3, 0), lease_expires_at = NULL, updated_at = ?3, event_flip = CASE WHEN f.value ->> 's' = 'completed' THEN 1 - event_flip ELSE event_flip END
FROM jsonb_each(?1) AS f
WHERE outbox_jobs.id = f.value ->> 'i' AND outbox_jobs.status = 'claimed' AND outbox_jobs.locked_by = ?2 AND outbox_jobs.runs = f.value ->> 'a'
RETURNING outbox_jobs.id, outbox_jobs.kind, outbox_jobs.queue, outbox_jobs.status, outbox_jobs.attempts;

-- worker: complete: a batch of plain completions
UPDATE outbox_jobs
SET status = 'completed', output = NULL, completed_at = ?3, scheduled = 0, lease_expires_at = NULL, updated_at = ?3, event_flip = 1 - event_flip
FROM jsonb_each(?1) AS f
WHERE outbox_jobs.id = f.key AND outbox_jobs.status = 'claimed' AND outbox_jobs.locked_by = ?2 AND outbox_jobs.runs = f.value
RETURNING outbox_jobs.id, outbox_jobs.kind, outbox_jobs.queue, outbox_jobs.status, outbox_jobs.attempts;

-- worker: complete: a batch of completions kept nowhere
DELETE
FROM outbox_jobs
WHERE (id, runs) IN (SELECT f.value ->> 'i', f.value ->> 'a' FROM jsonb_each(?1) AS f WHERE f.value ->> 'd') AND status = 'claimed' AND locked_by = ?2 AND sequence_key IS NULL
RETURNING id, kind, queue, 'completed', attempts;

-- worker: complete: a batch of completions into the archive
INSERT INTO outbox_jobs_done (id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at)
SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, f.o, attempts, runs, locked_by, locked_at, claimed_at, 'completed', ?3, NULL, ?3
FROM (SELECT value ->> 'i' AS i, value ->> 'a' AS a, value ->> 'o' AS o FROM jsonb_each(?1) WHERE value ->> 'k') AS f JOIN outbox_jobs ON outbox_jobs.id = f.i
WHERE outbox_jobs.status = 'claimed' AND outbox_jobs.locked_by = ?2 AND outbox_jobs.runs = f.a AND outbox_jobs.sequence_key IS NULL;

-- worker: complete: one completion
UPDATE outbox_jobs
SET status = 'completed', output = ?4, completed_at = ?5, lease_expires_at = NULL, updated_at = ?5
WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND runs = ?3;

-- worker: complete: one retry
UPDATE outbox_jobs
SET status = 'pending', run_at = ?4, scheduled = ?4 > ?6, last_error = ?5, lease_expires_at = NULL, updated_at = ?6
WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND runs = ?3;

-- worker: complete: one failure
UPDATE outbox_jobs
SET status = 'failed', last_error = ?4, lease_expires_at = NULL, updated_at = ?5
WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND runs = ?3;

-- worker: complete: one snooze
UPDATE outbox_jobs
SET status = 'pending', attempts = attempts - 1, run_at = ?4, scheduled = ?4 > ?5, lease_expires_at = NULL, updated_at = ?5
WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND runs = ?3;

-- worker: complete: one release
UPDATE outbox_jobs
SET status = 'pending', attempts = attempts - 1, run_at = ?4, lease_expires_at = NULL, updated_at = ?4
WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND runs = ?3;

-- worker: complete: one completion into the archive
INSERT INTO outbox_jobs_done (id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, output, attempts, runs, locked_by, locked_at, claimed_at, status, completed_at, lease_expires_at, updated_at)
SELECT id, kind, queue, payload, priority, max_attempts, idempotency_key, schema_hash, created_at, sequence_key, sequence_no, sequence_hold, waiting, superseded, scheduled, run_at, last_error, ?4, attempts, runs, locked_by, locked_at, claimed_at, 'completed', ?5, NULL, ?5
FROM outbox_jobs
WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND runs = ?3 AND sequence_key IS NULL;

-- worker: complete: one completion kept nowhere
DELETE
FROM outbox_jobs
WHERE id = ?1 AND status = 'claimed' AND locked_by = ?2 AND runs = ?3 AND sequence_key IS NULL
RETURNING kind, queue;

-- worker: feed: a statement's row
INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs)
VALUES ('', ?1, ?2, ?3, ?4, 0, ?5, ?6);

-- worker: renew: leases
UPDATE outbox_jobs
SET lease_expires_at = MAX(COALESCE(lease_expires_at, 0), ?1)
WHERE status = 'claimed' AND locked_by = ?2 AND id IN (SELECT value FROM json_each(?3));

-- worker: rescue: let go stranded sequences
UPDATE outbox_jobs
SET waiting = 0
WHERE id IN (SELECT (SELECT h.id FROM outbox_jobs h WHERE h.sequence_key = k.sequence_key AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1)) ORDER BY h.sequence_no LIMIT 1) FROM (SELECT DISTINCT w.sequence_key FROM outbox_jobs w WHERE w.status = 'pending' AND w.waiting = 1 AND NOT EXISTS (SELECT 1 FROM outbox_jobs c WHERE c.sequence_key = w.sequence_key AND (c.status = 'claimed' OR (c.status = 'pending' AND c.waiting = 0)))) k) AND status = 'pending' AND waiting = 1 AND parents_left = 0;

-- worker: rescue: expired claims
UPDATE outbox_jobs
SET status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END, last_error = 'lease expired while claimed by ' || COALESCE(locked_by, 'an unknown worker') || CASE WHEN attempts >= max_attempts THEN '; no attempts left' ELSE '' END, lease_expires_at = NULL, run_at = ?1, updated_at = ?1
WHERE status = 'claimed' AND lease_expires_at < ?1
RETURNING id, kind, queue, attempts, status, locked_by;
