-- The registry of synced tables (docs/TABLES.md): ferry.register_table, which operators
-- call in their migrations, the code it generates for each table (its triggers, its
-- pull reader, the pull dispatcher, the static upserts), and GET /v1/schema.
--
-- Generated code is written from the templates below. This file ends by generating it
-- again for every registered table (ferry.rebuild_generated_code), and ferry migrate
-- applies the file again whenever it changes, so a changed template reaches the tables
-- registered before the change. The policies and grants register_table makes are the
-- table's own state and are not made again here: to change them on registered tables,
-- register the tables again in a numbered migration.

-- MARK: - Sync columns

-- Ferry's own columns of a synced table: pull never sends them, clients never write
-- them, GET /v1/schema does not list them.
create or replace function ferry.internal_columns() returns name[]
language sql immutable parallel safe
as $$ select '{_stamp,_deleted,_lock_device,_lock_heartbeat_at}'::name[] $$;

-- The columns clients may not write: Ferry's own and updated_at, the server's clock
-- (which pull sends). Push refuses them (unknown_column), the static upserts skip them,
-- and a device_lock table's column grants leave them out.
create or replace function ferry.unwritable_columns() returns name[]
language sql immutable parallel safe
as $$ select ferry.internal_columns() || 'updated_at'::name $$;

-- MARK: - Primary keys

-- A table's primary key columns in key order: ordinal (from 1), attnum, name and type
-- (the column's type oid); no rows without a primary key. Every function that needs a
-- synced table's key reads it here. Plain SQL with no search_path setting, so that
-- PostgreSQL inlines it into the query that calls it (push reads it once per batch).
create or replace function ferry.primary_key(p_table regclass)
returns table (ordinal bigint, attnum smallint, name name, type_id oid)
language sql stable
as $$
    select k.position as ordinal, a.attnum, a.attname, a.atttypid
    from pg_catalog.pg_index i
    cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as k(attnum, position)
    join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
    where i.indrelid = p_table and i.indisprimary
$$;

-- A table's primary key columns, quoted and comma-separated in key order: 'user_id, day'.
create or replace function ferry.primary_key_list(p_table regclass) returns text
language sql stable set search_path = ''
as $$
    select pg_catalog.string_agg(pg_catalog.format('%I', k.name), ', ' order by k.ordinal)
    from ferry.primary_key(p_table) k;
$$;

-- The one row trigger function of every synced table (ferry_stamp): each insert and
-- update gets _stamp = pg_current_xact_id(), the change stamp pull compares with its
-- snapshot cursor, and updated_at = now(), the server's clock (a client's is ignored).
-- No search_path: it runs on every synced write and names only pg_catalog functions,
-- found first whatever the path; a SET clause would cost a GUC save and restore per row.
create or replace function ferry.stamp_row() returns trigger
language plpgsql
as $$
begin
    new._stamp := pg_catalog.pg_current_xact_id();
    new.updated_at := pg_catalog.now();
    return new;
end
$$;

-- MARK: - Registering a table

-- ferry.register_table('game_records', strategy => 'insert_only'): docs/TABLES.md's
-- strategies; owner_column defaults to user_id (ignored for shared), options to {}.
-- It checks the table, adds the sync columns, the (owner, _stamp) index, forced Row Level
-- Security with policies and grants for ferry_client, records the table in
-- ferry.synced_tables, and generates its code. Registering again is harmless: it brings
-- the table to what the (new) strategy wants. Refusals raise with an errcode and a
-- message naming the table. It runs as its caller and is granted to no request role: it
-- alters tables, so only their owner may call it.
--
-- A per-user table whose primary key leaves the owner column out shares its key values
-- between all users (a row is visible to its owner only, its key is not): registering
-- one raises a WARNING unless its options say "global_key": true.
create or replace function ferry.register_table(
    p_table regclass, strategy text, owner_column name default 'user_id', options jsonb default '{}'
) returns void
language plpgsql set search_path = '' set client_min_messages = warning
as $$
declare
    -- Named as docs/TABLES.md calls them (strategy => 'lww'); used by these names below.
    p_strategy alias for $2;
    p_owner_column alias for $3;
    p_options alias for $4;
    v_kind "char";
    v_name name;
    v_owner name := case when p_strategy = 'shared' then null else p_owner_column end;
    v_owner_attnum smallint;
    v_owner_type regtype;
    v_key name[];
    v_writable boolean := p_strategy in ('lww', 'insert_only', 'set', 'device_lock');
    v_column record;
    v_type regtype;
    v_index_key text;
    v_shared record;
begin
    if pg_catalog.jsonb_typeof(p_options -> 'global_key') not in ('boolean', 'null') then
        raise exception 'ferry.register_table(%): options.global_key must be true or false', p_table
            using errcode = '22023';
    end if;
    if p_strategy is null or p_strategy not in ('lww', 'insert_only', 'set', 'device_lock', 'readonly', 'shared') then
        raise exception 'ferry.register_table(%): unknown strategy %', p_table, coalesce(p_strategy, 'null')
            using errcode = '22023',
                hint = 'strategies are lww, insert_only, set, device_lock, readonly and shared';
    end if;
    if p_options is null or pg_catalog.jsonb_typeof(p_options) <> 'object' then
        raise exception 'ferry.register_table(%): options must be a JSON object', p_table using errcode = '22023';
    end if;
    select c.relkind, c.relname into v_kind, v_name from pg_catalog.pg_class c where c.oid = p_table;
    if v_kind not in ('r', 'p') then
        raise exception 'ferry.register_table(%): not a table', p_table using errcode = '42809';
    end if;
    -- Push and pull name tables by their bare name, so it must be unique among synced tables.
    if exists (
        select from ferry.synced_tables s join pg_catalog.pg_class c on c.oid = s.table_name
        where c.relname = v_name and s.table_name <> p_table
    ) then
        raise exception 'ferry.register_table(%): another synced table is named %', p_table, v_name
            using errcode = '42P07', hint = 'clients name synced tables without a schema';
    end if;

    select pg_catalog.array_agg(k.name order by k.ordinal) into v_key from ferry.primary_key(p_table) k;
    if v_key is null then
        raise exception 'ferry.register_table(%): the table has no primary key', p_table
            using errcode = '42P16', hint = 'rows are pushed and pulled by their primary key';
    end if;

    if v_owner is not null then
        select a.attnum, a.atttypid::regtype into v_owner_attnum, v_owner_type
            from pg_catalog.pg_attribute a
            where a.attrelid = p_table and a.attname = v_owner and a.attnum > 0 and not a.attisdropped;
        if v_owner_attnum is null then
            raise exception 'ferry.register_table(%): no owner column %', p_table, v_owner
                using errcode = '42703', hint = 'pass owner_column => … or add a uuid column user_id';
        end if;
        if v_owner_type <> 'uuid'::regtype then
            raise exception 'ferry.register_table(%): owner column % is %, not uuid', p_table, v_owner, v_owner_type
                using errcode = '42804';
        end if;
    end if;

    if p_strategy = 'device_lock'
        and (pg_catalog.cardinality(v_key) <> 2 or not v_owner = any (v_key))
    then
        raise exception 'ferry.register_table(%): a device_lock table''s primary key is its owner column and one other, not (%)',
            p_table, pg_catalog.array_to_string(v_key, ', ')
            using errcode = '42P16', hint = 'e.g. primary key (user_id, slot)';
    end if;

    -- The sync columns: added when missing, refused when present with another type.
    for v_column in
        select * from (values
            ('_stamp', 'xid8'::regtype, 'pg_catalog.pg_current_xact_id()', true),
            ('_deleted', 'boolean'::regtype, 'false', true),
            ('updated_at', 'timestamptz'::regtype, 'pg_catalog.now()', true),
            ('_lock_device', 'text'::regtype, null, p_strategy = 'device_lock'),
            ('_lock_heartbeat_at', 'timestamptz'::regtype, null, p_strategy = 'device_lock')
        ) as c(name, type, default_sql, wanted)
        where c.wanted
    loop
        v_type := null;
        select a.atttypid::regtype into v_type
            from pg_catalog.pg_attribute a
            where a.attrelid = p_table and a.attname = v_column.name and a.attnum > 0 and not a.attisdropped;
        if v_type is null then
            execute pg_catalog.format('alter table %s add column %I %s%s', p_table, v_column.name, v_column.type,
                case when v_column.default_sql is null then ''
                    else ' not null default ' || v_column.default_sql end);
        elsif v_type <> v_column.type then
            raise exception 'ferry.register_table(%): column % is %, but sync needs %',
                p_table, v_column.name, v_type, v_column.type
                using errcode = '42804', hint = 'rename or drop the column';
        elsif v_column.default_sql is not null then
            execute pg_catalog.format('alter table %s alter column %I set default %s, alter column %I set not null',
                p_table, v_column.name, v_column.default_sql, v_column.name);
        end if;
    end loop;

    -- The pull index, made unless an index on exactly (owner, _stamp) (or (_stamp)) exists.
    select pg_catalog.string_agg(a.attnum::text, ' ' order by a.attname = '_stamp')
        into v_index_key
        from pg_catalog.pg_attribute a
        where a.attrelid = p_table and (a.attname = '_stamp' or a.attname = v_owner);
    if not exists (
        select from pg_catalog.pg_index i
        where i.indrelid = p_table and i.indpred is null and i.indexprs is null and i.indkey::text = v_index_key
    ) then
        if v_owner is null then
            execute pg_catalog.format('create index on %s (_stamp)', p_table);
        else
            execute pg_catalog.format('create index on %s (%I, _stamp)', p_table, v_owner);
        end if;
    end if;

    -- Row Level Security: Ferry's policies are named ferry_*, for ferry_client (and its
    -- members); they are dropped and made again so a new strategy replaces the old one.
    -- Roles outside ferry_client match no policy: FORCE keeps even the table owner out
    -- unless it bypasses RLS (operators and Ferry's own account functions do).
    execute pg_catalog.format('alter table %s enable row level security', p_table);
    execute pg_catalog.format('alter table %s force row level security', p_table);
    execute pg_catalog.format('drop policy if exists ferry_read on %s', p_table);
    execute pg_catalog.format('drop policy if exists ferry_insert on %s', p_table);
    execute pg_catalog.format('drop policy if exists ferry_update on %s', p_table);
    execute pg_catalog.format('drop policy if exists ferry_delete on %s', p_table);
    execute pg_catalog.format('revoke all on %s from ferry_client', p_table);
    if v_owner is null then
        execute pg_catalog.format('create policy ferry_read on %s for select to ferry_client using (true)', p_table);
    else
        execute pg_catalog.format(
            'create policy ferry_read on %s for select to ferry_client using (%I = (select ferry.uid()))',
            p_table, v_owner);
    end if;
    execute pg_catalog.format('grant select on %s to ferry_client', p_table);
    if v_writable then
        execute pg_catalog.format(
            'create policy ferry_insert on %s for insert to ferry_client with check (%I = (select ferry.uid()))',
            p_table, v_owner);
        execute pg_catalog.format(
            'create policy ferry_update on %s for update to ferry_client using (%2$I = (select ferry.uid())) with check (%2$I = (select ferry.uid()))',
            p_table, v_owner);
        -- Clients delete by tombstone (push); the policy lets account tools run as the user.
        execute pg_catalog.format(
            'create policy ferry_delete on %s for delete to ferry_client using (%I = (select ferry.uid()))',
            p_table, v_owner);
        execute pg_catalog.format('grant insert, update, delete on %s to ferry_client', p_table);
    end if;

    insert into ferry.synced_tables (table_name, strategy, owner_column, options)
        values (p_table, p_strategy, v_owner, p_options)
        on conflict (table_name) do update
            set strategy = excluded.strategy, owner_column = excluded.owner_column, options = excluded.options;

    -- The table-wide revoke above took every column grant of an earlier registration with it.
    if p_strategy = 'device_lock' then
        perform ferry.restrict_lock_columns(p_table);
    end if;
    perform ferry.install_triggers(p_table);
    perform ferry.install_pull_reader(p_table);
    perform ferry.install_pull_rows();
    perform ferry.install_upserts();
    perform ferry.install_watermelon();

    select * into v_shared from ferry.tables_keyed_across_users() t where t.table_name = p_table;
    if found then
        raise warning 'ferry.register_table(%): the primary key (%) leaves out the owner column %, so all users share its values: a user''s insert of a key another user has is refused',
            p_table, v_shared.key_columns, v_shared.owner_column
            using hint = pg_catalog.format(
                'key the table within its owner, primary key (%I, %s), or pass options => ''{"global_key": true}'' if every user is meant to share the key',
                v_shared.owner_column, v_shared.key_columns);
    end if;
end
$$;

comment on function ferry.register_table(regclass, text, name, jsonb) is
    'Makes a table synced with a strategy (lww, insert_only, set, device_lock, readonly, shared): sync columns, stamp trigger, cue triggers, TRUNCATE guard, (owner, _stamp) index, RLS, grants to ferry_client (column grants without the lock columns for device_lock), pull reader, static upsert, WatermelonDB reader, registry row. Warns when a table clients write has a primary key without the owner column (see ferry.tables_keyed_across_users). Idempotent.';

-- Every registered table of a strategy clients write (lww, insert_only, set,
-- device_lock) whose primary key does not contain its owner column, unless its options
-- have "global_key": true (the operator's word that every user is meant to share the
-- key: ids the server hands out, say): the table, its key columns and its owner column.
-- ferry migrate prints a warning for each after every run.
create or replace function ferry.tables_keyed_across_users(out table_name regclass, out key_columns text, out owner_column name)
returns setof record
language sql stable set search_path = ''
as $$
    select s.table_name, pg_catalog.string_agg(pg_catalog.quote_ident(k.name), ', ' order by k.ordinal),
        s.owner_column
    from ferry.synced_tables s
    cross join lateral ferry.primary_key(s.table_name) k
    where s.strategy in ('lww', 'insert_only', 'set', 'device_lock')
        and (s.options -> 'global_key') is distinct from 'true'::jsonb
    group by s.table_name, s.owner_column
    having not pg_catalog.bool_or(k.name = s.owner_column)
    order by s.table_name::text;
$$;

comment on function ferry.tables_keyed_across_users() is
    'Registered tables clients write whose primary key leaves the owner column out (one key space for all users), unless their options have "global_key": true; ferry migrate warns about each.';

-- A device_lock table's column grants for ferry_client: INSERT and UPDATE of every
-- column a client may write, and UPDATE of _deleted too (push, which runs as
-- ferry_client, writes tombstones), in place of the table-wide grants; so a client
-- cannot fake holding a lock even with SQL run as ferry_client. A column added to the
-- table later needs register_table again to be writable.
create or replace function ferry.restrict_lock_columns(p_table regclass) returns void
language plpgsql set search_path = ''
as $$
declare
    v_update text;
    v_insert text;
begin
    select pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ', ' order by a.attnum),
            pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ', ' order by a.attnum)
                filter (where a.attname <> '_deleted')
        into v_update, v_insert
        from pg_catalog.pg_attribute a
        where a.attrelid = p_table and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
            and (a.attname <> all (ferry.unwritable_columns()) or a.attname = '_deleted');
    execute pg_catalog.format('revoke insert, update on %s from ferry_client', p_table);
    execute pg_catalog.format('grant insert (%s) on %s to ferry_client', v_insert, p_table);
    execute pg_catalog.format('grant update (%s) on %s to ferry_client', v_update, p_table);
end
$$;

-- MARK: - Triggers

-- A synced table's triggers: ferry_stamp (ferry.stamp_row); ferry_cue_insert,
-- ferry_cue_update and ferry_cue_delete (ferry.send_cues, cues.sql: one event each,
-- since PostgreSQL allows transition tables only on a trigger with one), with the
-- table's owner column as the argument (none for shared); ferry_tombstone_delete
-- (ferry.tombstone_delete, deletes.sql), with the primary key's columns as its arguments;
-- ferry_refuse_truncate (ferry.refuse_truncate); and for a shared table this cluster
-- receives by logical replication (ferry.replicated_tables), ferry_cue_replicated and
-- ferry_replica_only (below).
create or replace function ferry.install_triggers(p_table regclass) returns void
language plpgsql set search_path = '' set client_min_messages = warning
as $$
declare
    v_owner name;
    v_argument text;
begin
    select s.owner_column into v_owner from ferry.synced_tables s where s.table_name = p_table;
    if not found then
        raise exception 'ferry.install_triggers(%): not a synced table', p_table using errcode = '42P01';
    end if;
    execute pg_catalog.format(
        'create or replace trigger ferry_stamp before insert or update on %s for each row execute function ferry.stamp_row()',
        p_table);
    v_argument := case when v_owner is null then '' else pg_catalog.quote_literal(v_owner) end;
    execute pg_catalog.format(
        'create or replace trigger ferry_cue_insert after insert on %s referencing new table as new_rows'
            ' for each statement execute function ferry.send_cues(%s)',
        p_table, v_argument);
    execute pg_catalog.format(
        'create or replace trigger ferry_cue_update after update on %s referencing old table as old_rows new table as new_rows'
            ' for each statement execute function ferry.send_cues(%s)',
        p_table, v_argument);
    execute pg_catalog.format(
        'create or replace trigger ferry_cue_delete after delete on %s referencing old table as old_rows'
            ' for each statement execute function ferry.send_cues(%s)',
        p_table, v_argument);
    execute pg_catalog.format(
        'create or replace trigger ferry_tombstone_delete before delete on %s for each row execute function ferry.tombstone_delete(%s)',
        p_table, (select pg_catalog.string_agg(pg_catalog.quote_literal(k.name), ', ' order by k.ordinal)
            from ferry.primary_key(p_table) k));
    execute pg_catalog.format(
        'create or replace trigger ferry_refuse_truncate before truncate on %s'
            ' for each statement execute function ferry.refuse_truncate()',
        p_table);

    -- A shared table received from an origin (ferry.receive_shared): logical replication
    -- applies its rows with session_replication_role = replica, when only ALWAYS and
    -- REPLICA triggers fire. Each applied row is stamped here (its _stamp and updated_at
    -- from the origin mean nothing in this cluster), a delete handled as ever, a row
    -- trigger cues (statement triggers never fire for applied rows); every other write
    -- is refused by ferry_replica_only, an ordinary trigger, which sorts first.
    if exists (select from ferry.replicated_tables r where r.table_name = p_table) then
        execute pg_catalog.format('alter table %s enable always trigger ferry_stamp', p_table);
        execute pg_catalog.format('alter table %s enable always trigger ferry_tombstone_delete', p_table);
        execute pg_catalog.format(
            'create or replace trigger ferry_cue_replicated after insert or update or delete on %s'
                ' for each row execute function ferry.send_replicated_cue()',
            p_table);
        execute pg_catalog.format('alter table %s enable replica trigger ferry_cue_replicated', p_table);
        execute pg_catalog.format(
            'create or replace trigger ferry_replica_only before insert or update or delete on %s'
                ' for each row execute function ferry.refuse_replica_write()',
            p_table);
    else
        execute pg_catalog.format('alter table %s enable trigger ferry_stamp', p_table);
        execute pg_catalog.format('alter table %s enable trigger ferry_tombstone_delete', p_table);
        execute pg_catalog.format('drop trigger if exists ferry_cue_replicated on %s', p_table);
        execute pg_catalog.format('drop trigger if exists ferry_replica_only on %s', p_table);
    end if;

    -- The rows the table had before its triggers (a first registration stamps them all
    -- with this transaction) are in no ferry.changes row: from here on it is complete
    -- again for the cursors that see this transaction (0016_changes.sql). CREATE TRIGGER's
    -- lock waited for the table's writers in flight, and holds off new ones until commit.
    update ferry.history set changes_since = pg_catalog.pg_current_xact_id();
end
$$;

comment on function ferry.install_triggers(regclass) is
    'Installs a synced table''s triggers: ferry_stamp (ferry.stamp_row), ferry_cue_insert, ferry_cue_update, ferry_cue_delete (ferry.send_cues), ferry_tombstone_delete (ferry.tombstone_delete) and ferry_refuse_truncate; for a shared table received by logical replication also ferry_cue_replicated (ferry.send_replicated_cue) and ferry_replica_only (ferry.refuse_replica_write), ferry_stamp and ferry_tombstone_delete firing ALWAYS. Called by ferry.register_table.';

-- MARK: - Pull readers

-- The JSON pull sends for a row of p_table, as an SQL expression over the alias t: the
-- row less Ferry's columns. A device_lock row also carries its holder (_lock_holder, null
-- when nobody holds it), so a device learns of a takeover from the pull its cue starts,
-- with no heartbeat of its own.
create or replace function ferry.pull_row_json(p_table regclass) returns text
language sql stable set search_path = ''
as $$
    select 'pg_catalog.to_jsonb(t) - ' || pg_catalog.quote_literal(ferry.internal_columns()::text) || '::text[]'
        || case when exists (select from ferry.synced_tables s where s.table_name = p_table and s.strategy = 'device_lock')
            then ' || pg_catalog.jsonb_build_object(''_lock_holder'', t._lock_device)' else '' end;
$$;

comment on function ferry.pull_row_json(regclass) is
    'The JSON pull sends for a row of the table, as SQL over the alias t (the pull readers and ferry.pull_steady use it)';

-- A synced table's pull reader, ferry.pull_rows_<table oid>, recorded in
-- ferry.synced_tables.pull_reader: the table's pull query written out as static SQL, so
-- PostgreSQL keeps its plans for the session (the same query built as text and run with
-- EXECUTE is parsed and planned on every pull). Its four queries are one query in four
-- forms: first load or not, resuming inside this table or not. (A steady-state pull, after
-- a cursor and within one page, is read by ferry.pull_steady, below.) STABLE and SECURITY
-- INVOKER like ferry.pull, so it reads in pull's snapshot under Row Level Security; it
-- sets no search_path and names everything qualified. Its SQL names the table and
-- primary key as they were when it was built, so it first checks, by index lookups,
-- that the table it is given still has them, and otherwise raises 55000 naming the fix
-- (register the table again) rather than read under a stale key.
create or replace function ferry.install_pull_reader(p_table regclass) returns void
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
    select pg_catalog.string_agg(k.attnum::text, ' ' order by k.ordinal), -- as int2vector prints indkey
        pg_catalog.string_agg(pg_catalog.format('t.%I', k.name), ', ' order by k.ordinal),
        pg_catalog.string_agg(pg_catalog.format('%L, t.%I', k.name, k.name), ', ' order by k.ordinal),
        pg_catalog.string_agg(pg_catalog.format('p.%I', k.name), ', ' order by k.ordinal)
        into v_key_attnums, v_order, v_object, v_after
        from ferry.primary_key(p_table) k;

    -- The query. %4$s and %6$s resume after the cursor's position inside this table;
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
                    $query$ || ferry.pull_row_json(p_table) || $query$ as body,
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

-- ferry.pull_rows(name, limit, until, since, shared_since, …), the dispatcher ferry.pull
-- calls: one branch per synced table, chosen by the name clients use (unique among synced
-- tables, and kept by a dump and restore, unlike oids), calling that table's reader with
-- static SQL, so pull runs no dynamic SQL at all. A `shared` table's branch reads after
-- shared_since when there is one (ferry.pull's header), every other after since. A name
-- with no branch raises 55000 like a stale reader. A transaction advisory lock while it
-- reads the registry keeps two registrations at once from each leaving the other's
-- table out.
--
-- ferry.pull_candidates(until, since, shared_since), built beside it, is how a
-- steady-state pull skips the tables with nothing new for the caller: ONE statement (a
-- UNION ALL of EXISTS) that probes every synced table for a row its reader could return
-- (its range of stamps: from the cursor's xmin, visible in `until`, not in the table's
-- since; under Row Level Security, so a per-user table's probe is one index probe of the
-- (owner, _stamp) index) and returns the names of those with one, in name order: pull
-- calls the dispatcher for those only. The readers' rows are a subset of what the probes
-- look for, so the answer is the same; a steady-state pull mostly visits tables that did
-- not change, and a reader's call costs several times a probe. A caller that may not
-- read every synced table gets null (one statement cannot leave a table out): pull then
-- calls the dispatcher for every table it may read, as on a first load. Both name each
-- table by its name, never its oid, which a dump and restore changes: a table renamed
-- since makes them answer null and its reader refuse to read (55000).
--
-- ferry.pull_steady(made, until, since, shared_since, limit), built beside them, is the
-- steady state: a pull after a done cursor whose rows fit in one page, the pull a device
-- makes on every cue. It answers exactly what ferry.pull would, in few statements: one
-- reads the device's last mutation id, the purge horizon and which tables have something
-- new together, then one static read per each, written into it (no dispatcher or reader
-- call). Which tables: from ferry.changes (0016_changes.sql) for a cursor that sees
-- ferry.history.changes_since, one index range instead of a probe (and two locks) per
-- table; by the probes above for an older cursor, and for the tables ferry.changes does
-- not answer for (docs/ARCHITECTURE.md, "Which tables changed"). A pull's cost was
-- mostly fixed costs per statement and per call, not its reads (bench/RESULTS.md), and
-- the probes' locks, two per table. It answers null, and ferry.pull takes the pull over
-- from the start, whenever the answer is not that simple: rows past the limit (a page
-- that ends inside a table needs positions), a cursor of another history or past the
-- purge horizon (ferry.pull raises), a table the caller may not read or a table without
-- a reader, a table whose primary key changed since it was built (the reader raises
-- 55000). Its purge-horizon check and last-mutation-id read are ferry.pull's (pull.sql),
-- repeated inside its one statement rather than called: change them in both.
-- Their earlier forms (taking the table and the xmin; the dispatcher probed too).
drop function if exists ferry.pull_rows(name, regclass, integer, xid8, pg_snapshot, pg_snapshot, jsonb, xid8);
drop function if exists ferry.pull_candidates(xid8, pg_snapshot, pg_snapshot);

create or replace function ferry.install_pull_rows() returns void
language plpgsql set search_path = ''
as $install$
declare
    v_branches text;
    v_probes text;
    v_readable text;
    v_steady_reads text;
    v_unnoted_probes text;
    v_noted_users text;
    v_noted_shared text;
    v_noted_oids text;
    -- The tables (%2$s) ferry.changes notes a change of for owner %1$s since snapshot %3$s.
    v_noted_read text := $read$select c.table_name from ferry.changes c
                        where c.owner = %1$s and c.table_name = any (%2$L::name[])
                            and c.changed_by >= pg_catalog.pg_snapshot_xmin(%3$s) and c.changed_by < pg_catalog.pg_snapshot_xmax(p_until)
                            and pg_catalog.pg_visible_in_snapshot(c.changed_by, p_until)
                            and not pg_catalog.pg_visible_in_snapshot(c.changed_by, %3$s)$read$;
    v_every_table_read boolean := not exists (select from ferry.synced_tables s where s.pull_reader is null);
    v_refusal text := $refusal$raise exception 'pull: synced table %% has no pull reader', p_name
                    using errcode = '55000', hint = 'call ferry.register_table on it again to rebuild its pull reader';$refusal$;
begin
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('ferry.install_pull_rows'));
    select pg_catalog.string_agg(pg_catalog.format(
            $branch$
            %1$s p_name = %2$L then
                select * into fetched, upserts, deletes, reached
                    from %3$s(pg_catalog.to_regclass(%4$L), p_limit, coalesce(pg_catalog.pg_snapshot_xmin(%5$s), '0'),
                        p_until, %5$s, p_after_key, p_after_stamp);$branch$,
            case when b.position = 1 then 'if' else 'elsif' end, b.relname, b.pull_reader, b.table_name::text,
            case when b.strategy = 'shared' then 'coalesce(p_shared_since, p_since)' else 'p_since' end), ''
            order by b.position),
        pg_catalog.string_agg(p.probe, E'\n                union all ' order by b.position),
        pg_catalog.string_agg(pg_catalog.format('pg_catalog.has_table_privilege(pg_catalog.to_regclass(%L), ''select'')',
            b.table_name::text), E'\n                and ' order by b.position),
        -- ferry.pull_steady's read of each table: its rows new since the cursor, as the
        -- reader's "changes since the cursor" reads them, without positions (a page that
        -- ends inside a table is left to ferry.pull), and whether the table still has the
        -- primary key it was built for (else ferry.pull, whose reader raises 55000). Any
        -- limit + 1 rows, unsorted: all of them when they fit, else the answer is null.
        pg_catalog.string_agg(pg_catalog.format(
            $read$
            if %1$L = any (v_tables) then
                select pg_catalog.count(*)::integer,
                        pg_catalog.jsonb_agg(r.body order by r.stamp, %2$s) filter (where not r.deleted),
                        pg_catalog.jsonb_agg(r.key order by r.stamp, %2$s) filter (where r.deleted),
                        (select exists (select from pg_catalog.pg_index i
                            where i.indrelid = pg_catalog.to_regclass(%3$L) and i.indisprimary and i.indkey::text = %4$L))
                    into v_fetched, v_upserts, v_deletes, v_same_key
                    from (
                        select t._stamp as stamp, t._deleted as deleted, %5$s,
                            %6$s as body,
                            case when t._deleted then pg_catalog.jsonb_build_object(%7$s) end as key
                        from %3$s t
                        where t._stamp >= pg_catalog.pg_snapshot_xmin(%8$s) and t._stamp < pg_catalog.pg_snapshot_xmax(p_until)
                            and pg_catalog.pg_visible_in_snapshot(t._stamp, p_until)
                            and not pg_catalog.pg_visible_in_snapshot(t._stamp, %8$s)
                        limit p_limit + 1
                    ) r;
                v_total := v_total + v_fetched;
                if not v_same_key or v_total > p_limit then
                    return null;
                end if;
                if v_fetched > 0 then
                    v_changes := v_changes || pg_catalog.jsonb_build_object(%1$L, pg_catalog.jsonb_build_object(
                        'upserts', coalesce(v_upserts, '[]'), 'deletes', coalesce(v_deletes, '[]')));
                end if;
            end if;$read$,
            b.relname, k.ordered, b.table_name::text, k.attnums, k.aliased, ferry.pull_row_json(b.table_name), k.object,
            case when b.strategy = 'shared' then 'v_shared_since' else 'p_since' end), '' order by b.position),
        -- With ferry.changes (0016_changes.sql): the probes of the tables it does not
        -- answer for, and the names and oids of those it does.
        pg_catalog.string_agg(p.probe, E'\n                union all ' order by b.position) filter (where not b.noted),
        pg_catalog.array_agg(b.relname order by b.position) filter (where b.noted and b.strategy <> 'shared')::text,
        pg_catalog.array_agg(b.relname order by b.position) filter (where b.noted and b.strategy = 'shared')::text,
        pg_catalog.string_agg(pg_catalog.format('pg_catalog.to_regclass(%L)::oid', b.table_name::text),
            E',\n                                    ' order by b.position) filter (where b.noted)
        into v_branches, v_probes, v_readable, v_steady_reads, v_unnoted_probes, v_noted_users, v_noted_shared, v_noted_oids
        from (
            select c.relname, s.table_name, s.strategy, s.pull_reader,
                pg_catalog.row_number() over (order by c.relname) as position,
                -- ferry.changes answers for a table whose every write fires its statement
                -- triggers (not one logical replication applies) and whose rows a caller
                -- reads only through ferry_read (its owner's, or a shared table's all):
                -- an operator's permissive read policy would show rows of other owners.
                not exists (select from ferry.replicated_tables r where r.table_name = s.table_name)
                    and not exists (select from pg_catalog.pg_policy p
                        where p.polrelid = s.table_name and p.polpermissive and p.polcmd in ('r', '*')
                            and p.polname <> 'ferry_read') as noted
            from ferry.synced_tables s join pg_catalog.pg_class c on c.oid = s.table_name
            where s.pull_reader is not null
        ) b
        cross join lateral (
            select pg_catalog.string_agg(p.attnum::text, ' ' order by p.ordinal) as attnums, -- as int2vector prints indkey
                pg_catalog.string_agg(pg_catalog.format('t.%I as k%s', p.name, p.ordinal), ', ' order by p.ordinal) as aliased,
                pg_catalog.string_agg(pg_catalog.format('r.k%s', p.ordinal), ', ' order by p.ordinal) as ordered,
                pg_catalog.string_agg(pg_catalog.format('%L, t.%I', p.name, p.name), ', ' order by p.ordinal) as object
            from ferry.primary_key(b.table_name) p
        ) k
        -- A table's probe: has it a row the caller may read, new since the cursor?
        cross join lateral (
            select pg_catalog.format(
                $probe$select %L::name where exists (
                    select from %s t
                    where t._stamp >= pg_catalog.pg_snapshot_xmin(%s) and t._stamp < pg_catalog.pg_snapshot_xmax(p_until)
                        and pg_catalog.pg_visible_in_snapshot(t._stamp, p_until)
                        and not pg_catalog.pg_visible_in_snapshot(t._stamp, %3$s))$probe$,
                b.relname, b.table_name, case when b.strategy = 'shared' then 'v_shared_since' else 'p_since' end) as probe
        ) p;
    execute pg_catalog.format(
        $function$
        create or replace function ferry.pull_rows(
            p_name name, p_limit integer, p_until pg_snapshot, p_since pg_snapshot, p_shared_since pg_snapshot,
            p_after_key jsonb, p_after_stamp xid8,
            out fetched integer, out upserts jsonb, out deletes jsonb, out reached jsonb)
        language plpgsql stable
        as %L
        $function$,
        pg_catalog.format(
            $body$
        -- Built by ferry.install_pull_rows from ferry.synced_tables; ferry.register_table
        -- rebuilds it. Columns are always named through an alias.
        #variable_conflict use_variable
        begin%s
        end
        $body$,
            case when v_branches is null then pg_catalog.format(E'\n            %s', pg_catalog.format(v_refusal))
                else pg_catalog.format(E'%s\n            else\n                %s\n            end if;', v_branches,
                    pg_catalog.format(v_refusal)) end));
    revoke all on function
        ferry.pull_rows(name, integer, pg_snapshot, pg_snapshot, pg_snapshot, jsonb, xid8) from public;
    grant execute on function
        ferry.pull_rows(name, integer, pg_snapshot, pg_snapshot, pg_snapshot, jsonb, xid8) to ferry_client;

    execute pg_catalog.format(
        $function$
        create or replace function ferry.pull_candidates(p_until pg_snapshot, p_since pg_snapshot, p_shared_since pg_snapshot)
        returns name[]
        language plpgsql stable
        as %L
        $function$,
        pg_catalog.format(
            $body$
        -- Built by ferry.install_pull_rows from ferry.synced_tables; ferry.register_table
        -- rebuilds it. Columns are always named through an alias.
        #variable_conflict use_variable
        declare
            v_shared_since pg_snapshot := coalesce(p_shared_since, p_since);
        begin
            if not coalesce(%s, false) then
                return null;
            end if;
            return array(%s);
        end
        $body$,
            coalesce(v_readable, 'true'), coalesce(v_probes, 'select null::name where false')));
    revoke all on function ferry.pull_candidates(pg_snapshot, pg_snapshot, pg_snapshot) from public;
    grant execute on function ferry.pull_candidates(pg_snapshot, pg_snapshot, pg_snapshot) to ferry_client;

    execute pg_catalog.format(
        $function$
        create or replace function ferry.pull_steady(
            p_made jsonb, p_until pg_snapshot, p_since pg_snapshot, p_shared_since pg_snapshot, p_limit integer)
        returns jsonb
        language plpgsql stable
        as %L
        $function$,
        pg_catalog.format(
            $body$
        -- Built by ferry.install_pull_rows from ferry.synced_tables; ferry.register_table
        -- rebuilds it. Columns are always named through an alias.
        #variable_conflict use_variable
        declare
            v_here jsonb := ferry.history_here();
            v_shared_since pg_snapshot := coalesce(p_shared_since, p_since);
            v_may_read boolean;
            v_noted boolean;
            v_last bigint;
            v_expired boolean;
            v_tables name[];
            v_fetched integer;
            v_upserts jsonb;
            v_deletes jsonb;
            v_same_key boolean;
            v_total integer := 0;
            v_changes jsonb := '{}'::jsonb;
        begin
            -- Whether the caller may read every table; whether ferry.changes may name the
            -- tables with something new (the cursor sees every change it misses noted
            -- there, and no table it answers for has gained a read policy of its own
            -- since this function was built), and which it names; the device's last
            -- mutation id; whether the cursor is past the purge horizon.
            select coalesce(%s, false),
                    coalesce(pg_catalog.pg_visible_in_snapshot(h.changes_since, p_since)
                        and pg_catalog.pg_visible_in_snapshot(h.changes_since, v_shared_since)
                        and not exists (select from pg_catalog.pg_policy p
                            -- (The array in a subquery, made once: inline, the planner
                            -- evaluated it for every policy of the database.)
                            where p.polrelid = any ((select array[%s])::oid[]) and p.polpermissive and p.polcmd in ('r', '*')
                                and p.polname <> 'ferry_read'), false),
                    array(%s),
                    (select d.last_mutation_id from ferry.devices d
                        where d.user_id = ferry.uid() and d.device_id = ferry.device_id()),
                    exists (select from ferry.purge_horizon h, (values (p_since), (p_shared_since)) c (since)
                        where pg_catalog.pg_snapshot_xmin(c.since) <= h.purged_through
                            and not pg_catalog.pg_visible_in_snapshot(h.purge_xid, c.since))
                into v_may_read, v_noted, v_tables, v_last, v_expired
                from ferry.history h;
            if not v_may_read or ferry.history_left(p_made, v_here) then
                return null;
            end if;
            -- The probes, of every table for a cursor ferry.changes cannot answer, else of
            -- the tables it does not answer for.
            if not v_noted then
                v_tables := array(%s);%s
            end if;
            if v_expired then
                return null;
            end if;%s
            v_last := coalesce(v_last, 0);
            return pg_catalog.jsonb_build_object(
                'changes', v_changes,
                'cursor', (pg_catalog.jsonb_build_object('since', p_until::text, 'last_mutation_id', v_last) || v_here)::text,
                'has_more', false,
                'last_mutation_id', v_last);
        end
        $body$,
            case when v_every_table_read then coalesce(v_readable, 'true') else 'false' end,
            coalesce(v_noted_oids, 'null::oid'),
            coalesce(nullif(pg_catalog.concat_ws(E'\n                        union all ',
                case when v_noted_users is not null then pg_catalog.format(v_noted_read, 'ferry.uid()', v_noted_users, 'p_since') end,
                case when v_noted_shared is not null then pg_catalog.format(v_noted_read,
                    $nil$'00000000-0000-0000-0000-000000000000'::uuid$nil$, v_noted_shared, 'v_shared_since') end), ''),
                'select null::name where false'),
            coalesce(v_probes, 'select null::name where false'),
            case when v_unnoted_probes is not null then pg_catalog.format(E'\n            else\n                v_tables := v_tables || array(%s);',
                v_unnoted_probes) end,
            coalesce(v_steady_reads, '')));
    revoke all on function ferry.pull_steady(jsonb, pg_snapshot, pg_snapshot, pg_snapshot, integer) from public;
    grant execute on function ferry.pull_steady(jsonb, pg_snapshot, pg_snapshot, pg_snapshot, integer) to ferry_client;
end
$install$;

comment on function ferry.install_pull_rows() is
    'Builds ferry.pull_rows, the dispatcher ferry.pull calls (one branch per synced table calling its pull reader with static SQL), ferry.pull_candidates, the probe of every synced table for something new since the cursor in one statement, and ferry.pull_steady, a steady-state pull in a few statements. Called by ferry.register_table.';

-- MARK: - Static upserts

-- What a table's static upsert depends on, as an md5: its writable columns in order
-- with type oid, typmod and stored default expression, and its primary key. Null when
-- the table cannot have one: an identity column, or a column whose default comes from
-- its domain (the upsert could not reproduce either default). push calls it once per
-- table per batch, so it reads the catalog as stored (oids, each default's expression
-- tree), with no names rendered (format_type, pg_get_expr) and no SET search_path, which
-- cost more; a restore that renumbers a user type, or a function a default calls,
-- changes it (speed until the table is registered again). PL/pgSQL, which keeps the
-- query's plan for the session: as a SQL function (an aggregate, so never inlined) it
-- was planned again at every push.
create or replace function ferry.upsert_shape(p_table regclass) returns text
language plpgsql stable
as $$
begin
    return (
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
        and a.attname <> all (ferry.unwritable_columns()));
end
$$;

comment on function ferry.upsert_shape(regclass) is
    'What a table''s static upsert (ferry.upsert_row) depends on, as an md5: writable columns with type oids, typmods and stored defaults, and the primary key; null when it cannot have one.';

-- The JSON type pull sends a key column's values in, by to_jsonb's rule for its base
-- type (a domain counts as its base type, one level, and shares its category):
-- 'number', 'boolean' or 'string'; null for arrays, composites, json and jsonb, which
-- push does not check. A device must send a key in this type, or its copy and the
-- server's would not match (push refuses it: invalid_row).
create or replace function ferry.key_json_type(p_type oid) returns text
language plpgsql stable
as $$
begin
    return (
        select case when y.typcategory in ('A', 'C') or y.base in (114, 3802) then null
                when y.base in (20, 21, 23, 700, 701, 1700) then 'number' when y.base = 16 then 'boolean'
                else 'string' end
        from (
            select case when t.typtype = 'd' then t.typbasetype else t.oid end as base, t.typcategory
            from pg_catalog.pg_type t where t.oid = p_type
        ) y);
end
$$;

comment on function ferry.key_json_type(oid) is
    'The JSON type (number, boolean, string) a key column of this type must come in, as pull sends it; null when push does not check it (arrays, composites, json, jsonb)';

-- Raises 22023 for a key column given in another JSON type than its own, inside
-- ferry.upsert_rows's statement (push then writes the run mutation by mutation, and
-- answers that mutation invalid_row). Typed like the value it stands in for (p_value,
-- a null of the column's type).
create or replace function ferry.refuse_key_type(p_value anyelement, p_column text) returns anyelement
language plpgsql
as $$
begin
    raise exception 'push: key column % is not given in its JSON type', pg_catalog.to_json(p_column)
        using errcode = '22023', detail = pg_catalog.format('the column is %s', pg_catalog.pg_typeof(p_value));
end
$$;

-- ferry.upsert_row(name, shape, row), the static lww upserts push tries first: one
-- branch per lww table, taken when the table's name and the shape push read from the
-- catalog in this batch both match what the branch was written for. A static statement
-- names every column a client may write, where a mutation gives some: the upsert
-- inserts a column's default for one the row does not give (evaluated only then), and
-- on conflict keeps its stored value, so it still merges the given columns (a tombstone
-- revived takes the defaults too: it starts from the given columns). It returns
-- true once it wrote; otherwise false, and push builds the statement for the given
-- columns: a changed table costs speed until it is registered again, never
-- correctness. One difference with the built statement: an operator's column trigger
-- (BEFORE/AFTER UPDATE OF col) fires on conflict for every writable column. Locks the
-- registry's reading as ferry.install_pull_rows does.
--
-- ferry.upsert_rows(name, shape, given, rows), built beside it from the same branches:
-- the same upsert of many rows in ONE statement, push's set-based path (push.sql). Rows
-- is a JSON array of rows that all give the columns `given` (and no other), written in
-- array order; it returns true once it wrote, false when no branch matches. Like any
-- statement it writes all of its rows or none: push calls it only where that answers
-- every mutation exactly, and otherwise applies them one by one.
create or replace function ferry.install_upserts() returns void
language plpgsql set search_path = ''
as $install$
declare
    v_branches text;
    v_set_branches text;
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
            u.rel, u.key_list, coalesce(u.sets || E',\n                    ', '')), '' order by u.position),
        pg_catalog.string_agg(pg_catalog.format(
            $branch$
            %s p_name = %L and p_shape = %L then
                v_given := array[%s];
                insert into %s as t (%s)
                select %s
                from pg_catalog.jsonb_array_elements(p_rows) with ordinality r(value, n)%s
                order by r.n
                on conflict (%s) do update set
                    %s_deleted = false;
                return true;$branch$,
            case when u.position = 1 then 'if' else 'elsif' end, u.name, u.shape, u.given, u.rel, u.columns,
            u.values_given,
            case when u.cast_all then '' else pg_catalog.format(
                E'\n                cross join lateral pg_catalog.jsonb_populate_record(null::%s, r.value) p', u.rel) end,
            u.key_list, coalesce(u.sets_given || E',\n                    ', '')), ''
            order by u.position)
        into v_branches, v_set_branches
        from (
            select c.relname as name, s.table_name as rel, ferry.upsert_shape(s.table_name) as shape,
                pg_catalog.row_number() over (order by c.relname) as position, w.columns, w.values_list, w.sets,
                w.given, w.values_given, w.sets_given, w.cast_all, ferry.primary_key_list(s.table_name) as key_list
            from ferry.synced_tables s
            join pg_catalog.pg_class c on c.oid = s.table_name
            cross join lateral (
                select pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ', ' order by a.attnum) as columns,
                    pg_catalog.string_agg(pg_catalog.format('case when p_row ? %L then p.%I else %s end',
                        a.attname, a.attname, coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), 'null')),
                        E',\n                    ' order by a.attnum) as values_list,
                    pg_catalog.string_agg(pg_catalog.format('%1$I = case when p_row ? %2$L or t._deleted then excluded.%1$I else t.%1$I end',
                        a.attname, a.attname), E',\n                    ' order by a.attnum) filter (where not exists (
                            select from ferry.primary_key(s.table_name) k where k.attnum = a.attnum))
                        as sets,
                    -- upsert_rows: whether the run gives each column, in v_given[n], the
                    -- column's place among the writable ones, read once per run.
                    pg_catalog.string_agg(pg_catalog.format('%L = any (p_given)', a.attname), ', ' order by a.attnum)
                        as given,
                    -- The owner is the caller (push checked a given one is); a key column's
                    -- value must come in its JSON type (ferry.key_json_type), else the
                    -- statement fails and push writes the run mutation by mutation.
                    pg_catalog.string_agg(case
                        when a.attname = s.owner_column then 'v_user'
                        when a.key_type is not null then pg_catalog.format(
                            'case when v_given[%1$s] then case when pg_catalog.jsonb_typeof(r.value -> %2$L) = %3$L then %4$s'
                                ' else ferry.refuse_key_type(null::%6$s, %2$L) end else %5$s end',
                            a.n, a.attname, a.key_type, a.value, coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), 'null'),
                            pg_catalog.format_type(a.atttypid, null))
                        else pg_catalog.format('case when v_given[%s] then %s else %s end',
                            a.n, a.value, coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), 'null')) end,
                        E',\n                    ' order by a.attnum) as values_given,
                    pg_catalog.bool_and(a.cast is not null) as cast_all,
                    pg_catalog.string_agg(pg_catalog.format('%1$I = case when v_given[%2$s] or t._deleted then excluded.%1$I else t.%1$I end',
                        a.attname, a.n), E',\n                    ' order by a.attnum) filter (where not exists (
                            select from ferry.primary_key(s.table_name) k where k.attnum = a.attnum))
                        as sets_given
                from (
                  -- Each value by its cast when every column has one, else from the record p.
                  select a.*, case when pg_catalog.bool_and(a.cast is not null) over () then a.cast
                        else pg_catalog.format('p.%I', a.attname) end as value
                  from (
                    select a.attrelid, a.attnum, a.attname, a.atttypid, a.attisdropped, a.attgenerated,
                        pg_catalog.row_number() over (order by a.attnum) as n,
                        (select ferry.key_json_type(k.type_id) from ferry.primary_key(s.table_name) k
                            where k.attnum = a.attnum) as key_type,
                        -- The value read from the row's JSON by a cast, as jsonb_populate_record
                        -- reads it but without building a record per row: its text cast to the
                        -- column's type without typmod (the insert applies that, as the input
                        -- function would); JSON itself for json and jsonb; none for arrays and
                        -- composites, which only jsonb_populate_record reads (p).
                        case when y.typcategory in ('A', 'C') then null
                            when y.base in (114, 3802) then pg_catalog.format('nullif(r.value -> %L, ''null''::jsonb)::%s',
                                a.attname, pg_catalog.format_type(a.atttypid, null))
                            else pg_catalog.format('(r.value ->> %L)::%s', a.attname, pg_catalog.format_type(a.atttypid, null))
                            end as cast
                    from pg_catalog.pg_attribute a
                    cross join lateral (
                        select case when t.typtype = 'd' then t.typbasetype else t.oid end as base, t.typcategory
                        from pg_catalog.pg_type t where t.oid = a.atttypid
                    ) y
                    where a.attrelid = s.table_name and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
                        and a.attname <> all (ferry.unwritable_columns())
                  ) a
                ) a
                left join pg_catalog.pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
                where a.attrelid = s.table_name and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
                    and a.attname <> all (ferry.unwritable_columns())
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
    execute pg_catalog.format(
        $function$
        create or replace function ferry.upsert_rows(p_name text, p_shape text, p_given text[], p_rows jsonb) returns boolean
        language plpgsql
        as %L
        $function$,
        pg_catalog.format(
            $body$
        -- Built by ferry.install_upserts from ferry.synced_tables; ferry.register_table
        -- rebuilds it. Columns are always named through an alias.
        #variable_conflict use_variable
        declare
            v_given boolean[];
            v_user uuid := ferry.uid();
        begin%s
            return false;
        end
        $body$,
            case when v_set_branches is null then '' else v_set_branches || E'\n            end if;' end));
    revoke all on function ferry.upsert_rows(text, text, text[], jsonb) from public;
    grant execute on function ferry.upsert_rows(text, text, text[], jsonb) to ferry_client;
end
$install$;

comment on function ferry.install_upserts() is
    'Builds ferry.upsert_row, the static lww upserts push tries first (one branch per lww table, for the shape it was written for), and ferry.upsert_rows, the same upsert of many rows in one statement (push''s set-based path). Called by ferry.register_table.';

-- MARK: - Schema

-- A column's default as the JSON value it gives, when that is a constant a client may
-- show on a row it creates before the server's version arrives ('', 0, '{}', 'medium'):
-- only constants, and immutable functions and operators of them (casts), are evaluated;
-- now(), a sequence, current_user, a domain check give null, as does no default.
create or replace function ferry.column_default(p_table regclass, p_column smallint) returns jsonb
language plpgsql stable set search_path = ''
as $$
declare
    v_tree text;
    v_expression text;
    v_value jsonb;
begin
    select d.adbin::text, pg_catalog.pg_get_expr(d.adbin, d.adrelid) into v_tree, v_expression
        from pg_catalog.pg_attrdef d where d.adrelid = p_table and d.adnum = p_column;
    if v_tree is null
        or exists (
            select from pg_catalog.regexp_matches(v_tree, '\{([A-Z_]+)', 'g') as m(tag)
            where m.tag[1] not in ('CONST', 'FUNCEXPR', 'OPEXPR', 'RELABELTYPE'))
        or exists (
            select from pg_catalog.regexp_matches(v_tree, ':(?:op)?funcid ([0-9]+)', 'g') as m(id)
            join pg_catalog.pg_proc p on p.oid = m.id[1]::oid
            where p.provolatile <> 'i')
    then
        return null;
    end if;
    execute pg_catalog.format('select pg_catalog.to_jsonb(%s)', v_expression) into v_value;
    return v_value;
exception when others then
    -- A function of the default the caller may not execute: the client shows null.
    return null;
end
$$;

comment on function ferry.column_default(regclass, smallint) is
    'The column''s default as JSON when it is a constant (constants, immutable functions and operators of them), else null; GET /v1/schema''s "default".';

-- GET /v1/schema: {"tables": [{"name", "strategy", "key": [...], "owner": column or null,
-- "columns": [{"name", "type", "default"?}, ...], "watermelon": {...}}, ...]}, every
-- registered table the caller may read, by name; columns in table order with their
-- PostgreSQL types (format_type) and, when it is a constant, their default
-- (ferry.column_default), without Ferry's internal ones. updated_at is listed: pull sends it.
-- "watermelon" is ferry.watermelon_schema's answer (watermelon.sql): whether
-- /v1/watermelon/sync serves the table, and as what WatermelonDB columns. PL/pgSQL, whose
-- body is not checked when it is created: watermelon.sql comes after this file.
create or replace function ferry.table_schema() returns jsonb
language plpgsql stable
as $$
begin
    return (
    select pg_catalog.jsonb_build_object('tables', coalesce(pg_catalog.jsonb_agg(t.entry order by t.name), '[]'))
    from (
        select c.relname as name, pg_catalog.jsonb_build_object(
            'name', c.relname, 'strategy', s.strategy, 'owner', s.owner_column,
            'key', (select pg_catalog.jsonb_agg(k.name order by k.ordinal) from ferry.primary_key(c.oid) k),
            'columns', (
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                    'name', a.attname, 'type', pg_catalog.format_type(a.atttypid, a.atttypmod))
                    || coalesce((
                        select pg_catalog.jsonb_build_object('default', d.value)
                        from (select ferry.column_default(c.oid, a.attnum) as value) d
                        where a.atthasdef and d.value is not null), '{}')
                    order by a.attnum)
                from pg_catalog.pg_attribute a
                where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
                    and a.attname <> all (ferry.internal_columns())),
            'watermelon', ferry.watermelon_schema(c.oid)
        ) as entry
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        where pg_catalog.has_table_privilege(s.table_name, 'select')
    ) t);
end
$$;

-- MARK: - Generated code, made again

-- What register_table generates, made again for every registered table: its triggers
-- and pull reader, then the dispatcher, the static upserts and the WatermelonDB pull
-- reader. A table that lost its primary key keeps its reader, which refuses to read
-- (register the table again). ferry.install_watermelon is defined in watermelon.sql,
-- which comes after this file: applied to a database that lacks it yet, the file that
-- defines it builds its reader itself when it is applied.
create or replace function ferry.rebuild_generated_code() returns void
language plpgsql set search_path = ''
as $$
declare
    v_table regclass;
begin
    for v_table in
        select s.table_name from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        where exists (select from ferry.primary_key(s.table_name))
        order by c.relname
    loop
        perform ferry.install_triggers(v_table);
        perform ferry.install_pull_reader(v_table);
    end loop;
    perform ferry.install_pull_rows();
    perform ferry.install_upserts();
    if pg_catalog.to_regprocedure('ferry.install_watermelon()') is not null then
        perform ferry.install_watermelon();
    end if;
end
$$;

comment on function ferry.rebuild_generated_code() is
    'Builds again, for every registered table, the code ferry.register_table generates: triggers, pull reader, the dispatcher ferry.pull_rows, the static upserts ferry.upsert_row and the WatermelonDB reader ferry.watermelon_open. Called at the end of sql/ferry/functions/registry.sql.';

-- MARK: - Grants

revoke all on function
    ferry.internal_columns(), ferry.unwritable_columns(), ferry.stamp_row(),
    ferry.register_table(regclass, text, name, jsonb), ferry.tables_keyed_across_users(),
    ferry.restrict_lock_columns(regclass), ferry.install_triggers(regclass), ferry.install_pull_reader(regclass),
    ferry.install_pull_rows(), ferry.primary_key(regclass), ferry.primary_key_list(regclass), ferry.upsert_shape(regclass),
    ferry.install_upserts(), ferry.table_schema(), ferry.column_default(regclass, smallint),
    ferry.rebuild_generated_code(), ferry.key_json_type(oid), ferry.refuse_key_type(anyelement, text)
from public;
-- push and pull call these as ferry_client.
grant execute on function
    ferry.internal_columns(), ferry.unwritable_columns(), ferry.primary_key(regclass), ferry.primary_key_list(regclass),
    ferry.upsert_shape(regclass), ferry.table_schema(), ferry.column_default(regclass, smallint),
    ferry.key_json_type(oid), ferry.refuse_key_type(anyelement, text)
to ferry_client;

select ferry.rebuild_generated_code();
