-- ferry.changes (sql/ferry/0016_changes.sql): which synced tables changed for whom in
-- which transaction. The statement triggers note every write (ferry.send_cues,
-- functions/cues.sql), ferry.pull_steady reads only the tables it names for a cursor
-- that sees ferry.history.changes_since and probes every table otherwise
-- (functions/registry.sql), a table with a read policy of its own is probed always,
-- ferry.compact_changes folds an owner's rows for a table into one (functions/retention.sql),
-- and register_table and finish_restore start it over.
--
-- As in pull_unchanged.sql, rows and notes are given change stamps by hand, so that one
-- transaction can hold a cursor's snapshot ("150:150:": stamps below 150 seen), a
-- changes_since it sees (100) and rows after it (200).
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;

create table public.noted_a (user_id uuid not null, id text not null, title text, primary key (user_id, id));
create table public.noted_b (like public.noted_a including all);
create table public.noted_s (id text primary key, title text);
insert into ferry.users (id) values ('00000000-0000-4000-8000-0000000000d1'), ('00000000-0000-4000-8000-0000000000e2');
do $$
begin
    perform ferry.register_table('public.noted_a', strategy => 'lww');
    perform ferry.register_table('public.noted_b', strategy => 'lww');
    perform ferry.register_table('public.noted_s', strategy => 'shared');
end
$$;

select plan(22);

create schema noted_test;
grant usage on schema noted_test to ferry_client;

-- This transaction's notes for table p_name: their owners, in order.
create function noted_test.owners(p_name name) returns uuid[] language sql
as $$
    select pg_catalog.array_agg(c.owner order by c.owner) from ferry.changes c
    where c.table_name = p_name and c.changed_by = pg_catalog.pg_current_xact_id();
$$;

-- MARK: - What the triggers note

select is((select h.changes_since from ferry.history h), pg_catalog.pg_current_xact_id(),
    'register_table: ferry.changes starts over at its transaction');

insert into public.noted_a (user_id, id, title) values
    ('00000000-0000-4000-8000-0000000000d1', 'one', 'x'), ('00000000-0000-4000-8000-0000000000d1', 'two', 'x');
select is(noted_test.owners('noted_a'), '{00000000-0000-4000-8000-0000000000d1}'::uuid[],
    'an insert of two rows of one owner: one note');
insert into public.noted_a (user_id, id, title) values ('00000000-0000-4000-8000-0000000000d1', 'three', 'x');
select is(noted_test.owners('noted_a'), '{00000000-0000-4000-8000-0000000000d1}'::uuid[],
    'a second statement of the transaction: still one note');
update public.noted_a set user_id = '00000000-0000-4000-8000-0000000000e2' where id = 'three';
select is(noted_test.owners('noted_a'),
    '{00000000-0000-4000-8000-0000000000d1,00000000-0000-4000-8000-0000000000e2}'::uuid[],
    're-owning a row: a note for the old owner and the new');
set local ferry.skip_cues = 'on';
insert into public.noted_b (user_id, id, title) values ('00000000-0000-4000-8000-0000000000e2', 'one', 'x');
select is(noted_test.owners('noted_b'), '{00000000-0000-4000-8000-0000000000e2}'::uuid[],
    'a write with ferry.skip_cues on is noted all the same');
set local ferry.skip_cues = '';
insert into public.noted_s (id, title) values ('one', 'x');
select is(noted_test.owners('noted_s'), '{00000000-0000-0000-0000-000000000000}'::uuid[],
    'a shared table: noted for the nil owner (every user)');
delete from ferry.changes where table_name = 'noted_b';
delete from public.noted_b where id = 'one';
select is(noted_test.owners('noted_b'), '{00000000-0000-4000-8000-0000000000e2}'::uuid[],
    'a DELETE (a tombstone): noted');
delete from ferry.changes where table_name = 'noted_b';
delete from public.noted_b where id = 'one';
select is(noted_test.owners('noted_b'), null, 'deleting a tombstone (a purge): not noted');

-- MARK: - What a steady-state pull reads

-- A's rows as a cursor "150:150:" sees them: an old one and a new one in each per-user
-- table, a new one in the shared table; A's notes name noted_a only, at 200.
-- (A DELETE makes a tombstone; a second one deletes it.)
delete from public.noted_a;
delete from public.noted_a;
delete from public.noted_b;
delete from public.noted_b;
delete from public.noted_s;
delete from public.noted_s;
delete from ferry.changes;
alter table public.noted_a disable trigger ferry_stamp;
alter table public.noted_b disable trigger ferry_stamp;
alter table public.noted_s disable trigger ferry_stamp;
insert into public.noted_a (user_id, id, title, _stamp) values
    ('00000000-0000-4000-8000-0000000000d1', 'old', 'seen', '100'), ('00000000-0000-4000-8000-0000000000d1', 'new', 'unseen', '200');
insert into public.noted_b (user_id, id, title, _stamp) values
    ('00000000-0000-4000-8000-0000000000d1', 'old', 'seen', '100'), ('00000000-0000-4000-8000-0000000000d1', 'new', 'unseen', '200');
insert into public.noted_s (id, title, _stamp) values ('old', 'seen', '100'), ('new', 'unseen', '200');
alter table public.noted_a enable trigger ferry_stamp;
alter table public.noted_b enable trigger ferry_stamp;
alter table public.noted_s enable trigger ferry_stamp;
delete from ferry.changes;
insert into ferry.changes (owner, changed_by, table_name) values
    ('00000000-0000-4000-8000-0000000000d1', '200', 'noted_a'), ('00000000-0000-4000-8000-0000000000e2', '200', 'noted_b');

-- ferry.pull_steady as A after the cursor "150:150:": the names of the tables it answers.
create function noted_test.steady_tables() returns text[] language plpgsql
as $$
declare
    v_answer jsonb;
begin
    perform pg_catalog.set_config('role', 'ferry_client', true),
        pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000d1', true),
        pg_catalog.set_config('ferry.device_id', 'd1', true);
    v_answer := ferry.pull_steady('{}', pg_catalog.pg_current_snapshot(), '150:150:', null, 100);
    perform pg_catalog.set_config('role', 'none', true);
    return array(select k from pg_catalog.jsonb_object_keys(v_answer -> 'changes') k order by k);
end
$$;

update ferry.history set changes_since = '300';
select is(noted_test.steady_tables(), '{noted_a,noted_b,noted_s}'::text[],
    'a cursor that does not see changes_since: every table probed, all three found');
update ferry.history set changes_since = '100';
select is(noted_test.steady_tables(), '{noted_a}'::text[],
    'a cursor that sees changes_since: only the tables its owner''s notes name (noted_b''s note is B''s)');
insert into ferry.changes (owner, changed_by, table_name) values ('00000000-0000-0000-0000-000000000000', '200', 'noted_s');
select is(noted_test.steady_tables(), '{noted_a,noted_s}'::text[], 'a shared table''s note names it for everyone');
insert into ferry.changes (owner, changed_by, table_name) values ('00000000-0000-4000-8000-0000000000d1', '120', 'noted_b');
select is(noted_test.steady_tables(), '{noted_a,noted_s}'::text[], 'a note the cursor saw names nothing');
update ferry.history set changes_since = null;
select is(noted_test.steady_tables(), '{noted_a,noted_b,noted_s}'::text[], 'no changes_since: every table probed');
update ferry.history set changes_since = '100';

-- A read policy of the operator's own on a noted table: ferry.changes cannot say what it
-- shows (rows of other owners), so every table is probed until the code is rebuilt, and
-- after that the table is probed, the others still noted.
create policy shared_with_all on public.noted_b for select to ferry_client using (true);
select is(noted_test.steady_tables(), '{noted_a,noted_b,noted_s}'::text[],
    'a new read policy on a noted table: every table probed');
do $$ begin perform ferry.install_pull_rows(); end $$;
select is(noted_test.steady_tables(), '{noted_a,noted_b,noted_s}'::text[],
    'rebuilt: the table with the policy is found by its probe');
delete from ferry.changes where table_name = 'noted_a';
select is(noted_test.steady_tables(), '{noted_b,noted_s}'::text[],
    'rebuilt: a noted table without a note is not read');
drop policy shared_with_all on public.noted_b;
do $$ begin perform ferry.install_pull_rows(); end $$;

-- A shared table received by logical replication, whose applied rows no statement
-- trigger sees: probed.
delete from ferry.changes where table_name = 'noted_s';
select is(noted_test.steady_tables(), '{}'::text[], 'no note for the caller: no table read');
do $$ begin perform ferry.receive_shared('public.noted_s'); end $$;
update ferry.history set changes_since = '100';
select is(noted_test.steady_tables(), '{noted_s}'::text[], 'a received shared table: found by its probe');
do $$ begin perform ferry.stop_receiving_shared('public.noted_s'); end $$;

-- MARK: - Compacting, and starting over

delete from ferry.changes;
insert into ferry.changes (owner, changed_by, table_name) values
    ('00000000-0000-4000-8000-0000000000d1', '200', 'noted_a'), ('00000000-0000-4000-8000-0000000000d1', '210', 'noted_a'),
    ('00000000-0000-4000-8000-0000000000d1', '200', 'noted_b');
insert into ferry.changes (owner, changed_by, table_name)
    values ('00000000-0000-4000-8000-0000000000d1', pg_catalog.pg_current_xact_id(), 'noted_a');
select is(ferry.compact_changes(100), 2::bigint, 'compact: the two finished notes of one owner and table go');
select is((select pg_catalog.array_agg(c.table_name::text || ' ' || (c.changed_by = pg_catalog.pg_current_xact_id())::text
        order by c.table_name, c.changed_by) from ferry.changes c),
    '{"noted_a true","noted_b false"}'::text[],
    'compact: one note of this transaction in their place (the one already of it kept), a lone note left alone');

do $$ begin perform ferry.finish_restore(); end $$;
select is((select pg_catalog.count(*) from ferry.changes), 0::bigint, 'finish_restore: ferry.changes emptied');
select is((select h.changes_since from ferry.history h), pg_catalog.pg_current_xact_id(),
    'finish_restore: ferry.changes starts over at its transaction');

select * from finish();
rollback;
