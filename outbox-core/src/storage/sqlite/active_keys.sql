-- Nothing changes on SQLite: it has no heap-only updates to win back (an update there touches only the indexes
-- whose columns or conditions it changes), so its partial unique index of active jobs' keys stays. On PostgreSQL
-- the index reads a generated column instead of the job's status (`postgres/active_keys.sql`). One list of
-- migrations serves both backends.
SELECT 1;
