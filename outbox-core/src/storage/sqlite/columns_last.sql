-- Nothing changes on SQLite: it rewrites a changed row whole, whatever the order of its columns. On PostgreSQL
-- the jobs table is rebuilt with the columns a claim and a completion change last (`postgres/columns_last.sql`).
-- One list of migrations serves both backends.
SELECT 1;
