#!/usr/bin/env python3
"""WAL bytes per job of the PostgreSQL table shapes, measured in one psql session.

    python3 outbox-bench/shapes/wal.py postgres://user@host/db [jobs = 20000] [sessions = 1] [shape ...]

Each shape gets a schema of its own (dropped afterwards, also on failure), enqueues `jobs` no-op jobs in
statements of 2,000 rows, analyzes, then drains them as the worker does: claim 100 (autocommit), complete the
100 (autocommit), with one feed row per claim and per completion. It prints the WAL written per job while
enqueuing, while draining and in all, and the drain's rate (`pg_current_wal_lsn` around each phase). The drain
runs on `sessions` psql sessions at once, each claiming and completing in turn, as several workers (or one
worker's claim and completion connections) would: the rate of the statements alone, with no client around them.

- `current`: the outbox schema as the dated migrations made it (`outbox/tests/fixtures/dated/`, their last
  step aside, which changes no table), and the worker's claim and fenced completion
  (as in `outbox-bench/src/raw_pg/sql.rs`; one `enqueued` row per inserting statement from the insert trigger,
  60 % of each page of the jobs table left free for its rows' updates, the columns updates change last, each
  claim's lease in one row of `outbox_claims`, deleted with the claim's completion; the claim's and the
  completion's feed rows name the jobs' kind and queue once and list `[id, attempt]`; finished jobs found through
  `outbox_finished`, where each completion lists its jobs in one row, not through an index of the jobs table). Every shape's job ids are
  26 characters, as the worker's ULIDs are, in the order the jobs are inserted, their last 12 characters no more
  compressible than a ULID's.
- `finished_index`: `current` before its twelfth migration: an index of finished jobs by time, which every
  completion writes an entry into, in place of the log of finished jobs.
- `completion_in_place`: `current` with claimed jobs out of the ready index (its condition `status = 'pending'`
  again), so that a completion is a heap-only update and a claim is not.
- `half_full`: `finished_index` before its eleventh migration: pages filled to half (`fillfactor = 50`) rather than
  40 %, which leaves room for the claimed version of most rows but not for the completed one as well.
- `claims_move`: `half_full` before its tenth migration: the ready, scheduled, sequence-blocking and finished
  indexes read the status (and the finished one `updated_at`), so a claim is not a heap-only update: it writes
  the row's new version with a primary key entry, and the job leaves the ready index.
- `uuid_ids`: `current` with job ids stored as `uuid` (16 bytes) rather than as text (26 bytes and a length byte).
- `two_ready_indexes`: `claims_move` before its ninth migration: a ready index led by the kind beside the one led by
  the queue, both written by every enqueue.
- `lease_index`: `two_ready_indexes` before its eighth migration: leases found through a partial index of the jobs table
  (`status = 'claimed'`), which every claim and completion writes, rather than one row per claim in `outbox_claims`.
- `previous`: `two_ready_indexes` without its fourth migration's changes: an `enqueued` row per job, and full pages, so
  each update moves the row to another page.
- `ready_table`: the proposed shape. Jobs stay in a table with no index on anything a claim or completion
  changes (mutable columns last, `fillfactor = 40`), so both updates of a job row are HOT; what can run sits in
  a narrow ready table (its claim flag and lease indexed there), deleted at completion; one `enqueued` row per
  inserting statement.
- `ready_claimed`: the ready table deleted at claim instead. A claim deletes its ready rows and records its lease in
  one row per claim (`shape_claims`, deleted with the claim's completion), so no row is updated twice and nothing
  indexed is updated at all; the ready table has no primary key, only the claim's order.
- `ready_compact`: `ready_claimed` with 16-byte ids (`uuid`), a 64-bit schema hash instead of 256 bits, and feed
  rows that name their kind and queue once, listing `[id, attempt]` per job.
- `hot_completion`: `claims_move` with no index that a completion changes, so that a completion is a heap-only update
  while the claim still is not. The ready, scheduled and sequence-blocking indexes read stored generated columns
  that are false (or NULL, for a job with no sequence) both while claimed and once completed; there is no index of
  finished jobs (what retention and the readers of recent work would need instead is not measured here). No ready
  table.
- `ready_indexed`: `ready_claimed` with the two indexes today's readers use kept: the ready table's queue index (for
  workers of some queues) and an index of finished jobs by time (for retention and the readers of recent work),
  on a generated column that stays NULL while a job runs, so the claim stays heap-only and only the completion is
  not.

The shapes measure tables and statements, not the triggers a schema carries (sequences, transitions): the
proposed ones have none, and a production schema must keep its guarantees (idempotency among active jobs, rescue
of expired leases, retention's scan of finished jobs) without an index on anything a claim or completion changes.
"""

import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_SQL = os.path.join(HERE, "..", "..", "outbox", "tests", "fixtures", "dated", "postgres")
CHUNK = 2000
BATCH = 100
# The dated PostgreSQL migrations' files, in the order they applied (`outbox/tests/fixtures/dated/`), but the
# last three that shape tables, which `current` adds (the other shapes change the schema before them, or before the
# last); the last of all (`snapshot_enqueue.sql`) changes how a trigger reads, not a table.
MIGRATIONS = ("schema.sql", "ready.sql", "keep.sql", "fewer_writes.sql", "active_keys.sql", "columns_last.sql",
              "archive.sql", "claims.sql", "one_ready_index.sql")
FINISHED_INDEX_TABLES = "\n".join("\\i " + os.path.join(SCHEMA_SQL, f) for f in ("hot_claim.sql", "room_for_both.sql"))
CURRENT_TABLES = FINISHED_INDEX_TABLES + "\n\\i " + os.path.join(SCHEMA_SQL, "finished_log.sql")
# The ready index led by the kind, which the ninth migration drops.
TWO_READY = """CREATE INDEX outbox_jobs_ready ON outbox_jobs (kind, priority DESC, run_at, id)
 WHERE status = 'pending' AND NOT waiting AND NOT scheduled;
"""

# A job id as the worker makes them: 26 characters, in the order of `g`, the last 12 as random as a ULID's last ones
# (so a listing of ids compresses as little as the worker's do).
ID = "'01JDZ8' || lpad(g::text, 8, '0') || upper(substr(md5(g::text), 1, 12))"

CURRENT_ENQUEUE = """INSERT INTO outbox_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts, run_at,
 idempotency_key, schema_hash, created_at, updated_at, sequence_key, sequence_hold, scheduled)
SELECT """ + ID + """, 'noop', 'default', jsonb_build_object('n', g), 'pending', 0, 0, 3, now(),
 NULL, repeat('ab', 8), now(), now(), NULL, 1, false FROM generate_series({lo}, {hi}) g;"""

TWO_READY_CLAIM = """WITH c AS MATERIALIZED (SELECT id FROM outbox_jobs WHERE status = 'pending' AND NOT waiting AND NOT scheduled
 AND kind = 'noop' AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED),
u AS (UPDATE outbox_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = 'w1',
 locked_at = now(), claimed_at = now(), lease_expires_at = now() + interval '5 minutes', updated_at = now(),
 event_flip = NOT j.event_flip FROM c WHERE j.id = c.id RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts),
l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT 'w1', now() + interval '5 minutes', array_agg(id)
 FROM u HAVING count(*) > 0 RETURNING id),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs)
 SELECT '', '', '', now(), 'claimed', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts)) FROM u HAVING count(*) > 0)
SELECT COALESCE(array_agg(id ORDER BY id), '{{}}') AS ids, COALESCE((SELECT id FROM l), 0) AS claim FROM u \\gset"""

CURRENT_COMPLETE = """WITH u AS (UPDATE outbox_jobs j SET status = 'completed', output = NULL, completed_at = now(),
 scheduled = false, lease_expires_at = NULL, updated_at = now(), event_flip = NOT j.event_flip
 FROM unnest(:'ids'::text[]) AS f(id) WHERE j.id = f.id AND (j.status || '') = 'claimed' AND j.locked_by = 'w1'
 RETURNING j.id, j.kind, j.queue, j.status, j.attempts),
x AS (DELETE FROM outbox_claims c WHERE c.id = :claim),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs)
 SELECT '', '', '', now(), 'completed', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts)) FROM u
 WHERE status = 'completed' HAVING count(*) > 0)
SELECT count(*) FROM u;"""

# Before the eighth migration: leases found through a partial index of the jobs table, no claims.
LEASE_INDEX = TWO_READY + """DROP TRIGGER outbox_jobs_claimed_elsewhere ON outbox_jobs; DROP TRIGGER outbox_jobs_inserted_claimed ON outbox_jobs;
DROP TABLE outbox_claims;
CREATE INDEX outbox_jobs_lease ON outbox_jobs (lease_expires_at) WHERE status = 'claimed';"""
LEASE_INDEX_CLAIM = TWO_READY_CLAIM.replace("""l AS (INSERT INTO outbox_claims (worker, lease_expires_at, jobs) SELECT 'w1', now() + interval '5 minutes', array_agg(id)
 FROM u HAVING count(*) > 0 RETURNING id),
""", "").replace(", COALESCE((SELECT id FROM l), 0) AS claim", "")
LEASE_INDEX_COMPLETE = CURRENT_COMPLETE.replace("x AS (DELETE FROM outbox_claims c WHERE c.id = :claim),\n", "")

SHAPE_JOBS = """CREATE TABLE shape_jobs (id text COLLATE "C" PRIMARY KEY, kind text COLLATE "C" NOT NULL,
 queue text COLLATE "C" NOT NULL, payload jsonb NOT NULL, priority int NOT NULL, max_attempts int NOT NULL,
 idempotency_key text COLLATE "C", schema_hash text NOT NULL, created_at timestamptz NOT NULL,
 sequence_key text COLLATE "C", sequence_no bigint, run_at timestamptz NOT NULL, output jsonb, last_error text,
 completed_at timestamptz, claimed_at timestamptz, locked_at timestamptz, locked_by text,
 lease_expires_at timestamptz, updated_at timestamptz NOT NULL, attempts int NOT NULL, runs int NOT NULL DEFAULT 0,
 status text COLLATE "C" NOT NULL) WITH (fillfactor = 40);
CREATE INDEX shape_jobs_sequence ON shape_jobs (sequence_key, sequence_no) WHERE sequence_key IS NOT NULL;"""

READY_TABLES = SHAPE_JOBS + """
CREATE TABLE shape_ready (id text COLLATE "C" PRIMARY KEY, kind text COLLATE "C" NOT NULL, priority int NOT NULL,
 run_at timestamptz NOT NULL, claimed boolean NOT NULL DEFAULT false, lease_expires_at timestamptz);
CREATE INDEX shape_ready_next ON shape_ready (kind, priority DESC, run_at, id) WHERE NOT claimed;
CREATE INDEX shape_ready_lease ON shape_ready (lease_expires_at) WHERE claimed;"""

READY_ENQUEUE = """WITH j AS (INSERT INTO shape_jobs (id, kind, queue, payload, status, priority, attempts, max_attempts,
 run_at, idempotency_key, schema_hash, created_at, updated_at)
 SELECT """ + ID + """, 'noop', 'default', jsonb_build_object('n', g), 'pending', 0, 0, 3,
 now(), NULL, repeat('ab', 8), now(), now() FROM generate_series({lo}, {hi}) g
 RETURNING id, kind, queue, priority, run_at, attempts),
r AS (INSERT INTO shape_ready (id, kind, priority, run_at) SELECT id, kind, priority, run_at FROM j)
INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, jobs)
SELECT '', '', '', now(), 'enqueued', 0, json_agg(json_build_array(id, kind, queue, attempts) ORDER BY id) FROM j;"""

READY_CLAIM = """WITH c AS (UPDATE shape_ready r SET claimed = true, lease_expires_at = now() + interval '5 minutes'
 WHERE r.id IN (SELECT id FROM shape_ready WHERE NOT claimed AND kind = 'noop' AND run_at <= now()
 ORDER BY priority DESC, run_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED) RETURNING r.id),
u AS (UPDATE shape_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = 'w1',
 locked_at = now(), claimed_at = now(), lease_expires_at = now() + interval '5 minutes', updated_at = now()
 FROM c WHERE j.id = c.id RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs)
 SELECT '', '', '', now(), 'claimed', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts)) FROM u HAVING count(*) > 0)
SELECT COALESCE(array_agg(id ORDER BY id), '{{}}') AS ids FROM u \\gset"""

READY_COMPLETE = """WITH u AS (UPDATE shape_jobs j SET status = 'completed', output = NULL, completed_at = now(),
 lease_expires_at = NULL, updated_at = now()
 FROM unnest(:'ids'::text[]) AS f(id) WHERE j.id = f.id AND j.status = 'claimed' AND j.locked_by = 'w1'
 RETURNING j.id, j.kind, j.queue, j.status, j.attempts),
d AS (DELETE FROM shape_ready r USING u WHERE r.id = u.id),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs)
 SELECT '', '', '', now(), 'completed', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts)) FROM u
 WHERE status = 'completed' HAVING count(*) > 0)
SELECT count(*) FROM u;"""

PREVIOUS = TWO_READY + """CREATE OR REPLACE FUNCTION outbox_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt)
    SELECT id, kind, queue, created_at, 'enqueued', attempts FROM inserted ORDER BY id;
    RETURN NULL;
END $$;
ALTER TABLE outbox_jobs RESET (fillfactor);"""

CLAIMED_TABLES = SHAPE_JOBS + """
CREATE TABLE shape_ready (id text COLLATE "C" NOT NULL, kind text COLLATE "C" NOT NULL, priority int NOT NULL,
 run_at timestamptz NOT NULL);
CREATE INDEX shape_ready_next ON shape_ready (kind, priority DESC, run_at, id);
CREATE TABLE shape_claims (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, worker text NOT NULL,
 lease_expires_at timestamptz NOT NULL, jobs text[] NOT NULL);
CREATE INDEX shape_claims_lease ON shape_claims (lease_expires_at);"""

CLAIMED_CLAIM = """WITH c AS (DELETE FROM shape_ready r WHERE r.ctid = ANY(ARRAY(SELECT ctid FROM shape_ready WHERE kind = 'noop'
 AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED)) RETURNING r.id),
u AS (UPDATE shape_jobs j SET status = 'claimed', attempts = j.attempts + 1, runs = j.runs + 1, locked_by = 'w1',
 locked_at = now(), claimed_at = now(), lease_expires_at = now() + interval '5 minutes', updated_at = now()
 FROM c WHERE j.id = c.id RETURNING j.id, j.kind, j.queue, j.payload::text AS payload, j.attempts),
l AS (INSERT INTO shape_claims (worker, lease_expires_at, jobs) SELECT 'w1', now() + interval '5 minutes', array_agg(id)
 FROM u HAVING count(*) > 0 RETURNING id),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs)
 SELECT '', '', '', now(), 'claimed', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts)) FROM u HAVING count(*) > 0)
SELECT COALESCE(array_agg(id ORDER BY id), '{{}}') AS ids, COALESCE((SELECT id FROM l), 0) AS claim FROM u \\gset"""

CLAIMED_COMPLETE = """WITH u AS (UPDATE shape_jobs j SET status = 'completed', output = NULL, completed_at = now(),
 lease_expires_at = NULL, updated_at = now()
 FROM unnest(:'ids'::text[]) AS f(id) WHERE j.id = f.id AND j.status = 'claimed' AND j.locked_by = 'w1'
 RETURNING j.id, j.kind, j.queue, j.status, j.attempts),
d AS (DELETE FROM shape_claims c WHERE c.id = :claim),
e AS (INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, worker, jobs)
 SELECT '', '', '', now(), 'completed', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts)) FROM u
 WHERE status = 'completed' HAVING count(*) > 0)
SELECT count(*) FROM u;"""


HOT_COMPLETION_TABLES = TWO_READY + """ALTER TABLE outbox_jobs
 ADD COLUMN ready boolean GENERATED ALWAYS AS (status = 'pending' AND NOT waiting AND NOT scheduled) STORED,
 ADD COLUMN due_later boolean GENERATED ALWAYS AS (status = 'pending' AND scheduled) STORED,
 ADD COLUMN blocks boolean GENERATED ALWAYS AS (CASE WHEN sequence_key IS NOT NULL THEN status IN ('pending', 'claimed')
  OR (status IN ('failed', 'cancelled') AND sequence_hold = 1) END) STORED;
DROP INDEX outbox_jobs_ready, outbox_jobs_ready_queue, outbox_jobs_scheduled, outbox_jobs_finished,
 outbox_jobs_sequence_blocking;
CREATE INDEX outbox_jobs_ready ON outbox_jobs (kind, priority DESC, run_at, id) WHERE ready;
CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, kind, priority DESC, run_at, id) WHERE ready;
CREATE INDEX outbox_jobs_scheduled ON outbox_jobs (run_at) WHERE due_later;
CREATE INDEX outbox_jobs_sequence_blocking ON outbox_jobs (sequence_key, sequence_no) WHERE blocks;"""

HOT_COMPLETION_CLAIM = TWO_READY_CLAIM.replace(
    "WHERE status = 'pending' AND NOT waiting AND NOT scheduled\n AND kind", "WHERE ready AND kind")

CURRENT_CLAIM = TWO_READY_CLAIM.replace(
    "WHERE status = 'pending' AND NOT waiting AND NOT scheduled\n AND kind = 'noop'",
    "WHERE status = 'pending' AND NOT waiting AND NOT scheduled\n AND queue = 'default' AND kind = 'noop'")
assert CURRENT_CLAIM != TWO_READY_CLAIM

# The claim of `current` (the tenth migration's): a claimed job stays in the ready index, read through `open`.
CLAIMS_MOVE_CLAIM = CURRENT_CLAIM
CURRENT_CLAIM = CLAIMS_MOVE_CLAIM.replace("WHERE status = 'pending' AND NOT waiting AND NOT scheduled\n AND queue",
                                          "WHERE open AND status = 'pending'\n AND queue")
assert CURRENT_CLAIM != CLAIMS_MOVE_CLAIM



def short_listings(sql):
    """A claim or completion of `current` with its feed row as the worker writes it: the jobs' shared kind and queue
    named once by the row, each job listed as `[id, attempt]`."""
    for event in ("claimed", "completed"):
        sql = sql.replace(
            f"SELECT '', '', '', now(), '{event}', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts))",
            f"SELECT '', min(kind), min(queue), now(), '{event}', 0, 'w1', json_agg(json_build_array(id, attempts))")
    return sql


# The claim and completion of `finished_index` as the worker wrote them.
LISTED_CLAIM = short_listings(CURRENT_CLAIM)
LISTED_COMPLETE = short_listings(CURRENT_COMPLETE)
assert LISTED_CLAIM != CURRENT_CLAIM and LISTED_COMPLETE != CURRENT_COMPLETE
# The completion of `current`: its jobs listed in one row of the log of finished jobs.
LOGGED_COMPLETE = LISTED_COMPLETE.replace(
    "x AS (DELETE FROM outbox_claims c WHERE c.id = :claim),",
    "x AS (DELETE FROM outbox_claims c WHERE c.id = :claim),\n"
    "f AS (INSERT INTO outbox_finished (at, jobs) SELECT now(), array_agg(id) FROM u HAVING count(*) > 0),")
assert LOGGED_COMPLETE != LISTED_COMPLETE


# `current` with the claimed jobs out of the ready index, so that a completion is a heap-only update and a claim is
# not.
COMPLETION_IN_PLACE = CURRENT_TABLES + """
ALTER TABLE outbox_jobs ADD COLUMN ready boolean
 GENERATED ALWAYS AS (status = 'pending' AND NOT waiting AND NOT scheduled) STORED;
DROP INDEX outbox_jobs_ready_queue;
CREATE INDEX outbox_jobs_ready_queue ON outbox_jobs (queue, kind, priority DESC, run_at, id) WHERE ready;"""
COMPLETION_IN_PLACE_CLAIM = CURRENT_CLAIM.replace("WHERE open AND status = 'pending'", "WHERE ready")
assert COMPLETION_IN_PLACE_CLAIM != CURRENT_CLAIM

# `current` with its job ids stored as `uuid` (16 bytes) rather than as text (26 bytes and a length byte).
UUID_IDS = CURRENT_TABLES + """
ALTER TABLE outbox_jobs ALTER COLUMN id TYPE uuid USING id::uuid;
ALTER TABLE outbox_claims ALTER COLUMN jobs TYPE uuid[] USING jobs::uuid[];
ALTER TABLE outbox_finished ALTER COLUMN jobs TYPE uuid[] USING jobs::uuid[];
CREATE OR REPLACE FUNCTION outbox_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_job_events (job_id, kind, queue, at, event, attempt, jobs)
    SELECT CASE WHEN count(*) = 1 THEN min(id::text) ELSE '' END, CASE WHEN count(*) = 1 THEN min(kind) ELSE '' END,
        CASE WHEN count(*) = 1 THEN min(queue) ELSE '' END, min(created_at), 'enqueued',
        CASE WHEN count(*) = 1 THEN min(attempts) ELSE 0 END,
        CASE WHEN count(*) > 1 THEN json_agg(json_build_array(id, kind, queue, attempts) ORDER BY id) END
    FROM inserted HAVING count(*) > 0;
    RETURN NULL;
END $$;"""


def uuid_ids(sql):
    """A statement of `current` for `uuid_ids`: ids made and bound as `uuid`."""
    sql = sql.replace(ID, "('0192f1c2-0000-7000-8000-' || lpad(g::text, 12, '0'))::uuid")
    return sql.replace("unnest(:'ids'::text[])", "unnest(:'ids'::uuid[])")


def compact(sql):
    """`ready_claimed` with 16-byte ids (`uuid`), a 64-bit schema hash, and feed rows that name their kind and queue once."""
    sql = sql.replace('id text COLLATE "C" PRIMARY KEY, kind', "id uuid PRIMARY KEY, kind")
    sql = sql.replace('id text COLLATE "C" NOT NULL, kind', "id uuid NOT NULL, kind")
    sql = sql.replace("jobs text[] NOT NULL", "jobs uuid[] NOT NULL")
    sql = sql.replace(ID, "('0192f1c2-0000-7000-8000-' || lpad(g::text, 12, '0'))::uuid")
    sql = sql.replace("repeat('ab', 32)", "repeat('ab', 8)")
    sql = sql.replace("unnest(:'ids'::text[])", "unnest(:'ids'::uuid[])")
    sql = sql.replace("SELECT '', '', '', now(), 'enqueued', 0, json_agg(json_build_array(id, kind, queue, attempts) ORDER BY id) FROM j",
                      "SELECT '', min(kind), min(queue), now(), 'enqueued', 0, json_agg(json_build_array(id, attempts) ORDER BY id) FROM j")
    sql = sql.replace("SELECT '', '', '', now(), 'claimed', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts)) FROM u",
                      "SELECT '', min(kind), min(queue), now(), 'claimed', 0, 'w1', json_agg(json_build_array(id, attempts)) FROM u")
    sql = sql.replace("SELECT '', '', '', now(), 'completed', 0, 'w1', json_agg(json_build_array(id, kind, queue, attempts)) FROM u",
                      "SELECT '', min(kind), min(queue), now(), 'completed', 0, 'w1', json_agg(json_build_array(id, attempts)) FROM u")
    return sql


SHAPES = {
    "current": (CURRENT_TABLES, CURRENT_ENQUEUE, LISTED_CLAIM, LOGGED_COMPLETE),
    "finished_index": (FINISHED_INDEX_TABLES, CURRENT_ENQUEUE, LISTED_CLAIM, LISTED_COMPLETE),
    "completion_in_place": (COMPLETION_IN_PLACE, CURRENT_ENQUEUE, short_listings(COMPLETION_IN_PLACE_CLAIM),
                            LOGGED_COMPLETE),
    "claims_move": ("", CURRENT_ENQUEUE, CLAIMS_MOVE_CLAIM, CURRENT_COMPLETE),
    "previous": (PREVIOUS, CURRENT_ENQUEUE, TWO_READY_CLAIM, CURRENT_COMPLETE),
    "ready_table": (READY_TABLES, READY_ENQUEUE, READY_CLAIM, READY_COMPLETE),
    "ready_claimed": (CLAIMED_TABLES, READY_ENQUEUE, CLAIMED_CLAIM, CLAIMED_COMPLETE),
    "ready_compact": tuple(compact(x) for x in (CLAIMED_TABLES, READY_ENQUEUE, CLAIMED_CLAIM, CLAIMED_COMPLETE)),
    "two_ready_indexes": (TWO_READY, CURRENT_ENQUEUE, TWO_READY_CLAIM, CURRENT_COMPLETE),
    "lease_index": (LEASE_INDEX, CURRENT_ENQUEUE, LEASE_INDEX_CLAIM, LEASE_INDEX_COMPLETE),
    "hot_completion": (HOT_COMPLETION_TABLES, CURRENT_ENQUEUE, HOT_COMPLETION_CLAIM, CURRENT_COMPLETE),
    "half_full": (FINISHED_INDEX_TABLES + "\nALTER TABLE outbox_jobs SET (fillfactor = 50);", CURRENT_ENQUEUE,
                  LISTED_CLAIM, LISTED_COMPLETE),
    "uuid_ids": (UUID_IDS, uuid_ids(CURRENT_ENQUEUE), LISTED_CLAIM,
                 uuid_ids(LOGGED_COMPLETE)),
    "ready_indexed": (
        CLAIMED_TABLES.replace("run_at timestamptz NOT NULL);\nCREATE INDEX shape_ready_next",
                               "run_at timestamptz NOT NULL, queue text COLLATE \"C\" NOT NULL DEFAULT 'default');\n"
                               "CREATE INDEX shape_ready_queue ON shape_ready (queue, kind, priority DESC, run_at, id);\n"
                               "CREATE INDEX shape_ready_next")
        + """
ALTER TABLE shape_jobs ADD COLUMN finished_at timestamptz GENERATED ALWAYS AS
 (CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN updated_at END) STORED;
CREATE INDEX shape_jobs_finished ON shape_jobs (finished_at) WHERE finished_at IS NOT NULL;""",
        READY_ENQUEUE.replace("INSERT INTO shape_ready (id, kind, priority, run_at) SELECT id, kind, priority, run_at FROM j",
                              "INSERT INTO shape_ready (id, kind, queue, priority, run_at) SELECT id, kind, queue, priority, run_at FROM j"),
        CLAIMED_CLAIM,
        CLAIMED_COMPLETE,
    ),
}


def setup(schema, shape, jobs):
    """Creates the shape's schema and enqueues the jobs; prints the WAL written while enqueuing."""
    tables, enqueue, _, _ = SHAPES[shape]
    out = [
        "\\set ON_ERROR_STOP 1",
        f"CREATE SCHEMA {schema}; SET search_path = {schema}; SET plan_cache_mode = force_custom_plan;",
    ]
    out += [f"\\i {os.path.join(SCHEMA_SQL, f)}" for f in MIGRATIONS]
    out += [tables, "CHECKPOINT;", "SELECT pg_current_wal_lsn() AS l0 \\gset"]
    out += [enqueue.format(lo=lo + 1, hi=min(lo + CHUNK, jobs)) for lo in range(0, jobs, CHUNK)]
    out += ["SELECT 'result', pg_wal_lsn_diff(pg_current_wal_lsn(), :'l0');", "ANALYZE;"]
    return "\n".join(out) + "\n"


def drain(schema, shape, claims):
    """One session's part of the drain: `claims` claims, each followed by the completion of what it claimed."""
    _, _, claim, complete = SHAPES[shape]
    out = ["\\set ON_ERROR_STOP 1", f"SET search_path = {schema}; SET plan_cache_mode = force_custom_plan;"]
    for _ in range(claims):
        out += [claim.format(batch=BATCH), complete]
    return "\n".join(out) + "\n"


def query(url, sql, what):
    done = subprocess.run(["psql", url, "-X", "-q", "-A", "-t", "-F", " ", "-v", "ON_ERROR_STOP=1", "-c", sql],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{what}: psql failed: {done.stderr.strip()}")
    return done.stdout.strip()


def run(url, shape, jobs, sessions):
    schema = f"outbox_shape_{os.getpid()}"
    table = "shape_jobs" if shape.startswith("ready") else "outbox_jobs"
    try:
        done = subprocess.run(["psql", url, "-X", "-q", "-A", "-t", "-F", " "], input=setup(schema, shape, jobs),
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"shape {shape}: psql failed: {done.stderr.strip()}")
        enqueued = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("result ")]
        if not enqueued:
            raise SystemExit(f"shape {shape}: no result in psql's output")
        # Every session makes its share of the claims and two more, which find nothing once the jobs are gone.
        claims = -(-jobs // (BATCH * sessions)) + 2
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
            script.write(drain(schema, shape, claims))
            script.flush()
            l2 = query(url, "SELECT pg_current_wal_lsn()", f"shape {shape}")
            started = time.perf_counter()
            procs = [subprocess.Popen(["psql", url, "-X", "-q", "-f", script.name], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True) for _ in range(sessions)]
            failures = [proc.communicate()[1].strip() for proc in procs]
            secs = time.perf_counter() - started
        failures = [f for f, proc in zip(failures, procs) if proc.returncode != 0]
        if failures:
            raise SystemExit(f"shape {shape}: a draining session failed: {failures[0]}")
        drained = query(url, f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{l2}'), "
                        f"(SELECT count(*) FROM {schema}.{table} WHERE status = 'completed')", f"shape {shape}").split()
        if int(drained[1]) != jobs:
            raise SystemExit(f"shape {shape}: {drained[1]} of {jobs} jobs completed")
        enq, dr = float(enqueued[0]) / jobs, float(drained[0]) / jobs
        return round(enq), round(dr), round(enq + dr), round(jobs / secs)
    finally:
        subprocess.run(["psql", url, "-X", "-q", "-c", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
                       capture_output=True, check=False)


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: wal.py <postgres url> [jobs = 20000] [sessions = 1] [shape ...]")
    url = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    sessions = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    shapes = sys.argv[4:] or list(SHAPES)
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape `{unknown[0]}`; the shapes are {', '.join(SHAPES)}")
    print(f"{'shape':<14} {'enqueue B/job':>14} {'drain B/job':>12} {'life B/job':>11} {'drain jobs/s':>13}")
    for shape in shapes:
        enq, dr, life, rate = run(url, shape, jobs, sessions)
        print(f"{shape:<14} {enq:>14} {dr:>12} {life:>11} {rate:>13}", flush=True)


if __name__ == "__main__":
    main()
