-- Kinds that keep nothing: a worker deletes such a job in the statement that completes it, while the row is
-- still claimed. Its events stay for the feed's readers (a reader resuming from `Last-Event-ID` must not miss
-- them), and retention prunes them once they are as old as the feed keeps. A finished job deleted by retention
-- or `purge` still takes its history with it.
DROP TRIGGER outbox_jobs_purged ON outbox_jobs;
CREATE TRIGGER outbox_jobs_purged AFTER DELETE ON outbox_jobs FOR EACH ROW WHEN (OLD.status <> 'claimed')
    EXECUTE FUNCTION outbox_jobs_purged();
