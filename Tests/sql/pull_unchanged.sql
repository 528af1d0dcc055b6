-- The pull dispatcher's probe (sql/ferry/functions/registry.sql, ferry.install_pull_rows):
-- a table with nothing new for the caller since the cursor is answered without calling
-- its reader, and what it answers is what the reader would; a table with something new,
-- and any table on a first load, is read by its reader as before. And the same probe
-- over every table at once, ferry.pull_candidates, which ferry.pull asks first.
--
-- Rows are given change stamps by hand (the stamp trigger off while they are stored), so
-- that one transaction can hold a cursor's snapshot ("150:150:": stamps below 150 seen)
-- and rows after it (stamp 200).
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;
-- Function call counts, for pg_stat_xact_user_functions (this transaction's).
set local track_functions = 'all';

create table public.probe_a (user_id uuid not null, id text not null, title text, primary key (user_id, id));
create table public.probe_b (like public.probe_a including all);
create table public.probe_c (like public.probe_a including all);
insert into ferry.users (id) values ('00000000-0000-4000-8000-0000000000d1'), ('00000000-0000-4000-8000-0000000000e2');
do $$
begin
    perform ferry.register_table('public.probe_a', strategy => 'lww');
    perform ferry.register_table('public.probe_b', strategy => 'lww');
    perform ferry.register_table('public.probe_c', strategy => 'lww');
end
$$;

-- A: an old row in each table, a new one in probe_a, a new tombstone in probe_c. B: a new
-- row in probe_b (which A must not see, nor be read for).
alter table public.probe_a disable trigger ferry_stamp;
alter table public.probe_b disable trigger ferry_stamp;
alter table public.probe_c disable trigger ferry_stamp;
insert into public.probe_a (user_id, id, title, _stamp) values
    ('00000000-0000-4000-8000-0000000000d1', 'old', 'seen', '100'), ('00000000-0000-4000-8000-0000000000d1', 'new', 'unseen', '200');
insert into public.probe_b (user_id, id, title, _stamp) values
    ('00000000-0000-4000-8000-0000000000d1', 'old', 'seen', '100'), ('00000000-0000-4000-8000-0000000000e2', 'new', 'B''s', '200');
insert into public.probe_c (user_id, id, title, _stamp, _deleted) values
    ('00000000-0000-4000-8000-0000000000d1', 'old', 'seen', '100', false), ('00000000-0000-4000-8000-0000000000d1', 'gone', 'x', '200', true);
alter table public.probe_a enable trigger ferry_stamp;
alter table public.probe_b enable trigger ferry_stamp;
alter table public.probe_c enable trigger ferry_stamp;

create schema probe_test;
grant usage on schema probe_test to ferry_client;

-- The dispatcher's answer for table p_name, as A, after the cursor "150:150:" (null: a
-- first load), read in this statement's snapshot: {fetched, upserts, deletes, reached}.
create function probe_test.pulled(p_name name, p_since pg_snapshot) returns jsonb language plpgsql
as $$
declare
    v_answer jsonb;
begin
    perform pg_catalog.set_config('role', 'ferry_client', true),
        pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000d1', true),
        pg_catalog.set_config('ferry.device_id', 'd1', true);
    select pg_catalog.to_jsonb(r) into v_answer
        from ferry.pull_rows(p_name, p_name::regclass, 100, coalesce(pg_catalog.pg_snapshot_xmin(p_since), '0'),
            pg_catalog.pg_current_snapshot(), p_since, null, null) r;
    perform pg_catalog.set_config('role', 'none', true);
    return v_answer;
end
$$;

-- The same from the table's reader itself.
create function probe_test.read(p_name name, p_since pg_snapshot) returns jsonb language plpgsql
as $$
declare
    v_answer jsonb;
begin
    perform pg_catalog.set_config('role', 'ferry_client', true),
        pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000d1', true),
        pg_catalog.set_config('ferry.device_id', 'd1', true);
    execute pg_catalog.format('select pg_catalog.to_jsonb(r) from %s($1, 100, $2, pg_catalog.pg_current_snapshot(), $3, null, null) r',
            (select s.pull_reader from ferry.synced_tables s where s.table_name = p_name::regclass))
        into v_answer using p_name::regclass, coalesce(pg_catalog.pg_snapshot_xmin(p_since), '0'), p_since;
    perform pg_catalog.set_config('role', 'none', true);
    return v_answer;
end
$$;

-- How many times the reader of table p_name was called in this transaction.
create function probe_test.reader_calls(p_name name) returns bigint language sql
as $$
    select coalesce((select s.calls from pg_catalog.pg_stat_xact_user_functions s
        join ferry.synced_tables t on t.pull_reader = 'ferry.' || s.funcname
        where t.table_name = p_name::regclass), 0);
$$;

-- ferry.pull_candidates as A, after the cursor "150:150:", read in this statement's snapshot.
create function probe_test.candidates() returns name[] language plpgsql
as $$
declare
    v_answer name[];
begin
    perform pg_catalog.set_config('role', 'ferry_client', true),
        pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000d1', true),
        pg_catalog.set_config('ferry.device_id', 'd1', true);
    v_answer := ferry.pull_candidates('150', pg_catalog.pg_current_snapshot(), '150:150:');
    perform pg_catalog.set_config('role', 'none', true);
    return v_answer;
end
$$;

select plan(16);

-- What each reader answers, called directly (each call counted).
create temp table expected as
select n, probe_test.read(n, '150:150:') as answer from unnest('{probe_a,probe_b,probe_c}'::name[]) n;
select is((select pg_catalog.array_agg(probe_test.reader_calls(n) order by n) from unnest('{probe_a,probe_b,probe_c}'::name[]) n),
    '{1,1,1}'::bigint[], 'each reader called once directly');

-- Through the dispatcher.
select is(probe_test.pulled('probe_a', '150:150:'), (select e.answer from expected e where e.n = 'probe_a'),
    'probe_a, a new row: the reader''s answer');
select is(pg_catalog.jsonb_path_query_array(probe_test.pulled('probe_a', '150:150:'), '$.upserts[*].id'), '["new"]',
    'probe_a: the new row only');
select is(probe_test.reader_calls('probe_a'), 3::bigint, 'probe_a, with a new row: its reader is called');
select is(probe_test.pulled('probe_b', '150:150:'), (select e.answer from expected e where e.n = 'probe_b'),
    'probe_b, nothing new for A (B''s new row is not A''s): the reader''s answer');
select is(probe_test.pulled('probe_b', '150:150:') ->> 'fetched', '0', 'probe_b: nothing fetched');
select is(probe_test.reader_calls('probe_b'), 1::bigint, 'probe_b: its reader is not called');
select is(probe_test.pulled('probe_c', '150:150:'), (select e.answer from expected e where e.n = 'probe_c'),
    'probe_c, a new tombstone: the reader''s answer');
select is(probe_test.pulled('probe_c', '150:150:') -> 'deletes', '[{"id": "gone", "user_id": "00000000-0000-4000-8000-0000000000d1"}]'::jsonb,
    'probe_c: the delete');

-- A first load reads every table through its reader.
select is(probe_test.pulled('probe_b', null) -> 'upserts' -> 0 ->> 'title', 'seen', 'probe_b, first load: A''s row');
select is(probe_test.reader_calls('probe_b'), 2::bigint, 'probe_b, first load: its reader is called');

-- All tables at once.
select ok('probe_a' = any (probe_test.candidates()) and 'probe_c' = any (probe_test.candidates()),
    'candidates: the tables with something new for A');
select ok(not 'probe_b' = any (probe_test.candidates()), 'candidates: not the table with nothing new for A');
select is((select pg_catalog.array_agg(c.relname::text order by c.relname) from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name where s.owner_column is null and c.relname = any (probe_test.candidates())),
    (select pg_catalog.array_agg(c.relname::text order by c.relname) from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name where s.owner_column is null),
    'candidates: every shared table, unprobed');
select is(pg_catalog.cardinality(probe_test.candidates()) - (select pg_catalog.count(*)::integer from ferry.synced_tables s
        where s.owner_column is null), 2, 'candidates: no other per-user table');
-- A synced table the caller may not read: no candidates (pull asks every table, as before).
revoke select on public.probe_b from ferry_client;
select is(probe_test.candidates(), null, 'candidates: null when the caller may not read every synced table');

select * from finish();
rollback;
