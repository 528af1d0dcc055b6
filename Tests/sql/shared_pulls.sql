-- What a gateway reads to answer the shared part of pulls from memory
-- (sql/ferry/functions/shared_pulls.sql), the cursor that lets it (pull.sql's
-- shared_since and last_mutation_id), and the cues that tell it whose rows changed
-- (cues.sql: the writer's transaction after the device). The puzzle example's
-- daily_puzzles is shared, its profiles a user's own.
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;
select plan(12);

create schema shared_pulls_test;
create table shared_pulls_test.state (cursor jsonb);

-- As a device of a user: the gateway's identity statement.
create function shared_pulls_test.as_user(p_user uuid) returns void language sql as $$
    select pg_catalog.set_config('ferry.user_id', p_user::text, true),
        pg_catalog.set_config('ferry.device_id', 'phone', true),
        pg_catalog.set_config('role', 'ferry_client', true);
$$;
grant usage on schema shared_pulls_test to ferry_client;
grant all on shared_pulls_test.state to ferry_client;

select ferry.new_user_id() as ana \gset
insert into ferry.users (id) values (:'ana');
insert into ferry.devices (user_id, device_id, last_mutation_id) values (:'ana', 'phone', 4);

-- A first load: its done cursor names the device's last mutation.
select shared_pulls_test.as_user(:'ana');
insert into shared_pulls_test.state (cursor) select (ferry.pull(null, 100) ->> 'cursor')::jsonb;
reset role;
select is((select (s.cursor ->> 'last_mutation_id')::bigint from shared_pulls_test.state s), 4::bigint,
    'a done cursor names the last mutation of its answer');

-- An operator publishes a puzzle; the user changes their own profile. This file runs in
-- one transaction, whose own writes no snapshot taken in it sees as committed, so what a
-- pull returns of them is checked by SharedPullCacheTests against a real gateway; here,
-- what the functions read and the cursors' shape.
insert into public.daily_puzzles (day, grid) values ('2026-12-01', pg_catalog.repeat('5', 81));
insert into public.profiles (user_id, username) values (:'ana', 'ana');
update shared_pulls_test.state s set cursor = s.cursor || '{"since": "1:1:"}';

select shared_pulls_test.as_user(:'ana');
select is((select pg_catalog.count(*) from ferry.shared_changes(null)), 0::bigint,
    'shared_changes without a snapshot reads nothing (a cache''s first read)');
select is(
    (select pg_catalog.array_agg(c.table_name::text || ' ' || (c.key ->> 'day') || ' ' || (c.body ->> 'grid'))
        from ferry.shared_changes('1:1:') c),
    array['daily_puzzles 2026-12-01 ' || pg_catalog.repeat('5', 81)],
    'shared_changes reads the shared rows the snapshot has not seen, and no user''s own');
select is(
    (select c.body from ferry.shared_changes('1:1:') c),
    (select pg_catalog.to_jsonb(p) - ferry.internal_columns()::text[] from public.daily_puzzles p),
    'a shared row''s body is its columns without Ferry''s own, as a pull reader sends it');
select is(
    (select c.stamp from ferry.shared_changes('1:1:') c),
    (select p._stamp from public.daily_puzzles p where p.day = '2026-12-01'),
    'with its change stamp, which the gateway compares with cursors');
select ok((select s.open from ferry.shared_pull_state() s),
    'every shared table has only register_table''s open read policy');
select ok((select s.snapshot = pg_catalog.pg_current_snapshot()::text from ferry.shared_pull_state() s),
    'the state names the statement''s own snapshot');
-- A cursor whose shared tables a gateway moved on: read, and ended at one snapshot again.
select is(
    (select pg_catalog.array_agg(k order by k) from pg_catalog.jsonb_object_keys((ferry.pull(
        (select (s.cursor || '{"shared_since": "1:1:"}')::text from shared_pulls_test.state s), 100)
        ->> 'cursor')::jsonb) k),
    array['epoch', 'last_mutation_id', 'lsn', 'since', 'started', 'timeline'],
    'a pull from a cursor with shared_since ends with a done cursor without it');
select throws_ok(
    pg_catalog.format('select ferry.pull(%L, 100)', '{"shared_since": "1:1:", "last_mutation_id": 0}'),
    '22023', null, 'a cursor with shared_since and no since is refused');
reset role;

-- The cue of a write names its transaction after the device, as the gateway reads it.
select matches(ferry.cue_device(), '^phone@[0-9]+$', 'a cue names the device and, after an @, its transaction');
select pg_catalog.set_config('ferry.device_id', '', true);
select matches(ferry.cue_device(), '^-@[0-9]+$', 'an operator''s cue names no device and its transaction');

-- A shared table an operator restricts is read per user only: the cache stands aside.
create policy shared_pulls_test_only_some on public.daily_puzzles as restrictive for select to ferry_client
    using (day > '2000-01-01');
select shared_pulls_test.as_user(:'ana');
select ok(not (select s.open from ferry.shared_pull_state() s),
    'a shared table with a policy of its operator''s is not open to the cache');
reset role;

select * from finish();
rollback;
