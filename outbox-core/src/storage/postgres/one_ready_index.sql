-- One index of ready jobs instead of two. The index led by the kind served the workers of every queue, the one led
-- by the queue the workers of some; every job entered both as it was enqueued (a twelfth of the WAL a job writes
-- over its life: 1,533 against 1,403 bytes per job with `outbox-bench/shapes/wal.py`, shape `two_ready_indexes`
-- against `current`).
-- A worker of every queue now reads the queue-led index once per queue that holds ready jobs: it lists them every
-- second, with the queues its kinds are registered to, through a walk of the index that visits one entry per
-- queue (`store/claim.rs`).
DROP INDEX outbox_jobs_ready;
