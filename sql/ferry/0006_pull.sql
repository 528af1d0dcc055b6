-- 0006_pull: GET /v1/pull over a snapshot cursor (docs/ARCHITECTURE.md, "Sync").
--
-- Adds
--   ferry.pull(text, integer)   the body of GET /v1/pull, run as ferry_client (SECURITY
--                               INVOKER: Row Level Security decides which rows are read).
--
-- One snapshot, one statement. pull is STABLE: PostgreSQL runs every query of a
-- non-volatile PL/pgSQL function (static and EXECUTE alike) in the snapshot of the
-- statement that called it, and pg_current_snapshot() answers that same snapshot. So
-- `select ferry.pull($1, $2)`, sent after the identity statement in the gateway's one
-- pipeline, reads ferry.devices and every synced table in ONE snapshot and names it as the
-- new cursor, with no BEGIN ISOLATION LEVEL REPEATABLE READ (which would cost two more
-- statements, and must come before the identity statement's snapshot). The tables are
-- read one EXECUTE each, in name order, because the set of tables is data.
--
-- The cursor, as SQL sees it (the gateway signs it and makes it opaque):
--   {"since": "<pg_snapshot>"}               done: the next pull returns the rows whose
--                                            change stamp is not visible in that snapshot
--   {"since": "<pg_snapshot>" | null,        paging (has_more): the page range is the rows
--    "until": "<pg_snapshot>",               visible in `until` and not in `since` (null:
--    "last_mutation_id": N,                  first load, live rows only), after position
--    "table": "name", "stamp": "xid",        (table, _stamp, primary key); the last page
--    "key": {primary key}}                   returns {"since": until}.
-- A row changed after `until` has a stamp `until` cannot see, so it leaves the paging
-- range and comes with the next pull: no row is lost or repeated across pages, whatever
-- commits in between. last_mutation_id is read in the first page's snapshot and carried
-- through the pages, because it must describe the data of `until`.
--
-- Order within an answer: tables by name, then _stamp, then primary key; at most p_limit
-- rows (upserts and deletes together). Each table is scanned through its (owner, _stamp)
-- index from the since snapshot's xmin up to the until snapshot's xmax.

create function ferry.pull(p_cursor text, p_limit integer) returns jsonb
language plpgsql stable
as $$
declare
    v_cursor jsonb;
    v_since pg_snapshot;
    v_until pg_snapshot;
    v_last bigint;
    v_after_table name;
    v_after_stamp xid8;
    v_after_key jsonb;
    v_remaining integer := p_limit;
    v_changes jsonb := '{}';
    v_has_more boolean := false;
    v_position jsonb;
    v_table record;
    v_fetched integer;
    v_upserts jsonb;
    v_deletes jsonb;
    v_reached jsonb;
begin
    if p_limit is null or p_limit < 1 then
        raise exception 'pull: limit must be a positive integer' using errcode = '22023';
    end if;
    -- A malformed cursor raises 22P02 (bad JSON or snapshot text) or 22023 (bad shape).
    if p_cursor is not null then
        v_cursor := p_cursor::jsonb;
        if pg_catalog.jsonb_typeof(v_cursor) <> 'object' then
            raise exception 'pull: invalid cursor' using errcode = '22023';
        end if;
        v_since := (v_cursor ->> 'since')::pg_snapshot;
        if v_cursor ? 'until' then
            v_until := (v_cursor ->> 'until')::pg_snapshot;
            v_last := (v_cursor ->> 'last_mutation_id')::bigint;
            v_after_table := v_cursor ->> 'table';
            v_after_stamp := (v_cursor ->> 'stamp')::xid8;
            v_after_key := v_cursor -> 'key';
            if v_until is null or v_last is null or v_after_table is null or v_after_stamp is null
                or pg_catalog.jsonb_typeof(v_after_key) is distinct from 'object'
            then
                raise exception 'pull: invalid cursor' using errcode = '22023';
            end if;
        elsif v_since is null then
            raise exception 'pull: invalid cursor' using errcode = '22023';
        end if;
        -- TOMBSTONES (issue 4, item 4): when v_since's xmin is older than the purge
        -- horizon (tombstones the client never saw may be gone), raise here with the
        -- errcode the gateway answers 409 cursor_expired. A pull without a cursor never does.
    end if;
    if v_until is null then
        v_until := pg_catalog.pg_current_snapshot();
        select d.last_mutation_id into v_last from ferry.devices d
            where d.user_id = ferry.uid() and d.device_id = ferry.device_id();
        v_last := coalesce(v_last, 0);
    end if;

    for v_table in
        select c.relname as name, c.oid::regclass as rel, k.order_list, k.object_args, k.after_list
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        cross join lateral (
            select pg_catalog.string_agg(pg_catalog.format('t.%I', a.attname), ', ' order by p.position) as order_list,
                pg_catalog.string_agg(pg_catalog.format('%L, t.%I', a.attname, a.attname), ', ' order by p.position)
                    as object_args,
                pg_catalog.string_agg(pg_catalog.format('p.%I', a.attname), ', ' order by p.position) as after_list
            from pg_catalog.pg_index i
            cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as p(attnum, position)
            join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = p.attnum
            where i.indrelid = c.oid and i.indisprimary
        ) k
        where pg_catalog.has_table_privilege(s.table_name, 'select')
            and (v_after_table is null or c.relname >= v_after_table)
        order by c.relname
    loop
        -- remaining + 1 rows: one more than fits says has_more (with 0 left, whether any remain).
        execute pg_catalog.format($sql$
            select pg_catalog.count(*)::integer,
                pg_catalog.jsonb_agg(r.body order by r.n) filter (where r.n <= $1 and not r.deleted),
                pg_catalog.jsonb_agg(r.key order by r.n) filter (where r.n <= $1 and r.deleted),
                (pg_catalog.array_agg(pg_catalog.jsonb_build_object('stamp', r.stamp::text, 'key', r.key)
                    order by r.n desc) filter (where r.n <= $1))[1]
            from (
                select pg_catalog.row_number() over (order by t._stamp, %1$s) as n,
                    t._stamp as stamp, t._deleted as deleted,
                    pg_catalog.to_jsonb(t) - '{_stamp,_deleted,_lock_device,_lock_heartbeat_at}'::text[] as body,
                    pg_catalog.jsonb_build_object(%2$s) as key
                from %3$s t %4$s
                where t._stamp >= $2 and t._stamp < pg_catalog.pg_snapshot_xmax($3)
                    and pg_catalog.pg_visible_in_snapshot(t._stamp, $3)
                    and %5$s %6$s
                order by t._stamp, %1$s
                limit $1 + 1
            ) r
            $sql$,
            v_table.order_list, v_table.object_args, v_table.rel,
            case when v_table.name = v_after_table
                then pg_catalog.format(', pg_catalog.jsonb_populate_record(null::%s, $5) p', v_table.rel) else '' end,
            case when v_since is null then 'not t._deleted'
                else 'not pg_catalog.pg_visible_in_snapshot(t._stamp, $4)' end,
            case when v_table.name = v_after_table
                then pg_catalog.format('and (t._stamp, %s) > ($6, %s)', v_table.order_list, v_table.after_list) else '' end)
            into v_fetched, v_upserts, v_deletes, v_reached
            using v_remaining, coalesce(pg_catalog.pg_snapshot_xmin(v_since), '0'::xid8), v_until, v_since,
                v_after_key, v_after_stamp;

        if v_upserts is not null or v_deletes is not null then
            v_changes := v_changes || pg_catalog.jsonb_build_object(v_table.name, pg_catalog.jsonb_build_object(
                'upserts', coalesce(v_upserts, '[]'), 'deletes', coalesce(v_deletes, '[]')));
        end if;
        if v_reached is not null then
            v_position := v_reached || pg_catalog.jsonb_build_object('table', v_table.name);
        end if;
        if v_fetched > v_remaining then
            v_has_more := true;
            exit;
        end if;
        v_remaining := v_remaining - v_fetched;
    end loop;

    return pg_catalog.jsonb_build_object(
        'changes', v_changes,
        'cursor', case
            when v_has_more then (pg_catalog.jsonb_build_object(
                'since', v_since::text, 'until', v_until::text, 'last_mutation_id', v_last) || v_position)::text
            else pg_catalog.jsonb_build_object('since', v_until::text)::text
        end,
        'has_more', v_has_more,
        'last_mutation_id', v_last);
end
$$;

comment on function ferry.pull(text, integer) is
    'GET /v1/pull as one statement in one snapshot, run as ferry_client: {"changes", "cursor" (raw; the gateway signs it), "has_more", "last_mutation_id"}';

revoke all on function ferry.pull(text, integer) from public;
grant execute on function ferry.pull(text, integer) to ferry_client;
