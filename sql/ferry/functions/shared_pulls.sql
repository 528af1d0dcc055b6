-- What a gateway reads to answer the shared part of pulls from memory
-- (docs/ARCHITECTURE.md, "Shared-change storms").
--
-- One write to a `shared` table cues every stream, and every device pulls. Answered by
-- ferry.pull, each such pull visits every synced table for its user, about a millisecond of
-- PostgreSQL: 50,000 devices would cost ~50 s of database CPU for one row. So each event
-- loop of a gateway keeps the shared tables' rows changed since it began watching, and
-- answers a pull whose only news can be shared from them, with a cursor whose
-- "shared_since" moves on while the device's own tables stay where they were (pull.sql).
-- The gateway reads these two functions in one statement, so in one snapshot:
--
--   ferry.shared_pull_state(): that snapshot (the cache's new position), the history a
--     cursor must name (ferry.history_here), the purge horizon, and whether every shared
--     table is readable by every client as ferry.register_table made it (its one policy,
--     ferry_read, using (true)). A shared table an operator gave other policies is read
--     per user by ferry.pull alone: the gateway then answers nothing from memory.
--   ferry.shared_changes(since): every row of a shared table whose change stamp is not
--     visible in `since`, with its stamp, tombstone flag, primary key and the body a
--     pull sends (the columns of the table's pull reader, registry.sql), read as the
--     caller (ferry_client) under Row Level Security, from the (_stamp) index.
-- Both are STABLE: every query in them, the dynamic ones included, runs in the snapshot
-- of the statement that called them, the one pg_current_snapshot() names.

create or replace function ferry.shared_pull_state(
    out snapshot text, out history jsonb, out purged_through xid8, out purge_xid xid8, out open boolean)
language plpgsql stable
as $$
begin
    snapshot := pg_catalog.pg_current_snapshot()::text;
    history := ferry.history_here();
    select h.purged_through, h.purge_xid into purged_through, purge_xid from ferry.purge_horizon h;
    open := not exists (
        select from pg_catalog.pg_policy p
        join ferry.synced_tables s on s.table_name = p.polrelid
        where s.strategy = 'shared'
            and (p.polname <> 'ferry_read' or not p.polpermissive or p.polcmd <> 'r'
                or pg_catalog.pg_get_expr(p.polqual, p.polrelid) <> 'true'));
end
$$;

comment on function ferry.shared_pull_state() is
    'For a gateway''s cache of shared changes: this statement''s snapshot, ferry.history_here(), the purge horizon, and whether every shared table has only ferry.register_table''s open read policy';

create or replace function ferry.shared_changes(p_since pg_snapshot)
returns table (table_name name, stamp xid8, deleted boolean, key jsonb, body jsonb)
language plpgsql stable
as $$
declare
    v_table record;
begin
    if p_since is null then
        return;
    end if;
    for v_table in
        select c.relname as name, s.table_name as rel,
            (select pg_catalog.string_agg(pg_catalog.format('%L, t.%I', k.name, k.name), ', ' order by k.ordinal)
                from ferry.primary_key(s.table_name) k) as key_object
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        where s.strategy = 'shared' and pg_catalog.has_table_privilege(s.table_name, 'select')
        order by c.relname
    loop
        return query execute pg_catalog.format(
            $query$select %L::name, t._stamp, t._deleted, pg_catalog.jsonb_build_object(%s),
                pg_catalog.to_jsonb(t) - ferry.internal_columns()::text[]
            from %s t
            where t._stamp >= pg_catalog.pg_snapshot_xmin($1) and not pg_catalog.pg_visible_in_snapshot(t._stamp, $1)
            order by t._stamp$query$,
            v_table.name, v_table.key_object, v_table.rel)
            using p_since;
    end loop;
end
$$;

comment on function ferry.shared_changes(pg_snapshot) is
    'For a gateway''s cache of shared changes: the rows of every shared table the caller may read whose _stamp is not visible in p_since (none for null), with stamp, tombstone flag, key and pull body';

revoke all on function ferry.shared_pull_state(), ferry.shared_changes(pg_snapshot) from public;
grant execute on function ferry.shared_pull_state(), ferry.shared_changes(pg_snapshot) to ferry_client;
