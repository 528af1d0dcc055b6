-- WatermelonDB's sync contract at GET and POST /v1/watermelon/sync (docs/WATERMELONDB.md):
-- which registered tables it serves and as what WatermelonDB schema, the pull (one
-- snapshot, answered with a number naming it), the push (one transaction, refused whole
-- on a conflict) and the timestamps' retention.
--
-- The timestamp (0005_watermelon_cursors.sql): a pull reads every table in one snapshot
-- S, stores (user, device, n, S) with n from a sequence, and answers n. The next pull
-- presents n, reads S(n) back and sends the rows whose _stamp is not visible in S(n)
-- (what /v1/pull does with its cursor, so out-of-order commits are never missed, and
-- S(n) is contained in the new snapshot because S(n)'s row committed before the client
-- could present it). A push refuses a record whose current version's _stamp is not
-- visible in S(n): that version was written after the pull, by someone else; the check
-- is the write's own WHERE, evaluated on the latest committed version under the row's
-- lock, so a change committed while the push waits is caught too. A transaction open
-- elsewhere changes neither side: a push right after a pull is never a conflict.
-- docs/WATERMELONDB.md, "Why the timestamp is correct", has the whole argument.
--
-- SQLSTATEs the gateway answers (Sources/FerryGateway/Sync/WatermelonRoutes.swift):
--   FR409  409 cursor_expired: last_pulled_at names no snapshot kept for this device,
--          or its snapshot is older than the purge horizon (pull.sql's test)
--   FRCNF  409 conflict: records changed on the server after last_pulled_at; the DETAIL
--          is {"<table>": ["<id>", ...]}
--   FR413  413 payload_too_large: more records than the gateway's limit
--   22023  400 invalid_request: the message names the table and column
--
-- Requests run as ferry_client (SECURITY INVOKER, so Row Level Security decides what a
-- request reads and writes); the cursor table is reached through SECURITY DEFINER
-- functions acting on the caller's own user and device alone. Every identifier that
-- reaches SQL text is a regclass or passes through format('%I'); values are bound.

-- MARK: - What is served, as what

-- WatermelonDB's ids: letters, digits, _ - . (Backend.md: default ids are 16 letters and
-- digits, and '"\/$ are unsafe), at most 128 of them. Pull leaves other rows out; push
-- refuses other ids.
create or replace function ferry.watermelon_id_pattern() returns text
language sql immutable parallel safe
as $$ select '^[A-Za-z0-9_.-]{1,128}$' $$;

-- Why WatermelonDB would refuse a table or column name (its checkName and validateName),
-- or null when it takes it. id is WatermelonDB's own column, refused as any other name.
create or replace function ferry.watermelon_name_problem(p_name text) returns text
language sql immutable parallel safe
as $$
    select case
        when pg_catalog.lower(p_name) in ('id', '_changed', '_status', 'local_storage')
            then 'a name WatermelonDB reserves'
        when p_name in ('__proto__', 'constructor', 'prototype', 'hasOwnProperty', 'isPrototypeOf', 'toString',
            'toLocaleString', 'valueOf')
            then 'a JavaScript Object property'
        when pg_catalog.lower(p_name) in ('$loki', 'rowid', 'oid', '_rowid_', 'sqlite_master')
            or pg_catalog.lower(p_name) like 'sqlite\_stat%'
            then 'a name LokiJS or SQLite reserves'
        when p_name like '\_\_%' then 'a name starting with __'
        when p_name !~ '^[a-zA-Z_][a-zA-Z0-9_]*$' then 'not letters, digits and _ only'
    end
$$;

-- The client-visible columns of a table (all but ferry.internal_columns()), in table
-- order, with how WatermelonDB sees each:
--   kind       the conversion: string (text-like, uuid, date, enum), json (json, jsonb:
--              JSON text in a string), number (integers, floats, numeric), boolean,
--              timestamp (timestamptz: milliseconds since the epoch); null: none
--   type       WatermelonDB's column type (string, number, boolean), null without a kind
--   optional   nullable (WatermelonDB's isOptional)
--   writable   a push may write it (not updated_at, not generated)
-- Domains count as their base type.
create or replace function ferry.watermelon_columns(p_table regclass)
returns table (name name, kind text, type text, sql_type text, optional boolean, writable boolean)
language sql stable
as $$
    with recursive base(attnum, type_oid, depth) as (
        select a.attnum, a.atttypid, 0
        from pg_catalog.pg_attribute a
        where a.attrelid = p_table and a.attnum > 0 and not a.attisdropped
        union all
        select b.attnum, t.typbasetype, b.depth + 1
        from base b join pg_catalog.pg_type t on t.oid = b.type_oid
        where t.typtype = 'd' and b.depth < 16
    ), resolved as (
        select distinct on (b.attnum) b.attnum, t.oid as type_oid, t.typtype, t.typname
        from base b join pg_catalog.pg_type t on t.oid = b.type_oid
        order by b.attnum, b.depth desc
    ), kinds as (
        select a.attnum, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) as sql_type,
            not a.attnotnull as optional,
            a.attgenerated = '' and a.attname <> all (ferry.unwritable_columns()) as writable,
            case
                when r.type_oid in ('text'::regtype, 'varchar'::regtype, 'bpchar'::regtype, 'uuid'::regtype,
                    'date'::regtype) or r.typtype = 'e' or r.typname = 'citext' then 'string'
                when r.type_oid in ('json'::regtype, 'jsonb'::regtype) then 'json'
                when r.type_oid in ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'float4'::regtype,
                    'float8'::regtype, 'numeric'::regtype) then 'number'
                when r.type_oid = 'bool'::regtype then 'boolean'
                when r.type_oid = 'timestamptz'::regtype then 'timestamp'
            end as kind
        from pg_catalog.pg_attribute a
        join resolved r on r.attnum = a.attnum
        where a.attrelid = p_table and a.attname <> all (ferry.internal_columns())
    )
    select k.attname, k.kind,
        case k.kind when 'string' then 'string' when 'json' then 'string' when 'number' then 'number'
            when 'timestamp' then 'number' when 'boolean' then 'boolean' end,
        k.sql_type, k.optional, k.writable
    from kinds k
    order by k.attnum;
$$;

comment on function ferry.watermelon_columns(regclass) is
    'A synced table''s client-visible columns as WatermelonDB sees them: kind (string, json, number, boolean, timestamp; null: no mapping), WatermelonDB type, PostgreSQL type, optional, writable.';

-- Whether GET/POST /v1/watermelon/sync serve a registered table, and its WatermelonDB
-- schema: {"served": true, "columns": [{"name", "type", "isOptional"}, ...]} (every
-- client-visible column but id, in table order, as an app's tableSchema would list
-- them), or {"served": false, "reason": "..."}. Served: each row is one WatermelonDB
-- record, so the primary key is a text id, alone or with the owner column (alone for a
-- shared table); the strategy is not device_lock (those rows move through /v1/locks);
-- WatermelonDB takes the table's name and every column's, and every column has a
-- mapping (ferry.watermelon_columns).
create or replace function ferry.watermelon_schema(p_table regclass) returns jsonb
language plpgsql stable
as $$
declare
    v_strategy text;
    v_owner name;
    v_name name;
    v_key name[];
    v_id_type text;
    v_column record;
    v_columns jsonb := '[]';
begin
    select s.strategy, s.owner_column, c.relname into v_strategy, v_owner, v_name
        from ferry.synced_tables s join pg_catalog.pg_class c on c.oid = s.table_name
        where s.table_name = p_table;
    if not found then
        return pg_catalog.jsonb_build_object('served', false, 'reason', 'not a synced table');
    end if;
    if v_strategy = 'device_lock' then
        return pg_catalog.jsonb_build_object('served', false,
            'reason', 'a device_lock table''s rows move through /v1/locks, one device at a time');
    end if;
    if ferry.watermelon_name_problem(v_name) is not null then
        return pg_catalog.jsonb_build_object('served', false,
            'reason', pg_catalog.format('the table name is %s', ferry.watermelon_name_problem(v_name)));
    end if;
    select pg_catalog.array_agg(a.attname order by k.position) into v_key
        from pg_catalog.pg_index i
        cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as k(attnum, position)
        join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
        where i.indrelid = p_table and i.indisprimary;
    select c.sql_type into v_id_type from ferry.watermelon_columns(p_table) c where c.name = 'id';
    if v_key is null
        or not ('id' = any (v_key))
        or pg_catalog.cardinality(v_key) > (case when v_owner is null then 1 else 2 end)
        or (pg_catalog.cardinality(v_key) = 2 and not v_owner = any (v_key))
        or not (v_id_type = 'text' or v_id_type like 'character varying%')
    then
        return pg_catalog.jsonb_build_object('served', false,
            'reason', pg_catalog.format('the primary key (%s) is not a text id%s',
                coalesce(pg_catalog.array_to_string(v_key, ', '), 'none'),
                case when v_owner is null then '' else pg_catalog.format(', alone or with %s', v_owner) end));
    end if;
    for v_column in select * from ferry.watermelon_columns(p_table) loop
        if v_column.name = 'id' then
            continue;
        end if;
        if ferry.watermelon_name_problem(v_column.name) is not null then
            return pg_catalog.jsonb_build_object('served', false,
                'reason', pg_catalog.format('column %s is %s', v_column.name,
                    ferry.watermelon_name_problem(v_column.name)));
        end if;
        if v_column.kind is null then
            return pg_catalog.jsonb_build_object('served', false,
                'reason', pg_catalog.format('column %s is %s, which has no WatermelonDB type', v_column.name,
                    v_column.sql_type));
        end if;
        v_columns := v_columns || pg_catalog.jsonb_build_object(
            'name', v_column.name, 'type', v_column.type, 'isOptional', v_column.optional);
    end loop;
    return pg_catalog.jsonb_build_object('served', true, 'columns', v_columns);
end
$$;

comment on function ferry.watermelon_schema(regclass) is
    'Whether /v1/watermelon/sync serves a registered table: {"served": true, "columns": [{"name", "type", "isOptional"}]} or {"served": false, "reason"}; GET /v1/schema''s "watermelon".';

-- MARK: - The pull reader, generated

-- ferry.watermelon_read(since, full tables): every served table the caller may read, in
-- name order, as the "changes" object's text, and the snapshot it was read in. STABLE,
-- so its queries all run in the snapshot of the statement that calls it, which
-- pg_current_snapshot() names (as ferry.pull, pull.sql). Written out as static SQL for
-- the served tables (PostgreSQL keeps its plans): built by this function, called by
-- ferry.register_table and ferry.rebuild_generated_code (registry.sql), and at the end
-- of this file.
--
-- Per table: since null (a first sync): the live rows, all in "updated". Otherwise the
-- rows whose _stamp is not visible in since: live ones in "updated", tombstones' ids in
-- "deleted"; and for a table named in full (a migration sync), every live row plus the
-- tombstones since. "created" is always empty (Ferry keeps no creation stamp; the app
-- passes sendCreatedAsUpdated: true). Records carry the client-visible columns:
-- timestamptz as epoch milliseconds (floor, so a pushed-back value keeps its stored
-- microseconds; infinity as null), json and jsonb as their text. A row whose id is not
-- WatermelonDB-safe (ferry.watermelon_id_pattern) is left out, with a WARNING in the
-- server log. Like the pull readers, each table's block first checks that the table
-- still has the name and primary key it was built for, else raises 55000 (register it
-- again).
create or replace function ferry.install_watermelon() returns void
language plpgsql set search_path = ''
as $install$
declare
    v_blocks text;
    v_table record;
    v_pairs text[];
    v_record text;
    v_column record;
    v_pattern text := ferry.watermelon_id_pattern();
begin
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('ferry.install_watermelon'));
    v_blocks := '';
    for v_table in
        select c.relname, s.table_name as rel,
            (select i.indkey::text from pg_catalog.pg_index i where i.indrelid = c.oid and i.indisprimary) as indkey
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        where (ferry.watermelon_schema(s.table_name) ->> 'served')::boolean
        order by c.relname
    loop
        v_pairs := '{}';
        for v_column in select * from ferry.watermelon_columns(v_table.rel) loop
            v_pairs := v_pairs || pg_catalog.format('%L, %s', v_column.name, case v_column.kind
                when 'timestamp' then pg_catalog.format(
                    'case when pg_catalog.isfinite(t.%1$I) then pg_catalog.floor(pg_catalog.extract(''epoch'', t.%1$I) * 1000)::bigint end',
                    v_column.name)
                when 'json' then pg_catalog.format('t.%I::text', v_column.name)
                else pg_catalog.format('t.%I', v_column.name) end);
        end loop;
        -- json_build_object takes at most 100 arguments: a wider record is built in jsonb pieces.
        if pg_catalog.cardinality(v_pairs) <= 50 then
            v_record := 'pg_catalog.json_build_object(' || pg_catalog.array_to_string(v_pairs, ', ') || ')';
        else
            select '(' || pg_catalog.string_agg('pg_catalog.jsonb_build_object(' || p.pairs || ')', ' || ') || ')::json'
                into v_record
                from (
                    select pg_catalog.string_agg(x.pair, ', ' order by x.n) as pairs
                    from pg_catalog.unnest(v_pairs) with ordinality x(pair, n)
                    group by (x.n - 1) / 50
                ) p;
        end if;
        v_blocks := v_blocks || pg_catalog.format(
            $block$
            v_table := pg_catalog.to_regclass(%1$L);
            if v_table is null or not exists (
                select from pg_catalog.pg_index i
                where i.indrelid = v_table and i.indisprimary and i.indkey::text = %4$L
            ) then
                raise exception 'watermelon pull: synced table %% was renamed or its primary key changed since it was registered',
                    %1$L
                    using errcode = '55000', hint = 'call ferry.register_table on it again';
            end if;
            if pg_catalog.has_table_privilege(v_table, 'select') then
                if p_since is null then
                    select pg_catalog.json_agg(%2$s) filter (where t.id ~ %5$L), null::json,
                            pg_catalog.count(*) filter (where t.id !~ %5$L)
                        into v_updated, v_deleted, v_unsafe
                        from %1$s t
                        where not t._deleted;
                elsif %3$L = any (p_full) then
                    select pg_catalog.json_agg(%2$s) filter (where not t._deleted and t.id ~ %5$L),
                            pg_catalog.json_agg(t.id) filter (where t._deleted and t.id ~ %5$L),
                            pg_catalog.count(*) filter (where t.id !~ %5$L)
                        into v_updated, v_deleted, v_unsafe
                        from %1$s t
                        where not t._deleted
                            or (t._stamp >= v_from and not pg_catalog.pg_visible_in_snapshot(t._stamp, p_since));
                else
                    select pg_catalog.json_agg(%2$s) filter (where not t._deleted and t.id ~ %5$L),
                            pg_catalog.json_agg(t.id) filter (where t._deleted and t.id ~ %5$L),
                            pg_catalog.count(*) filter (where t.id !~ %5$L)
                        into v_updated, v_deleted, v_unsafe
                        from %1$s t
                        where t._stamp >= v_from and not pg_catalog.pg_visible_in_snapshot(t._stamp, p_since);
                end if;
                changes := changes || v_separator || %6$L || coalesce(v_updated::text, '[]')
                    || ',"deleted":' || coalesce(v_deleted::text, '[]') || '}';
                v_separator := ',';
                if v_unsafe > 0 then
                    raise warning 'watermelon pull: %% rows of %% left out: their ids are not WatermelonDB ids (%%)',
                        v_unsafe, %3$L, %5$L;
                end if;
            end if;$block$,
            v_table.rel::text, v_record, v_table.relname, v_table.indkey, v_pattern,
            pg_catalog.to_json(v_table.relname::text)::text || ':{"created":[],"updated":');
    end loop;
    execute pg_catalog.format(
        $function$
        create or replace function ferry.watermelon_read(
            p_since pg_snapshot, p_full text[], out changes text, out snapshot pg_snapshot)
        language plpgsql stable
        as %L
        $function$,
        pg_catalog.format(
            $body$
        -- Built by ferry.install_watermelon from ferry.synced_tables; ferry.register_table
        -- rebuilds it. Columns are always named through an alias.
        #variable_conflict use_variable
        declare
            v_from xid8 := coalesce(pg_catalog.pg_snapshot_xmin(p_since), '0'::xid8);
            v_updated json;
            v_deleted json;
            v_unsafe bigint;
            v_separator text := '';
            v_table regclass;
        begin
            -- The purge horizon (pull.sql): a tombstone since has not seen may be gone.
            if exists (
                select from ferry.purge_horizon h
                where pg_catalog.pg_snapshot_xmin(p_since) <= h.purged_through
                    and not pg_catalog.pg_visible_in_snapshot(h.purge_xid, p_since)
            ) then
                raise exception 'watermelon pull: last_pulled_at is older than the tombstone purge horizon'
                    using errcode = 'FR409';
            end if;
            changes := '{';%s
            changes := changes || '}';
            snapshot := pg_catalog.pg_current_snapshot();
        end
        $body$, v_blocks));
    revoke all on function ferry.watermelon_read(pg_snapshot, text[]) from public;
    grant execute on function ferry.watermelon_read(pg_snapshot, text[]) to ferry_client;
end
$install$;

comment on function ferry.install_watermelon() is
    'Builds ferry.watermelon_read, the WatermelonDB pull reader: static SQL for every served table. Called by ferry.register_table and ferry.rebuild_generated_code.';

-- MARK: - Timestamps

-- How many timestamps a device keeps besides the one it presented
-- (ferry.issue_watermelon_cursor).
create or replace function ferry.watermelon_cursors_per_device() returns integer
language sql immutable parallel safe
as $$ select 8 $$;

-- The snapshot timestamp p_n names for the caller's device, or null.
create or replace function ferry.watermelon_cursor(p_n bigint) returns pg_snapshot
language plpgsql stable security definer set search_path = ''
as $$
declare
    v_snapshot pg_snapshot;
begin
    select c.snapshot into v_snapshot from ferry.watermelon_cursors c
        where c.user_id = ferry.uid() and c.device_id = ferry.device_id() and c.n = p_n;
    return v_snapshot;
end
$$;

-- A new timestamp naming p_snapshot for the caller's device. The device presented
-- p_presented (null on a first sync), so it stores that one and can never present an
-- older one again: those go. Of the others, the device keeps the presented one and
-- the newest ferry.watermelon_cursors_per_device(): pulls that present the same
-- timestamp again and again (or first syncs, one after another) would otherwise add
-- a row each until the purge. The device holds the presented one (if this answer is
-- lost) or one issued since (this answer, or a concurrent pull's that it applied:
-- WatermelonDB applies one of concurrent syncs, so only as many of those at once
-- could push it out).
create or replace function ferry.issue_watermelon_cursor(p_snapshot pg_snapshot, p_presented bigint) returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
    v_user uuid := ferry.uid();
    v_device text := ferry.device_id();
    v_n bigint := pg_catalog.nextval('ferry.watermelon_cursor_seq');
begin
    if v_user is null or v_device is null then
        raise exception 'no request identity: ferry.user_id and ferry.device_id must be set' using errcode = '28000';
    end if;
    insert into ferry.watermelon_cursors (user_id, device_id, n, snapshot) values (v_user, v_device, v_n, p_snapshot);
    delete from ferry.watermelon_cursors c
        where c.user_id = v_user and c.device_id = v_device and c.n is distinct from p_presented
            and (c.n < p_presented or c.n < (
                select o.n from ferry.watermelon_cursors o
                where o.user_id = v_user and o.device_id = v_device
                order by o.n desc offset ferry.watermelon_cursors_per_device() - 1 limit 1));
    return v_n;
end
$$;

-- The tombstone purge's share (ferry.purge_tombstones, retention.sql): deletes at most
-- p_batch timestamps issued more than p_older_than ago, except each device's newest
-- (which a device that stopped syncing still holds: its next pull is then checked
-- against the purge horizon, as a /v1/pull cursor is). Returns how many.
create or replace function ferry.trim_watermelon_cursors(p_older_than interval, p_batch integer) returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
    v_deleted bigint;
begin
    delete from ferry.watermelon_cursors c where (c.user_id, c.device_id, c.n) in (
        select o.user_id, o.device_id, o.n from ferry.watermelon_cursors o
        where o.issued_at < pg_catalog.now() - p_older_than
            and exists (
                select from ferry.watermelon_cursors newer
                where newer.user_id = o.user_id and newer.device_id = o.device_id and newer.n > o.n)
        limit p_batch
        for update skip locked);
    get diagnostics v_deleted = row_count;
    return v_deleted;
end
$$;

-- MARK: - Pull

-- The tables a migration sync wants whole: {"from": int, "tables": [name, ...],
-- "columns": [{"table": name, "columns": [name, ...]}, ...]} (WatermelonDB's
-- MigrationSyncChanges) gives the names in tables and each columns entry's table;
-- missing, '' or null: none. Names the server does not serve are ignored (the app's
-- local-only tables are named too). Another shape raises 22023.
create or replace function ferry.watermelon_migration_tables(p_migration text) returns text[]
language plpgsql immutable
as $$
declare
    v_migration jsonb;
begin
    if p_migration is null or p_migration = '' then
        return '{}';
    end if;
    begin
        v_migration := p_migration::jsonb;
    exception when data_exception then
        raise exception 'migration is not JSON' using errcode = '22023';
    end;
    if pg_catalog.jsonb_typeof(v_migration) = 'null' then
        return '{}';
    end if;
    if pg_catalog.jsonb_typeof(v_migration) is distinct from 'object'
        or pg_catalog.jsonb_typeof(v_migration -> 'from') is distinct from 'number'
        or pg_catalog.jsonb_typeof(v_migration -> 'tables') is distinct from 'array'
        or pg_catalog.jsonb_typeof(v_migration -> 'columns') is distinct from 'array'
        or exists (
            select from pg_catalog.jsonb_array_elements(v_migration -> 'tables') t
            where pg_catalog.jsonb_typeof(t) <> 'string')
        or exists (
            select from pg_catalog.jsonb_array_elements(v_migration -> 'columns') c
            where pg_catalog.jsonb_typeof(c) <> 'object'
                or pg_catalog.jsonb_typeof(c -> 'table') is distinct from 'string'
                or pg_catalog.jsonb_typeof(c -> 'columns') is distinct from 'array'
                or exists (
                    select from pg_catalog.jsonb_array_elements(c -> 'columns') n
                    where pg_catalog.jsonb_typeof(n) <> 'string'))
    then
        raise exception 'migration must be null or {"from": number, "tables": [name, ...], "columns": [{"table": name, "columns": [name, ...]}, ...]}'
            using errcode = '22023';
    end if;
    return array(
        select t #>> '{}' from pg_catalog.jsonb_array_elements(v_migration -> 'tables') t
        union
        select c ->> 'table' from pg_catalog.jsonb_array_elements(v_migration -> 'columns') c);
end
$$;

-- GET /v1/watermelon/sync as one statement, run as ferry_client: p_last_pulled_at null
-- for a first sync. Returns the answer's text, {"changes": {...}, "timestamp": n}, which
-- the gateway forwards as it is (the text turbo login wants: no other top-level keys).
-- VOLATILE: the cursor's lookup, the read (one snapshot, in ferry.watermelon_read) and
-- the new timestamp's insert are three statements in the request's one transaction.
create or replace function ferry.watermelon_pull(p_last_pulled_at bigint, p_migration text) returns text
language plpgsql
as $$
declare
    v_since pg_snapshot;
    v_full text[] := ferry.watermelon_migration_tables(p_migration);
    v_changes text;
    v_snapshot pg_snapshot;
begin
    if p_last_pulled_at is not null then
        if p_last_pulled_at < 1 then
            raise exception 'last_pulled_at must be a positive integer, or null for a first sync' using errcode = '22023';
        end if;
        v_since := ferry.watermelon_cursor(p_last_pulled_at);
        if v_since is null then
            raise exception 'watermelon pull: last_pulled_at % names no snapshot kept for this device', p_last_pulled_at
                using errcode = 'FR409';
        end if;
    end if;
    select r.changes, r.snapshot into v_changes, v_snapshot from ferry.watermelon_read(v_since, v_full) r;
    return '{"changes":' || v_changes || ',"timestamp":'
        || ferry.issue_watermelon_cursor(v_snapshot, p_last_pulled_at)::text || '}';
end
$$;

comment on function ferry.watermelon_pull(bigint, text) is
    'GET /v1/watermelon/sync as one statement, run as ferry_client: {"changes", "timestamp"} as text; FR409 for a timestamp this device does not hold or one older than the purge horizon.';

-- MARK: - Push

-- How many statements of one table's records may fail before a push is refused whole
-- (ferry.watermelon_write): each failure is a subtransaction, and finding the records
-- that fail alone among thousands costs about 1.25 statements each, so a push whose
-- records all fail would otherwise run into the statement timeout, a retryable 503
-- that the app sends again forever. Refused whole it is a final 400 naming the table
-- and a refused record; a push with a few bad records still has them rejected alone.
create or replace function ferry.watermelon_max_failed_attempts() returns integer
language sql immutable parallel safe
as $$ select 4000 $$;

-- One table's records of a push, written: p_records are the created and updated
-- records together (objects with an id), p_deleted the ids to delete, p_since the
-- snapshot of last_pulled_at. Returns the ids changed on the server after it
-- (conflicts, lww only), the records refused ([{"id", "code", "message"}]: forbidden,
-- read_only, immutable, invalid_row, constraint_violation; the rest applies), and
-- whether a row changed.
--
-- Created and updated are one operation (a created id that exists is updated, an
-- updated one that does not is created): for lww an INSERT ... ON CONFLICT DO UPDATE of
-- the columns each record gives, WHERE the stored row's _stamp is visible in p_since (or
-- is this transaction's), so a row changed after the pull is not written and not
-- returned, which makes it a conflict; a tombstone the pull saw is revived. insert_only
-- inserts, and refuses a different record under an existing id (or a tombstone's);
-- set inserts or revives. A deleted id of a live row is tombstoned (lww: unless changed
-- after the pull, a conflict; insert_only: refused); a missing one or a tombstone is
-- ignored. A record whose owner column names another user is refused; readonly and
-- shared tables refuse everything.
--
-- Records are grouped by the columns they give (a json or jsonb column given '', what
-- WatermelonDB stores for an unset @json field, counts as not given: its default on
-- insert, unchanged on update), one statement per group. A statement that fails on a
-- record's content (a data exception, a constraint, a row Row Level Security refuses,
-- an operator trigger's RAISE) is tried again on each half of its records, down to the
-- failing records, which are refused: as many subtransactions as it takes, not one per
-- record.
create or replace function ferry.watermelon_write(
    p_table regclass, p_strategy text, p_owner name, p_since pg_snapshot, p_records jsonb, p_deleted text[],
    out conflicts text[], out rejected jsonb, out wrote boolean)
language plpgsql
as $$
declare
    v_user uuid := ferry.uid();
    v_name name := (select c.relname from pg_catalog.pg_class c where c.oid = p_table);
    v_records jsonb;
    -- The primary key as it is: (id), (owner, id), or (id) with an owner column (a
    -- global_key table, whose ids other users' rows may hold).
    v_key text := (
        select pg_catalog.string_agg(pg_catalog.format('%I', a.attname), ', ' order by k.position)
        from pg_catalog.pg_index i
        cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as k(attnum, position)
        join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
        where i.indrelid = p_table and i.indisprimary);
    v_owner_match text := case when p_owner is null then '' else pg_catalog.format('t.%I = $3 and ', p_owner) end;
    v_group record;
    v_columns text;
    v_values text;
    v_sets text;
    v_differs text;
    v_sql text;
    v_written text[] := '{}';
    v_group_written text[];
    v_refused text[];
    v_missing text[];
    v_writable jsonb;
    v_ids text[];
    v_low integer[];
    v_high integer[];
    v_lo integer;
    v_hi integer;
    v_part jsonb;
    v_elements jsonb[];
    v_failed_ids text[];
    v_failed_codes text[];
    v_failed_messages text[];
    v_failed_attempts integer := 0;
    v_count bigint;
begin
    conflicts := '{}';
    rejected := '[]';
    wrote := false;
    if p_strategy in ('readonly', 'shared') then
        select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', x.id, 'code', 'read_only',
                'message', pg_catalog.format('%s is read-only for clients', v_name))), '[]')
            into rejected
            from (select r ->> 'id' as id from pg_catalog.jsonb_array_elements(p_records) r
                  union all select d from pg_catalog.unnest(p_deleted) d) x;
        return;
    end if;

    -- The owner is the caller: absent, null or '' means it; another user is refused.
    if p_owner is not null then
        select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', r ->> 'id', 'code', 'forbidden',
                    'message', pg_catalog.format('%s is the caller''s; this record names another user', p_owner)))
                    filter (where not x.own), '[]'),
                coalesce(pg_catalog.jsonb_agg(r) filter (where x.own), '[]')
            into rejected, v_records
            from pg_catalog.jsonb_array_elements(p_records) r
            cross join lateral (
                select pg_catalog.lower(coalesce(r ->> p_owner, '')) in ('', v_user::text) as own) x;
    else
        v_records := p_records;
    end if;
    v_refused := array(select x ->> 'id' from pg_catalog.jsonb_array_elements(rejected) x);
    -- The columns a record may give, read once.
    select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('name', c.name, 'kind', c.kind)), '[]')
        into v_writable
        from ferry.watermelon_columns(p_table) c
        where c.writable and c.name <> 'id' and c.name is distinct from p_owner;

    for v_group in
        select g.given, pg_catalog.jsonb_agg(g.r) as records, pg_catalog.count(*)::integer as n
        from (
            select r, array(
                select c ->> 'name' from pg_catalog.jsonb_array_elements(v_writable) c
                where r ? (c ->> 'name') and not (c ->> 'kind' = 'json' and r ->> (c ->> 'name') = '')
                order by c ->> 'name') as given
            from pg_catalog.jsonb_array_elements(v_records) r
        ) g
        group by g.given
    loop
        select pg_catalog.string_agg(pg_catalog.format(', %I', c.name), '' order by c.name),
            pg_catalog.string_agg(', ' || case c.kind
                    when 'boolean' then pg_catalog.format(
                        $q$case e.r -> %L when 'true' then true when 'false' then false when '1' then true when '0' then false end$q$,
                        c.name)
                    when 'timestamp' then pg_catalog.format(
                        'pg_catalog.to_timestamp((e.r ->> %L)::double precision / 1000)', c.name)
                    else pg_catalog.format('(e.r ->> %L)::%I.%I', c.name, tn.nspname, ty.typname) end,
                '' order by c.name),
            pg_catalog.string_agg(case c.kind
                    when 'timestamp' then pg_catalog.format(
                        '%1$I = case when t.%1$I is not null and excluded.%1$I is not null'
                            ' and pg_catalog.floor(pg_catalog.extract(''epoch'', t.%1$I) * 1000)'
                            ' = pg_catalog.floor(pg_catalog.extract(''epoch'', excluded.%1$I) * 1000)'
                            ' then t.%1$I else excluded.%1$I end, ', c.name)
                    else pg_catalog.format('%1$I = excluded.%1$I, ', c.name) end, '' order by c.name),
            pg_catalog.string_agg(pg_catalog.format(' or %s', case c.kind
                    when 'timestamp' then pg_catalog.format(
                        'pg_catalog.floor(pg_catalog.extract(''epoch'', t.%1$I) * 1000)'
                            ' is distinct from pg_catalog.floor((e.r ->> %2$L)::numeric)', c.name, c.name)
                    when 'json' then pg_catalog.format('t.%I::jsonb is distinct from (e.r ->> %L)::jsonb', c.name, c.name)
                    when 'boolean' then pg_catalog.format(
                        $q$t.%I is distinct from (case e.r -> %L when 'true' then true when 'false' then false when '1' then true when '0' then false end)$q$,
                        c.name, c.name)
                    else pg_catalog.format('t.%I is distinct from (e.r ->> %L)::%I.%I', c.name, c.name,
                        tn.nspname, ty.typname) end),
                '' order by c.name)
            into v_columns, v_values, v_sets, v_differs
            -- Casts name the type by its catalog name, without its modifier: an explicit
            -- cast to varchar(n) or char(n) cuts a longer value silently (and "character"
            -- alone is char(1)), where storing the text in the column refuses it (value
            -- too long: the record is rejected).
            from ferry.watermelon_columns(p_table) c
            join pg_catalog.pg_attribute a on a.attrelid = p_table and a.attname = c.name
            join pg_catalog.pg_type ty on ty.oid = a.atttypid
            join pg_catalog.pg_namespace tn on tn.oid = ty.typnamespace
            where c.name = any (v_group.given);
        v_sql := pg_catalog.format(
            'with w as (insert into %s as t (%sid%s) select %se.r ->> ''id''%s from pg_catalog.jsonb_array_elements($1) e(r)'
                ' on conflict (%s) do %s returning t.id) select pg_catalog.array_agg(w.id) from w',
            p_table, case when p_owner is null then '' else pg_catalog.format('%I, ', p_owner) end,
            coalesce(v_columns, ''), case when p_owner is null then '' else '$3, ' end, coalesce(v_values, ''),
            v_key, case p_strategy
                when 'lww' then 'update set ' || coalesce(v_sets, '') || '_deleted = false'
                    || ' where pg_catalog.pg_visible_in_snapshot(t._stamp, $2) or t._stamp = pg_catalog.pg_current_xact_id()'
                when 'set' then 'update set ' || coalesce(v_sets, '') || '_deleted = false where t._deleted'
                else 'nothing' end);

        -- The whole group, then halves of what fails, down to the records that fail alone.
        -- A part is a slice of the group's elements (not a scan of the group), and the
        -- failures are collected in arrays and turned into JSON once: a push whose every
        -- record fails costs about 1.25 statements per record, not the square of them.
        v_group_written := '{}';
        v_failed_ids := '{}';
        v_failed_codes := '{}';
        v_failed_messages := '{}';
        v_elements := null;
        v_low := array[1];
        v_high := array[v_group.n];
        while pg_catalog.cardinality(v_low) > 0 loop
            v_lo := v_low[pg_catalog.cardinality(v_low)];
            v_hi := v_high[pg_catalog.cardinality(v_high)];
            v_low := v_low[1:pg_catalog.cardinality(v_low) - 1];
            v_high := v_high[1:pg_catalog.cardinality(v_high) - 1];
            v_part := case when v_lo = 1 and v_hi = v_group.n then v_group.records
                else pg_catalog.to_jsonb(v_elements[v_lo:v_hi]) end;
            begin
                execute v_sql into v_ids using v_part, p_since, v_user;
                v_group_written := v_group_written || coalesce(v_ids, '{}');
            exception
                when data_exception or integrity_constraint_violation or insufficient_privilege or raise_exception
                    or program_limit_exceeded
                then
                    v_failed_attempts := v_failed_attempts + 1;
                    if v_failed_attempts > ferry.watermelon_max_failed_attempts() then
                        raise exception '%: PostgreSQL refuses so many of its records (over % failed attempts to find them) that this push is refused whole; one refused: % (%)',
                            v_name, ferry.watermelon_max_failed_attempts(), pg_catalog.to_json(v_part -> 0 ->> 'id'),
                            sqlerrm
                            using errcode = '22023';
                    end if;
                    if v_elements is null then
                        v_elements := array(select pg_catalog.jsonb_array_elements(v_group.records));
                    end if;
                    if v_hi - v_lo >= 8 then
                        v_low := v_low || array[(v_lo + v_hi) / 2 + 1, v_lo];
                        v_high := v_high || array[v_hi, (v_lo + v_hi) / 2];
                    elsif v_lo < v_hi then
                        -- A few records: each alone, without the halves between.
                        v_low := v_low || array(select pg_catalog.generate_series(v_hi, v_lo, -1));
                        v_high := v_high || array(select pg_catalog.generate_series(v_hi, v_lo, -1));
                    else
                        v_failed_ids := v_failed_ids || (v_part -> 0 ->> 'id');
                        v_failed_codes := v_failed_codes || case
                            when sqlstate like '23%' then 'constraint_violation'
                            when sqlstate = '42501' then 'forbidden'
                            else 'invalid_row' end;
                        v_failed_messages := v_failed_messages || sqlerrm;
                    end if;
            end;
        end loop;
        if pg_catalog.cardinality(v_failed_ids) > 0 then
            v_refused := v_refused || v_failed_ids;
            rejected := rejected || (
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', f.id, 'code', f.code, 'message', f.message)
                    order by f.i)
                from rows from (pg_catalog.unnest(v_failed_ids), pg_catalog.unnest(v_failed_codes),
                    pg_catalog.unnest(v_failed_messages)) with ordinality f(id, code, message, i));
        end if;

        v_written := v_written || v_group_written;
        if pg_catalog.cardinality(v_group_written) >= v_group.n then
            continue;
        end if;
        -- Not written and not refused: a row already stands under the key (hashed, not
        -- compared pairwise: a group may hold thousands of records).
        v_missing := array(
            select r ->> 'id' from pg_catalog.jsonb_array_elements(v_group.records) r
            except select pg_catalog.unnest(v_group_written || v_refused));
        -- A row the caller cannot see: another user's, under a global key. Refused (the
        -- insert did nothing, or the update's condition was false before Row Level
        -- Security could refuse it), never a conflict the client cannot resolve.
        execute pg_catalog.format(
            'select pg_catalog.array_agg(m.id) from pg_catalog.unnest($1) m(id)'
                ' where not exists (select from %s t where %st.id = m.id)',
            p_table, v_owner_match)
            into v_ids using v_missing, p_since, v_user;
        if v_ids is not null then
            rejected := rejected || (
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', i, 'code', 'forbidden',
                    'message', pg_catalog.format('another user''s record of %s has this id', v_name)))
                from pg_catalog.unnest(v_ids) i);
            v_refused := v_refused || v_ids;
            v_missing := array(select pg_catalog.unnest(v_missing) except select pg_catalog.unnest(v_ids));
        end if;
        if p_strategy = 'insert_only' then
            -- Not inserted: an existing record, refused unless it is the same one.
            execute pg_catalog.format(
                'select pg_catalog.array_agg(t.id) from %s t join pg_catalog.jsonb_array_elements($1) e(r)'
                    ' on %st.id = e.r ->> ''id'' where t.id = any ($2) and (t._deleted%s)',
                p_table, v_owner_match, coalesce(v_differs, ''))
                into v_ids using v_group.records, v_missing, v_user;
            rejected := rejected || coalesce((
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', i, 'code', 'immutable',
                    'message', pg_catalog.format('a different record of %s exists under this id, or was deleted', v_name)))
                from pg_catalog.unnest(v_ids) i), '[]');
        elsif p_strategy = 'lww' then
            conflicts := conflicts || v_missing;
        end if;
    end loop;
    wrote := pg_catalog.cardinality(v_written) > 0;

    if pg_catalog.cardinality(p_deleted) > 0 then
        if p_strategy = 'insert_only' then
            execute pg_catalog.format(
                'select pg_catalog.array_agg(t.id) from %s t where %st.id = any ($1) and not t._deleted',
                p_table, v_owner_match)
                into v_ids using p_deleted, p_since, v_user;
            rejected := rejected || coalesce((
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', i, 'code', 'immutable',
                    'message', pg_catalog.format('records of %s are never deleted', v_name)))
                from pg_catalog.unnest(v_ids) i), '[]');
        else
            execute pg_catalog.format(
                'update %s t set _deleted = true where %st.id = any ($1) and not t._deleted%s',
                p_table, v_owner_match, case when p_strategy = 'lww' then
                    ' and (pg_catalog.pg_visible_in_snapshot(t._stamp, $2) or t._stamp = pg_catalog.pg_current_xact_id())'
                    else '' end)
                using p_deleted, p_since, v_user;
            get diagnostics v_count = row_count;
            wrote := wrote or v_count > 0;
            if p_strategy = 'lww' then
                -- Still live: changed after the pull, so the delete did not touch it.
                execute pg_catalog.format(
                    'select pg_catalog.array_agg(t.id) from %s t where %st.id = any ($1) and not t._deleted',
                    p_table, v_owner_match)
                    into v_ids using p_deleted, p_since, v_user;
                conflicts := conflicts || coalesce(v_ids, '{}');
            end if;
        end if;
    end if;
end
$$;

comment on function ferry.watermelon_write(regclass, text, name, pg_snapshot, jsonb, text[]) is
    'One table''s share of a WatermelonDB push, run as ferry_client: {conflicts, rejected, wrote}.';

-- POST /v1/watermelon/sync as one statement, run as ferry_client: the body as text (the
-- changes object WatermelonDB's pushChanges gets), p_last_pulled_at the timestamp of
-- the pull before it. Returns the answer's text: {} or {"experimentalRejectedIds":
-- {"<table>": [id, ...]}, "rejections": [{"table", "id", "code", "message"}, ...]}.
--
-- Everything is checked before anything is written; a refusal raises (the request's one
-- transaction applies nothing): the shape (22023: an object of tables, each with arrays
-- created, updated (objects with an id) and deleted (ids), ids WatermelonDB-safe and
-- each once per table), the number of records (FR413, over p_max_records), the tables
-- (22023: a served table; an unknown one with three empty arrays is ignored, since
-- WatermelonDB sends every local table), each given value's JSON type against its
-- column (22023 'tasks.position: expected a number, ...'), the timestamp (FR409). Other
-- fields of a record (_status, _changed, updated_at, columns the table lacks) are
-- ignored. Then the tables are written in name order (ferry.watermelon_write); any
-- conflict raises FRCNF, so nothing is applied. A \u0000 in a string (text cannot hold
-- it) is dropped: Backend.md asks the server to sanitize content rather than fail.
--
-- Cues: as ferry.push, one per table written, with the device as origin, while
-- ferry.skip_cues keeps the table's own triggers quiet.
create or replace function ferry.watermelon_push(p_last_pulled_at bigint, p_body text, p_max_records integer)
returns text
language plpgsql
as $$
declare
    v_user uuid := ferry.uid();
    v_changes jsonb;
    v_problem record;
    v_count bigint;
    v_since pg_snapshot;
    v_table record;
    v_result record;
    v_pattern text := ferry.watermelon_id_pattern();
    v_conflicts jsonb := '{}';
    v_rejections jsonb := '[]';
    v_rejected_ids jsonb := '{}';
    v_cued text[] := '{}';
    v_skip_cues text := pg_catalog.current_setting('ferry.skip_cues', true);
    v_first text;
begin
    if v_user is null or ferry.device_id() is null then
        raise exception 'no request identity: ferry.user_id and ferry.device_id must be set' using errcode = '28000';
    end if;
    begin
        v_changes := p_body::jsonb;
    exception when untranslatable_character then
        -- Every "\\" becomes "\u005c" (the same string), so what still reads "\u0000" is one.
        v_changes := pg_catalog.replace(pg_catalog.replace(p_body, '\\', '\u005c'), '\u0000', '')::jsonb;
    end;

    if pg_catalog.jsonb_typeof(v_changes) is distinct from 'object' then
        raise exception 'the body must be a changes object: {"<table>": {"created": [...], "updated": [...], "deleted": [...]}}'
            using errcode = '22023';
    end if;
    select e.key into v_first from pg_catalog.jsonb_each(v_changes) e
        where pg_catalog.jsonb_typeof(e.value) <> 'object'
            or pg_catalog.jsonb_typeof(e.value -> 'created') is distinct from 'array'
            or pg_catalog.jsonb_typeof(e.value -> 'updated') is distinct from 'array'
            or pg_catalog.jsonb_typeof(e.value -> 'deleted') is distinct from 'array'
        order by e.key limit 1;
    if found then
        raise exception 'table %: its changes must be an object with the arrays created, updated and deleted',
            pg_catalog.to_json(v_first) using errcode = '22023';
    end if;
    select coalesce(pg_catalog.sum(pg_catalog.jsonb_array_length(e.value -> 'created')
            + pg_catalog.jsonb_array_length(e.value -> 'updated') + pg_catalog.jsonb_array_length(e.value -> 'deleted')), 0)
        into v_count from pg_catalog.jsonb_each(v_changes) e;
    if v_count > p_max_records then
        raise exception 'a push carries at most % records; this one has %', p_max_records, v_count using errcode = 'FR413';
    end if;

    -- Every record and id, table by table: the shape first, then whether it is served.
    select e.key, r.value as record into v_problem
        from pg_catalog.jsonb_each(v_changes) e,
            pg_catalog.jsonb_array_elements((e.value -> 'created') || (e.value -> 'updated')) r
        where pg_catalog.jsonb_typeof(r.value) <> 'object' or pg_catalog.jsonb_typeof(r.value -> 'id') is distinct from 'string'
            or (r.value ->> 'id') !~ v_pattern
        order by e.key limit 1;
    if found then
        raise exception 'table %: %', pg_catalog.to_json(v_problem.key), case
            when pg_catalog.jsonb_typeof(v_problem.record) <> 'object' then 'created and updated hold records (objects)'
            when pg_catalog.jsonb_typeof(v_problem.record -> 'id') is distinct from 'string' then 'a record''s id must be a string'
            else pg_catalog.format('id %s is not a WatermelonDB id (1 to 128 letters, digits, _ - .)',
                v_problem.record -> 'id') end
            using errcode = '22023';
    end if;
    select e.key, d.value as record into v_problem
        from pg_catalog.jsonb_each(v_changes) e, pg_catalog.jsonb_array_elements(e.value -> 'deleted') d
        where pg_catalog.jsonb_typeof(d.value) <> 'string' or (d.value #>> '{}') !~ v_pattern
        order by e.key limit 1;
    if found then
        raise exception 'table %: deleted holds ids, and % is not a WatermelonDB id (1 to 128 letters, digits, _ - .)',
            pg_catalog.to_json(v_problem.key), v_problem.record using errcode = '22023';
    end if;
    select x.key, x.id into v_problem
        from (
            select e.key, r.value ->> 'id' as id
            from pg_catalog.jsonb_each(v_changes) e,
                pg_catalog.jsonb_array_elements((e.value -> 'created') || (e.value -> 'updated')) r
            union all
            select e.key, d.value #>> '{}'
            from pg_catalog.jsonb_each(v_changes) e, pg_catalog.jsonb_array_elements(e.value -> 'deleted') d
        ) x
        group by x.key, x.id having pg_catalog.count(*) > 1
        order by x.key, x.id limit 1;
    if found then
        raise exception 'table %: id % appears more than once in this push', pg_catalog.to_json(v_problem.key),
            pg_catalog.to_json(v_problem.id) using errcode = '22023';
    end if;
    select e.key into v_first
        from pg_catalog.jsonb_each(v_changes) e
        left join (
            select c.relname, s.table_name from ferry.synced_tables s join pg_catalog.pg_class c on c.oid = s.table_name
        ) t on t.relname = e.key
        where (pg_catalog.jsonb_array_length(e.value -> 'created') + pg_catalog.jsonb_array_length(e.value -> 'updated')
                + pg_catalog.jsonb_array_length(e.value -> 'deleted')) > 0
            and (t.table_name is null or not (ferry.watermelon_schema(t.table_name) ->> 'served')::boolean)
        order by e.key limit 1;
    if found then
        raise exception 'table % is not served at /v1/watermelon/sync (GET /v1/schema lists the tables that are)',
            pg_catalog.to_json(v_first) using errcode = '22023';
    end if;
    -- Each given value's JSON type against its column's WatermelonDB type (each table's
    -- columns read once).
    with named as (
        select e.key, e.value, s.table_name, s.owner_column
        from pg_catalog.jsonb_each(v_changes) e
        join pg_catalog.pg_class c on c.relname = e.key
        join ferry.synced_tables s on s.table_name = c.oid
    ), cols as materialized (
        select n.key, c.name, c.type
        from named n cross join lateral ferry.watermelon_columns(n.table_name) c
        where (c.writable or c.name = n.owner_column) and c.name <> 'id'
    )
    select n.key, r.value ->> 'id' as id, c.name, c.type, pg_catalog.jsonb_typeof(r.value -> c.name) as given
        into v_problem
        from named n
        cross join pg_catalog.jsonb_array_elements((n.value -> 'created') || (n.value -> 'updated')) r
        join cols c on c.key = n.key and r.value ? c.name
        where case pg_catalog.jsonb_typeof(r.value -> c.name)
            when 'null' then false
            when 'string' then c.type <> 'string'
            when 'number' then c.type = 'string' or (c.type = 'boolean' and (r.value -> c.name) not in ('0', '1'))
            when 'boolean' then c.type <> 'boolean'
            else true end
        order by n.key, r.value ->> 'id', c.name limit 1;
    if found then
        raise exception '%.%: expected %, got a JSON % (record %)', v_problem.key, v_problem.name,
            case v_problem.type when 'string' then 'a string' when 'number' then 'a number'
                else 'true, false, 0 or 1' end,
            v_problem.given, pg_catalog.to_json(v_problem.id)
            using errcode = '22023';
    end if;

    if p_last_pulled_at is null or p_last_pulled_at < 1 then
        raise exception 'last_pulled_at must be the timestamp of the pull before this push' using errcode = '22023';
    end if;
    v_since := ferry.watermelon_cursor(p_last_pulled_at);
    if v_since is null then
        raise exception 'watermelon push: last_pulled_at % names no snapshot kept for this device', p_last_pulled_at
            using errcode = 'FR409';
    end if;

    for v_table in
        select c.relname as name, s.table_name as rel, s.strategy, s.owner_column,
            (e.value -> 'created') || (e.value -> 'updated') as records,
            array(select d #>> '{}' from pg_catalog.jsonb_array_elements(e.value -> 'deleted') d) as deleted
        from pg_catalog.jsonb_each(v_changes) e
        join pg_catalog.pg_class c on c.relname = e.key
        join ferry.synced_tables s on s.table_name = c.oid
        where (pg_catalog.jsonb_array_length(e.value -> 'created') + pg_catalog.jsonb_array_length(e.value -> 'updated')
                + pg_catalog.jsonb_array_length(e.value -> 'deleted')) > 0
        order by c.relname
    loop
        if v_skip_cues is distinct from 'on' then
            perform pg_catalog.set_config('ferry.skip_cues', v_table.name, true);
        end if;
        select * into v_result from ferry.watermelon_write(
            v_table.rel, v_table.strategy, v_table.owner_column, v_since, v_table.records, v_table.deleted);
        if pg_catalog.cardinality(v_result.conflicts) > 0 then
            v_conflicts := v_conflicts || pg_catalog.jsonb_build_object(v_table.name, v_result.conflicts);
        end if;
        if pg_catalog.jsonb_array_length(v_result.rejected) > 0 then
            v_rejected_ids := v_rejected_ids || pg_catalog.jsonb_build_object(v_table.name,
                (select pg_catalog.jsonb_agg(x -> 'id') from pg_catalog.jsonb_array_elements(v_result.rejected) x));
            v_rejections := v_rejections || (
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('table', v_table.name) || x)
                from pg_catalog.jsonb_array_elements(v_result.rejected) x);
        end if;
        if v_result.wrote then
            v_cued := v_cued || v_table.name::text;
        end if;
    end loop;
    perform pg_catalog.set_config('ferry.skip_cues', coalesce(v_skip_cues, ''), true);

    if v_conflicts <> '{}' then
        select e.key, e.value ->> 0 as id, (select pg_catalog.sum(pg_catalog.jsonb_array_length(x.value))
                from pg_catalog.jsonb_each(v_conflicts) x) as total
            into v_problem from pg_catalog.jsonb_each(v_conflicts) e order by e.key limit 1;
        raise exception '% % changed on the server after last_pulled_at (% %): pull, then push again',
            v_problem.total, case when v_problem.total = 1 then 'record' else 'records' end,
            v_problem.key, pg_catalog.to_json(v_problem.id)
            using errcode = 'FRCNF', detail = v_conflicts::text;
    end if;
    if v_skip_cues is distinct from 'on' then
        perform pg_catalog.pg_notify('ferry_cue', v_user::text || ' ' || ferry.cue_device() || ' ' || t)
            from pg_catalog.unnest(v_cued) t;
    end if;
    if v_rejections = '[]' then
        return '{}';
    end if;
    return pg_catalog.jsonb_build_object('experimentalRejectedIds', v_rejected_ids, 'rejections', v_rejections)::text;
end
$$;

comment on function ferry.watermelon_push(bigint, text, integer) is
    'POST /v1/watermelon/sync as one statement, run as ferry_client: {} or {"experimentalRejectedIds", "rejections"}; 22023, FR413, FR409, FRCNF (DETAIL: the conflicting ids by table) refuse the whole push.';

-- MARK: - Grants

revoke all on function
    ferry.watermelon_id_pattern(), ferry.watermelon_cursors_per_device(), ferry.watermelon_max_failed_attempts(),
    ferry.watermelon_name_problem(text), ferry.watermelon_columns(regclass),
    ferry.watermelon_schema(regclass), ferry.install_watermelon(), ferry.watermelon_cursor(bigint),
    ferry.issue_watermelon_cursor(pg_snapshot, bigint), ferry.trim_watermelon_cursors(interval, integer),
    ferry.watermelon_migration_tables(text), ferry.watermelon_pull(bigint, text),
    ferry.watermelon_write(regclass, text, name, pg_snapshot, jsonb, text[]), ferry.watermelon_push(bigint, text, integer)
from public;
-- Requests call these as ferry_client (GET /v1/schema calls watermelon_schema).
grant execute on function
    ferry.watermelon_id_pattern(), ferry.watermelon_max_failed_attempts(), ferry.watermelon_name_problem(text),
    ferry.watermelon_columns(regclass),
    ferry.watermelon_schema(regclass), ferry.watermelon_cursor(bigint), ferry.issue_watermelon_cursor(pg_snapshot, bigint),
    ferry.watermelon_migration_tables(text), ferry.watermelon_pull(bigint, text),
    ferry.watermelon_write(regclass, text, name, pg_snapshot, jsonb, text[]), ferry.watermelon_push(bigint, text, integer)
to ferry_client;

select ferry.install_watermelon();
