-- POST /v1/push, exactly once per mutation (docs/PROTOCOL.md "Push", and its notes
-- "Push, pull and schema" and "Database errors" for every decision the contract leaves
-- open). The gateway calls ferry.push_body with the body as it received it; SQL callers
-- call ferry.push. Both run ferry.push_mutations as ferry_client (SECURITY INVOKER, so
-- Row Level Security on the synced tables enforces ownership).
--
-- Every identifier that reaches SQL text is a regclass (whose text form is quoted) or
-- passes through format('%I'), with column names from the catalog checked against what
-- the request names; values are bound with USING, never interpolated.

-- MARK: - Devices

-- A device's row in ferry.devices holds the last mutation id it pushed, stored in the
-- same transaction as the writes. ferry_client reads its own (pull reports it) and
-- writes it only through the two SECURITY DEFINER functions below, which act on the
-- caller's own device alone. The policy calls ferry.uid(), so it is made here, after it.
drop policy if exists devices_owner on ferry.devices;
create policy devices_owner on ferry.devices
    using (user_id = (select ferry.uid())) with check (user_id = (select ferry.uid()));

-- The caller's device row, locked until the transaction ends (made when missing): two
-- pushes of one device serialize here. Returns its last mutation id.
create or replace function ferry.lock_device() returns bigint
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

-- Raises the caller's device's last mutation id to p_last (never lowers it). PL/pgSQL,
-- which keeps its statement's plan for the session: a SQL function with a SET clause is
-- never inlined, and was planned again at every push.
create or replace function ferry.advance_device(p_last bigint) returns void
language plpgsql security definer set search_path = ''
as $$
begin
    update ferry.devices d set last_mutation_id = greatest(d.last_mutation_id, p_last)
        where d.user_id = ferry.uid() and d.device_id = ferry.device_id();
end
$$;

-- MARK: - One column's conversion

-- The first column of p_row (in key order) whose value alone does not convert to its
-- column's type, as 'column "name": <the server's message>'. Called only after a
-- mutation failed with a data exception, so its cost is the error path's.
create or replace function ferry.column_value_error(p_table regclass, p_row jsonb) returns text
language plpgsql
as $$
declare
    v_column text;
begin
    if p_table is null or p_row is null then
        return null;
    end if;
    for v_column in select k from pg_catalog.jsonb_object_keys(p_row) k order by k loop
        begin
            execute pg_catalog.format('select pg_catalog.jsonb_populate_record(null::%s, $1)', p_table)
                using pg_catalog.jsonb_build_object(v_column, p_row -> v_column);
        exception when data_exception then
            return pg_catalog.format('column %s: %s', pg_catalog.to_json(v_column), sqlerrm);
        end;
    end loop;
    return null;
end
$$;

-- MARK: - The tables a batch names

-- Everything push needs about the tables a batch names, in one catalog query, by name:
-- {"<table>": {oid, owner, primary key (key, key_list, match, key_types), the columns a
-- client may write, the static upsert's shape, set_based, and what each op does under
-- the table's strategy (ferry.write_rule, strategies.sql)}}.
--
-- Read from the catalog once per session and table, then from the session's cache: a
-- setting, ferry.push_table_<md5 of the name>, holding three lines, what the answer is
-- valid for, when it was read, and the answer (a setting made in a transaction that rolls
-- back is undone with it). The catalog query costs a push of 50 mutations about a fifth
-- of its time; the check that the cache is still right is all a push pays, so it must
-- be cheap and exact. Two ways, by what the migration could install:
-- - Noted changes (functions/catalog_changes.sql): Ferry's two event triggers note in
--   ferry.catalog_changes every transaction whose DDL could change an answer, and the
--   registry's trigger every change to it. While both triggers are there and enabled
--   ALWAYS (their row versions are part of what an answer is valid for, so disabling one
--   for a while is seen), an answer is right while no noted change is invisible in the
--   snapshot taken before it was read, and the transaction that read it noted none (its
--   own are visible in its snapshot, made before or after the read): one index range
--   over the newest notes, and three relation locks instead of thirteen, which also
--   leaves PostgreSQL's sixteen fast-path lock slots to the push's own tables.
-- - The fingerprint, when a superuser did not install the event triggers: the list of
--   the catalog row versions the answer is read from, each by its xmin and ctid, which
--   every change of a row replaces (even within one transaction): the table's registry
--   row and pg_class row, its columns (with their types, for a domain's default) and
--   defaults, triggers, policies and indexes, and the functions that compute the answer.
-- Either way any DDL that could change the answer is seen, so a table altered without
-- being registered again is read afresh, as before.
create or replace function ferry.push_tables(p_list jsonb) returns jsonb
language plpgsql
as $$
declare
    v_noting text;
    v_since pg_snapshot;
    v_reader xid8;
    v_tables jsonb;
    v_every_name jsonb;
    v_names text[];
    v_name text;
    v_answer_since pg_snapshot;
    v_answer_reader xid8;
    v_stale text[];
    v_valid_for jsonb := '{}'::jsonb;
    v_table record;
    v_cached text;
    v_read jsonb;
    v_entry record;
begin
    -- Whether Ferry's event triggers note every change (both there, enabled ALWAYS), as
    -- their row versions; null when they do not.
    select pg_catalog.string_agg(e.xmin::text || e.ctid::text, ' ' order by e.evtname) into v_noting
        from pg_catalog.pg_event_trigger e
        where e.evtname in ('ferry_note_ddl', 'ferry_note_drop') and e.evtenabled = 'A'
        having pg_catalog.count(*) = 2;
    if v_noting is not null then
        -- The table names the batch gives (as strings: any other value names no table),
        -- each once; the usual batch gives one, and only when it gives more are they sorted.
        v_every_name := pg_catalog.jsonb_path_query_array(p_list, '$[*].table ? (@.type() == "string")');
        v_names := case when v_every_name <@ pg_catalog.jsonb_build_array(v_every_name -> 0) then array[v_every_name ->> 0]
            else array(select distinct pg_catalog.jsonb_array_elements_text(v_every_name)) end;
        -- Their cached answers that no noted change has outdated, and the names without
        -- one (not synced tables among them: the query below skips those).
        v_tables := '{}'::jsonb;
        foreach v_name in array v_names loop
            continue when v_name is null;
            v_cached := pg_catalog.current_setting('ferry.push_table_' || pg_catalog.md5(v_name), true);
            -- When it was read under these triggers: the snapshot its answer was read after,
            -- and the transaction that read it, if it had an id then.
            v_answer_since := case when pg_catalog.split_part(v_cached, E'\n', 1) = 'noted ' || v_noting
                then pg_catalog.split_part(pg_catalog.split_part(v_cached, E'\n', 2), ' ', 1)::pg_snapshot end;
            v_answer_reader := nullif(pg_catalog.split_part(pg_catalog.split_part(v_cached, E'\n', 2), ' ', 2), '')::xid8;
            -- Fresh while no noted change is invisible in that snapshot, and the reading
            -- transaction noted none (its own changes count as seen in its snapshot, but it
            -- may have made some after reading, or before, and be making more). It was
            -- running when the snapshot was taken, so its id is not below the snapshot's
            -- xmin: one index range holds both.
            if v_answer_since is not null and not exists (
                select from ferry.catalog_changes x
                where x.changed_by >= pg_catalog.pg_snapshot_xmin(v_answer_since)
                    and (not pg_catalog.pg_visible_in_snapshot(x.changed_by, v_answer_since) or x.changed_by = v_answer_reader)
            ) then
                v_tables := v_tables || pg_catalog.jsonb_build_object(v_name, pg_catalog.split_part(v_cached, E'\n', 3)::jsonb);
            else
                v_stale := v_stale || v_name;
            end if;
        end loop;
        if v_stale is null then
            return coalesce(v_tables, '{}'::jsonb);
        end if;
        -- Taken before the catalog is read, so the answers are at least this new.
        v_since := pg_catalog.pg_current_snapshot();
        v_reader := pg_catalog.pg_current_xact_id_if_assigned();
    else
        v_tables := '{}'::jsonb;
        for v_table in
            select c.oid, c.relname, pg_catalog.concat_ws(' ', s.xmin, s.ctid, c.xmin, c.ctid,
                    (select pg_catalog.string_agg(a.xmin::text || a.ctid::text || coalesce((
                            select y.xmin::text || y.ctid::text from pg_catalog.pg_type y where y.oid = a.atttypid), ''),
                            ',' order by a.attnum)
                        from pg_catalog.pg_attribute a where a.attrelid = c.oid and a.attnum > 0),
                    (select pg_catalog.string_agg(d.xmin::text || d.ctid::text, ',' order by d.oid) from pg_catalog.pg_attrdef d where d.adrelid = c.oid),
                    (select pg_catalog.string_agg(g.xmin::text || g.ctid::text, ',' order by g.oid) from pg_catalog.pg_trigger g where g.tgrelid = c.oid),
                    (select pg_catalog.string_agg(y.xmin::text || y.ctid::text, ',' order by y.oid) from pg_catalog.pg_policy y where y.polrelid = c.oid),
                    (select pg_catalog.string_agg(i.xmin::text || i.ctid::text, ',' order by i.indexrelid) from pg_catalog.pg_index i where i.indrelid = c.oid),
                    (select pg_catalog.string_agg(f.xmin::text || f.ctid::text, ',' order by f.oid) from pg_catalog.pg_proc f
                        where f.oid = any (array['ferry.push_tables(jsonb)'::regprocedure, 'ferry.write_rule(text, text, name)'::regprocedure,
                            'ferry.upsert_shape(regclass)'::regprocedure, 'ferry.key_json_type(oid)'::regprocedure,
                            'ferry.primary_key(regclass)'::regprocedure, 'ferry.unwritable_columns()'::regprocedure]::oid[])))
                    as fingerprint
            from ferry.synced_tables s
            -- By the table's oid (offset 0 keeps the planner from hashing a scan of pg_class).
            cross join lateral (
                select c.oid, c.relname, c.xmin, c.ctid from pg_catalog.pg_class c where c.oid = s.table_name offset 0
            ) c
            where c.relname in (select m ->> 'table' from pg_catalog.jsonb_array_elements(p_list) m)
        loop
            v_cached := pg_catalog.current_setting('ferry.push_table_' || pg_catalog.md5(v_table.relname), true);
            if pg_catalog.split_part(v_cached, E'\n', 1) = v_table.fingerprint then
                v_tables := v_tables || pg_catalog.jsonb_build_object(v_table.relname, pg_catalog.split_part(v_cached, E'\n', 3)::jsonb);
            else
                v_valid_for := v_valid_for || pg_catalog.jsonb_build_object(v_table.relname, v_table.fingerprint);
            end if;
        end loop;
        if v_valid_for = '{}'::jsonb then
            return v_tables;
        end if;
        v_stale := array(select pg_catalog.jsonb_object_keys(v_valid_for));
    end if;

    select pg_catalog.jsonb_object_agg(c.relname, pg_catalog.jsonb_build_object(
            'oid', c.oid::bigint, 'owner', s.owner_column,
            'key', k.names, 'key_list', k.list, 'match', k.match, 'key_types', k.types, 'columns', cols.names,
            -- Whether the key may arbitrate ON CONFLICT (not deferrable).
            'key_immediate', (select i.indimmediate from pg_catalog.pg_index i where i.indrelid = c.oid and i.indisprimary),
            'shape', ferry.upsert_shape(c.oid), 'set_based', sb.ok, 'rules', pg_catalog.jsonb_build_object(
                'table', ferry.write_rule(s.strategy, null, c.relname),
                'insert', ferry.write_rule(s.strategy, 'insert', c.relname),
                'upsert', ferry.write_rule(s.strategy, 'upsert', c.relname),
                'delete', ferry.write_rule(s.strategy, 'delete', c.relname))))
        into v_read
        from ferry.synced_tables s
        -- By the table's oid, one lookup per registered table (offset 0 keeps the planner
        -- from hashing a scan of all of pg_class instead).
        cross join lateral (
            select c.oid, c.relname from pg_catalog.pg_class c where c.oid = s.table_name offset 0
        ) c
        cross join lateral (
            select pg_catalog.jsonb_agg(p.name order by p.ordinal) as names,
                pg_catalog.string_agg(pg_catalog.format('%I', p.name), ', ' order by p.ordinal) as list,
                pg_catalog.string_agg(pg_catalog.format('t.%1$I = p.%1$I', p.name), ' and ' order by p.ordinal)
                    as match,
                -- The JSON type each key column must come in (ferry.key_json_type), those checked.
                pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_object_agg(p.name, ferry.key_json_type(p.type_id)))
                    as types
            from ferry.primary_key(c.oid) p
        ) k
        cross join lateral (
            select pg_catalog.jsonb_object_agg(a.attname, true) as names
            from pg_catalog.pg_attribute a
            where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
                and a.attname <> all (ferry.unwritable_columns())
        ) cols
        -- Whether one statement answers a run of the table's upserts as the loop would (the
        -- header): no trigger but Ferry's own and foreign key checks between this table and
        -- others (a deferred unique check is a trigger too), no policy but Ferry's.
        cross join lateral (
            select not exists (
                    select from pg_catalog.pg_trigger g
                    where g.tgrelid = c.oid
                        and g.tgname not in ('ferry_stamp', 'ferry_cue_insert', 'ferry_cue_update', 'ferry_cue_delete',
                            'ferry_tombstone_delete', 'ferry_refuse_truncate')
                        and not (g.tgisinternal and g.tgconstrrelid not in (0, c.oid) and exists (
                            select from pg_catalog.pg_proc f where f.oid = g.tgfoid and f.proname like 'RI\_FKey\_%'))
                ) and not exists (
                    select from pg_catalog.pg_policy y
                    where y.polrelid = c.oid and y.polname not in ('ferry_read', 'ferry_insert', 'ferry_update', 'ferry_delete')
                ) as ok
        ) sb
        where c.relname = any (v_stale);
    for v_entry in select e.key, e.value from pg_catalog.jsonb_each(v_read) e loop
        perform pg_catalog.set_config('ferry.push_table_' || pg_catalog.md5(v_entry.key),
            coalesce('noted ' || v_noting || E'\n' || v_since::text || ' ' || coalesce(v_reader::text, ''),
                (v_valid_for ->> v_entry.key) || E'\n')
                || E'\n' || v_entry.value::text, false);
    end loop;
    return coalesce(v_tables, '{}'::jsonb) || coalesce(v_read, '{}'::jsonb);
end
$$;

comment on function ferry.push_tables(jsonb) is
    'What push needs about each synced table a batch names (owner, key, writable columns, shape, set_based, rules), by name: from the catalog, or this session''s cache of it while no change it depends on was noted (or, without Ferry''s event triggers, while the catalog rows it was read from are unchanged)';

-- MARK: - The set-based path's rules

-- Whether push's set-based statement may write a table's upserts, from its entry in
-- ferry.push_tables: set-based by the catalog, not refused, and its upsert rule an
-- overwrite with no lock (lww). Push's two queries for runs (push_mutations) share it.
create or replace function ferry.writes_set_based(p_table jsonb) returns boolean
language sql immutable
as $$
    select (p_table ->> 'set_based')::boolean and not p_table -> 'rules' -> 'table' ? 'refused'
        and p_table -> 'rules' -> 'upsert' ->> 'op' = 'upsert'
        and p_table -> 'rules' -> 'upsert' ->> 'live' = 'overwrite'
        and not (p_table -> 'rules' -> 'upsert' ->> 'held')::boolean
$$;

-- Whether a mutation's row object (less updated_at) may be written by the set-based
-- statement of a table with this owner column and these writable columns: the owner
-- omitted, null or the caller's, as a string, and every column one a client may write
-- (nothing left once they are removed). Push's two queries for runs share it.
create or replace function ferry.writes_row_set_based(p_row jsonb, p_owner text, p_columns text[], p_user uuid)
returns boolean
language sql immutable
as $$
    select coalesce(pg_catalog.jsonb_typeof(p_row -> p_owner), 'null') in ('null', 'string')
        and coalesce(p_row ->> p_owner, p_user::text) = p_user::text
        and p_row - p_columns = '{}'::jsonb
$$;

-- MARK: - Push, mutation by mutation

-- p_mutations is {"mutations": [...]} (other fields ignored) or the array itself;
-- p_unstorable maps a mutation's position to the {"code", "message"} it is rejected
-- with (what ferry.push_body could not read as jsonb). Returns {"last_mutation_id": N,
-- "results": [{"id", "status": "applied" | "duplicate" | "rejected", "code"?,
-- "message"?}, ...]}, one result per mutation in order. A mutation whose id is not above
-- the device's last_mutation_id is a duplicate carrying its original outcome
-- (outcomes.sql); the batch's rejections are remembered for that, in its transaction.
--
-- A batch that is not an array of objects with non-negative integer ids raises 22023
-- (400 invalid_request); anything wrong inside one mutation rejects that mutation only:
-- each runs in its own subtransaction, so a failed write is undone alone and the batch
-- goes on. Errors a retry can fix (deadlock, serialization, connection) abort the batch.
--
-- The set-based path, for the common batch: a run of consecutive mutations that are all
-- lww upserts (the rule's overwrite, no lock) of one table, each new by its id, not
-- unstorable, giving the same columns, all of them writable, the owner omitted or the
-- caller's, is written by ONE statement (ferry.upsert_rows, registry.sql) in a
-- subtransaction, in batch order, and answered applied mutation by mutation; that
-- statement fails, sending the run to the loop, when a key column is missing, null or
-- not given in its JSON type. This answers exactly what the loop would: each would be
-- applied by its static upsert (below), in the same order, row after row under the same
-- immediate checks. Where one statement could answer otherwise it is not tried (the
-- table has a trigger or policy of its own, or a foreign key or deferred check within
-- itself, whose outcome could depend on the statements' boundaries); and where it fails
-- (any error the loop answers with a rejection, or one key twice) it is undone and the
-- run goes through the loop, which answers each mutation as before. Runs of one
-- mutation go through the loop too.
--
-- An lww upsert, the common write, tries the table's static upsert first
-- (ferry.upsert_row, registry.sql), else builds the statement for the given columns.
-- While it writes a table, push sets ferry.skip_cues to that table's name (its own
-- writes are the caller's rows, so it cues them itself, once per table, at the end; a
-- write an operator's trigger makes to another synced table still cues as always).
--
-- No fixed search_path: push runs with the caller's own privileges and names everything
-- qualified, and an operator's triggers on a synced table run inside it and may rely on
-- the session's path.
create or replace function ferry.push_mutations(p_mutations jsonb, p_unstorable jsonb) returns jsonb
language plpgsql
as $$
declare
    v_user uuid := ferry.uid();
    v_device text := ferry.device_id();
    v_list jsonb;
    v_tables jsonb;
    v_last bigint;
    v_results jsonb[] := '{}'::jsonb[];
    v_m jsonb;
    v_position integer;
    v_id bigint;
    v_table jsonb;
    v_rel regclass;
    v_rule jsonb;
    v_owner text;
    v_op text;
    v_row jsonb;
    v_key text[];
    v_given text[];
    v_bad text;
    v_bad_type text;
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
    v_cued text[] := '{}'::text[];
    v_rejected_ids bigint[] := '{}'::bigint[];
    v_rejected_codes text[] := '{}'::text[];
    v_rejected_messages text[] := '{}'::text[];
    v_earlier integer;
    v_runs jsonb;
    v_retried boolean;
    v_inserted integer;
    v_ids jsonb;
    v_id_list text;
    v_all_applied boolean := false;
    v_run jsonb;
    v_count integer;
    v_first jsonb;
    v_first_table jsonb;
    v_first_given jsonb;
    v_first_owner text;
    v_first_keys text[];
    v_run_columns text[];
    v_whole_run boolean;
begin
    v_list := case pg_catalog.jsonb_typeof(p_mutations)
        when 'array' then p_mutations when 'object' then p_mutations -> 'mutations' end;
    if v_list is null or pg_catalog.jsonb_typeof(v_list) <> 'array' then
        raise exception 'push: mutations must be an array' using errcode = '22023';
    end if;
    -- The ids of the elements that are objects with a number id, in one JSON path query
    -- (an error in a strict filter, as @.id on an object without one, fails only that
    -- element): every element must be one, and its id's text at most 18 digits.
    v_ids := pg_catalog.jsonb_path_query_array(v_list, 'strict $[*] ? (@.type() == "object" && @.id.type() == "number").id');
    v_id_list := v_ids::text;
    if pg_catalog.jsonb_array_length(v_ids) <> pg_catalog.jsonb_array_length(v_list)
        or v_id_list !~ '^\[(([0-9]{1,18}, )*[0-9]{1,18})?\]$'
    then
        raise exception 'push: every mutation must be an object with a non-negative integer id' using errcode = '22023';
    end if;

    v_last := ferry.lock_device();

    v_tables := ferry.push_tables(v_list);

    -- The runs the set-based path writes (header), by the position of their first mutation:
    -- {"<first>": {"last": position, "table", "given": [columns]}}. The run's rows stay in
    -- the batch: ferry.upsert_rows reads them from it by position and writes the caller as
    -- their owner, and checks their key columns' JSON types (registry.sql).
    --
    -- The common batch is one run: every mutation an eligible upsert of the first one's
    -- table giving the first one's columns (with the owner or without), ids increasing.
    -- One pass over the batch, with no sort, says so. It may pass a batch over (an owner
    -- column named updated_at), never take one the query below would not answer alike.
    v_count := pg_catalog.jsonb_array_length(v_list);
    v_first := v_list -> 0;
    v_first_table := case when pg_catalog.jsonb_typeof(v_first -> 'table') = 'string' then v_tables -> (v_first ->> 'table') end;
    if v_count > 1 and p_unstorable is null and pg_catalog.jsonb_typeof(v_first -> 'row') = 'object'
        and ferry.writes_set_based(v_first_table)
    then
        v_first_owner := v_first_table ->> 'owner';
        v_first_given := pg_catalog.jsonb_path_query_array((v_first -> 'row') - 'updated_at' - v_first_owner, '$.keyvalue().key');
        v_first_keys := array(select pg_catalog.jsonb_array_elements_text(v_first_given));
        -- What a row of the run may hold: the first one's columns, the owner and updated_at.
        v_run_columns := v_first_keys || array[v_first_owner, 'updated_at'];
        if array(select pg_catalog.jsonb_object_keys(v_first_table -> 'columns')) @> (v_first_keys || v_first_owner) then
            -- (Left to right: each test runs only when those before it held. Each row is
            -- taken out of its mutation once, in the subquery, which offset 0 keeps apart.)
            select pg_catalog.bool_and(
                    l.m ->> 'op' = 'upsert' and l.m -> 'table' = v_first -> 'table'
                    and (l.m ->> 'id')::bigint > case when l.o = 1 then v_last else (v_ids ->> (l.o::integer - 2))::bigint end
                    and pg_catalog.jsonb_typeof(l.r) = 'object' and l.r ?& v_first_keys
                    and ferry.writes_row_set_based(l.r, v_first_owner, v_run_columns, v_user))
                into v_whole_run
                from (
                    select l.m, l.o, l.m -> 'row' as r
                    from pg_catalog.jsonb_array_elements(v_list) with ordinality l(m, o)
                    offset 0
                ) l;
        end if;
        if v_whole_run then
            v_runs := pg_catalog.jsonb_build_object('0', pg_catalog.jsonb_build_object(
                'last', v_count - 1, 'table', v_first ->> 'table', 'given', v_first_given));
        end if;
    end if;

    -- Any batch: each step is a materialized CTE, so that each value is computed once per
    -- mutation; no set-returning function runs per mutation (each cost more than the rest
    -- of the row's checks together).
    if not coalesce(v_whole_run, false) then
        with mutation as materialized (
            select l.o - 1 as position, (l.m ->> 'id')::bigint as id, l.m ->> 'table' as name,
                l.m ->> 'op' = 'upsert' and pg_catalog.jsonb_typeof(l.m -> 'table') = 'string'
                    and pg_catalog.jsonb_typeof(l.m -> 'row') = 'object' as upsert,
                case when pg_catalog.jsonb_typeof(l.m -> 'row') = 'object' then (l.m -> 'row') - 'updated_at' end as given_row,
                pg_catalog.max((l.m ->> 'id')::bigint) over (order by l.o rows between unbounded preceding and 1 preceding)
                    as before
            from pg_catalog.jsonb_array_elements(v_list) with ordinality l(m, o)
        ), writable as materialized (
            -- The tables whose upserts one statement may write, once each.
            select tt.key as name, tt.value ->> 'owner' as owner,
                array(select pg_catalog.jsonb_object_keys(tt.value -> 'columns')) as columns
            from pg_catalog.jsonb_each(v_tables) tt
            where ferry.writes_set_based(tt.value)
        ), eligible as materialized (
            -- New by its id, storable, its row one the statement may write; its columns but
            -- the owner (which the statement writes anyway) as a JSON array, in jsonb's key
            -- order, so that one set of columns is one array.
            select m.position, m.name, pg_catalog.jsonb_path_query_array(m.given_row - t.owner, '$.keyvalue().key') as given
            from mutation m
            join writable t on t.name = m.name
            where m.upsert and m.id > greatest(v_last, m.before)
                and (p_unstorable is null or not p_unstorable ? m.position::text)
                and ferry.writes_row_set_based(m.given_row, t.owner, t.columns, v_user)
        )
        select pg_catalog.jsonb_object_agg(r.first, pg_catalog.jsonb_build_object('last', r.last, 'table', r.name, 'given', r.given))
            into v_runs
            from (
                select pg_catalog.min(e.position) as first, pg_catalog.max(e.position) as last, e.name, e.given
                from (
                    -- Consecutive positions of one table and one set of columns share an island.
                    select e.*, e.position - pg_catalog.row_number() over (partition by e.name, e.given order by e.position) as island
                    from eligible e
                ) e
                group by e.name, e.given, e.island
                having pg_catalog.count(*) > 1
            ) r;
    end if;

    -- Mutation by mutation, by position (a run the set-based path wrote is passed over whole).
    v_position := -1;
    loop
        v_position := v_position + 1;
        exit when v_position >= v_count;
        v_m := v_list -> v_position;
        v_run := v_runs -> v_position::text;
        if v_run is not null then
            v_wrote := false;
            begin
                if v_skip_cues is distinct from 'on' then
                    perform pg_catalog.set_config('ferry.skip_cues', v_run ->> 'table', true);
                end if;
                v_wrote := ferry.upsert_rows(v_run ->> 'table', v_tables -> (v_run ->> 'table') ->> 'shape',
                    array(select pg_catalog.jsonb_array_elements_text(v_run -> 'given')),
                    pg_catalog.jsonb_path_query_array(v_list, '$[$first to $last].row',
                        pg_catalog.jsonb_build_object('first', v_position, 'last', v_run -> 'last')));
            exception
                -- What the loop answers with a rejection, and one key twice (21000): the run
                -- is undone and goes through the loop.
                when data_exception or program_limit_exceeded or raise_exception or integrity_constraint_violation
                    or insufficient_privilege or cardinality_violation
                then
                    v_wrote := false;
            end;
            if v_wrote then
                if v_position = 0 and (v_run ->> 'last')::integer = v_count - 1 then
                    v_all_applied := true;
                else
                    v_results := v_results || array(
                        select pg_catalog.jsonb_build_object('id', v_list -> i -> 'id', 'status', 'applied')
                        from pg_catalog.generate_series(v_position, (v_run ->> 'last')::integer) i);
                end if;
                v_position := (v_run ->> 'last')::integer;
                v_last := (v_list -> v_position ->> 'id')::bigint;
                if not (v_run ->> 'table') = any (v_cued) then
                    v_cued := v_cued || (v_run ->> 'table');
                end if;
                continue;
            end if;
        end if;
        v_id := (v_m ->> 'id')::bigint;
        if v_id <= v_last then
            -- Its original outcome (ferry.duplicate_result, outcomes.sql), or this batch's
            -- when the batch named it before.
            v_earlier := pg_catalog.array_position(v_rejected_ids, v_id);
            v_results := v_results || case when v_earlier is not null then pg_catalog.jsonb_build_object(
                    'id', v_id, 'status', 'duplicate', 'original', 'rejected', 'code', v_rejected_codes[v_earlier],
                    'message', v_rejected_messages[v_earlier])
                else ferry.duplicate_result(v_id) end;
            continue;
        end if;
        v_last := v_id;
        v_code := null;
        v_message := null;
        v_wrote := false;
        v_rel := null;
        v_row := null;

        <<mutation>>
        begin
            -- One ferry.push_body could not read as jsonb: only its id (and table) are here.
            if p_unstorable ? v_position::text then
                v_code := p_unstorable -> v_position::text ->> 'code';
                v_message := p_unstorable -> v_position::text ->> 'message';
                exit mutation;
            end if;
            v_table := case when pg_catalog.jsonb_typeof(v_m -> 'table') = 'string' then v_tables -> (v_m ->> 'table') end;
            if v_table is null then
                v_code := 'unknown_table';
                v_message := case coalesce(pg_catalog.jsonb_typeof(v_m -> 'table'), 'missing')
                    when 'string' then pg_catalog.format('%s is not a synced table', v_m -> 'table')
                    when 'missing' then 'the mutation has no table field'
                    else pg_catalog.format('table must be a string, not %s', v_m -> 'table') end;
                exit mutation;
            end if;
            v_rel := (v_table ->> 'oid')::oid::regclass;
            v_owner := v_table ->> 'owner';
            v_op := v_m ->> 'op';
            v_rule := v_table -> 'rules' -> 'table';
            if v_rule ? 'refused' then
                v_code := v_rule ->> 'refused';
                v_message := v_rule ->> 'message';
                exit mutation;
            end if;
            if v_op is null or v_op not in ('insert', 'upsert', 'delete') then
                v_code := 'invalid_row';
                v_message := pg_catalog.format('op must be insert, upsert or delete, not %s', coalesce((v_m -> 'op')::text, 'missing'));
                exit mutation;
            end if;
            v_rule := v_table -> 'rules' -> v_op;
            if v_rule ? 'refused' then
                v_code := v_rule ->> 'refused';
                v_message := v_rule ->> 'message';
                exit mutation;
            end if;
            v_op := v_rule ->> 'op';

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

            select k, g.given into v_bad, v_bad_type
                from pg_catalog.unnest(v_key) k
                cross join lateral (select pg_catalog.jsonb_typeof(v_row -> k) as given) g
                where g.given is null or g.given = 'null' or g.given <> (v_table -> 'key_types' ->> k)
                limit 1;
            if v_bad is not null then
                v_code := 'invalid_row';
                v_message := case when v_bad_type is null or v_bad_type = 'null'
                    then pg_catalog.format('key column %s is missing', pg_catalog.to_json(v_bad))
                    else pg_catalog.format('key column %s takes a JSON %s (as pull sends it), not a %s',
                        pg_catalog.to_json(v_bad), v_table -> 'key_types' ->> v_bad, v_bad_type) end;
                exit mutation;
            end if;
            v_given := array(select pg_catalog.jsonb_object_keys(v_row));
            -- This table's cue triggers stay quiet for push's own writes: push cues once per
            -- table at the end (header). A subtransaction rolled back restores the setting.
            if v_skip_cues is distinct from 'on' then
                perform pg_catalog.set_config('ferry.skip_cues', v_m ->> 'table', true);
            end if;

            -- An overwrite no lock guards (lww's upsert), the common write: one statement.
            -- (A key owned by another user is invisible, so it conflicts under RLS:
            -- forbidden.) The table's static upsert when its shape is the one the upsert
            -- was written for, else the same statement built for the given columns.
            if v_rule ->> 'live' = 'overwrite' and not (v_rule ->> 'held')::boolean then
                if ferry.upsert_row(v_m ->> 'table', v_table ->> 'shape', v_row) then
                    v_wrote := true;
                    exit mutation;
                end if;
                v_list_sql := (select pg_catalog.string_agg(pg_catalog.format('%I', k), ', ') from pg_catalog.unnest(v_given) k);
                -- A tombstone revived starts from the given columns: the others take their
                -- defaults (what excluded holds for a column the insert does not name).
                v_sets := (select pg_catalog.string_agg(case when k = any (v_given)
                        then pg_catalog.format('%1$I = excluded.%1$I', k)
                        else pg_catalog.format('%1$I = case when t._deleted then excluded.%1$I else t.%1$I end', k) end,
                        ', ')
                    from pg_catalog.jsonb_object_keys(v_table -> 'columns') k where not k = any (v_key));
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
            -- The row under this key decided on (twice at most: see the insert).
            v_retried := false;
            <<attempt>>
            loop
                v_found := null;
                v_same := null;
                execute pg_catalog.format(
                    'select true, t._deleted, %s, %s from %s t, pg_catalog.jsonb_populate_record(null::%s, $1) p where %s for update of t',
                    case when (v_rule ->> 'held')::boolean then 't._lock_device' else 'null::text' end,
                    case when v_rule ->> 'live' = 'same_or_immutable' then 'pg_catalog.to_jsonb(t), pg_catalog.to_jsonb(p)'
                        else 'null::jsonb, null::jsonb' end,
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
                    -- Another device of the caller may have inserted this key since the select
                    -- (two devices' first writes of one row): ON CONFLICT waits for that insert
                    -- and writes nothing if it committed, and the row is decided on as if it had
                    -- been there. Once: a key still invisible then is another user's, and the
                    -- plain insert raises what it always did (as it does for a deferrable key,
                    -- which cannot arbitrate ON CONFLICT).
                    execute pg_catalog.format(
                        'insert into %s (%s) select %s from pg_catalog.jsonb_populate_record(null::%s, $1)%s',
                        v_rel, v_list_sql, v_list_sql, v_rel,
                        case when v_retried or not (v_table ->> 'key_immediate')::boolean then ''
                            else pg_catalog.format(' on conflict (%s) do nothing', v_table ->> 'key_list') end)
                        using v_row;
                    get diagnostics v_inserted = row_count;
                    if v_inserted = 0 then
                        v_retried := true;
                        continue attempt;
                    end if;
                    v_wrote := true;
                elsif not v_deleted and (v_rule ->> 'live' = 'duplicate' or (v_rule ->> 'live' = 'same_or_immutable' and v_same)) then
                    v_code := 'duplicate';
                elsif (not v_deleted and v_rule ->> 'live' <> 'overwrite') or (v_deleted and v_rule ->> 'tombstone' = 'immutable') then
                    v_code := 'immutable';
                    v_message := pg_catalog.format('a different row of %s exists under this key', v_m ->> 'table');
                else
                    -- An overwrite, a merge write of the given columns; or a revived tombstone,
                    -- which starts from the given columns (the others take their defaults).
                    if v_deleted then
                        v_sets := (select pg_catalog.string_agg(case when k = any (v_given)
                                then pg_catalog.format('%1$I = p.%1$I', k) else pg_catalog.format('%I = default', k) end, ', ')
                            from pg_catalog.jsonb_object_keys(v_table -> 'columns') k where not k = any (v_key));
                    end if;
                    execute pg_catalog.format(
                        'update %s t set %s_deleted = false from pg_catalog.jsonb_populate_record(null::%s, $1) p where %s',
                        v_rel, coalesce(v_sets || ', ', ''), v_rel, v_table ->> 'match') using v_row;
                    v_wrote := true;
                end if;
                exit attempt;
            end loop;
        exception
            when data_exception then
                v_code := 'invalid_row';
                v_message := coalesce(ferry.column_value_error(v_rel, v_row), sqlerrm);
            when program_limit_exceeded or raise_exception then
                -- A value past a server limit (an index entry over its size), or an
                -- operator's trigger refusing the row with a plain RAISE EXCEPTION.
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
        if v_code is not null and v_code <> 'duplicate' then
            v_rejected_ids := v_rejected_ids || v_id;
            v_rejected_codes := v_rejected_codes || v_code;
            v_rejected_messages := v_rejected_messages || v_message;
        end if;
    end loop;

    perform pg_catalog.set_config('ferry.skip_cues', coalesce(v_skip_cues, ''), true);
    if v_skip_cues is distinct from 'on' then
        perform ferry.queue_cue(v_user::text || ' ' || ferry.cue_device() || ' ' || t)
            from pg_catalog.unnest(v_cued) t;
    end if;
    perform ferry.advance_device(v_last);
    if pg_catalog.cardinality(v_rejected_ids) > 0 then
        perform ferry.remember_rejections(v_rejected_ids, v_rejected_codes, v_rejected_messages);
    end if;
    return pg_catalog.jsonb_build_object('last_mutation_id', v_last, 'results', case
        -- One run wrote the whole batch: every result is {"id": N, "status": "applied"},
        -- made from the ids' text, "[1, 2]", which holds only digits between its ", "
        -- (checked above), at a third of the cost of building each result as an object.
        when v_all_applied then pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(v_id_list,
            '[', '[{"id": '), ', ', ', "status": "applied"}, {"id": '), ']', ', "status": "applied"}]')::jsonb
        else pg_catalog.to_jsonb(v_results) end);
end
$$;

comment on function ferry.push_mutations(jsonb, jsonb) is
    'The push loop, run as ferry_client: exactly-once by the device''s last_mutation_id; unstorable maps a mutation''s position to the {"code", "message"} it is rejected with. {"last_mutation_id", "results"}';

-- MARK: - The body as the gateway receives it

-- The body as text (checked as UTF-8 JSON by the gateway), null when it holds more than
-- p_max_mutations mutations, else push's answer. It is read as jsonb in one cast; when
-- that fails (a \u0000 escape, which text cannot hold; a number beyond numeric's
-- range), each mutation is read alone and the ones that do not convert are answered as
-- rejections: invalid_row, naming the column when it can (unknown_table for a table
-- name that is a number beyond numeric's range).
create or replace function ferry.push_body(p_body text, p_max_mutations integer) returns jsonb
language plpgsql
as $$
declare
    v_body jsonb;
    v_clean json;
    v_list json;
    v_element json;
    v_position integer;
    v_items jsonb[] := '{}'::jsonb[];
    v_unstorable jsonb;
    v_field text;
    v_value json;
    v_column text;
    v_code text;
    v_message text;
begin
    begin
        v_body := p_body::jsonb;
    exception when data_exception or program_limit_exceeded then
        -- Some value has no jsonb form. Every "\\" (an escaped backslash) is written
        -- "\u005c", the same string, and every "\u0000" then becomes "\\u0000": so the
        -- text holds a backslash pair exactly where it held a \u0000, and it reads as json,
        -- whose functions convert escapes but not numbers.
        v_clean := pg_catalog.replace(pg_catalog.replace(p_body, '\\', '\u005c'), '\u0000', '\\u0000')::json;
        v_list := case when pg_catalog.json_typeof(v_clean) = 'object' then v_clean -> 'mutations' end;
        if v_list is null or pg_catalog.json_typeof(v_list) <> 'array' then
            raise exception 'push: mutations must be an array' using errcode = '22023';
        end if;
        if pg_catalog.json_array_length(v_list) > p_max_mutations then
            return null;
        end if;
        v_unstorable := '{}';
        for v_element, v_position in select e, o - 1 from pg_catalog.json_array_elements(v_list) with ordinality m(e, o) loop
            v_code := null;
            v_field := null;
            v_column := null;
            if pg_catalog.json_typeof(v_element) <> 'object' then
                -- ferry.push_mutations refuses the batch for it.
                v_items := v_items || pg_catalog.to_jsonb(pg_catalog.json_typeof(v_element));
                continue;
            end if;
            if pg_catalog.strpos(v_element::text, '\\') > 0 then
                select f.key, f.value into v_field, v_value from pg_catalog.json_each(v_element) f
                    where pg_catalog.strpos(f.value::text, '\\') > 0 or pg_catalog.strpos(pg_catalog.to_json(f.key)::text, '\\') > 0
                    limit 1;
                -- Even in the table name: a key holding \u0000 is refused, never looked up.
                v_code := 'invalid_row';
                if v_field in ('row', 'key') and pg_catalog.json_typeof(v_value) = 'object' then
                    select pg_catalog.to_json(f.key)::text into v_column from pg_catalog.json_each(v_value) f
                        where pg_catalog.strpos(f.value::text, '\\') > 0 or pg_catalog.strpos(pg_catalog.to_json(f.key)::text, '\\') > 0
                        limit 1;
                end if;
                v_message := case when v_field = 'table' then 'the table name holds \u0000, which no table name can'
                    else pg_catalog.format('%s holds \u0000, which PostgreSQL cannot store',
                        coalesce('column ' || v_column, 'field ' || pg_catalog.to_json(v_field)::text)) end;
            else
                begin
                    v_items := v_items || v_element::jsonb;
                    continue;
                exception when data_exception or program_limit_exceeded then
                    v_message := sqlerrm;
                end;
                -- A number beyond numeric's range: name where it is.
                <<find>>
                for v_field, v_value in select f.key, f.value from pg_catalog.json_each(v_element) f loop
                    begin
                        perform v_value::jsonb;
                    exception when data_exception or program_limit_exceeded then
                        v_code := case when v_field = 'table' then 'unknown_table' else 'invalid_row' end;
                        v_message := pg_catalog.format('field %s: %s', pg_catalog.to_json(v_field), sqlerrm);
                        if v_field in ('row', 'key') and pg_catalog.json_typeof(v_value) = 'object' then
                            for v_column, v_value in select f.key, f.value from pg_catalog.json_each(v_value) f loop
                                begin
                                    perform v_value::jsonb;
                                exception when data_exception or program_limit_exceeded then
                                    v_message := pg_catalog.format('column %s: %s', pg_catalog.to_json(v_column), sqlerrm);
                                    exit find;
                                end;
                            end loop;
                        end if;
                        exit find;
                    end;
                end loop;
                v_code := coalesce(v_code, 'invalid_row');
            end if;
            -- All push needs to answer it: its id (a bad one makes push refuse the batch).
            v_items := v_items || pg_catalog.jsonb_build_object(
                'id', case when pg_catalog.json_typeof(v_element -> 'id') = 'number' and (v_element ->> 'id') ~ '^[0-9]{1,18}$'
                    then (v_element ->> 'id')::bigint end);
            v_unstorable := v_unstorable || pg_catalog.jsonb_build_object(
                v_position::text, pg_catalog.jsonb_build_object('code', v_code, 'message', v_message));
        end loop;
        v_body := pg_catalog.jsonb_build_object('mutations', pg_catalog.to_jsonb(v_items));
    end;
    if pg_catalog.jsonb_typeof(v_body -> 'mutations') = 'array'
        and pg_catalog.jsonb_array_length(v_body -> 'mutations') > p_max_mutations
    then
        return null;
    end if;
    return ferry.push_mutations(v_body, v_unstorable);
end
$$;

comment on function ferry.push_body(text, integer) is
    'POST /v1/push as one statement, run as ferry_client: the body as text, null when it holds more than max_mutations mutations; a mutation with no jsonb form (\u0000, a number beyond numeric) is rejected on its own';

-- A push batch given as jsonb, for SQL callers (a jsonb value holds no \u0000).
create or replace function ferry.push(p_mutations jsonb) returns jsonb
language plpgsql
as $$
begin
    return ferry.push_mutations(p_mutations, null);
end
$$;

comment on function ferry.push(jsonb) is
    'A push batch given as jsonb (which holds no \u0000), for SQL callers: ferry.push_mutations with nothing unstorable. The gateway calls ferry.push_body.';

-- MARK: - Grants

revoke all on function
    ferry.lock_device(), ferry.advance_device(bigint), ferry.column_value_error(regclass, jsonb),
    ferry.push_tables(jsonb), ferry.writes_set_based(jsonb), ferry.writes_row_set_based(jsonb, text, text[], uuid),
    ferry.push_mutations(jsonb, jsonb), ferry.push_body(text, integer), ferry.push(jsonb)
from public;

grant execute on function
    ferry.lock_device(), ferry.advance_device(bigint), ferry.column_value_error(regclass, jsonb),
    ferry.push_tables(jsonb), ferry.writes_set_based(jsonb), ferry.writes_row_set_based(jsonb, text, text[], uuid),
    ferry.push_mutations(jsonb, jsonb), ferry.push_body(text, integer), ferry.push(jsonb)
to ferry_client;
