-- ferry.catalog_changes (sql/ferry/0017_catalog_changes.sql): the transactions that
-- changed what push caches about the synced tables, noted by Ferry's event triggers and
-- the registry's trigger (functions/catalog_changes.sql); and how ferry.push_tables
-- (functions/push.sql) trusts its session cache by them, or by the catalog's fingerprint
-- when the event triggers are not there.
--
-- A transaction is noted once, so each DDL below runs after this transaction's note is
-- deleted by hand, and the cache's rule across transactions is checked with notes and a
-- cached snapshot and reader written by hand. A cached answer is told from a fresh one by
-- a marker planted in it.
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;

create table public.noted_ddl (user_id uuid not null, id text not null, title text, primary key (user_id, id));
create table public.not_synced (id integer primary key);
-- A synced table that inherits from one that is not.
create table public.noted_parent (note text);
create table public.noted_child (user_id uuid not null, id text not null, primary key (user_id, id)) inherits (public.noted_parent);
select ferry.register_table('public.noted_ddl', strategy => 'lww') is null;
select ferry.register_table('public.noted_child', strategy => 'lww') is null;

create schema catalog_test;
-- Whether this transaction is noted; and its note deleted, so the next one shows.
create function catalog_test.noted() returns boolean language sql
as $$ select exists (select from ferry.catalog_changes c where c.changed_by = pg_catalog.pg_current_xact_id()) $$;
create function catalog_test.forget() returns boolean language sql
as $$ delete from ferry.catalog_changes c where c.changed_by = pg_catalog.pg_current_xact_id() returning false $$;
create function catalog_test.nothing() returns trigger language plpgsql as $$ begin return new; end $$;
-- ferry.push_tables' answer for the test's table.
create function catalog_test.answer() returns jsonb language sql
as $$ select ferry.push_tables('[{"table": "noted_ddl"}]') -> 'noted_ddl' $$;
-- The cache entry of the test's table: its three lines, one of them replaced.
create function catalog_test.cached() returns text language sql
as $$ select pg_catalog.current_setting('ferry.push_table_' || pg_catalog.md5('noted_ddl'), true) $$;
create function catalog_test.plant(p_line integer, p_text text) returns boolean language sql
as $$
    select pg_catalog.set_config('ferry.push_table_' || pg_catalog.md5('noted_ddl'), pg_catalog.array_to_string(
        (select pg_catalog.array_agg(case when l.n = p_line then p_text else l.line end order by l.n)
         from pg_catalog.unnest(pg_catalog.string_to_array(catalog_test.cached(), E'\n')) with ordinality l(line, n)),
        E'\n'), false) is null
$$;

select plan(39);

select is((select pg_catalog.array_agg(e.evtname || ' ' || e.evtenabled::text order by e.evtname) from pg_catalog.pg_event_trigger e
        where e.evtname like 'ferry\_note\_%'),
    '{"ferry_note_ddl A","ferry_note_drop A"}', 'both event triggers are there, enabled always');
select ok(catalog_test.noted(), 'registering a table is noted');

-- What is noted: DDL on a synced table and what hangs off it, a type, Ferry's schema, the registry.
select catalog_test.forget();
alter table public.noted_ddl add column extra text;
select ok(catalog_test.noted(), 'a column added to a synced table');
select catalog_test.forget();
alter table public.noted_ddl alter column title set default 'untitled';
select ok(catalog_test.noted(), 'a default set');
select catalog_test.forget();
alter table public.noted_ddl alter column title drop default;
select ok(catalog_test.noted(), 'a default dropped');
select catalog_test.forget();
create index noted_ddl_title on public.noted_ddl (title);
select ok(catalog_test.noted(), 'an index made');
select catalog_test.forget();
drop index public.noted_ddl_title;
select ok(catalog_test.noted(), 'an index dropped');
select catalog_test.forget();
create trigger noted_nothing before insert on public.noted_ddl for each row execute function catalog_test.nothing();
select ok(catalog_test.noted(), 'a trigger made');
select catalog_test.forget();
drop trigger noted_nothing on public.noted_ddl;
select ok(catalog_test.noted(), 'a trigger dropped');
select catalog_test.forget();
create policy noted_read on public.noted_ddl for select using (true);
select ok(catalog_test.noted(), 'a policy made');
select catalog_test.forget();
drop policy noted_read on public.noted_ddl;
select ok(catalog_test.noted(), 'a policy dropped');
select catalog_test.forget();
alter table public.noted_ddl add constraint noted_title check (title <> '');
select ok(catalog_test.noted(), 'a constraint added');
select catalog_test.forget();
alter table public.noted_ddl drop constraint noted_title;
select ok(catalog_test.noted(), 'a constraint dropped');
select catalog_test.forget();
alter table public.noted_ddl drop column extra;
select ok(catalog_test.noted(), 'a column dropped');
select catalog_test.forget();
create domain catalog_test.positive as integer check (value > 0);
select ok(catalog_test.noted(), 'a domain made');
select catalog_test.forget();
alter domain catalog_test.positive set default 1;
select ok(catalog_test.noted(), 'a domain''s default set');
select catalog_test.forget();
create function ferry.catalog_probe() returns integer language sql as 'select 1';
select ok(catalog_test.noted(), 'a function made in schema ferry');
select catalog_test.forget();
update ferry.synced_tables s set strategy = s.strategy where s.table_name = 'public.noted_ddl'::regclass;
select ok(catalog_test.noted(), 'a change to the registry');

select catalog_test.forget();
alter table public.noted_parent add column extra text;
select ok(catalog_test.noted(), 'a column added to the parent of a synced table (its child gets it too)');
select catalog_test.forget();
alter table public.noted_parent drop column extra;
select ok(catalog_test.noted(), 'and dropped from it');

-- What is not noted.
select catalog_test.forget();
alter table public.not_synced add column extra text;
create index not_synced_extra on public.not_synced (extra);
create trigger not_synced_nothing before insert on public.not_synced for each row execute function catalog_test.nothing();
drop trigger not_synced_nothing on public.not_synced;
select ok(not catalog_test.noted(), 'DDL on a table that is not synced is not noted');
create temporary table scratch (id integer primary key, note text);
create index on scratch (note);
drop table scratch;
select ok(not catalog_test.noted(), 'nor on a temporary table');

-- The cache under the event triggers. Its first answer is read and kept.
select catalog_test.forget();
select is(catalog_test.answer() ->> 'owner', 'user_id', 'the first answer is read from the catalog');
select is(pg_catalog.split_part(catalog_test.cached(), E'\n', 1), (select 'noted ' || pg_catalog.string_agg(e.xmin::text || e.ctid::text,
        ' ' order by e.evtname) from pg_catalog.pg_event_trigger e where e.evtname in ('ferry_note_ddl', 'ferry_note_drop')),
    'and kept under the event triggers'' row versions');
-- As if read by another transaction (which had no id) after this snapshot, with a marker.
create table catalog_test.seen as select pg_catalog.pg_current_snapshot() as since;
select catalog_test.plant(2, (select s.since::text || ' ' from catalog_test.seen s)), catalog_test.plant(3, '{"marker": true}');
insert into ferry.catalog_changes values ('3') on conflict do nothing;
select is(catalog_test.answer(), '{"marker": true}', 'a cached answer is used while every note is seen by its snapshot');
insert into ferry.catalog_changes select (pg_catalog.pg_snapshot_xmax(s.since)::text::numeric + 1000)::text::xid8 from catalog_test.seen s;
select is(catalog_test.answer() ->> 'owner', 'user_id', 'a note its snapshot does not see makes it read again');
delete from ferry.catalog_changes c using catalog_test.seen s where c.changed_by = (pg_catalog.pg_snapshot_xmax(s.since)::text::numeric + 1000)::text::xid8;
-- Read by this transaction, which its own snapshot counts as seen.
select catalog_test.forget();
select catalog_test.plant(2, (select s.since::text || ' ' || pg_catalog.pg_current_xact_id()::text from catalog_test.seen s)),
    catalog_test.plant(3, '{"marker": true}');
select is(catalog_test.answer(), '{"marker": true}', 'read by a transaction that noted nothing: used');
select ferry.note_catalog_change() is null;
select catalog_test.plant(2, (select s.since::text || ' ' || pg_catalog.pg_current_xact_id()::text from catalog_test.seen s)),
    catalog_test.plant(3, '{"marker": true}');
select is(catalog_test.answer() ->> 'owner', 'user_id', 'read by a transaction that noted a change: read again');
select catalog_test.plant(1, 'noted 1(0,1) 1(0,2)'), catalog_test.plant(3, '{"marker": true}');
select is(catalog_test.answer() ->> 'owner', 'user_id', 'kept under other event trigger versions: read again');
-- The names a batch gives, each looked up once, whatever comes first: a name that is
-- not a string (or none) names no table, and a table repeated is one entry.
select is((select pg_catalog.array_agg(k order by k) from pg_catalog.jsonb_object_keys(ferry.push_tables(
        '[{"table": 5}, {"id": 1}, {"table": "noted_ddl"}, {"table": "noted_child"}, {"table": "noted_ddl"}, {"table": "nothing"}]')) k),
    '{noted_child,noted_ddl}', 'a batch naming several tables, a number and none first: each synced one answered');
select is((select pg_catalog.array_agg(k) from pg_catalog.jsonb_object_keys(ferry.push_tables(
        '[{"table": "noted_ddl"}, {"table": "noted_ddl"}, {"table": 5}]')) k),
    '{noted_ddl}', 'a batch naming one table twice and a number: that table');
select is(ferry.push_tables('[{"table": 5}, {"op": "upsert"}]'), '{}', 'a batch naming no table by a string: none');
-- This transaction's own DDL, after its answer was kept.
select catalog_test.forget();
select is(catalog_test.answer() ->> 'columns', '{"id": true, "title": true, "user_id": true}', 'the columns, read');
alter table public.noted_ddl add column colour text;
select is(catalog_test.answer() ->> 'columns', '{"id": true, "title": true, "colour": true, "user_id": true}',
    'a column this transaction added after the answer was kept is in the next one');

-- Without the event triggers: the fingerprint, as before them.
alter event trigger ferry_note_drop disable;
select is(catalog_test.answer() ->> 'owner', 'user_id', 'with an event trigger disabled the answer is read again');
select ok(pg_catalog.split_part(catalog_test.cached(), E'\n', 1) not like 'noted %', 'and kept under its fingerprint');
select catalog_test.plant(3, '{"marker": true}');
select is(catalog_test.answer(), '{"marker": true}', 'a cached answer is used while its fingerprint holds');
alter table public.noted_ddl drop column colour;
select is(catalog_test.answer() ->> 'columns', '{"id": true, "title": true, "user_id": true}',
    'DDL changes the fingerprint: read again');

-- A logical restore's notes are of the old cluster's transactions: ferry.finish_restore
-- keeps only its own.
insert into ferry.catalog_changes values ('4000000000') on conflict do nothing;
select ferry.finish_restore() >= 0;
select is((select pg_catalog.array_agg(c.changed_by) from ferry.catalog_changes c), array[pg_catalog.pg_current_xact_id()],
    'after a restore, only the transaction that finished it is noted');

select * from finish();
rollback;
