-- WatermelonDB's sync contract at GET and POST /v1/watermelon/sync (docs/WATERMELONDB.md),
-- in four files: this one (which registered tables it serves, and as what WatermelonDB
-- schema), watermelon_pull.sql (the pull: one snapshot, answered with a number naming
-- it, and its generated reader), watermelon_push.sql (the push: one transaction, refused
-- whole on a conflict) and watermelon_timestamps.sql (the numbers and their retention).
-- They are applied in that order; this file's functions come first because the pull
-- file builds its reader from them when it is applied.
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
    v_columns jsonb := '[]'::jsonb;
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
    select pg_catalog.array_agg(k.name order by k.ordinal) into v_key from ferry.primary_key(p_table) k;
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

-- MARK: - Grants

revoke all on function
    ferry.watermelon_id_pattern(), ferry.watermelon_name_problem(text), ferry.watermelon_columns(regclass),
    ferry.watermelon_schema(regclass)
from public;
-- Requests call these as ferry_client (GET /v1/schema calls watermelon_schema).
grant execute on function
    ferry.watermelon_id_pattern(), ferry.watermelon_name_problem(text), ferry.watermelon_columns(regclass),
    ferry.watermelon_schema(regclass)
to ferry_client;
