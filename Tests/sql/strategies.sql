-- Each strategy's rule (sql/ferry/functions/strategies.sql, docs/TABLES.md "Strategies")
-- as both write paths apply it: ferry.push_mutations, through ferry.push, and
-- ferry.watermelon_write, the per-table write of a WatermelonDB push. One table of
-- cases, each run through both paths from the same stored row, compares what is left
-- under the key (or the refusal's code) with what the rule says.
--
-- Run by Tests/sql/run.sh (make test) in a scratch database migrated with sql/ferry and
-- the examples; everything here is made inside one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;

-- MARK: - Tables, one per strategy, and the paths as functions

-- note: a column the cases' writes never send (a revived tombstone's check, at the end).
create table public.rule_lww (user_id uuid not null, id text not null, title text, note text default 'fresh',
    primary key (user_id, id));
create table public.rule_insert_only (like public.rule_lww including all);
create table public.rule_set (like public.rule_lww including all);
create table public.rule_device_lock (like public.rule_lww including all);
create table public.rule_readonly (like public.rule_lww including all);
create table public.rule_shared (id text primary key, title text);

insert into ferry.users (id) values ('00000000-0000-4000-8000-0000000000a1'), ('00000000-0000-4000-8000-0000000000b2');

create schema rule_test;
grant usage on schema rule_test to ferry_client;

do $$
begin
    perform ferry.register_table('public.rule_lww', strategy => 'lww');
    perform ferry.register_table('public.rule_insert_only', strategy => 'insert_only');
    perform ferry.register_table('public.rule_set', strategy => 'set');
    perform ferry.register_table('public.rule_device_lock', strategy => 'device_lock');
    perform ferry.register_table('public.rule_readonly', strategy => 'readonly');
    perform ferry.register_table('public.rule_shared', strategy => 'shared');
end
$$;

create function rule_test.caller() returns uuid language sql immutable
as $$ select '00000000-0000-4000-8000-0000000000a1'::uuid $$;

-- Acts as a request does: role ferry_client, the caller's user and a device.
create function rule_test.act_as(p_device text) returns void language sql
as $$
    select pg_catalog.set_config('role', 'ferry_client', true), pg_catalog.set_config('ferry.user_id', rule_test.caller()::text, true),
        pg_catalog.set_config('ferry.device_id', p_device, true);
$$;

create function rule_test.act_as_owner() returns void language sql
as $$ select pg_catalog.set_config('role', 'none', true) $$;

-- The row under key k of the table before a write: none, or its title, live or a tombstone.
create function rule_test.store(p_table text, p_prior text) returns void language plpgsql
as $$
begin
    perform pg_catalog.set_config('ferry.hard_delete', 'on', true);
    execute pg_catalog.format('delete from public.%I', p_table);
    perform pg_catalog.set_config('ferry.hard_delete', 'off', true);
    if p_prior = 'none' then
        return;
    end if;
    execute pg_catalog.format('insert into public.%I (%sid, title, _deleted) values (%s''k'', $1, $2)', p_table,
        case when p_table = 'rule_shared' then '' else 'user_id, ' end,
        case when p_table = 'rule_shared' then '' else pg_catalog.quote_literal(rule_test.caller()) || ', ' end)
        using case when p_prior in ('same', 'tombstone same') then 'new' else 'old' end, p_prior like 'tombstone%';
end
$$;

-- What is under key k now: absent, live:<title> or tombstone:<title>.
create function rule_test.stored(p_table text) returns text language plpgsql
as $$
declare
    v_state text;
begin
    execute pg_catalog.format(
        'select case when _deleted then ''tombstone:'' else ''live:'' end || title from public.%I where id = ''k''', p_table)
        into v_state;
    return coalesce(v_state, 'absent');
end
$$;

-- A push of one mutation (title "new" under key k) by device d1: the refusal's code, or
-- what is stored after it.
create function rule_test.push_outcome(p_table text, p_op text) returns text language plpgsql
as $$
declare
    v_answer jsonb;
begin
    perform rule_test.act_as('d1');
    v_answer := ferry.push(pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
        'id', ferry.lock_device() + 1, 'table', p_table, 'op', p_op,
        case when p_op = 'delete' then 'key' else 'row' end,
        case when p_op = 'delete' then '{"id": "k"}'::jsonb else '{"id": "k", "title": "new"}'::jsonb end)));
    perform rule_test.act_as_owner();
    return coalesce(v_answer -> 'results' -> 0 ->> 'code', rule_test.stored(p_table));
end
$$;

-- A WatermelonDB push's write of the same (a created or updated record is an upsert, a
-- deleted id a delete), from a pull that saw the stored row.
create function rule_test.watermelon_outcome(p_table text, p_op text) returns text language plpgsql
as $$
declare
    v_strategy text := (select s.strategy from ferry.synced_tables s where s.table_name = ('public.' || p_table)::regclass);
    v_result record;
begin
    perform rule_test.act_as('d1');
    select * into v_result from ferry.watermelon_write(
        ('public.' || p_table)::regclass, v_strategy,
        case when p_table = 'rule_shared' then null else 'user_id'::name end, pg_catalog.pg_current_snapshot(),
        case when p_op = 'delete' then '[]'::jsonb else '[{"id": "k", "title": "new"}]'::jsonb end,
        case when p_op = 'delete' then '{k}'::text[] else '{}' end);
    perform rule_test.act_as_owner();
    return coalesce(v_result.rejected -> 0 ->> 'code',
        case when pg_catalog.cardinality(v_result.conflicts) > 0 then 'conflict' end, rule_test.stored(p_table));
end
$$;

-- MARK: - The rule, as cases

-- prior: what is stored under k before the write (same: title "new", the write's own;
-- old: another title); expected: what the rule leaves, or its refusal's code. A case with
-- watermelon false has no WatermelonDB form (an insert is pushed as an upsert; a
-- device_lock table is not served there).
create temp table rule_cases (strategy text, op text, prior text, expected text, watermelon boolean);
insert into rule_cases values
    ('lww', 'upsert', 'none', 'live:new', true),
    ('lww', 'upsert', 'old', 'live:new', true),
    ('lww', 'upsert', 'tombstone old', 'live:new', true),
    ('lww', 'insert', 'none', 'live:new', false),
    ('lww', 'insert', 'same', 'live:new', false),
    ('lww', 'insert', 'old', 'immutable', false),
    ('lww', 'insert', 'tombstone old', 'live:new', false),
    ('lww', 'delete', 'none', 'absent', true),
    ('lww', 'delete', 'old', 'tombstone:old', true),
    ('lww', 'delete', 'tombstone old', 'tombstone:old', true),
    ('insert_only', 'upsert', 'none', 'live:new', true),
    ('insert_only', 'upsert', 'same', 'live:new', true),
    ('insert_only', 'upsert', 'old', 'immutable', true),
    ('insert_only', 'upsert', 'tombstone same', 'immutable', true),
    ('insert_only', 'insert', 'old', 'immutable', false),
    ('insert_only', 'delete', 'old', 'immutable', true),
    ('set', 'upsert', 'none', 'live:new', true),
    ('set', 'upsert', 'old', 'live:old', true),
    ('set', 'upsert', 'tombstone old', 'live:new', true),
    ('set', 'insert', 'old', 'live:old', false),
    ('set', 'delete', 'old', 'tombstone:old', true),
    ('set', 'delete', 'tombstone old', 'tombstone:old', true),
    ('device_lock', 'upsert', 'none', 'live:new', false),
    ('device_lock', 'upsert', 'old', 'live:new', false),
    ('device_lock', 'insert', 'old', 'immutable', false),
    ('device_lock', 'delete', 'old', 'tombstone:old', false),
    ('readonly', 'upsert', 'none', 'read_only', true),
    ('readonly', 'insert', 'old', 'read_only', false),
    ('readonly', 'delete', 'old', 'read_only', true),
    ('shared', 'upsert', 'none', 'read_only', true),
    ('shared', 'delete', 'old', 'read_only', true);

select plan((select pg_catalog.count(*)::integer from rule_cases)
    + (select pg_catalog.count(*)::integer from rule_cases where watermelon) + 21);

-- MARK: - Both paths against the cases

-- Case by case, in order: the row stored, then the write through one path.
create function rule_test.run_cases(p_path text) returns setof text language plpgsql
as $$
declare
    c record;
begin
    for c in select * from rule_cases where p_path = 'push' or watermelon order by strategy, op, prior loop
        perform rule_test.store('rule_' || c.strategy, c.prior);
        return next is(case p_path when 'push' then rule_test.push_outcome('rule_' || c.strategy, c.op)
                else rule_test.watermelon_outcome('rule_' || c.strategy, c.op) end,
            c.expected, pg_catalog.format('%s: %s %s onto %s', p_path, c.strategy, c.op, c.prior));
    end loop;
end
$$;

select * from rule_test.run_cases('push');
select * from rule_test.run_cases('watermelon');

-- MARK: - What only one path has

-- A push answers duplicate where the rule leaves the row as it is.
select rule_test.store('rule_set', 'old');
select is((select ferry.push(pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('id', ferry.lock_device() + 1,
        'table', 'rule_set', 'op', 'insert', 'row', '{"id": "k", "title": "new"}'::jsonb))) -> 'results' -> 0 ->> 'status'
        from rule_test.act_as('d1')), 'duplicate', 'push: a set insert onto a live row is a duplicate');
select rule_test.act_as_owner();
select rule_test.store('rule_insert_only', 'same');
select is((select ferry.push(pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('id', ferry.lock_device() + 1,
        'table', 'rule_insert_only', 'op', 'insert', 'row', '{"id": "k", "title": "new"}'::jsonb))) -> 'results' -> 0 ->> 'status'
        from rule_test.act_as('d1')), 'duplicate', 'push: the same insert_only row again is a duplicate');
select rule_test.act_as_owner();

-- An insert_only delete is refused by push whatever is stored; WatermelonDB refuses only
-- the deletion of a live record (a deleted id it never had is ignored, as for every table).
select rule_test.store('rule_insert_only', 'none');
select is(rule_test.push_outcome('rule_insert_only', 'delete'), 'immutable', 'push: an insert_only delete of no row is refused');
select rule_test.store('rule_insert_only', 'none');
select is(rule_test.watermelon_outcome('rule_insert_only', 'delete'), 'absent',
    'watermelon: an insert_only delete of no record is ignored');

-- device_lock: only the device holding the lock writes the row.
select rule_test.store('rule_device_lock', 'old');
update public.rule_device_lock set _lock_device = 'd2', _lock_heartbeat_at = pg_catalog.now();
select is(rule_test.push_outcome('rule_device_lock', 'upsert'), 'lock_not_held', 'push: device_lock, held by another device');
select is(rule_test.push_outcome('rule_device_lock', 'delete'), 'lock_not_held',
    'push: device_lock delete, held by another device');
select is(rule_test.stored('rule_device_lock'), 'live:old', 'a row another device holds is left as it is');
select rule_test.act_as('d1');
select throws_ok($$ select ferry.watermelon_write('public.rule_device_lock', 'device_lock', 'user_id',
        pg_catalog.pg_current_snapshot(), '[{"id": "k", "title": "new"}]', '{}') $$,
    '22023', null, 'watermelon: a device_lock table is never written');
select rule_test.act_as_owner();

-- lww on WatermelonDB: a row changed after the pull is a conflict, not overwritten or
-- deleted. (_stamp set past every snapshot: a version the pull cannot have seen.)
select rule_test.store('rule_lww', 'old');
set local session_replication_role = replica;
update public.rule_lww set _stamp = '1000000000000'::xid8;
set local session_replication_role = origin;
select is(rule_test.watermelon_outcome('rule_lww', 'upsert'), 'conflict', 'watermelon: lww upsert of a row changed after the pull');
select is(rule_test.stored('rule_lww'), 'live:old', 'watermelon: the conflicting row is left as it is');
select is(rule_test.watermelon_outcome('rule_lww', 'delete'), 'conflict', 'watermelon: lww delete of a row changed after the pull');
select is(rule_test.stored('rule_lww'), 'live:old', 'watermelon: the conflicting row is not deleted');
-- push has no pull to compare with: last write wins.
select is(rule_test.push_outcome('rule_lww', 'upsert'), 'live:new', 'push: lww upsert of a row changed since any pull');

-- Another user's row: forbidden on both paths.
select rule_test.store('rule_lww', 'none');
select is((select ferry.push(pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('id', ferry.lock_device() + 1,
        'table', 'rule_lww', 'op', 'upsert',
        'row', '{"id": "k", "title": "new", "user_id": "00000000-0000-4000-8000-0000000000b2"}'::jsonb))) -> 'results' -> 0 ->> 'code'
        from rule_test.act_as('d1')), 'forbidden', 'push: a row naming another user is forbidden');
select rule_test.act_as_owner();
select is((select (w.rejected -> 0 ->> 'code') from rule_test.act_as('d1'), ferry.watermelon_write('public.rule_lww', 'lww', 'user_id',
        pg_catalog.pg_current_snapshot(), '[{"id": "k", "title": "new", "user_id": "00000000-0000-4000-8000-0000000000b2"}]',
        '{}') w), 'forbidden', 'watermelon: a record naming another user is forbidden');
select rule_test.act_as_owner();

-- A revived tombstone starts from the columns given: a column the write does not send
-- takes its default, not the deleted row's value; a live row's stays (a merge write).
create function rule_test.note_after(p_table text, p_path text, p_op text, p_prior text) returns text language plpgsql
as $$
declare
    v_note text;
begin
    perform rule_test.store(p_table, p_prior);
    execute pg_catalog.format('update public.%I set note = ''kept''', p_table);
    perform case p_path when 'push' then rule_test.push_outcome(p_table, p_op)
        else rule_test.watermelon_outcome(p_table, p_op) end;
    execute pg_catalog.format('select note from public.%I where id = ''k''', p_table) into v_note;
    return v_note;
end
$$;
select is(rule_test.note_after('rule_lww', 'push', 'upsert', 'tombstone old'), 'fresh',
    'push: an lww upsert reviving a tombstone starts from the given columns');
select is(rule_test.note_after('rule_lww', 'push', 'upsert', 'old'), 'kept', 'push: an lww upsert of a live row merges');
select is(rule_test.note_after('rule_lww', 'push', 'insert', 'tombstone old'), 'fresh',
    'push: an lww insert reviving a tombstone starts from the given columns');
select is(rule_test.note_after('rule_set', 'push', 'insert', 'tombstone old'), 'fresh',
    'push: a set insert reviving a tombstone starts from the given columns');
select is(rule_test.note_after('rule_lww', 'watermelon', 'upsert', 'tombstone old'), 'fresh',
    'watermelon: an lww upsert reviving a tombstone starts from the given columns');
-- A default changed since the table's static upsert was built: push builds the statement.
alter table public.rule_lww alter column note set default 'fresher';
select is(rule_test.note_after('rule_lww', 'push', 'upsert', 'tombstone old'), 'fresher',
    'push: the built lww upsert reviving a tombstone starts from the given columns');

select * from finish();
rollback;
