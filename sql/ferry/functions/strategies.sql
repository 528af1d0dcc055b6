-- What a client's write does under each strategy (docs/TABLES.md, "Strategies"), in one
-- place. Both write paths read it: ferry.push_mutations (push.sql, one mutation at a
-- time, each in its own subtransaction) and ferry.watermelon_write (watermelon_push.sql,
-- a table's records in a few set-based statements). How each path writes stays its own
-- (push answers mutation by mutation; a WatermelonDB push is one transaction refused
-- whole on a conflict with its pull); what a write does to the row under its key, and
-- which writes are refused, is decided here. Tests/sql/strategies.sql holds the rule
-- table and checks both paths against it.

-- MARK: - The rule

-- The rule for a write of p_op (push's op: insert, upsert or delete; a WatermelonDB
-- created or updated record is an upsert, a deleted id a delete) to a table of
-- p_strategy named p_table, or, with a null p_op, whether clients write the table at all:
--   {"refused": code, "message": text}  the write is refused: read_only (readonly and
--       shared tables, whatever the op), immutable (an insert_only table's delete)
--   {} for a null p_op whose table clients write
--   {"op": "delete", "held": bool}  a live row under the key becomes a tombstone; no row,
--       or a tombstone, is left as it is
--   {"op": "insert" | "upsert", "live": ..., "tombstone": ..., "held": bool}, where
--     op         the write as it is done: an upsert is an insert where a row, once
--                written, is not overwritten (insert_only, set)
--     live       a live row under the key: overwrite (a merge write of the given columns),
--                duplicate (left as it is; the write is a duplicate) or same_or_immutable
--                (a duplicate when the given columns hold the stored values, else refused
--                as immutable)
--     tombstone  a tombstone under the key: revive (a merge write of the given columns,
--                live again) or immutable (refused)
--   held         the row is written by the device holding its lock only (device_lock)
-- Null for an op or strategy outside these. STABLE, not IMMUTABLE, although its answer
-- never changes: format and jsonb_build_object are STABLE, and PostgreSQL inlines a SQL
-- function into its caller's plan only when it is no less volatile than what it calls
-- (inlined, a call costs what the CASE does; called, about five times that).
create or replace function ferry.write_rule(p_strategy text, p_op text, p_table name) returns jsonb
language sql stable parallel safe
as $$
    select case
        when p_strategy in ('readonly', 'shared') then pg_catalog.jsonb_build_object(
            'refused', 'read_only', 'message', pg_catalog.format('%s is read-only for clients', p_table))
        when p_strategy not in ('lww', 'insert_only', 'set', 'device_lock') then null
        when p_op is null then '{}'::jsonb
        when p_op = 'delete' and p_strategy = 'insert_only' then pg_catalog.jsonb_build_object(
            'refused', 'immutable', 'message', pg_catalog.format('rows of %s are never deleted', p_table))
        when p_op = 'delete' then pg_catalog.jsonb_build_object('op', 'delete', 'held', p_strategy = 'device_lock')
        when p_op = 'upsert' and p_strategy in ('lww', 'device_lock') then pg_catalog.jsonb_build_object(
            'op', 'upsert', 'live', 'overwrite', 'tombstone', 'revive', 'held', p_strategy = 'device_lock')
        when p_op not in ('insert', 'upsert') then null
        when p_strategy = 'set' then '{"op": "insert", "live": "duplicate", "tombstone": "revive", "held": false}'::jsonb
        when p_strategy = 'insert_only' then
            '{"op": "insert", "live": "same_or_immutable", "tombstone": "immutable", "held": false}'::jsonb
        else pg_catalog.jsonb_build_object(
            'op', 'insert', 'live', 'same_or_immutable', 'tombstone', 'revive', 'held', p_strategy = 'device_lock')
    end
$$;

comment on function ferry.write_rule(text, text, name) is
    'What a client''s write of an op (insert, upsert, delete; null: the table as a whole) does under a strategy: {"refused", "message"} or {"op", "live", "tombstone", "held"}. Read by ferry.push_mutations and ferry.watermelon_write.';

-- MARK: - Grants

revoke all on function ferry.write_rule(text, text, name) from public;
grant execute on function ferry.write_rule(text, text, name) to ferry_client;
