-- 0012_pull_readers: pull reads each synced table through a function of its own whose
-- SQL is static, so PostgreSQL keeps its plans (docs/ARCHITECTURE.md "Sync", issue 4).
--
-- Why: 0006's pull built each table's query as text and ran it with EXECUTE, which
-- PostgreSQL parses, analyses and plans anew every time. With the puzzle app's seven
-- tables that was about two thirds of a pull's CPU (perf, bench/RESULTS.md "Sync").
-- PL/pgSQL keeps the plans of a function's static SQL for the session, so the query is
-- now written out once per table, when the table is registered: the table's reader; and
-- pull reaches the readers through a generated dispatcher, so it runs no dynamic SQL
-- at all. (Calling each reader through a one-line EXECUTE instead cost ~20 % of a pull.)
--
-- Adds
--   ferry.synced_tables.pull_reader
--                             the table's reader, 'ferry.pull_rows_<table oid>' (text: the
--                             name the dispatcher is written with).
--   ferry.install_pull_reader(table)
--                             (re)builds a synced table's reader and records it. A reader
--                             takes (table, limit, from xid, until, since, after key, after
--                             stamp) and returns 0006's four values (count fetched, upserts,
--                             deletes, position reached). Its four static queries are
--                             0006's one query in its four forms: first load or not,
--                             resuming inside this table or not. STABLE and SECURITY
--                             INVOKER like pull, so it reads in pull's one snapshot and Row
--                             Level Security still decides which rows it sees; like pull it
--                             sets no search_path and names everything qualified.
--                             A reader's SQL names its table and primary key as they were
--                             when it was built, so it first checks, by index lookups, that
--                             the table it is given still has that name and that primary
--                             key (attnums), and otherwise raises 55000 naming the fix
--                             (register the table again) rather than read under a stale key.
--                             A dump and restore that drops a dropped column's attnum can
--                             trip it too; the same fix applies.
--   ferry.install_pull_rows() (re)builds ferry.pull_rows(name, table, …), the dispatcher:
--                             one branch per synced table, chosen by the name clients use
--                             (unique among synced tables, and kept by a dump and restore,
--                             unlike oids), calling that table's reader with static SQL. A
--                             name with no branch raises 55000 like a stale reader. It
--                             holds a transaction advisory lock while it reads the registry,
--                             so two registrations at once cannot each leave the other's
--                             table out.
-- Changes
--   ferry.register_table()    also builds the table's reader and the dispatcher; 0010's
--                             is kept as ferry.register_table_0010 and called first.
--   ferry.pull()              0008's, with each table read through ferry.pull_rows.
--                             Every table registered before this migration gets its reader
--                             here.

-- MARK: - Readers

alter table ferry.synced_tables add column pull_reader text;

create function ferry.install_pull_reader(p_table regclass) returns void
language plpgsql set search_path = ''
as $install$
declare
    v_reader text := 'pull_rows_' || p_table::oid::text;
    v_key_attnums text;
    v_order text;
    v_object text;
    v_after text;
    v_query text;
    v_resume_from text;
    v_resume_where text;
begin
    if not exists (select from ferry.synced_tables s where s.table_name = p_table) then
        raise exception 'ferry.install_pull_reader(%): not a synced table', p_table using errcode = '42P01';
    end if;
    select i.indkey::text,
        pg_catalog.string_agg(pg_catalog.format('t.%I', a.attname), ', ' order by k.position),
        pg_catalog.string_agg(pg_catalog.format('%L, t.%I', a.attname, a.attname), ', ' order by k.position),
        pg_catalog.string_agg(pg_catalog.format('p.%I', a.attname), ', ' order by k.position)
        into v_key_attnums, v_order, v_object, v_after
        from pg_catalog.pg_index i
        cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as k(attnum, position)
        join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
        where i.indrelid = p_table and i.indisprimary
        group by i.indkey;

    -- 0006's query. %4$s and %6$s resume after the cursor's position inside this table;
    -- %5$s is the first load's filter (live rows) or the next pull's (not seen by since).
    v_query := $query$select pg_catalog.count(*)::integer,
                pg_catalog.jsonb_agg(r.body order by r.n) filter (where r.n <= p_limit and not r.deleted),
                pg_catalog.jsonb_agg(r.key order by r.n) filter (where r.n <= p_limit and r.deleted),
                (pg_catalog.array_agg(pg_catalog.jsonb_build_object('stamp', r.stamp::text, 'key', r.key)
                    order by r.n desc) filter (where r.n <= p_limit))[1]
            into fetched, upserts, deletes, reached
            from (
                select pg_catalog.row_number() over (order by t._stamp, %1$s) as n,
                    t._stamp as stamp, t._deleted as deleted,
                    pg_catalog.to_jsonb(t) - '{_stamp,_deleted,_lock_device,_lock_heartbeat_at}'::text[] as body,
                    pg_catalog.jsonb_build_object(%2$s) as key
                from %3$s t%4$s
                where t._stamp >= p_from and t._stamp < pg_catalog.pg_snapshot_xmax(p_until)
                    and pg_catalog.pg_visible_in_snapshot(t._stamp, p_until)
                    and %5$s%6$s
                order by t._stamp, %1$s
                limit p_limit + 1
            ) r;$query$;
    v_resume_from := pg_catalog.format(', pg_catalog.jsonb_populate_record(null::%s, p_after_key) p', p_table);
    v_resume_where := pg_catalog.format(' and (t._stamp, %s) > (p_after_stamp, %s)', v_order, v_after);

    execute pg_catalog.format(
        $function$
        create or replace function ferry.%1$I(
            p_table regclass, p_limit integer, p_from xid8, p_until pg_snapshot, p_since pg_snapshot,
            p_after_key jsonb, p_after_stamp xid8,
            out fetched integer, out upserts jsonb, out deletes jsonb, out reached jsonb)
        language plpgsql stable
        as %2$L
        $function$,
        v_reader,
        pg_catalog.format(
            $body$
        -- Built by ferry.install_pull_reader for %1$s and its primary key: after changing
        -- either, call ferry.register_table on the table again. Columns are always named
        -- through an alias, so a column called like a parameter cannot be taken for it.
        #variable_conflict use_variable
        begin
            perform from pg_catalog.pg_index i
                where i.indrelid = p_table and i.indisprimary and i.indkey::text = %2$L
                    and p_table = pg_catalog.to_regclass(%3$L);
            if not found then
                raise exception 'pull: synced table %% was renamed or its primary key changed since it was registered',
                    p_table
                    using errcode = '55000', hint = 'call ferry.register_table on it again to rebuild its pull reader';
            end if;
            if p_since is null and p_after_key is null then -- first load
            %4$s
            elsif p_since is null then -- first load, resuming inside this table
            %5$s
            elsif p_after_key is null then -- changes since the cursor
            %6$s
            else -- changes since the cursor, resuming inside this table
            %7$s
            end if;
        end
        $body$,
            p_table, v_key_attnums, p_table::text,
            pg_catalog.format(v_query, v_order, v_object, p_table, '', 'not t._deleted', ''),
            pg_catalog.format(v_query, v_order, v_object, p_table, v_resume_from, 'not t._deleted', v_resume_where),
            pg_catalog.format(v_query, v_order, v_object, p_table, '',
                'not pg_catalog.pg_visible_in_snapshot(t._stamp, p_since)', ''),
            pg_catalog.format(v_query, v_order, v_object, p_table, v_resume_from,
                'not pg_catalog.pg_visible_in_snapshot(t._stamp, p_since)', v_resume_where)));
    execute pg_catalog.format(
        'comment on function ferry.%I is %L', v_reader,
        pg_catalog.format('ferry.pull''s reader of %s, built by ferry.install_pull_reader: not to be edited', p_table));
    execute pg_catalog.format('revoke all on function ferry.%I from public', v_reader);
    execute pg_catalog.format('grant execute on function ferry.%I to ferry_client', v_reader);
    update ferry.synced_tables s set pull_reader = 'ferry.' || pg_catalog.quote_ident(v_reader) where s.table_name = p_table;
end
$install$;

comment on function ferry.install_pull_reader(regclass) is
    'Builds a synced table''s pull reader (ferry.pull_rows_<oid>: the table''s pull query as static SQL, whose plans PostgreSQL keeps) and records it in ferry.synced_tables. Called by ferry.register_table.';

create function ferry.install_pull_rows() returns void
language plpgsql set search_path = ''
as $install$
declare
    v_branches text;
    v_refusal text := $refusal$raise exception 'pull: synced table %% has no pull reader', p_name
                    using errcode = '55000', hint = 'call ferry.register_table on it again to rebuild its pull reader';$refusal$;
begin
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('ferry.install_pull_rows'));
    select pg_catalog.string_agg(pg_catalog.format(
            $branch$
            %s p_name = %L then
                select * into fetched, upserts, deletes, reached
                    from %s(p_table, p_limit, p_from, p_until, p_since, p_after_key, p_after_stamp);$branch$,
            case when b.position = 1 then 'if' else 'elsif' end, b.relname, b.pull_reader), '' order by b.position)
        into v_branches
        from (
            select c.relname, s.pull_reader, pg_catalog.row_number() over (order by c.relname) as position
            from ferry.synced_tables s join pg_catalog.pg_class c on c.oid = s.table_name
            where s.pull_reader is not null
        ) b;
    execute pg_catalog.format(
        $function$
        create or replace function ferry.pull_rows(
            p_name name, p_table regclass, p_limit integer, p_from xid8, p_until pg_snapshot, p_since pg_snapshot,
            p_after_key jsonb, p_after_stamp xid8,
            out fetched integer, out upserts jsonb, out deletes jsonb, out reached jsonb)
        language plpgsql stable
        as %L
        $function$,
        pg_catalog.format(
            $body$
        -- Built by ferry.install_pull_rows from ferry.synced_tables; ferry.register_table
        -- rebuilds it.
        begin%s
        end
        $body$,
            case when v_branches is null then pg_catalog.format(E'\n            %s', pg_catalog.format(v_refusal))
                else pg_catalog.format(E'%s\n            else\n                %s\n            end if;', v_branches,
                    pg_catalog.format(v_refusal)) end));
    revoke all on function
        ferry.pull_rows(name, regclass, integer, xid8, pg_snapshot, pg_snapshot, jsonb, xid8) from public;
    grant execute on function
        ferry.pull_rows(name, regclass, integer, xid8, pg_snapshot, pg_snapshot, jsonb, xid8) to ferry_client;
end
$install$;

comment on function ferry.install_pull_rows() is
    'Builds ferry.pull_rows, the dispatcher ferry.pull calls: one branch per synced table calling its pull reader with static SQL. Called by ferry.register_table.';

alter function ferry.register_table(regclass, text, name, jsonb) rename to register_table_0010;

create function ferry.register_table(
    p_table regclass, strategy text, owner_column name default 'user_id', options jsonb default '{}'
) returns void
language plpgsql set search_path = '' set client_min_messages = warning
as $$
begin
    perform ferry.register_table_0010(p_table, $2, $3, $4);
    perform ferry.install_pull_reader(p_table);
    perform ferry.install_pull_rows();
end
$$;

comment on function ferry.register_table(regclass, text, name, jsonb) is
    'Makes a table synced with a strategy (lww, insert_only, set, device_lock, readonly, shared): sync columns, stamp trigger, cue triggers, TRUNCATE guard, (owner, _stamp) index, RLS, grants to ferry_client (column grants without the lock columns for device_lock), pull reader, registry row. Idempotent.';

select ferry.install_pull_reader(s.table_name) from ferry.synced_tables s;
select ferry.install_pull_rows();

-- MARK: - pull calls the readers

-- 0008's ferry.pull with the loop reading each table through ferry.pull_rows; nothing
-- else changes.
-- create or replace keeps its owner, comment and grants (ferry_client).
create or replace function ferry.pull(p_cursor text, p_limit integer) returns jsonb
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
        -- The purge horizon (header of this file): a tombstone this cursor has not seen
        -- may be gone. Checked in this statement's snapshot, the one the rows are read in.
        if exists (
            select from ferry.purge_horizon h
            where pg_catalog.pg_snapshot_xmin(coalesce(v_since, v_until)) <= h.purged_through
                and not pg_catalog.pg_visible_in_snapshot(h.purge_xid, coalesce(v_since, v_until))
        ) then
            raise exception 'pull: the cursor is older than the tombstone purge horizon'
                using errcode = 'FR409', hint = 'pull without a cursor';
        end if;
    end if;
    if v_until is null then
        v_until := pg_catalog.pg_current_snapshot();
        select d.last_mutation_id into v_last from ferry.devices d
            where d.user_id = ferry.uid() and d.device_id = ferry.device_id();
        v_last := coalesce(v_last, 0);
    end if;

    for v_table in
        select c.relname as name, s.table_name as rel
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        where pg_catalog.has_table_privilege(s.table_name, 'select')
            and (v_after_table is null or c.relname >= v_after_table)
        order by c.relname
    loop
        -- remaining + 1 rows: one more than fits says has_more (with 0 left, whether any remain).
        select * into v_fetched, v_upserts, v_deletes, v_reached
            from ferry.pull_rows(v_table.name, v_table.rel, v_remaining,
                coalesce(pg_catalog.pg_snapshot_xmin(v_since), '0'::xid8), v_until, v_since,
                case when v_table.name = v_after_table then v_after_key end, v_after_stamp);

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

-- MARK: - Grants

revoke all on function
    ferry.install_pull_reader(regclass), ferry.install_pull_rows(),
    ferry.register_table_0010(regclass, text, name, jsonb), ferry.register_table(regclass, text, name, jsonb)
from public;
