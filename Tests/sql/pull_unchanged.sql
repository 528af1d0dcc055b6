-- How a steady-state pull skips the tables with nothing new for the caller
-- (sql/ferry/functions/registry.sql, ferry.install_pull_rows): ferry.pull_candidates
-- probes every synced table in one statement and names those with something new since
-- the cursor, and what the dispatcher ferry.pull_rows answers is what the table's reader
-- answers. And ferry.pull_steady, which answers a pull after a done cursor in a few
-- statements, reading only the tables the probes name, or leaves it to ferry.pull.
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
create table public.probe_s (id text primary key, title text);
insert into ferry.users (id) values ('00000000-0000-4000-8000-0000000000d1'), ('00000000-0000-4000-8000-0000000000e2');
do $$
begin
    perform ferry.register_table('public.probe_a', strategy => 'lww');
    perform ferry.register_table('public.probe_b', strategy => 'lww');
    perform ferry.register_table('public.probe_c', strategy => 'lww');
    perform ferry.register_table('public.probe_s', strategy => 'shared');
end
$$;

-- A: an old row in each table, a new one in probe_a, a new tombstone in probe_c. B: a new
-- row in probe_b (which A must not see, nor be read for).
alter table public.probe_a disable trigger ferry_stamp;
alter table public.probe_b disable trigger ferry_stamp;
alter table public.probe_c disable trigger ferry_stamp;
alter table public.probe_s disable trigger ferry_stamp;
insert into public.probe_a (user_id, id, title, _stamp) values
    ('00000000-0000-4000-8000-0000000000d1', 'old', 'seen', '100'), ('00000000-0000-4000-8000-0000000000d1', 'new', 'unseen', '200');
insert into public.probe_b (user_id, id, title, _stamp) values
    ('00000000-0000-4000-8000-0000000000d1', 'old', 'seen', '100'), ('00000000-0000-4000-8000-0000000000e2', 'new', 'B''s', '200');
insert into public.probe_c (user_id, id, title, _stamp, _deleted) values
    ('00000000-0000-4000-8000-0000000000d1', 'old', 'seen', '100', false), ('00000000-0000-4000-8000-0000000000d1', 'gone', 'x', '200', true);
insert into public.probe_s (id, title, _stamp) values ('old', 'seen', '100'), ('new', 'unseen', '200');
alter table public.probe_s enable trigger ferry_stamp;
alter table public.probe_a enable trigger ferry_stamp;
alter table public.probe_b enable trigger ferry_stamp;
alter table public.probe_c enable trigger ferry_stamp;

create schema probe_test;
grant usage on schema probe_test to ferry_client;

-- Makes this transaction A's device d1 as the gateway would (ferry_client), until the
-- caller sets role back to none.
create function probe_test.as_a() returns void language sql
as $$
    select pg_catalog.set_config('role', 'ferry_client', true),
        pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000d1', true),
        pg_catalog.set_config('ferry.device_id', 'd1', true);
$$;

-- The dispatcher's answer for table p_name, as A, after the cursor "150:150:" (null: a
-- first load), read in this statement's snapshot: {fetched, upserts, deletes, reached}.
create function probe_test.pulled(p_name name, p_since pg_snapshot) returns jsonb language plpgsql
as $$
declare
    v_answer jsonb;
begin
    perform probe_test.as_a();
    select pg_catalog.to_jsonb(r) into v_answer
        from ferry.pull_rows(p_name, 100, pg_catalog.pg_current_snapshot(), p_since, null, null, null) r;
    perform pg_catalog.set_config('role', 'none', true);
    return v_answer;
end
$$;

-- The same from the table's reader itself, with at most p_limit rows.
create function probe_test.read(p_name name, p_since pg_snapshot, p_limit integer default 100) returns jsonb language plpgsql
as $$
declare
    v_answer jsonb;
begin
    perform probe_test.as_a();
    execute pg_catalog.format('select pg_catalog.to_jsonb(r) from %s($1, $4, $2, pg_catalog.pg_current_snapshot(), $3, null, null) r',
            (select s.pull_reader from ferry.synced_tables s where s.table_name = p_name::regclass))
        into v_answer using p_name::regclass, coalesce(pg_catalog.pg_snapshot_xmin(p_since), '0'), p_since, p_limit;
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

-- ferry.pull_candidates as A, after the cursor "150:150:" (the shared tables after
-- p_shared_since, when given), read in this statement's snapshot.
create function probe_test.candidates(p_shared_since pg_snapshot default null) returns name[] language plpgsql
as $$
declare
    v_answer name[];
begin
    perform probe_test.as_a();
    v_answer := ferry.pull_candidates(pg_catalog.pg_current_snapshot(), '150:150:', p_shared_since);
    perform pg_catalog.set_config('role', 'none', true);
    return v_answer;
end
$$;

select plan(29);

-- What each reader answers, called directly (each call counted).
create temp table expected as
select n, probe_test.read(n, '150:150:') as answer from unnest('{probe_a,probe_b,probe_c}'::name[]) n;
select is((select pg_catalog.array_agg(probe_test.reader_calls(n) order by n) from unnest('{probe_a,probe_b,probe_c}'::name[]) n),
    '{1,1,1}'::bigint[], 'each reader called once directly');

-- Through the dispatcher: the reader's answer.
select is(probe_test.pulled('probe_a', '150:150:'), (select e.answer from expected e where e.n = 'probe_a'),
    'probe_a, a new row: the reader''s answer');
select is(pg_catalog.jsonb_path_query_array(probe_test.pulled('probe_a', '150:150:'), '$.upserts[*].id'), '["new"]',
    'probe_a: the new row only');
select is(probe_test.pulled('probe_b', '150:150:'), (select e.answer from expected e where e.n = 'probe_b'),
    'probe_b, nothing new for A (B''s new row is not A''s): the reader''s answer');
select is(probe_test.pulled('probe_b', '150:150:') ->> 'fetched', '0', 'probe_b: nothing fetched');
select is(probe_test.pulled('probe_c', '150:150:'), (select e.answer from expected e where e.n = 'probe_c'),
    'probe_c, a new tombstone: the reader''s answer');
select is(probe_test.pulled('probe_c', '150:150:') -> 'deletes', '[{"id": "gone", "user_id": "00000000-0000-4000-8000-0000000000d1"}]'::jsonb,
    'probe_c: the delete');
-- A first load.
select is(probe_test.pulled('probe_b', null) -> 'upserts' -> 0 ->> 'title', 'seen', 'probe_b, first load: A''s row');

-- ferry.pull_steady as A after the cursor "150:150:", at most p_limit rows.
create function probe_test.steady(p_limit integer default 100) returns jsonb language plpgsql
as $$
declare
    v_answer jsonb;
begin
    perform probe_test.as_a();
    v_answer := ferry.pull_steady('{}', pg_catalog.pg_current_snapshot(), '150:150:', null, p_limit);
    perform pg_catalog.set_config('role', 'none', true);
    return v_answer;
end
$$;

-- The steady state: what the readers answer, for the tables with something new only.
select is(probe_test.steady() -> 'changes' -> 'probe_a' -> 'upserts', probe_test.pulled('probe_a', '150:150:') -> 'upserts',
    'steady: probe_a''s new row, as its reader reads it');
select is(probe_test.steady() -> 'changes' -> 'probe_c',
    pg_catalog.jsonb_build_object('upserts', '[]'::jsonb, 'deletes', probe_test.pulled('probe_c', '150:150:') -> 'deletes'),
    'steady: probe_c''s tombstone, as its reader reads it');
select is((select pg_catalog.array_agg(k order by k) from pg_catalog.jsonb_object_keys(probe_test.steady() -> 'changes') k),
    '{probe_a,probe_c,probe_s}'::text[], 'steady: the tables with something new for A, not probe_b');
select is(probe_test.steady() - 'changes' - 'cursor', '{"has_more": false, "last_mutation_id": 0}'::jsonb,
    'steady: a whole answer');
select is(probe_test.steady(3) -> 'changes', probe_test.steady() -> 'changes', 'steady: rows that fill the page exactly');
select is(probe_test.steady(2), null, 'steady: rows past the limit are left to ferry.pull (a page ends inside a table)');

-- All tables at once.
select ok('probe_a' = any (probe_test.candidates()) and 'probe_c' = any (probe_test.candidates()),
    'candidates: the tables with something new for A');
select ok(not 'probe_b' = any (probe_test.candidates()), 'candidates: not the table with nothing new for A');
select ok('probe_s' = any (probe_test.candidates()), 'candidates: a shared table with a row new since the cursor');
select ok(not 'probe_s' = any (probe_test.candidates('250:250:')), 'candidates: a shared table read after shared_since, nothing new since it');
select is((select pg_catalog.array_agg(c order by o) from unnest(probe_test.candidates()) with ordinality u(c, o)),
    (select pg_catalog.array_agg(c order by c) from unnest(probe_test.candidates()) c), 'candidates: in name order');

-- ferry.pull after the cursor calls no reader, and reads only the tables with something
-- new (probe_b is probed, once, never read).
create temp table before_pull as
select n, probe_test.reader_calls(n) as calls,
    (select t.idx_scan + t.seq_scan from pg_catalog.pg_stat_xact_user_tables t where t.relid = n::regclass) as scans
from unnest('{probe_a,probe_b,probe_c}'::name[]) n;
select is(
    (select pg_catalog.jsonb_object_keys(ferry.pull('{"since": "150:150:", "last_mutation_id": 0}', 100) -> 'changes')
        where pg_catalog.set_config('role', 'ferry_client', true) is not null
            and pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000d1', true) is not null
            and pg_catalog.set_config('ferry.device_id', 'd1', true) is not null
        order by 1 limit 1),
    'probe_a', 'pull after the cursor: A''s new rows');
reset role;
select is((select pg_catalog.array_agg(probe_test.reader_calls(b.n) - b.calls order by b.n) from before_pull b),
    '{0,0,0}'::bigint[], 'pull after the cursor: no reader is called');
select is((select pg_catalog.array_agg(t.idx_scan + t.seq_scan - b.scans order by b.n)
        from before_pull b join pg_catalog.pg_stat_xact_user_tables t on t.relid = b.n::regclass),
    '{2,1,2}'::bigint[], 'pull after the cursor: each table probed, probe_b not read');
select is(
    (select ferry.pull('{"since": "150:150:", "last_mutation_id": 0}', 2) -> 'has_more'
        where pg_catalog.set_config('role', 'ferry_client', true) is not null
            and pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000d1', true) is not null
            and pg_catalog.set_config('ferry.device_id', 'd1', true) is not null),
    'true'::jsonb, 'pull after the cursor past the limit: a page, with more');
reset role;

-- A synced table the caller may not read: no candidates (pull asks every table it may
-- read, as on a first load).
revoke select on public.probe_b from ferry_client;
select is(probe_test.candidates(), null, 'candidates: null when the caller may not read every synced table');
select is(probe_test.steady(), null, 'steady: null when the caller may not read every synced table');
select ok((select ferry.pull('{"since": "150:150:", "last_mutation_id": 0}', 100) -> 'changes' ? 'probe_a'
        where pg_catalog.set_config('role', 'ferry_client', true) is not null
            and pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000d1', true) is not null
            and pg_catalog.set_config('ferry.device_id', 'd1', true) is not null),
    'pull as a caller that may not read every synced table: the tables it may read');
reset role;

-- The limit, bounded so that no page's limit + 1 overflows.
select throws_ok($$select ferry.pull(null, 0)$$, '22023', null, 'pull: a limit below 1 is refused');
select throws_ok($$select ferry.pull('{"since": "150:150:", "last_mutation_id": 0}', 2147483647)$$, '22023', null,
    'pull: a limit past a million is refused, not overflowed');
select lives_ok($$select ferry.pull('{"since": "150:150:", "last_mutation_id": 0}', 1000000)$$, 'pull: a limit of a million');

select * from finish();
rollback;
