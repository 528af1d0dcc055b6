-- 0005_sync_tables_and_push: registering a table for sync, and the exactly-once push.
--
-- Adds
--   ferry.stamp_row()        the one row trigger function of every synced table: each insert
--                            and update gets _stamp = pg_current_xact_id() (the change stamp
--                            pull compares with its snapshot cursor, docs/ARCHITECTURE.md "Sync")
--                            and updated_at = now() (the server's clock; a client's is ignored)
--   ferry.register_table()   what operators call in their migrations: checks the table,
--                            adds the sync columns, the trigger, the (owner, _stamp) index,
--                            Row Level Security and grants for ferry_client, and records it in
--                            ferry.synced_tables. Runs as its caller and is granted to no request
--                            role: it alters tables, so only their owner may call it.
--   ferry.devices            per device of a user, the last mutation id pushed (PROTOCOL.md
--                            "Push": stored in the same transaction as the writes). Readable
--                            by ferry_client under RLS (pull reports it); written only by the
--                            two helpers below, which act on the caller's own device alone.
--   ferry.lock_device(), ferry.advance_device(bigint)
--                            SECURITY DEFINER helpers of push: lock (creating when missing) and
--                            advance the caller's device row
--   ferry.push(jsonb)        POST /v1/push as one statement: the whole batch, one transaction,
--                            one round trip. SECURITY INVOKER, run as ferry_client, so RLS on
--                            the synced tables is what enforces ownership.
--   ferry.table_schema()     the body of GET /v1/schema, as the caller (ferry_client).
--
-- Every identifier that reaches SQL text is either a regclass (whose text form is quoted)
-- or passed through format('%I'), and the column names come from the catalog, checked
-- against what the request names; values are bound with USING, never interpolated.

-- MARK: - The change stamp

-- No search_path is set: the trigger runs on every synced write and names only pg_catalog
-- functions, which are found first whatever the path; a SET clause would cost a GUC save
-- and restore per row.
create function ferry.stamp_row() returns trigger
language plpgsql
as $$
begin
    new._stamp := pg_catalog.pg_current_xact_id();
    new.updated_at := pg_catalog.now();
    return new;
end
$$;

-- MARK: - Registering a table

-- ferry.register_table('game_records', strategy => 'insert_only'): see docs/TABLES.md's
-- strategies; owner_column defaults to user_id (ignored for shared), options to {}.
-- Registering again is harmless: it brings the table to what the (new) strategy wants and
-- updates the registry row. Refusals raise with an errcode and a message naming the table.
create function ferry.register_table(
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
begin
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

    select pg_catalog.array_agg(a.attname order by k.position) into v_key
        from pg_catalog.pg_index i
        cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as k(attnum, position)
        join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
        where i.indrelid = p_table and i.indisprimary;
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

    execute pg_catalog.format(
        'create or replace trigger ferry_stamp before insert or update on %s for each row execute function ferry.stamp_row()',
        p_table);
    -- REALTIME (issue 4, cues): the statement-level trigger that sends
    -- pg_notify('ferry_cue', …) once per owner after insert, update or delete goes here,
    -- created the same way (create or replace trigger ferry_cue … for each statement).

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
end
$$;

comment on function ferry.register_table(regclass, text, name, jsonb) is
    'Makes a table synced with a strategy (lww, insert_only, set, device_lock, readonly, shared): sync columns, stamp trigger, (owner, _stamp) index, RLS, grants to ferry_client, registry row. Idempotent.';

-- MARK: - Devices

create table ferry.devices (
    user_id uuid not null references ferry.users on delete cascade,
    device_id text not null,
    last_mutation_id bigint not null default 0,
    primary key (user_id, device_id)
);
alter table ferry.devices enable row level security;
alter table ferry.devices force row level security;
create policy devices_owner on ferry.devices
    using (user_id = (select ferry.uid())) with check (user_id = (select ferry.uid()));
revoke all on ferry.devices from public;
grant select on ferry.devices to ferry_client;

-- The caller's device row, locked until the transaction ends (made when missing): two
-- pushes of one device serialize here. Returns its last mutation id.
create function ferry.lock_device() returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
    v_user uuid := ferry.uid();
    v_device text := ferry.device_id();
    v_last bigint;
begin
    if v_user is null or v_device is null then
        raise exception 'no request identity: ferry.user_id and ferry.device_id must be set' using errcode = '28000';
    end if;
    select d.last_mutation_id into v_last from ferry.devices d
        where d.user_id = v_user and d.device_id = v_device for update;
    if v_last is null then
        -- A concurrent first push of the same device waits on the insert, then finds its row.
        insert into ferry.devices (user_id, device_id) values (v_user, v_device) on conflict do nothing;
        select d.last_mutation_id into v_last from ferry.devices d
            where d.user_id = v_user and d.device_id = v_device for update;
    end if;
    return v_last;
end
$$;

-- Raises the caller's device's last mutation id to p_last (never lowers it).
create function ferry.advance_device(p_last bigint) returns void
language sql security definer set search_path = ''
as $$
    update ferry.devices d set last_mutation_id = greatest(d.last_mutation_id, p_last)
        where d.user_id = ferry.uid() and d.device_id = ferry.device_id();
$$;

-- MARK: - Push

-- POST /v1/push. p_mutations is the request body {"mutations": [...]} (other fields are
-- ignored) or the array itself. Returns {"last_mutation_id": N, "results": [{"id",
-- "status": "applied" | "duplicate" | "rejected", "code"?, "message"?}, ...]}, one result
-- per mutation in order.
--
-- A batch that is not an array of objects with non-negative integer ids raises 22023
-- (the gateway answers 400 invalid_request); anything wrong inside one mutation rejects
-- that mutation only. Each mutation runs in its own subtransaction, so a failed write
-- is undone alone and the batch goes on (PostgreSQL keeps 64 subtransaction ids per
-- backend in shared memory; batches with more writes than that still work, with the
-- usual cost of an overflowed subtransaction cache). Errors that are not the mutation's fault
-- (deadlock, serialization, connection) abort the whole batch: the client retries it.
--
-- Decisions where PROTOCOL.md is silent:
--   - ids are compared with the device's last mutation id as the batch proceeds, so an id
--     not above an earlier one in the same batch is a duplicate too;
--   - "table" is a synced table's bare name (no schema; register_table keeps names
--     unique); a missing or unknown one is unknown_table;
--   - a mutation without an op or a row/key object, or with an unknown op, is rejected
--     invalid_row; so are values that do not cast to the column's type (any data
--     exception) and a key column missing or null;
--   - unknown_column also covers Ferry's internal columns (_stamp, _deleted, _lock_*)
--     and generated columns; a delete's key may name only key columns and the owner;
--   - integrity errors (check, foreign key, unique, not null) are constraint_violation;
--     a Row Level Security refusal is forbidden (e.g. an lww upsert of a key that another
--     user's row holds, in a table whose key does not include the owner);
--   - "the same row" for insert means every column the mutation gives equals the stored
--     value; this holds for every strategy, so an lww insert of a different row under a
--     live key is immutable too. An insert onto a tombstone revives it (merge of the given
--     columns), except in insert_only tables (immutable);
--   - set: inserting a live member again is duplicate whatever its other columns;
--     upsert is treated as insert; insert_only: upsert is insert, delete is immutable;
--   - the owner given as JSON null counts as omitted; updated_at in a row is dropped;
--   - lock_not_held: the row's _lock_device names another device (a row nobody holds
--     is writable; claiming locks is the locks endpoint's job).
--
-- No fixed search_path, unlike the SECURITY DEFINER functions: push runs with the caller's
-- own privileges, so a path could only mislead the caller itself, and every name below is
-- qualified; but an operator's triggers on a synced table run inside push and may rely on
-- the session's path (public).
create function ferry.push(p_mutations jsonb) returns jsonb
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
            'key', k.names, 'key_list', k.list, 'match', k.match, 'columns', cols.names))
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

            -- lww upsert, the common write: one statement. (A key owned by another user is
            -- invisible, so it conflicts under RLS: forbidden.)
            if v_op = 'upsert' and v_strategy = 'lww' then
                v_list_sql := (select pg_catalog.string_agg(pg_catalog.format('%I', k), ', ') from pg_catalog.unnest(v_given) k);
                v_sets := (select pg_catalog.string_agg(pg_catalog.format('%1$I = excluded.%1$I', k), ', ')
                    from pg_catalog.unnest(v_given) k where not k = any (v_key));
                execute pg_catalog.format(
                    'insert into %s as t (%s) select %s from pg_catalog.jsonb_populate_record(null::%s, $1)'
                        ' on conflict (%s) do update set %s_deleted = false',
                    v_rel, v_list_sql, v_list_sql, v_rel, v_table ->> 'key_list', coalesce(v_sets || ', ', ''))
                    using v_row;
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
                end if;
            elsif not v_found then
                execute pg_catalog.format(
                    'insert into %s (%s) select %s from pg_catalog.jsonb_populate_record(null::%s, $1)',
                    v_rel, v_list_sql, v_list_sql, v_rel) using v_row;
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

        v_results := v_results || case
            when v_code is null then pg_catalog.jsonb_build_object('id', v_id, 'status', 'applied')
            when v_code = 'duplicate' then pg_catalog.jsonb_build_object('id', v_id, 'status', 'duplicate')
            else pg_catalog.jsonb_build_object('id', v_id, 'status', 'rejected', 'code', v_code, 'message', v_message)
        end;
    end loop;

    perform ferry.advance_device(v_last);
    return pg_catalog.jsonb_build_object('last_mutation_id', v_last, 'results', pg_catalog.to_jsonb(v_results));
end
$$;

comment on function ferry.push(jsonb) is
    'POST /v1/push as one statement, run as ferry_client: exactly-once by the device''s last_mutation_id; {"last_mutation_id", "results"}';

-- MARK: - Schema

-- GET /v1/schema: {"tables": [{"name", "strategy", "key": [...], "owner": column or null,
-- "columns": [{"name", "type"}, ...]}, ...]}, every registered table the caller may read,
-- by name; columns in table order with their PostgreSQL types (format_type), without
-- Ferry's internal ones (_stamp, _deleted, _lock_*). updated_at is listed: pull sends it.
create function ferry.table_schema() returns jsonb
language sql stable
as $$
    select pg_catalog.jsonb_build_object('tables', coalesce(pg_catalog.jsonb_agg(t.entry order by t.name), '[]'))
    from (
        select c.relname as name, pg_catalog.jsonb_build_object(
            'name', c.relname, 'strategy', s.strategy, 'owner', s.owner_column,
            'key', (
                select pg_catalog.jsonb_agg(a.attname order by p.position)
                from pg_catalog.pg_index i
                cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as p(attnum, position)
                join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = p.attnum
                where i.indrelid = c.oid and i.indisprimary),
            'columns', (
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                    'name', a.attname, 'type', pg_catalog.format_type(a.atttypid, a.atttypmod)) order by a.attnum)
                from pg_catalog.pg_attribute a
                where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
                    and a.attname not in ('_stamp', '_deleted', '_lock_device', '_lock_heartbeat_at'))
        ) as entry
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        where pg_catalog.has_table_privilege(s.table_name, 'select')
    ) t;
$$;

-- MARK: - Grants

revoke all on function
    ferry.stamp_row(), ferry.register_table(regclass, text, name, jsonb), ferry.lock_device(),
    ferry.advance_device(bigint), ferry.push(jsonb), ferry.table_schema()
from public;

grant execute on function
    ferry.lock_device(), ferry.advance_device(bigint), ferry.push(jsonb), ferry.table_schema()
to ferry_client;
