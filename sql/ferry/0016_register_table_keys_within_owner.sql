-- 0016_register_table_keys_within_owner: ferry.register_table warns about a per-user
-- table whose primary key leaves the owner column out, and `ferry migrate` names every
-- such table after a run, unless the table's options say its key is global.
--
-- Why: such a key is one value space for every user. A row is visible to its owner only
-- (RLS), but its key is not: when user A has pushed id 'g-1748432312', user B's write of
-- the same id is refused for good (constraint_violation, or forbidden for an upsert: the
-- row exists and B may not see it) and tells B that somebody has that id. Ids a device makes (a time, a counter, a short
-- random string) collide across users that way. Keyed within its owner, (user_id, id),
-- each user has the whole key space; push, pull, locks and the first-sign-in merge work
-- with such keys (push fills the owner in from the caller, so a row or a delete's key
-- may leave it out).
--
-- A warning, not a refusal: migrations applied before this one (the example apps' own
-- first migrations among them, applied after sql/ferry on a new database) register such
-- tables, and an applied migration is never edited. The example apps re-key theirs in
-- their next migration.
--
-- Adds
--   ferry.tables_keyed_across_users()
--                            every registered table of a strategy clients write (lww,
--                            insert_only, set, device_lock) whose primary key does not
--                            contain its owner column, and whose options do not have
--                            "global_key": true (the operator's word that every user is
--                            meant to share the key: ids the server hands out, say): the
--                            table, its key columns and its owner column. readonly tables
--                            (the operator writes them) and shared ones (no owner) are
--                            never listed.
-- Changes
--   ferry.register_table()   raises a WARNING with a hint for such a table after
--                            registering it, and refuses options.global_key that is not a
--                            boolean (22023). 0013's function is kept as
--                            ferry.register_table_0013 and called first.

create function ferry.tables_keyed_across_users(out table_name regclass, out key_columns text, out owner_column name)
returns setof record
language sql stable set search_path = ''
as $$
    select s.table_name, pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' order by k.position),
        s.owner_column
    from ferry.synced_tables s
    join pg_catalog.pg_index i on i.indrelid = s.table_name and i.indisprimary
    cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as k(attnum, position)
    join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
    where s.strategy in ('lww', 'insert_only', 'set', 'device_lock')
        and (s.options -> 'global_key') is distinct from 'true'::jsonb
    group by s.table_name, s.owner_column
    having not pg_catalog.bool_or(a.attname = s.owner_column)
    order by s.table_name::text;
$$;

comment on function ferry.tables_keyed_across_users() is
    'Registered tables clients write whose primary key leaves the owner column out (one key space for all users), unless their options have "global_key": true; ferry migrate warns about each.';

alter function ferry.register_table(regclass, text, name, jsonb) rename to register_table_0013;

create function ferry.register_table(
    p_table regclass, strategy text, owner_column name default 'user_id', options jsonb default '{}'
) returns void
language plpgsql set search_path = '' set client_min_messages = warning
as $$
declare
    v_shared record;
begin
    if pg_catalog.jsonb_typeof($4 -> 'global_key') not in ('boolean', 'null') then
        raise exception 'ferry.register_table(%): options.global_key must be true or false', p_table
            using errcode = '22023';
    end if;
    perform ferry.register_table_0013(p_table, $2, $3, $4);
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
    'Makes a table synced with a strategy (lww, insert_only, set, device_lock, readonly, shared): sync columns, stamp trigger, cue triggers, TRUNCATE guard, (owner, _stamp) index, RLS, grants to ferry_client (column grants without the lock columns for device_lock), pull reader, static upsert, registry row. Warns when a table clients write has a primary key without the owner column (see ferry.tables_keyed_across_users). Idempotent.';

revoke all on function
    ferry.tables_keyed_across_users(), ferry.register_table_0013(regclass, text, name, jsonb),
    ferry.register_table(regclass, text, name, jsonb)
from public;
