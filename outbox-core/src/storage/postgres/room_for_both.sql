-- `outbox_jobs` leaves 60 % of each page free as jobs are inserted, not half (`fewer_writes.sql`). Since a claim
-- writes each row's new version on the row's own page (`hot_claim.sql`), a page filled to half had room for the
-- claimed versions of most of its rows but not for their completed versions as well: those moved to another page,
-- logged whole, with a lock record for the move, and a few claims did not fit either. Measured with
-- `outbox-bench/shapes/wal.py` (20,000 jobs, claims of 100, two sessions): a job's life writes 1,182 bytes of WAL
-- instead of 1,279, the drain 703 instead of 800. Only pages filled from now on keep the room.
ALTER TABLE outbox_jobs SET (fillfactor = 40);
