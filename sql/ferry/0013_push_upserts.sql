-- 0013_push_upserts: an lww upsert, push's common write, runs a static statement written
-- for its table, so PostgreSQL keeps its plan (bench/RESULTS.md "Sync"); and push cues
-- its own writes once per table instead of through the triggers of every statement.
--
-- Why: 0005's push builds each mutation's INSERT … ON CONFLICT as text for the columns
-- the mutation gives and runs it with EXECUTE, which PostgreSQL parses and plans every
-- time: about 100 µs of the ~200 µs of PostgreSQL CPU each upsert of a 50-mutation push
-- cost (pgbench, one client). The same upsert as static SQL costs ~35 µs.
--
-- A static statement must name every column, whereas the mutation gives some. So the
-- upsert lists every column a client may write, and
--   - inserts, for a column the row does not give, the column's default (what an INSERT
--     leaving the column out would store), evaluated only then;
--   - on conflict sets a column the row does not give to its stored value, so an upsert
--     still merges the given columns into the row.
-- One difference with 0005's statement remains: an operator's column trigger
-- (BEFORE/AFTER UPDATE OF col) fires on conflict for every writable column, not only
-- the given ones.
--
-- Adds
--   ferry.primary_key_list(table)
--                             a table's primary key columns, quoted, in key order.
--   ferry.upsert_shape(table) what a table's static upsert depends on, as an md5: its
--                             writable columns (push's: not dropped, generated, sync or
--                             lock columns) in order with type oid, typmod and stored
--                             default expression, and its primary key. Oids and stored
--                             expressions, not rendered names, because push reads it on
--                             every batch; a restore that renumbers a user type or a
--                             function a default calls changes it (speed until the table
--                             is registered again). Null when the table cannot have one:
--                             an identity column, or a column whose default comes from its
--                             domain (the upsert could not reproduce either default).
--   ferry.install_upserts()   (re)builds ferry.upsert_row(name, shape, row) from the
--                             registry: one branch per lww table, taken when the table's
--                             name and the shape push read from the catalog in this batch
--                             both match what the branch was written for. It runs the
--                             upsert and returns true; otherwise it returns false and push
--                             builds the statement as before. So a column added, dropped or
--                             given a new default, or a renamed table, costs speed until the
--                             table is registered again, never correctness. Holds a
--                             transaction advisory lock while it reads the registry, as
--                             ferry.install_pull_rows does.
--   ferry.cue_device()        ferry.device_id as a cue names it (0010's rule, now shared by
--                             the trigger and push).
--
-- Push cues once per table. With each upsert now cheaper, the cue triggers, which fire
-- after every statement of a push (an upsert fires the INSERT and the UPDATE one), were a
-- fifth of a push (bench/cue-cost.sh: 0.78 with cues on against off). A push writes only
-- its caller's rows, so its cues are known without reading transition tables: one
-- '<caller> <device> <table>' per table it wrote a row in, sent at the end, folded with any
-- identical payload of the transaction as before. While push writes a table it sets
-- ferry.skip_cues to that table's name, and the trigger skips only that table: a write an
-- operator's trigger makes to another synced table during the push still cues as always
-- (one it makes to the same table, for another user, does not).
--
-- Changes
--   ferry.register_table()    also rebuilds ferry.upsert_row; 0012's is kept as
--                             ferry.register_table_0012 and called first.
--   ferry.send_cues()         0010's; ferry.skip_cues may also name one table, which it
--                             then skips.
--   ferry.push()              0005's, reading each table's shape in its catalog query,
--                             trying ferry.upsert_row first for an lww upsert, and cueing
--                             its own writes once per table.

-- MARK: - Upserts

-- A table's primary key columns, quoted and comma-separated in key order: 'user_id, day'.
create function ferry.primary_key_list(p_table regclass) returns text
language sql stable set search_path = ''
as $$
    select pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ', ' order by k.position)
    from pg_catalog.pg_index i
    cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as k(attnum, position)
    join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
    where i.indrelid = p_table and i.indisprimary;
$$;

-- push calls this once per table per batch, so it reads the catalog as stored: type
-- oids and each default's stored expression tree, no names rendered (format_type,
-- pg_get_expr) and no SET search_path (a path switch on every call), which cost three
-- times as much.
create function ferry.upsert_shape(p_table regclass) returns text
language sql stable
as $$
    select case when pg_catalog.bool_or(a.attidentity <> '' or (d.adbin is null and ty.typdefaultbin is not null))
            then null
        else pg_catalog.md5(pg_catalog.string_agg(
                a.attname || ' ' || a.atttypid || ' ' || a.atttypmod || ' ' || coalesce(d.adbin::text, '-'), ', '
                order by a.attnum)
            || ' key ' || (select i.indkey::text from pg_catalog.pg_index i where i.indrelid = p_table and i.indisprimary))
        end
    from pg_catalog.pg_attribute a
    join pg_catalog.pg_type ty on ty.oid = a.atttypid
    left join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
    where a.attrelid = p_table and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
        and a.attname not in ('_stamp', '_deleted', '_lock_device', '_lock_heartbeat_at', 'updated_at');
$$;

comment on function ferry.upsert_shape(regclass) is
    'What a table''s static upsert (ferry.upsert_row) depends on, as an md5: writable columns with type oids, typmods and stored defaults, and the primary key; null when it cannot have one.';

create function ferry.install_upserts() returns void
language plpgsql set search_path = ''
as $install$
declare
    v_branches text;
begin
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('ferry.install_upserts'));
    select pg_catalog.string_agg(pg_catalog.format(
            $branch$
            %s p_name = %L and p_shape = %L then
                insert into %s as t (%s)
                select %s
                from pg_catalog.jsonb_populate_record(null::%s, p_row) p
                on conflict (%s) do update set
                    %s_deleted = false;
                return true;$branch$,
            case when u.position = 1 then 'if' else 'elsif' end, u.name, u.shape, u.rel, u.columns, u.values_list,
            u.rel, u.key_list, coalesce(u.sets || E',\n                    ', '')), '' order by u.position)
        into v_branches
        from (
            select c.relname as name, s.table_name as rel, ferry.upsert_shape(s.table_name) as shape,
                pg_catalog.row_number() over (order by c.relname) as position, w.columns, w.values_list, w.sets,
                ferry.primary_key_list(s.table_name) as key_list
            from ferry.synced_tables s
            join pg_catalog.pg_class c on c.oid = s.table_name
            cross join lateral (
                select pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ', ' order by a.attnum) as columns,
                    pg_catalog.string_agg(pg_catalog.format('case when p_row ? %L then p.%I else %s end',
                        a.attname, a.attname, coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), 'null')),
                        E',\n                    ' order by a.attnum) as values_list,
                    pg_catalog.string_agg(pg_catalog.format('%1$I = case when p_row ? %2$L then excluded.%1$I else t.%1$I end',
                        a.attname, a.attname), E',\n                    ' order by a.attnum) filter (where not exists (
                            select from pg_catalog.pg_index i
                            where i.indrelid = s.table_name and i.indisprimary and a.attnum = any (i.indkey::smallint[])))
                        as sets
                from pg_catalog.pg_attribute a
                left join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
                where a.attrelid = s.table_name and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
                    and a.attname not in ('_stamp', '_deleted', '_lock_device', '_lock_heartbeat_at', 'updated_at')
            ) w
            where s.strategy = 'lww' and ferry.upsert_shape(s.table_name) is not null
        ) u;
    execute pg_catalog.format(
        $function$
        create or replace function ferry.upsert_row(p_name text, p_shape text, p_row jsonb) returns boolean
        language plpgsql
        as %L
        $function$,
        pg_catalog.format(
            $body$
        -- Built by ferry.install_upserts from ferry.synced_tables; ferry.register_table
        -- rebuilds it. Columns are always named through an alias.
        #variable_conflict use_variable
        begin%s
            return false;
        end
        $body$,
            case when v_branches is null then '' else v_branches || E'\n            end if;' end));
    revoke all on function ferry.upsert_row(text, text, jsonb) from public;
    grant execute on function ferry.upsert_row(text, text, jsonb) to ferry_client;
end
$install$;

comment on function ferry.install_upserts() is
    'Builds ferry.upsert_row, the static lww upserts push tries first: one branch per lww table, for the shape it was written for. Called by ferry.register_table.';

alter function ferry.register_table(regclass, text, name, jsonb) rename to register_table_0012;

create function ferry.register_table(
    p_table regclass, strategy text, owner_column name default 'user_id', options jsonb default '{}'
) returns void
language plpgsql set search_path = '' set client_min_messages = warning
as $$
begin
    perform ferry.register_table_0012(p_table, $2, $3, $4);
    perform ferry.install_upserts();
end
$$;

comment on function ferry.register_table(regclass, text, name, jsonb) is
    'Makes a table synced with a strategy (lww, insert_only, set, device_lock, readonly, shared): sync columns, stamp trigger, cue triggers, TRUNCATE guard, (owner, _stamp) index, RLS, grants to ferry_client (column grants without the lock columns for device_lock), pull reader, static upsert, registry row. Idempotent.';

select ferry.install_upserts();

-- MARK: - push cues once per table

-- ferry.device_id as a cue names it: one word the gateway can read, else '-'.
create function ferry.cue_device() returns text
language sql stable
as $$
    select case when d is null or d = '' or pg_catalog.strpos(d, ' ') > 0 or pg_catalog.length(d) > 200
        then '-' else d end
    from (select pg_catalog.current_setting('ferry.device_id', true) as d) setting;
$$;

-- 0010's ferry.send_cues with ferry.skip_cues also naming one table, and the device word
-- from ferry.cue_device; nothing else changes.
create or replace function ferry.send_cues() returns trigger
language plpgsql
as $$
declare
    v_skip text := pg_catalog.current_setting('ferry.skip_cues', true);
    v_suffix text;
begin
    if v_skip = 'on' or v_skip = tg_table_name then
        return null;
    end if;
    v_suffix := ' ' || ferry.cue_device() || ' ' || tg_table_name;

    -- Each branch is one query over the transition tables, calling pg_notify per row: the
    -- identical payloads of a statement (and of its transaction) are folded into one by
    -- PostgreSQL, so each owner is notified once. Cheaper than DISTINCT, whose hash table per
    -- statement tripled the trigger's cost on the one-row statements of a push.
    if tg_nargs = 0 then
        -- shared: one cue for every user when any row was touched. (A query names only
        -- the transition tables its trigger has, so DELETE has its own.)
        if tg_op = 'DELETE' then
            if exists (select from old_rows o where not o._deleted) then
                perform pg_catalog.pg_notify('ferry_cue', '*' || v_suffix);
            end if;
        elsif exists (select from new_rows) then
            perform pg_catalog.pg_notify('ferry_cue', '*' || v_suffix);
        end if;
    elsif tg_argv[0] = 'user_id' then
        -- The default owner column, read directly (the generic branch costs a row's JSON).
        if tg_op = 'INSERT' then
            perform pg_catalog.pg_notify('ferry_cue', n.user_id::text || v_suffix)
                from new_rows n where n.user_id is not null;
        elsif tg_op = 'UPDATE' then
            perform pg_catalog.pg_notify('ferry_cue', c.owner::text || v_suffix)
                from (select n.user_id as owner from new_rows n union all select o.user_id from old_rows o) c
                where c.owner is not null;
        else
            perform pg_catalog.pg_notify('ferry_cue', o.user_id::text || v_suffix)
                from old_rows o where o.user_id is not null and not o._deleted;
        end if;
    else
        if tg_op = 'INSERT' then
            perform pg_catalog.pg_notify('ferry_cue', c.owner || v_suffix)
                from (select pg_catalog.to_jsonb(n) ->> tg_argv[0] as owner from new_rows n) c
                where c.owner is not null;
        elsif tg_op = 'UPDATE' then
            perform pg_catalog.pg_notify('ferry_cue', c.owner || v_suffix)
                from (
                    select pg_catalog.to_jsonb(n) ->> tg_argv[0] as owner from new_rows n
                    union all
                    select pg_catalog.to_jsonb(o) ->> tg_argv[0] from old_rows o
                ) c
                where c.owner is not null;
        else
            perform pg_catalog.pg_notify('ferry_cue', c.owner || v_suffix)
                from (select pg_catalog.to_jsonb(o) ->> tg_argv[0] as owner from old_rows o where not o._deleted) c
                where c.owner is not null;
        end if;
    end if;
    return null;
end
$$;

-- MARK: - push tries the static upsert

-- 0005's ferry.push with the shape in its catalog query, ferry.upsert_row tried first for
-- an lww upsert, and its own writes cued once per table at the end (header). create or
-- replace keeps its owner, comment and grants (ferry_client).
create or replace function ferry.push(p_mutations jsonb) returns jsonb
language plpgsql
as $$
declare
    v_user uuid := ferry.uid();
    v_device text := ferry.device_id();
    v_list jsonb;
    v_tables jsonb;
    v_last bigint;
    v_results jsonb[] := '{}';
    v_m jsonb;
    v_id bigint;
    v_table jsonb;
    v_rel regclass;
    v_strategy text;
    v_owner text;
    v_op text;
    v_row jsonb;
    v_key text[];
    v_given text[];
    v_bad text;
    v_found boolean;
    v_deleted boolean;
    v_holder text;
    v_same boolean;
    v_stored jsonb;
    v_typed jsonb;
    v_list_sql text;
    v_sets text;
    v_code text;
    v_message text;
    v_wrote boolean;
    v_skip_cues text := pg_catalog.current_setting('ferry.skip_cues', true);
    v_cued text[] := '{}';
begin
    v_list := case pg_catalog.jsonb_typeof(p_mutations)
        when 'array' then p_mutations when 'object' then p_mutations -> 'mutations' end;
    if v_list is null or pg_catalog.jsonb_typeof(v_list) <> 'array' then
        raise exception 'push: mutations must be an array' using errcode = '22023';
    end if;
    if exists (
        select from pg_catalog.jsonb_array_elements(v_list) m
        where pg_catalog.jsonb_typeof(m) <> 'object' or pg_catalog.jsonb_typeof(m -> 'id') <> 'number'
            or (m ->> 'id') !~ '^[0-9]{1,18}$'
    ) then
        raise exception 'push: every mutation must be an object with a non-negative integer id' using errcode = '22023';
    end if;

    v_last := ferry.lock_device();

    -- Everything push needs about the tables the batch names, in one catalog query:
    -- strategy, owner, primary key, the columns a client may write, the key match.
    select pg_catalog.jsonb_object_agg(c.relname, pg_catalog.jsonb_build_object(
            'oid', c.oid::bigint, 'strategy', s.strategy, 'owner', s.owner_column,
            'key', k.names, 'key_list', k.list, 'match', k.match, 'columns', cols.names,
            'shape', ferry.upsert_shape(c.oid)))
        into v_tables
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        cross join lateral (
            select pg_catalog.jsonb_agg(a.attname order by p.position) as names,
                pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ', ' order by p.position) as list,
                pg_catalog.string_agg(pg_catalog.format('t.%1$I = p.%1$I', a.attname), ' and ' order by p.position)
                    as match
            from pg_catalog.pg_index i
            cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as p(attnum, position)
            join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = p.attnum
            where i.indrelid = c.oid and i.indisprimary
        ) k
        cross join lateral (
            select pg_catalog.jsonb_object_agg(a.attname, true) as names
            from pg_catalog.pg_attribute a
            where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
                and a.attname not in ('_stamp', '_deleted', '_lock_device', '_lock_heartbeat_at', 'updated_at')
        ) cols
        where c.relname in (select m ->> 'table' from pg_catalog.jsonb_array_elements(v_list) m);

    for v_m in select m from pg_catalog.jsonb_array_elements(v_list) m loop
        v_id := (v_m ->> 'id')::bigint;
        if v_id <= v_last then
            v_results := v_results || pg_catalog.jsonb_build_object('id', v_id, 'status', 'duplicate');
            continue;
        end if;
        v_last := v_id;
        v_code := null;
        v_message := null;
        v_wrote := false;

        <<mutation>>
        begin
            v_table := v_tables -> (v_m ->> 'table');
            if v_table is null then
                v_code := 'unknown_table';
                v_message := pg_catalog.format('%s is not a synced table', coalesce((v_m -> 'table')::text, 'no table'));
                exit mutation;
            end if;
            v_rel := (v_table ->> 'oid')::oid::regclass;
            v_strategy := v_table ->> 'strategy';
            v_owner := v_table ->> 'owner';
            v_op := v_m ->> 'op';
            if v_strategy in ('readonly', 'shared') then
                v_code := 'read_only';
                v_message := pg_catalog.format('%s is read-only for clients', v_m ->> 'table');
                exit mutation;
            end if;
            if v_op is null or v_op not in ('insert', 'upsert', 'delete') then
                v_code := 'invalid_row';
                v_message := pg_catalog.format('op must be insert, upsert or delete, not %s', coalesce((v_m -> 'op')::text, 'missing'));
                exit mutation;
            end if;
            if v_strategy in ('insert_only', 'set') and v_op = 'upsert' then
                v_op := 'insert';
            end if;
            if v_strategy = 'insert_only' and v_op = 'delete' then
                v_code := 'immutable';
                v_message := pg_catalog.format('rows of %s are never deleted', v_m ->> 'table');
                exit mutation;
            end if;

            v_row := v_m -> case when v_op = 'delete' then 'key' else 'row' end;
            if v_row is null or pg_catalog.jsonb_typeof(v_row) <> 'object' then
                v_code := 'invalid_row';
                v_message := case when v_op = 'delete' then 'delete needs a key object' else 'a row object is needed' end;
                exit mutation;
            end if;
            v_row := v_row - 'updated_at';
            v_key := array(select pg_catalog.jsonb_array_elements_text(v_table -> 'key'));

            select k into v_bad from pg_catalog.jsonb_object_keys(v_row) k
                where not (v_table -> 'columns') ? k limit 1;
            if v_bad is not null then
                v_code := 'unknown_column';
                v_message := pg_catalog.format('%s has no column %s a client may write', v_m ->> 'table', pg_catalog.to_json(v_bad));
                exit mutation;
            end if;
            if v_op = 'delete' then
                select k into v_bad from pg_catalog.jsonb_object_keys(v_row) k
                    where not k = any (v_key) and k <> v_owner limit 1;
                if v_bad is not null then
                    v_code := 'invalid_row';
                    v_message := pg_catalog.format('%s is not a key column', pg_catalog.to_json(v_bad));
                    exit mutation;
                end if;
            end if;

            -- The owner: omitted (or null) means the caller; anyone else is forbidden.
            if pg_catalog.jsonb_typeof(v_row -> v_owner) <> 'null' then
                if pg_catalog.jsonb_typeof(v_row -> v_owner) <> 'string' then
                    v_code := 'invalid_row';
                    v_message := pg_catalog.format('%s must be a uuid string', v_owner);
                    exit mutation;
                end if;
                if (v_row ->> v_owner)::uuid <> v_user then
                    v_code := 'forbidden';
                    v_message := pg_catalog.format('%s names another user', v_owner);
                    exit mutation;
                end if;
            end if;
            v_row := v_row || pg_catalog.jsonb_build_object(v_owner, v_user);

            select k into v_bad from pg_catalog.unnest(v_key) k
                where pg_catalog.jsonb_typeof(v_row -> k) is null or pg_catalog.jsonb_typeof(v_row -> k) = 'null' limit 1;
            if v_bad is not null then
                v_code := 'invalid_row';
                v_message := pg_catalog.format('key column %s is missing', pg_catalog.to_json(v_bad));
                exit mutation;
            end if;
            v_given := array(select pg_catalog.jsonb_object_keys(v_row));
            -- This table's cue triggers stay quiet for push's own writes: push cues once per
            -- table at the end (header). A subtransaction rolled back restores the setting.
            if v_skip_cues is distinct from 'on' then
                perform pg_catalog.set_config('ferry.skip_cues', v_m ->> 'table', true);
            end if;

            -- lww upsert, the common write: one statement. (A key owned by another user is
            -- invisible, so it conflicts under RLS: forbidden.) The table's static upsert
            -- when its shape is the one the upsert was written for, else the same
            -- statement built for the given columns.
            if v_op = 'upsert' and v_strategy = 'lww' then
                if ferry.upsert_row(v_m ->> 'table', v_table ->> 'shape', v_row) then
                    v_wrote := true;
                    exit mutation;
                end if;
                v_list_sql := (select pg_catalog.string_agg(pg_catalog.format('%I', k), ', ') from pg_catalog.unnest(v_given) k);
                v_sets := (select pg_catalog.string_agg(pg_catalog.format('%1$I = excluded.%1$I', k), ', ')
                    from pg_catalog.unnest(v_given) k where not k = any (v_key));
                execute pg_catalog.format(
                    'insert into %s as t (%s) select %s from pg_catalog.jsonb_populate_record(null::%s, $1)'
                        ' on conflict (%s) do update set %s_deleted = false',
                    v_rel, v_list_sql, v_list_sql, v_rel, v_table ->> 'key_list', coalesce(v_sets || ', ', ''))
                    using v_row;
                v_wrote := true;
                exit mutation;
            end if;

            -- The row under this key as the caller sees it, locked: whether it is a
            -- tombstone and who holds its lock; for an insert also the stored row and the
            -- given one as the table's types make them, to compare. Casting the values here
            -- is where a wrong type becomes invalid_row.
            v_found := null;
            execute pg_catalog.format(
                'select true, t._deleted, %s, %s from %s t, pg_catalog.jsonb_populate_record(null::%s, $1) p where %s for update of t',
                case when v_strategy = 'device_lock' then 't._lock_device' else 'null::text' end,
                case when v_op = 'insert' then 'pg_catalog.to_jsonb(t), pg_catalog.to_jsonb(p)' else 'null::jsonb, null::jsonb' end,
                v_rel, v_rel, v_table ->> 'match')
                into v_found, v_deleted, v_holder, v_stored, v_typed using v_row;
            if v_stored is not null then
                v_same := (v_stored - array(select pg_catalog.jsonb_object_keys(v_stored) except select pg_catalog.unnest(v_given)))
                    = (v_typed - array(select pg_catalog.jsonb_object_keys(v_typed) except select pg_catalog.unnest(v_given)));
            end if;
            v_found := coalesce(v_found, false);
            -- Without a row the values are cast by the write itself.
            if v_holder is not null and v_holder <> v_device then
                v_code := 'lock_not_held';
                v_message := pg_catalog.format('another device holds this row of %s', v_m ->> 'table');
                exit mutation;
            end if;

            v_list_sql := (select pg_catalog.string_agg(pg_catalog.format('%I', k), ', ') from pg_catalog.unnest(v_given) k);
            v_sets := (select pg_catalog.string_agg(pg_catalog.format('%1$I = p.%1$I', k), ', ')
                from pg_catalog.unnest(v_given) k where not k = any (v_key));

            if v_op = 'delete' then
                if v_found and not v_deleted then
                    execute pg_catalog.format(
                        'update %s t set _deleted = true from pg_catalog.jsonb_populate_record(null::%s, $1) p where %s',
                        v_rel, v_rel, v_table ->> 'match') using v_row;
                    v_wrote := true;
                end if;
            elsif not v_found then
                execute pg_catalog.format(
                    'insert into %s (%s) select %s from pg_catalog.jsonb_populate_record(null::%s, $1)',
                    v_rel, v_list_sql, v_list_sql, v_rel) using v_row;
                v_wrote := true;
            elsif v_op = 'insert' and not v_deleted and (v_same or v_strategy = 'set') then
                v_code := 'duplicate';
            elsif v_op = 'insert' and (not v_deleted or v_strategy = 'insert_only') then
                v_code := 'immutable';
                v_message := pg_catalog.format('a different row of %s exists under this key', v_m ->> 'table');
            else
                -- upsert, or insert onto a tombstone: a merge write of the given columns.
                execute pg_catalog.format(
                    'update %s t set %s_deleted = false from pg_catalog.jsonb_populate_record(null::%s, $1) p where %s',
                    v_rel, coalesce(v_sets || ', ', ''), v_rel, v_table ->> 'match') using v_row;
                v_wrote := true;
            end if;
        exception
            when data_exception then
                v_code := 'invalid_row';
                v_message := sqlerrm;
            when integrity_constraint_violation then
                v_code := 'constraint_violation';
                v_message := sqlerrm;
            when insufficient_privilege then
                v_code := 'forbidden';
                v_message := sqlerrm;
        end;
        if v_wrote and not (v_m ->> 'table') = any (v_cued) then
            v_cued := v_cued || (v_m ->> 'table');
        end if;

        v_results := v_results || case
            when v_code is null then pg_catalog.jsonb_build_object('id', v_id, 'status', 'applied')
            when v_code = 'duplicate' then pg_catalog.jsonb_build_object('id', v_id, 'status', 'duplicate')
            else pg_catalog.jsonb_build_object('id', v_id, 'status', 'rejected', 'code', v_code, 'message', v_message)
        end;
    end loop;

    perform pg_catalog.set_config('ferry.skip_cues', coalesce(v_skip_cues, ''), true);
    if v_skip_cues is distinct from 'on' then
        perform pg_catalog.pg_notify('ferry_cue', v_user::text || ' ' || ferry.cue_device() || ' ' || t)
            from pg_catalog.unnest(v_cued) t;
    end if;
    perform ferry.advance_device(v_last);
    return pg_catalog.jsonb_build_object('last_mutation_id', v_last, 'results', pg_catalog.to_jsonb(v_results));
end
$$;

-- MARK: - Grants

revoke all on function
    ferry.primary_key_list(regclass), ferry.upsert_shape(regclass), ferry.install_upserts(), ferry.cue_device(),
    ferry.register_table_0012(regclass, text, name, jsonb), ferry.register_table(regclass, text, name, jsonb)
from public;
grant execute on function ferry.upsert_shape(regclass), ferry.cue_device() to ferry_client;
