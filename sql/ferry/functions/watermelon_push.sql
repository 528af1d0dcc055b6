-- POST /v1/watermelon/sync (docs/WATERMELONDB.md; watermelon.sql names the other files):
-- the changes object checked whole, then written table by table, refused whole on a
-- conflict with the timestamp's snapshot (watermelon_timestamps.sql says why that check
-- is correct). Requests run as ferry_client.

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
-- updated one that does not is created: an upsert), and what it does under each
-- strategy is ferry.write_rule's (strategies.sql), as for /v1/push: for lww an INSERT ... ON CONFLICT DO UPDATE of
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
    -- Not ferry.primary_key_list, a function whose SET clause keeps it from being
    -- inlined: its body would be planned again in every push's transaction.
    v_key text := (
        select pg_catalog.string_agg(pg_catalog.format('%I', k.name), ', ' order by k.ordinal)
        from ferry.primary_key(p_table) k);
    v_owner_match text := case when p_owner is null then '' else pg_catalog.format('t.%I = $3 and ', p_owner) end;
    -- What created and updated records (upserts) and deleted ids do (strategies.sql).
    v_rule jsonb := ferry.write_rule(p_strategy, 'upsert', v_name);
    v_delete_rule jsonb := ferry.write_rule(p_strategy, 'delete', v_name);
    v_on_conflict text;
    v_group record;
    v_columns text;
    v_values text;
    v_sets text;
    v_differs text;
    v_sql text;
    v_written text[] := '{}'::text[];
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
    if ferry.write_rule(p_strategy, null, v_name) ? 'refused' then
        select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', x.id, 'code', r.rule ->> 'refused',
                'message', r.rule ->> 'message')), '[]')
            into rejected
            from (select r ->> 'id' as id from pg_catalog.jsonb_array_elements(p_records) r
                  union all select d from pg_catalog.unnest(p_deleted) d) x
            cross join (select ferry.write_rule(p_strategy, null, v_name) as rule) r;
        return;
    end if;
    if (v_rule ->> 'held')::boolean then
        -- ferry.watermelon_schema serves no device_lock table: a caller that got here
        -- skipped ferry.watermelon_push's checks.
        raise exception 'watermelon push: % is written by its lock holder only (/v1/locks)', v_name
            using errcode = '22023';
    end if;
    -- A row under the key: overwritten when the pull saw its version (or this
    -- transaction wrote it), else left as it is, a conflict; revived when it is a
    -- tombstone and the rule says so; else left, and classified below.
    v_on_conflict := case
        when v_rule ->> 'live' = 'overwrite' then 'update set %s_deleted = false'
            || ' where pg_catalog.pg_visible_in_snapshot(t._stamp, $2) or t._stamp = pg_catalog.pg_current_xact_id()'
        when v_rule ->> 'tombstone' = 'revive' then 'update set %s_deleted = false where t._deleted'
        else 'nothing' end;

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
        -- A tombstone revived starts from the given columns: the others take their
        -- defaults (what excluded holds for a column the insert does not name).
        v_sets := coalesce(v_sets, '') || coalesce((
            select pg_catalog.string_agg(pg_catalog.format('%1$I = case when t._deleted then excluded.%1$I else t.%1$I end, ',
                c ->> 'name'), '' order by c ->> 'name')
            from pg_catalog.jsonb_array_elements(v_writable) c
            where not (c ->> 'name') = any (v_group.given)), '');
        v_sql := pg_catalog.format(
            'with w as (insert into %s as t (%sid%s) select %se.r ->> ''id''%s from pg_catalog.jsonb_array_elements($1) e(r)'
                ' on conflict (%s) do %s returning t.id) select pg_catalog.array_agg(w.id) from w',
            p_table, case when p_owner is null then '' else pg_catalog.format('%I, ', p_owner) end,
            coalesce(v_columns, ''), case when p_owner is null then '' else '$3, ' end, coalesce(v_values, ''),
            v_key, pg_catalog.format(v_on_conflict, coalesce(v_sets, '')));

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
        if v_rule ->> 'live' = 'overwrite' then
            -- Not overwritten: changed after the pull.
            conflicts := conflicts || v_missing;
        elsif v_rule ->> 'live' = 'same_or_immutable' or v_rule ->> 'tombstone' = 'immutable' then
            -- Not inserted: an existing record, refused unless the rule lets it stand.
            execute pg_catalog.format(
                'select pg_catalog.array_agg(t.id) from %s t join pg_catalog.jsonb_array_elements($1) e(r)'
                    ' on %st.id = e.r ->> ''id'' where t.id = any ($2) and (%s%s)',
                p_table, v_owner_match, case when v_rule ->> 'tombstone' = 'immutable' then 't._deleted' else 'false' end,
                case when v_rule ->> 'live' = 'same_or_immutable' then coalesce(v_differs, '') else '' end)
                into v_ids using v_group.records, v_missing, v_user;
            rejected := rejected || coalesce((
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', i, 'code', 'immutable',
                    'message', pg_catalog.format('a different record of %s exists under this id, or was deleted', v_name)))
                from pg_catalog.unnest(v_ids) i), '[]');
        end if;
    end loop;
    wrote := pg_catalog.cardinality(v_written) > 0;

    if pg_catalog.cardinality(p_deleted) > 0 then
        if v_delete_rule ? 'refused' then
            -- Refused where there is a live record to delete.
            execute pg_catalog.format(
                'select pg_catalog.array_agg(t.id) from %s t where %st.id = any ($1) and not t._deleted',
                p_table, v_owner_match)
                into v_ids using p_deleted, p_since, v_user;
            rejected := rejected || coalesce((
                select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', i, 'code', v_delete_rule ->> 'refused',
                    'message', v_delete_rule ->> 'message'))
                from pg_catalog.unnest(v_ids) i), '[]');
        else
            execute pg_catalog.format(
                'update %s t set _deleted = true where %st.id = any ($1) and not t._deleted%s',
                p_table, v_owner_match, case when v_rule ->> 'live' = 'overwrite' then
                    ' and (pg_catalog.pg_visible_in_snapshot(t._stamp, $2) or t._stamp = pg_catalog.pg_current_xact_id())'
                    else '' end)
                using p_deleted, p_since, v_user;
            get diagnostics v_count = row_count;
            wrote := wrote or v_count > 0;
            if v_rule ->> 'live' = 'overwrite' then
                -- Still live: changed after the pull, so the delete did not touch it (a
                -- write that overwrites, a delete too, wins only over what the pull saw).
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
-- conflict raises FRCNF, so nothing is applied. A \u0000 in a string value (text cannot
-- hold it) is dropped: Backend.md asks the server to sanitize content rather than fail;
-- in a table name, an id or a column name it is refused (22023), never dropped.
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
    v_conflicts jsonb := '{}'::jsonb;
    v_rejections jsonb := '[]'::jsonb;
    v_rejected_ids jsonb := '{}'::jsonb;
    v_cued text[] := '{}'::text[];
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
        -- In a table name, an id or a column name it is refused: dropping it would write
        -- another key ("g\u0000t" as "gt"). Marked first as the six characters \u0000
        -- (a "\\u0000"), it shows in those keys; in values it is then dropped.
        v_changes := pg_catalog.replace(pg_catalog.replace(p_body, '\\', '\u005c'), '\u0000', '\\u0000')::jsonb;
        select pg_catalog.format('table "%s": %s', e.key, k.what) into v_first
            from pg_catalog.jsonb_each(case when pg_catalog.jsonb_typeof(v_changes) = 'object' then v_changes else '{}' end) e
            left join lateral (
                select 'the table name' as what where pg_catalog.strpos(e.key, '\u0000') > 0
                union all
                select pg_catalog.format('id "%s"', r.value ->> 'id')
                    from pg_catalog.jsonb_array_elements(
                        case when pg_catalog.jsonb_typeof(e.value -> 'created') = 'array' then e.value -> 'created' else '[]'::jsonb end
                        || case when pg_catalog.jsonb_typeof(e.value -> 'updated') = 'array' then e.value -> 'updated' else '[]'::jsonb end
                    ) r
                    where pg_catalog.strpos(r.value ->> 'id', '\u0000') > 0
                union all
                select pg_catalog.format('id "%s"', d.value #>> '{}')
                    from pg_catalog.jsonb_array_elements(case when pg_catalog.jsonb_typeof(e.value -> 'deleted') = 'array' then e.value -> 'deleted' else '[]'::jsonb end) d
                    where pg_catalog.strpos(d.value #>> '{}', '\u0000') > 0
                union all
                select pg_catalog.format('column "%s"', c.key)
                    from pg_catalog.jsonb_array_elements(
                        case when pg_catalog.jsonb_typeof(e.value -> 'created') = 'array' then e.value -> 'created' else '[]'::jsonb end
                        || case when pg_catalog.jsonb_typeof(e.value -> 'updated') = 'array' then e.value -> 'updated' else '[]'::jsonb end
                    ) r,
                        pg_catalog.jsonb_each(case when pg_catalog.jsonb_typeof(r.value) = 'object' then r.value end) c
                    where pg_catalog.strpos(c.key, '\u0000') > 0
                limit 1
            ) k on true
            where k.what is not null
            order by e.key limit 1;
        if v_first is not null then
            raise exception '%: a \u0000 cannot be in a table name, an id or a column name', v_first using errcode = '22023';
        end if;
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
        perform ferry.queue_cue(v_user::text || ' ' || ferry.cue_device() || ' ' || t)
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
    ferry.watermelon_max_failed_attempts(), ferry.watermelon_write(regclass, text, name, pg_snapshot, jsonb, text[]),
    ferry.watermelon_push(bigint, text, integer)
from public;
grant execute on function
    ferry.watermelon_max_failed_attempts(), ferry.watermelon_write(regclass, text, name, pg_snapshot, jsonb, text[]),
    ferry.watermelon_push(bigint, text, integer)
to ferry_client;
