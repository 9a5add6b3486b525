-- PostgreSQL records a statement's enqueued jobs in one row (`postgres/enqueued.sql`). SQLite's triggers fire
-- once per row, so here every job keeps an `enqueued` row of its own and this step changes nothing.
SELECT 1;
