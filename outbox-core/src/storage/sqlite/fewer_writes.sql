-- On PostgreSQL this step records a statement's enqueued jobs in one row and leaves room on the jobs' pages for
-- their updates (`postgres/fewer_writes.sql`). SQLite's triggers fire once per row and its pages have no such
-- setting: here it changes nothing.
SELECT 1;
