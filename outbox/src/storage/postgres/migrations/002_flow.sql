-- Flow control (`flow/`, `storage/flow.rs`): what a claim of a controlled kind reads besides the jobs.

-- A job's key for its kind's per-key rate, pauses and fair share, and its cost under a rate (NULL: 1). Neither
-- changes after enqueue, so claims and completions still update rows in place.
ALTER TABLE outbox_jobs ADD COLUMN flow_key text COLLATE "C",
    ADD COLUMN cost integer CONSTRAINT outbox_jobs_cost_check CHECK (cost >= 0);
-- The ready jobs of a keyed kind, key by key: a claim walks the keys that have some and reads each one's head.
CREATE INDEX outbox_jobs_flow_keys ON outbox_jobs (kind, flow_key, priority DESC, run_at, id)
    WHERE open AND flow_key IS NOT NULL;

-- What a kind declares of flow control, for producers and tools without the Rust type.
ALTER TABLE outbox_kinds ADD COLUMN rate text, ADD COLUMN rate_key text, ADD COLUMN fair text, ADD COLUMN cost text;

-- Pauses and holds: work of a queue, a kind, or one key of a kind that no claim takes. A pause lasts until resumed
-- (`ends_at` NULL); a hold (a handler's "rate limited until") ends by itself. An empty key is the whole kind.
CREATE TABLE outbox_pauses (
    scope text COLLATE "C" NOT NULL CONSTRAINT outbox_pauses_scope_check CHECK (scope IN ('queue', 'kind')),
    name text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL DEFAULT '',
    ends_at timestamptz,
    reason text,
    paused_at timestamptz NOT NULL,
    PRIMARY KEY (scope, name, key)
);

-- A pause or hold ended by an operator wakes the workers of the schema, as an enqueue does.
CREATE TRIGGER outbox_pauses_resumed AFTER DELETE ON outbox_pauses
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_jobs_notify();

-- Rate limits by name (a kind's name, or any name code shares a budget under): the rate, and a token bucket per key
-- (an empty key: the name's own). `level` units at `at` (ms); it refills at amount / window_ms up to burst.
CREATE TABLE outbox_rates (
    name text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL DEFAULT '',
    amount bigint NOT NULL CONSTRAINT outbox_rates_amount_check CHECK (amount > 0),
    window_ms bigint NOT NULL CONSTRAINT outbox_rates_window_ms_check CHECK (window_ms > 0),
    burst bigint NOT NULL CONSTRAINT outbox_rates_burst_check CHECK (burst > 0),
    level double precision NOT NULL,
    at bigint NOT NULL,
    PRIMARY KEY (name, key)
);

-- Fair share by kind: each key's weight and pass (the virtual time of its next claim); the empty key holds the
-- kind's clock, the pass of the last job taken.
CREATE TABLE outbox_fair (
    name text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    weight integer NOT NULL DEFAULT 1 CONSTRAINT outbox_fair_weight_check CHECK (weight > 0),
    pass double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (name, key)
);
