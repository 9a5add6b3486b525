-- A sequenced job enqueued by a transaction that reads one snapshot throughout (`REPEATABLE READ`, `SERIALIZABLE`)
-- goes in waiting. The insert trigger takes the sequence's lock and then reads whether a job of the sequence holds
-- it back. Under `READ COMMITTED` that read takes a snapshot of its own, after the lock, and sees every job whose
-- enqueuer held the lock before. A transaction's snapshot taken before such a job committed does not see it, so the
-- job went in free to run, beside or before the one ahead of it, and nothing made it wait again. (Of two
-- `SERIALIZABLE` enqueuers one was aborted; a `SERIALIZABLE` enqueuer behind a `READ COMMITTED` one was not.) No
-- data that a snapshot-bound transaction reads shows what committed after its snapshot, short of a row that every
-- enqueue writes, which would cost every `READ COMMITTED` enqueue. So such a transaction's job waits
-- whatever its snapshot shows. At its commit it asks the workers, on the wake-up channel (`<schema>`, the record
-- separator, `<sequence key>`), to let the sequence's first job go once nothing of it runs or is free to run
-- (`listener.rs`). The rescuers' sweep does it otherwise (`store/mod.rs`). A `READ COMMITTED` enqueue reads as it did.
CREATE OR REPLACE FUNCTION outbox_jobs_sequence_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(TG_TABLE_SCHEMA || ' outbox sequence ' || NEW.sequence_key, 0));
    NEW.sequence_no := nextval('outbox_jobs_sequence_no');
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        NEW.waiting := true;
        -- A notification's payload stays under 8,000 bytes; a longer key (written by hand: the library's keys
        -- stop at 512 bytes) is left to the sweep.
        IF octet_length(NEW.sequence_key) <= 7000 THEN
            PERFORM pg_notify('outbox_jobs', TG_TABLE_SCHEMA || chr(30) || NEW.sequence_key);
        END IF;
    ELSE
        NEW.waiting := EXISTS (SELECT 1 FROM outbox_jobs b WHERE b.sequence_key = NEW.sequence_key AND b.blocks);
    END IF;
    RETURN NEW;
END $$;
