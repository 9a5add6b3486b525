-- Flow control (`flow/`, `storage/flow.rs`): what a claim of a controlled kind reads besides the jobs.

-- A job's key for its kind's per-key rate, pauses and fair share, and its cost under a rate (NULL: 1).
ALTER TABLE outbox_jobs ADD COLUMN flow_key TEXT;
ALTER TABLE outbox_jobs ADD COLUMN cost INTEGER CHECK (cost IS NULL OR cost >= 0);
-- The ready jobs of a keyed kind, key by key: a claim walks the keys that have some and reads each one's head.
CREATE INDEX outbox_jobs_flow_keys ON outbox_jobs (kind, flow_key, priority DESC, run_at, id)
    WHERE status = 'pending' AND waiting = 0 AND scheduled = 0 AND flow_key IS NOT NULL;

-- What a kind declares of flow control, for producers and tools without the Rust type.
ALTER TABLE outbox_kinds ADD COLUMN rate TEXT;
ALTER TABLE outbox_kinds ADD COLUMN rate_key TEXT;
ALTER TABLE outbox_kinds ADD COLUMN fair TEXT;
ALTER TABLE outbox_kinds ADD COLUMN cost TEXT;

-- Pauses and holds: work of a queue, a kind, or one key of a kind that no claim takes. A pause lasts until resumed
-- (`ends_at` NULL); a hold (a handler's "rate limited until") ends by itself. An empty key is the whole kind.
CREATE TABLE outbox_pauses (
    scope TEXT NOT NULL CHECK (scope IN ('queue', 'kind')),
    name TEXT NOT NULL,
    key TEXT NOT NULL DEFAULT '',
    ends_at INTEGER,
    reason TEXT,
    paused_at INTEGER NOT NULL,
    PRIMARY KEY (scope, name, key)
) STRICT;

-- Rate limits by name (a kind's name, or any name code shares a budget under): the rate, and a token bucket per key
-- (an empty key: the name's own). `level` units at `at` (ms); it refills at amount / window_ms up to burst.
CREATE TABLE outbox_rates (
    name TEXT NOT NULL,
    key TEXT NOT NULL DEFAULT '',
    amount INTEGER NOT NULL CHECK (amount > 0),
    window_ms INTEGER NOT NULL CHECK (window_ms > 0),
    burst INTEGER NOT NULL CHECK (burst > 0),
    level REAL NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (name, key)
) STRICT;

-- Fair share by kind: each key's weight and pass (the virtual time of its next claim); the empty key holds the
-- kind's clock, the pass of the last job taken.
CREATE TABLE outbox_fair (
    name TEXT NOT NULL,
    key TEXT NOT NULL,
    weight INTEGER NOT NULL DEFAULT 1 CHECK (weight > 0),
    pass REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (name, key)
) STRICT;
