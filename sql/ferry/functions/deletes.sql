-- A SQL DELETE on a registered table leaves a tombstone (docs/TABLES.md, "Deleting rows"):
-- a row deleted for good is never pulled, so every device would keep it. The BEFORE
-- DELETE row trigger ferry_tombstone_delete (installed by ferry.install_triggers,
-- registry.sql, which is why this file sorts before it) turns the DELETE of a live row
-- into UPDATE ... SET _deleted = true, which stamps and cues as any write does; the
-- DELETE of a tombstone does nothing (the purge removes it once devices had the
-- retention period to pull it). A session that means to remove rows for good says so
-- with the setting ferry.hard_delete (set_config('ferry.hard_delete', 'on', true));
-- Ferry's own functions that must (account deletion, keep_cloud, cleanup-anonymous, the
-- purge) turn it on with ferry.hard_delete_begin and back with ferry.hard_delete_end, so
-- it holds inside them and nowhere else. (A SET clause in their header would do the same,
-- but PostgreSQL 15 lets only a superuser create a function that sets a custom parameter,
-- and the role that migrates need not be one.)

-- Turns hard deletes on for the rest of the transaction and returns the value it
-- replaced, for ferry.hard_delete_end.
create or replace function ferry.hard_delete_begin() returns text
language plpgsql volatile set search_path = ''
as $$
declare
    v_before text := coalesce(pg_catalog.current_setting('ferry.hard_delete', true), '');
begin
    perform pg_catalog.set_config('ferry.hard_delete', 'on', true);
    return v_before;
end
$$;

-- Puts back what ferry.hard_delete_begin replaced. An error between the two needs no
-- call: the setting is transaction-local, so it is undone with the (sub)transaction.
create or replace function ferry.hard_delete_end(p_before text) returns void
language plpgsql volatile set search_path = ''
as $$
begin
    perform pg_catalog.set_config('ferry.hard_delete', coalesce(p_before, ''), true);
end
$$;

revoke all on function ferry.hard_delete_begin(), ferry.hard_delete_end(text) from public;

-- The trigger function; its arguments are the table's primary key columns (as
-- install_triggers found them), matched against OLD. SECURITY DEFINER: whoever may
-- delete the row may tombstone it, whatever update rights its role lacks. On a shared
-- table received from an origin (ferry.receive_shared) it fires for the rows logical
-- replication applies too: the origin's delete of a live row (under ferry.hard_delete)
-- is a tombstone here, and its purge of a tombstone a purge here.
create or replace function ferry.tombstone_delete() returns trigger
language plpgsql security definer set search_path = ''
as $$
declare
    v_match text;
begin
    if coalesce(nullif(pg_catalog.current_setting('ferry.hard_delete', true), ''), 'off')::boolean then
        return old;
    end if;
    -- Logical replication applying the origin's purge of a tombstone, on a shared table
    -- this cluster receives (the trigger fires ALWAYS there; 'replica' is the apply
    -- worker's role). The row goes, and the purge horizon moves as a purge here would
    -- move it, so a cursor that had not seen the tombstone expires instead of keeping
    -- the row; the origin could not be followed otherwise (its later insert of the
    -- same key would collide with a tombstone kept here).
    if old._deleted and pg_catalog.current_setting('session_replication_role') = 'replica' then
        update ferry.purge_horizon h
            set purged_through = greatest(h.purged_through, old._stamp),
                purge_xid = pg_catalog.pg_current_xact_id(),
                purged_at = pg_catalog.now();
        return old;
    end if;
    if not old._deleted then
        select pg_catalog.string_agg(pg_catalog.format('t.%1$I = ($1).%1$I', k.name), ' and ')
            into v_match
            from pg_catalog.unnest(tg_argv) k(name);
        execute pg_catalog.format('update %I.%I t set _deleted = true where %s', tg_table_schema, tg_table_name, v_match)
            using old;
    end if;
    return null;
end
$$;

comment on function ferry.tombstone_delete() is
    'BEFORE DELETE row trigger of every synced table (ferry_tombstone_delete): a DELETE of a live row becomes its tombstone, of a tombstone nothing, unless ferry.hard_delete is on, or logical replication applies an origin''s purge (which moves the purge horizon).';

revoke all on function ferry.tombstone_delete() from public;
