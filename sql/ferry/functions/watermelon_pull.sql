-- GET /v1/watermelon/sync (docs/WATERMELONDB.md; watermelon.sql names the other files):
-- every served table read in one snapshot through a cursor ferry.watermelon_open opens,
-- a reader generated as the /v1/pull readers are, and the timestamp that names the
-- snapshot (watermelon_timestamps.sql). Requests run as ferry_client.

-- MARK: - The pull reader, generated

-- ferry.watermelon_open(since, full tables, cursor): opens the cursor p_cursor over the
-- records of every served table the caller may read, and returns those tables' names
-- (in name order: the "changes" object's keys) and the snapshot the cursor reads in.
-- STABLE, so the cursor is opened in the snapshot of the statement that calls it, which
-- pg_current_snapshot() names (a cursor opened by a VOLATILE function would take a
-- snapshot of its own): the timestamp issued for that snapshot names exactly what the
-- cursor reads, however long the reading takes. The cursor lives until the transaction
-- ends; ferry.watermelon_pull reads it whole, and the gateway's streamed answer
-- (docs/ARCHITECTURE.md, "WatermelonDB sync") reads it in batches with FETCH while it
-- writes. Built by this function, called by ferry.register_table and
-- ferry.rebuild_generated_code (registry.sql), and at the end of this file.
--
-- The cursor's rows are (table name, deleted, record), each table's records together, in
-- the order of the names returned, its updated records before its deleted ids. Per table:
-- since null (a first sync): the live rows, all updated. Otherwise the rows whose _stamp
-- is not visible in since: live ones updated, tombstones' ids deleted; and for a table
-- named in full (a migration sync), every live row plus the tombstones since. "created"
-- is always empty (Ferry keeps no creation stamp; the app passes sendCreatedAsUpdated:
-- true). A record is the JSON object's text of the client-visible columns: timestamptz
-- as epoch milliseconds (floor, so a pushed-back value keeps its stored microseconds;
-- infinity as null), json and jsonb as their text; a deleted row's is its id as a JSON
-- string. A row whose id is not WatermelonDB-safe (ferry.watermelon_id_pattern) has a
-- null record: readers leave it out and say so. Each table's block first checks that
-- the table still has the name and primary key it was built for, else raises 55000
-- (register it again). The cursor's query is assembled from each readable table's
-- static text and run with EXECUTE (which tables the caller may read is known only
-- then); its plan is made once per answer, against the whole answer's reading.
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
    v_updated text;
    v_deleted text;
begin
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('ferry.install_watermelon'));
    v_blocks := '';
    for v_table in
        select c.relname, s.table_name as rel,
            -- As int2vector prints pg_index.indkey, which the reader compares.
            (select pg_catalog.string_agg(k.attnum::text, ' ' order by k.ordinal) from ferry.primary_key(c.oid) k)
                as indkey
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
        -- The two halves of a table's reading: $1 is since, $2 the lowest stamp it may miss.
        v_updated := pg_catalog.format(
            'select %1$L::text as name, false as deleted, case when t.id ~ %3$L then %2$s::text end as record'
                ' from %4$s t where not t._deleted',
            v_table.relname, v_record, v_pattern, v_table.rel::text);
        v_deleted := pg_catalog.format(
            'select %1$L::text, true, case when t.id ~ %2$L then pg_catalog.to_json(t.id)::text end from %3$s t'
                ' where t._deleted and t._stamp >= $2 and not pg_catalog.pg_visible_in_snapshot(t._stamp, $1)',
            v_table.relname, v_pattern, v_table.rel::text);
        v_blocks := v_blocks || pg_catalog.format(
            $block$
            v_table := pg_catalog.to_regclass(%1$L);
            if v_table is null or not exists (
                select from pg_catalog.pg_index i
                where i.indrelid = v_table and i.indisprimary and i.indkey::text = %3$L
            ) then
                raise exception 'watermelon pull: synced table %% was renamed or its primary key changed since it was registered',
                    %1$L
                    using errcode = '55000', hint = 'call ferry.register_table on it again';
            end if;
            if pg_catalog.has_table_privilege(v_table, 'select') then
                tables := tables || %2$L::text;
                v_query := v_query || case when v_query = '' then '' else ' union all ' end || case
                    when p_since is null then %4$L
                    when %2$L = any (p_full) then %4$L || ' union all ' || %5$L
                    else %6$L || ' union all ' || %5$L end;
            end if;$block$,
            v_table.rel::text, v_table.relname, v_table.indkey, v_updated, v_deleted,
            v_updated || ' and t._stamp >= $2 and not pg_catalog.pg_visible_in_snapshot(t._stamp, $1)');
    end loop;
    execute pg_catalog.format(
        $function$
        create or replace function ferry.watermelon_open(
            p_since pg_snapshot, p_full text[], p_cursor refcursor, out tables text[], out snapshot pg_snapshot)
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
            v_query text := '';
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
            tables := '{}';%s
            if v_query = '' then
                v_query := 'select null::text as name, null::boolean as deleted, null::text as record where false';
            end if;
            open p_cursor no scroll for execute v_query using p_since, v_from;
            snapshot := pg_catalog.pg_current_snapshot();
        end
        $body$, v_blocks));
    revoke all on function ferry.watermelon_open(pg_snapshot, text[], refcursor) from public;
    grant execute on function ferry.watermelon_open(pg_snapshot, text[], refcursor) to ferry_client;
end
$install$;

comment on function ferry.install_watermelon() is
    'Builds ferry.watermelon_open, the WatermelonDB pull reader: a cursor over every served table. Called by ferry.register_table and ferry.rebuild_generated_code.';

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
        return '{}'::text[];
    end if;
    begin
        v_migration := p_migration::jsonb;
    exception when data_exception then
        raise exception 'migration is not JSON' using errcode = '22023';
    end;
    if pg_catalog.jsonb_typeof(v_migration) = 'null' then
        return '{}'::text[];
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

-- GET /v1/watermelon/sync's opening, run as ferry_client inside a transaction that
-- stays open while the cursor p_cursor (ferry.watermelon_open) is read: p_last_pulled_at
-- null for a first sync. Returns the served tables the caller reads, in order, and the
-- answer's timestamp, issued for the cursor's snapshot. VOLATILE: the timestamp's lookup,
-- the opening (one snapshot, in ferry.watermelon_open) and the new timestamp's insert are
-- three statements. The gateway writes the answer as it reads the cursor
-- (WatermelonPullStream); ferry.watermelon_pull below is the same answer in one text.
create or replace function ferry.watermelon_pull_open(
    p_last_pulled_at bigint, p_migration text, p_cursor refcursor, out tables text[], out "timestamp" bigint)
language plpgsql
as $$
declare
    v_since pg_snapshot;
    v_full text[] := ferry.watermelon_migration_tables(p_migration);
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
    select r.tables, r.snapshot into tables, v_snapshot from ferry.watermelon_open(v_since, v_full, p_cursor) r;
    "timestamp" := ferry.issue_watermelon_cursor(v_snapshot, p_last_pulled_at);
end
$$;

comment on function ferry.watermelon_pull_open(bigint, text, refcursor) is
    'GET /v1/watermelon/sync''s opening, run as ferry_client in an open transaction: the cursor p_cursor over the answer''s records, the tables it names and the timestamp; FR409 for a timestamp this device does not hold or one older than the purge horizon.';

-- GET /v1/watermelon/sync as one statement, run as ferry_client: the answer's text,
-- {"changes": {...}, "timestamp": n}, as the gateway streams it (the text turbo login
-- wants: no other top-level keys), built here whole, for SQL callers and tests. Records
-- with ids WatermelonDB cannot take are left out with a WARNING.
create or replace function ferry.watermelon_pull(p_last_pulled_at bigint, p_migration text) returns text
language plpgsql
as $$
declare
    v_tables text[];
    v_timestamp bigint;
    v_cursor refcursor := 'ferry_watermelon_pull'::refcursor;
    v_name text;
    v_is_deleted boolean;
    v_record text;
    v_parts text[] := '{}'::text[];
    v_index integer := 1;
    v_updated text[] := '{}'::text[];
    v_deleted text[] := '{}'::text[];
    v_unsafe bigint := 0;
    v_done boolean := false;
    v_pending boolean := false;
begin
    select o.tables, o."timestamp" into v_tables, v_timestamp
        from ferry.watermelon_pull_open(p_last_pulled_at, p_migration, v_cursor) o;
    while v_index <= pg_catalog.cardinality(v_tables) loop
        if not v_done and not v_pending then
            fetch v_cursor into v_name, v_is_deleted, v_record;
            v_done := not found;
        end if;
        v_pending := false;
        if v_done or v_name is distinct from v_tables[v_index] then
            -- Table v_index is whole (each table's records come together, in the tables'
            -- order); the row in hand, if any, is a later table's.
            v_parts := v_parts || (pg_catalog.to_json(v_tables[v_index])::text || ':{"created":[],"updated":['
                || pg_catalog.array_to_string(v_updated, ',') || '],"deleted":['
                || pg_catalog.array_to_string(v_deleted, ',') || ']}');
            if v_unsafe > 0 then
                raise warning 'watermelon pull: % rows of % left out: their ids are not WatermelonDB ids (%)',
                    v_unsafe, v_tables[v_index], ferry.watermelon_id_pattern();
            end if;
            v_updated := '{}'::text[];
            v_deleted := '{}'::text[];
            v_unsafe := 0;
            v_index := v_index + 1;
            v_pending := not v_done;
            continue;
        end if;
        if v_record is null then
            v_unsafe := v_unsafe + 1;
        elsif v_is_deleted then
            v_deleted := v_deleted || v_record;
        else
            v_updated := v_updated || v_record;
        end if;
    end loop;
    if v_pending then
        raise exception 'watermelon pull: the cursor''s records of % are out of order', v_name
            using errcode = 'XX000';
    end if;
    close v_cursor;
    return '{"changes":{' || pg_catalog.array_to_string(v_parts, ',') || '},"timestamp":'
        || v_timestamp::text || '}';
end
$$;

comment on function ferry.watermelon_pull(bigint, text) is
    'GET /v1/watermelon/sync as one statement, run as ferry_client: {"changes", "timestamp"} as text; FR409 for a timestamp this device does not hold or one older than the purge horizon.';

-- MARK: - Grants

revoke all on function
    ferry.install_watermelon(), ferry.watermelon_migration_tables(text), ferry.watermelon_pull(bigint, text),
    ferry.watermelon_pull_open(bigint, text, refcursor)
from public;
grant execute on function
    ferry.watermelon_migration_tables(text), ferry.watermelon_pull(bigint, text),
    ferry.watermelon_pull_open(bigint, text, refcursor)
to ferry_client;

-- The reader, built when this file is applied (ferry.rebuild_generated_code builds it
-- again whenever registry.sql is).
select ferry.install_watermelon();
