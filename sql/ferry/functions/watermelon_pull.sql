-- GET /v1/watermelon/sync (docs/WATERMELONDB.md; watermelon.sql names the other files):
-- every served table read in one snapshot by ferry.watermelon_read, a reader generated
-- as the /v1/pull readers are, and the timestamp that names the snapshot
-- (watermelon_timestamps.sql). Requests run as ferry_client.

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

-- MARK: - Grants

revoke all on function
    ferry.install_watermelon(), ferry.watermelon_migration_tables(text), ferry.watermelon_pull(bigint, text)
from public;
grant execute on function ferry.watermelon_migration_tables(text), ferry.watermelon_pull(bigint, text) to ferry_client;

-- The reader, built when this file is applied (ferry.rebuild_generated_code builds it
-- again whenever registry.sql is).
select ferry.install_watermelon();
