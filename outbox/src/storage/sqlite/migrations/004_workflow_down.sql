-- Undoes `004_workflow.sql`: the workflow triggers, tables, index and columns go, and the sequence triggers are
-- those of `001_schema` again.
DROP TRIGGER IF EXISTS outbox_jobs_workflow_purged;
DROP TRIGGER IF EXISTS outbox_jobs_workflow_retried;
DROP TRIGGER IF EXISTS outbox_jobs_workflow_gone;
DROP TRIGGER IF EXISTS outbox_jobs_workflow_failed;
DROP TRIGGER IF EXISTS outbox_jobs_workflow_done;
DROP TABLE IF EXISTS outbox_job_deps;
DROP TABLE IF EXISTS outbox_workflows;
DROP INDEX IF EXISTS outbox_jobs_workflow;
DROP TRIGGER outbox_jobs_sequence_next;
DROP TRIGGER outbox_jobs_sequence_purged;
DROP TRIGGER outbox_jobs_sequence_rejoin;
ALTER TABLE outbox_jobs DROP COLUMN has_children;
ALTER TABLE outbox_jobs DROP COLUMN on_parent_failure;
ALTER TABLE outbox_jobs DROP COLUMN parents_left;
ALTER TABLE outbox_jobs DROP COLUMN step;
ALTER TABLE outbox_jobs DROP COLUMN workflow_id;
CREATE TRIGGER outbox_jobs_sequence_next AFTER UPDATE OF status, sequence_hold ON outbox_jobs
    WHEN NEW.sequence_key IS NOT NULL
        AND (OLD.status IN ('pending', 'claimed') OR (OLD.status IN ('failed', 'cancelled') AND OLD.sequence_hold = 1))
        AND NOT (NEW.status IN ('pending', 'claimed') OR (NEW.status IN ('failed', 'cancelled') AND NEW.sequence_hold = 1))
BEGIN
    UPDATE outbox_jobs SET waiting = 0 WHERE id = (SELECT h.id FROM outbox_jobs h
        WHERE h.sequence_key = OLD.sequence_key
            AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
        ORDER BY h.sequence_no LIMIT 1) AND status = 'pending' AND waiting = 1;
END;
CREATE TRIGGER outbox_jobs_sequence_purged AFTER DELETE ON outbox_jobs
    WHEN OLD.sequence_key IS NOT NULL
        AND (OLD.status IN ('pending', 'claimed') OR (OLD.status IN ('failed', 'cancelled') AND OLD.sequence_hold = 1))
BEGIN
    UPDATE outbox_jobs SET waiting = 0 WHERE id = (SELECT h.id FROM outbox_jobs h
        WHERE h.sequence_key = OLD.sequence_key
            AND (h.status IN ('pending', 'claimed') OR (h.status IN ('failed', 'cancelled') AND h.sequence_hold = 1))
        ORDER BY h.sequence_no LIMIT 1) AND status = 'pending' AND waiting = 1;
END;
-- A finished job put back to pending rejoins its sequence behind whatever blocks it, and behind a later job
-- that is running or free to run (a job retried after its sequence went on never runs beside another).
CREATE TRIGGER outbox_jobs_sequence_rejoin AFTER UPDATE OF status ON outbox_jobs
    WHEN NEW.sequence_key IS NOT NULL AND NEW.status = 'pending'
        AND OLD.status IN ('completed', 'failed', 'cancelled')
BEGIN
    UPDATE outbox_jobs SET waiting = EXISTS (SELECT 1 FROM outbox_jobs b
        WHERE b.sequence_key = NEW.sequence_key AND b.id <> NEW.id
            AND ((b.sequence_no < NEW.sequence_no
                    AND (b.status IN ('pending', 'claimed') OR (b.status IN ('failed', 'cancelled') AND b.sequence_hold = 1)))
                OR b.status = 'claimed' OR (b.status = 'pending' AND b.waiting = 0)))
    WHERE id = NEW.id;
END;
