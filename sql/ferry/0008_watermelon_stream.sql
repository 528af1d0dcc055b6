-- 0008_watermelon_stream: the WatermelonDB pull reader became a cursor
-- (ferry.watermelon_open, functions/watermelon_pull.sql), which the gateway reads in
-- batches while it streams the answer; the reader that built the whole answer in one
-- text goes. (A SQL DELETE on a synced table became a tombstone in the same release,
-- functions/deletes.sql: tables registered before it get the trigger when registry.sql
-- is applied again, which rebuilds every table's triggers, so no data change is needed
-- here for it.)
drop function if exists ferry.watermelon_read(pg_snapshot, text[]);
