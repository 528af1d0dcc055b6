-- Push's set-based path (sql/ferry/functions/push.sql, "The set-based path"; the
-- statement ferry.upsert_rows, registry.sql) answers every mutation as the loop does.
--
-- The same batches are pushed twice from the same stored rows: by user A while the tables
-- can take the set-based path, then by user B after a do-nothing trigger of the test's
-- own on each table sends every mutation through the loop (a table with a trigger of its
-- own is not written set-based). Each batch's results, and the rows each user has after
-- it, must be the same; the batches hold applied upserts, duplicates carrying their
-- original outcome, a rejection of every code, and mixed batches whose runs fail and fall
-- back to the loop. Also checked: that A's pushes did take the set-based path, B's never.
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

-- n is unique per user (a conflict between two rows of one batch); title refuses 'bad'.
create table public.floor_lww (user_id uuid not null, id text not null, title text check (title is distinct from 'bad'),
    n integer, note text default 'fresh', meta jsonb, code varchar(3), primary key (user_id, id), unique (user_id, n));
-- An array column: its set-based statement reads rows with jsonb_populate_record, not casts.
create table public.floor_other (user_id uuid not null, id integer not null, label text, tags text[],
    primary key (user_id, id));
-- One key space for all users: a key another user has conflicts under RLS (forbidden).
create table public.floor_global (id text primary key, user_id uuid not null, label text);
create table public.floor_insert_only (user_id uuid not null, id text not null, title text, primary key (user_id, id));
create table public.floor_readonly (user_id uuid not null, id text not null, title text, primary key (user_id, id));
create table public.floor_lock (user_id uuid not null, slot text not null, title text, primary key (user_id, slot));

insert into ferry.users (id) values ('00000000-0000-4000-8000-00000000000a'), ('00000000-0000-4000-8000-00000000000b'),
    ('00000000-0000-4000-8000-00000000000c');

do $$
begin
    perform ferry.register_table('public.floor_lww', strategy => 'lww');
    perform ferry.register_table('public.floor_other', strategy => 'lww');
    perform ferry.register_table('public.floor_global', strategy => 'lww', options => '{"global_key": true}');
    perform ferry.register_table('public.floor_insert_only', strategy => 'insert_only');
    perform ferry.register_table('public.floor_readonly', strategy => 'readonly');
    perform ferry.register_table('public.floor_lock', strategy => 'device_lock');
end
$$;

create schema floor_test;
grant usage on schema floor_test to ferry_client;

-- The rows both users start from: a live row, a tombstone, a row locked by another
-- device; and user C's row of the shared key space.
insert into public.floor_lww (user_id, id, title, n, note)
select u, 'live', 'old', 1, 'kept' from unnest('{00000000-0000-4000-8000-00000000000a,00000000-0000-4000-8000-00000000000b}'::uuid[]) u;
insert into public.floor_lww (user_id, id, title, n, note, _deleted)
select u, 'dead', 'gone', 2, 'old note', true from unnest('{00000000-0000-4000-8000-00000000000a,00000000-0000-4000-8000-00000000000b}'::uuid[]) u;
insert into public.floor_insert_only (user_id, id, title)
select u, 'kept', 'x' from unnest('{00000000-0000-4000-8000-00000000000a,00000000-0000-4000-8000-00000000000b}'::uuid[]) u;
insert into public.floor_lock (user_id, slot, title, _lock_device)
select u, 's', 'held', 'another device' from unnest('{00000000-0000-4000-8000-00000000000a,00000000-0000-4000-8000-00000000000b}'::uuid[]) u;
insert into public.floor_global (id, user_id, label) values ('taken', '00000000-0000-4000-8000-00000000000c', 'C''s');

-- The batches, in order. In their text @me is the caller's uuid, @other the other user's,
-- @u the caller's letter (keys of the shared key space).
create table floor_test.batches (n integer primary key, body text);
insert into floor_test.batches values
    -- All applied, one run: a new row, a live row overwritten (note kept), a tombstone
    -- revived (note back to its default).
    (1, $b${"mutations": [
        {"id": 1, "table": "floor_lww", "op": "upsert", "row": {"id": "k1", "title": "a"}},
        {"id": 2, "table": "floor_lww", "op": "upsert", "row": {"id": "live", "title": "b"}},
        {"id": 3, "table": "floor_lww", "op": "upsert", "row": {"id": "dead", "title": "c"}}]}$b$),
    -- Mixed.
    (2, $b${"mutations": [
        {"id": 4, "table": "floor_lww", "op": "upsert", "row": {"id": "k2", "title": "x", "user_id": "@me"}},
        {"id": 5, "table": "floor_lww", "op": "upsert", "row": {"id": "k3", "title": "y"}},
        {"id": 4, "table": "floor_lww", "op": "upsert", "row": {"id": "k2", "title": "again"}},
        {"id": 6, "table": "floor_other", "op": "upsert", "row": {"id": 1, "label": "a"}},
        {"id": 7, "table": "floor_other", "op": "upsert", "row": {"id": 2, "label": "b", "updated_at": "2000-01-01T00:00:00Z"}},
        {"id": 8, "table": "floor_lww", "op": "upsert", "row": {"id": "k4", "title": "bad"}},
        {"id": 9, "table": "floor_lww", "op": "upsert", "row": {"id": "k5", "title": "z"}},
        {"id": 10, "table": "floor_lww", "op": "upsert", "row": {"id": "k6", "n": 1}},
        {"id": 11, "table": "floor_lww", "op": "upsert", "row": {"id": "k7", "n": 7}},
        {"id": 12, "table": "floor_lww", "op": "upsert", "row": {"id": "k8", "title": "p"}},
        {"id": 13, "table": "floor_lww", "op": "upsert", "row": {"id": "k8", "title": "q"}},
        {"id": 14, "table": "floor_lww", "op": "upsert", "row": {"id": "k9", "title": "t", "user_id": "@other"}},
        {"id": 15, "table": "floor_lww", "op": "upsert", "row": {"id": "k9", "colour": "red"}},
        {"id": 16, "table": "floor_lww", "op": "merge", "row": {"id": "k9"}},
        {"id": 17, "table": "floor_other", "op": "upsert", "row": {"id": "3", "label": "c"}},
        {"id": 18, "table": "floor_other", "op": "upsert", "row": {"label": "d"}},
        {"id": 19, "table": "floor_lww", "op": "upsert", "row": {"id": "k10", "n": "many"}},
        {"id": 20, "table": "floor_lww", "op": "upsert", "row": {"id": "k11", "n": 11}},
        {"id": 21, "table": "no_such_table", "op": "upsert", "row": {"id": "k"}},
        {"id": 22, "table": "floor_readonly", "op": "upsert", "row": {"id": "k"}},
        {"id": 23, "table": "floor_insert_only", "op": "delete", "key": {"id": "kept"}},
        {"id": 24, "table": "floor_lock", "op": "upsert", "row": {"slot": "s", "title": "mine"}},
        {"id": 25, "table": "floor_global", "op": "upsert", "row": {"id": "taken", "label": "mine"}},
        {"id": 26, "table": "floor_global", "op": "upsert", "row": {"id": "free-@u", "label": "mine"}},
        {"id": 27, "table": "floor_lww", "op": "upsert", "row": {"id": "k12", "title": "one"}},
        {"id": 28, "table": "floor_lww", "op": "upsert", "row": {"id": "k13", "title": "two", "note": "given"}},
        {"id": 29, "table": "floor_lww", "op": "delete", "key": {"id": "k1"}},
        {"id": 30, "table": "floor_lww", "op": "upsert", "row": {"id": "k1", "title": "back"}},
        {"id": 31, "table": "floor_lww", "op": "upsert", "row": {"id": "k14", "title": "after"}},
        {"id": 8, "table": "floor_lww", "op": "upsert", "row": {"id": "k4", "title": "fine"}},
        {"id": 32, "table": "floor_insert_only", "op": "insert", "row": {"id": "new", "title": "y"}},
        {"id": 33, "table": "floor_insert_only", "op": "insert", "row": {"id": "new2", "title": "y"}}]}$b$),
    -- Retried: every one a duplicate carrying its original outcome.
    (3, $b${"mutations": [
        {"id": 2, "table": "floor_lww", "op": "upsert", "row": {"id": "live", "title": "b"}},
        {"id": 8, "table": "floor_lww", "op": "upsert", "row": {"id": "k4", "title": "bad"}},
        {"id": 9, "table": "floor_lww", "op": "upsert", "row": {"id": "k5", "title": "z"}},
        {"id": 14, "table": "floor_lww", "op": "upsert", "row": {"id": "k9", "title": "t", "user_id": "@other"}},
        {"id": 25, "table": "floor_global", "op": "upsert", "row": {"id": "taken", "label": "mine"}},
        {"id": 34, "table": "floor_lww", "op": "upsert", "row": {"id": "k15", "title": "new"}},
        {"id": 35, "table": "floor_lww", "op": "upsert", "row": {"id": "k16", "title": "new"}}]}$b$),
    -- What push_body cannot read as jsonb (\u0000) in the middle of a run.
    (4, $b${"mutations": [
        {"id": 40, "table": "floor_lww", "op": "upsert", "row": {"id": "k17", "title": "s"}},
        {"id": 41, "table": "floor_lww", "op": "upsert", "row": {"id": "k18", "title": "\u0000"}},
        {"id": 42, "table": "floor_lww", "op": "upsert", "row": {"id": "k19", "title": "s"}},
        {"id": 43, "table": "floor_lww", "op": "upsert", "row": {"id": "k20", "title": "s"}}]}$b$),
    -- A run whose statement refuses a key given in another JSON type than its column's
    -- (a string for an integer, which a cast would take): through the loop.
    (5, $b${"mutations": [
        {"id": 50, "table": "floor_other", "op": "upsert", "row": {"id": 5, "label": "e"}},
        {"id": 51, "table": "floor_other", "op": "upsert", "row": {"id": "6", "label": "f"}},
        {"id": 52, "table": "floor_other", "op": "upsert", "row": {"id": 7, "label": "g"}},
        {"id": 53, "table": "floor_other", "op": "upsert", "row": {"id": 8, "label": "h"}}]}$b$),
    -- Values the set-based statement casts from the JSON: a value too long for its
    -- varchar(3) fails the run (through the loop: that one rejected)...
    (6, $b${"mutations": [
        {"id": 60, "table": "floor_lww", "op": "upsert", "row": {"id": "j1", "meta": {"a": 1}, "code": "abc"}},
        {"id": 61, "table": "floor_lww", "op": "upsert", "row": {"id": "j2", "meta": null, "code": "ab"}},
        {"id": 62, "table": "floor_lww", "op": "upsert", "row": {"id": "j3", "meta": "text", "code": "abcd"}},
        {"id": 63, "table": "floor_lww", "op": "upsert", "row": {"id": "j4", "meta": [1, 2], "code": "x"}}]}$b$),
    -- ... and written when all fit: JSON as jsonb, null as NULL, numbers as text.
    (7, $b${"mutations": [
        {"id": 70, "table": "floor_lww", "op": "upsert", "row": {"id": "j5", "meta": {"b": [1]}, "code": 12}},
        {"id": 71, "table": "floor_lww", "op": "upsert", "row": {"id": "j6", "meta": null, "code": null}},
        {"id": 72, "table": "floor_lww", "op": "upsert", "row": {"id": "j7", "meta": "s", "code": "a\"b"}}]}$b$),
    -- An array, read by jsonb_populate_record.
    (8, $b${"mutations": [
        {"id": 80, "table": "floor_other", "op": "upsert", "row": {"id": 10, "tags": ["a", "b"]}},
        {"id": 81, "table": "floor_other", "op": "upsert", "row": {"id": 11, "tags": []}}]}$b$),
    -- The whole batch one run (push's one-pass check), the owner given in some rows and
    -- updated_at in one, which the run's columns leave out.
    (9, $b${"mutations": [
        {"id": 90, "table": "floor_lww", "op": "upsert", "row": {"title": "w", "id": "w1"}},
        {"id": 91, "table": "floor_lww", "op": "upsert", "row": {"id": "w2", "title": "w", "user_id": "@me"}},
        {"id": 92, "table": "floor_lww", "op": "upsert", "row": {"id": "w3", "title": "w", "updated_at": "2000-01-01T00:00:00Z"}},
        {"id": 93, "table": "floor_lww", "op": "upsert", "row": {"id": "w4", "title": "w", "user_id": null}}]}$b$),
    -- Rows that are not objects, each rejected alone, before a run.
    (10, $b${"mutations": [
        {"id": 100, "table": "floor_lww", "op": "upsert", "row": 5},
        {"id": 101, "table": "floor_lww", "op": "upsert", "row": "w"},
        {"id": 102, "table": "floor_lww", "op": "upsert", "row": ["id", "w5"]},
        {"id": 103, "table": "floor_lww", "op": "upsert", "row": {"id": "w6", "title": "x"}},
        {"id": 104, "table": "floor_lww", "op": "upsert", "row": {"id": "w7", "title": "x"}}]}$b$),
    -- Upserts of one table and columns whose ids go back: a run of the first two, a
    -- duplicate, a run of one.
    (11, $b${"mutations": [
        {"id": 110, "table": "floor_lww", "op": "upsert", "row": {"id": "w8", "title": "y"}},
        {"id": 112, "table": "floor_lww", "op": "upsert", "row": {"id": "w9", "title": "y"}},
        {"id": 111, "table": "floor_lww", "op": "upsert", "row": {"id": "w10", "title": "y"}},
        {"id": 113, "table": "floor_lww", "op": "upsert", "row": {"id": "w11", "title": "y"}}]}$b$),
    -- Batch 9 retried: all duplicates, no run.
    (12, $b${"mutations": [
        {"id": 90, "table": "floor_lww", "op": "upsert", "row": {"title": "w", "id": "w1"}},
        {"id": 91, "table": "floor_lww", "op": "upsert", "row": {"id": "w2", "title": "w", "user_id": "@me"}},
        {"id": 92, "table": "floor_lww", "op": "upsert", "row": {"id": "w3", "title": "w", "updated_at": "2000-01-01T00:00:00Z"}},
        {"id": 93, "table": "floor_lww", "op": "upsert", "row": {"id": "w4", "title": "w", "user_id": null}}]}$b$),
    -- One run but for its last mutation, which names another owner.
    (13, $b${"mutations": [
        {"id": 130, "table": "floor_lww", "op": "upsert", "row": {"id": "w12", "title": "z"}},
        {"id": 131, "table": "floor_lww", "op": "upsert", "row": {"id": "w13", "title": "z"}},
        {"id": 132, "table": "floor_lww", "op": "upsert", "row": {"id": "w14", "title": "z", "user_id": "@other"}}]}$b$);

-- One push of batch p_n by user p_letter (a or b) from device p_device, as a request
-- makes it (the body as text, ferry.push_body); the answer.
create function floor_test.push(p_letter text, p_device text, p_n integer) returns jsonb language plpgsql
as $$
declare
    v_me text := '00000000-0000-4000-8000-00000000000' || p_letter;
    v_other text := '00000000-0000-4000-8000-00000000000' || case p_letter when 'a' then 'b' else 'a' end;
    v_body text;
    v_answer jsonb;
begin
    select pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(b.body, '@me', v_me), '@other', v_other), '@u', p_letter)
        into v_body from floor_test.batches b where b.n = p_n;
    perform pg_catalog.set_config('role', 'ferry_client', true), pg_catalog.set_config('ferry.user_id', v_me, true),
        pg_catalog.set_config('ferry.device_id', p_device, true);
    v_answer := ferry.push_body(v_body, 1000);
    perform pg_catalog.set_config('role', 'none', true);
    return v_answer;
end
$$;

-- What user p_letter has in the test's tables, without what tells the users apart.
create function floor_test.rows(p_letter text) returns jsonb language sql
as $$
    select pg_catalog.jsonb_build_object(
        'lww', (select pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t) - '{user_id,_stamp,updated_at}'::text[] order by t.id)
            from public.floor_lww t where t.user_id::text like '%' || p_letter),
        'other', (select pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t) - '{user_id,_stamp,updated_at}'::text[] order by t.id)
            from public.floor_other t where t.user_id::text like '%' || p_letter),
        'global', (select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', pg_catalog.replace(t.id, p_letter, '@u'),
                'label', t.label) order by t.id)
            from public.floor_global t where t.user_id::text like '%' || p_letter),
        'insert_only', (select pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t) - '{user_id,_stamp,updated_at}'::text[] order by t.id)
            from public.floor_insert_only t where t.user_id::text like '%' || p_letter),
        'lock', (select pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t) - '{user_id,_stamp,updated_at}'::text[] order by t.slot)
            from public.floor_lock t where t.user_id::text like '%' || p_letter));
$$;

create function floor_test.set_based_calls() returns bigint language sql
as $$
    select coalesce((select s.calls from pg_catalog.pg_stat_xact_user_functions s
        where s.funcid = 'ferry.upsert_rows(text, text, text[], jsonb)'::regprocedure), 0);
$$;

-- A's pushes: the tables as registered.
create table floor_test.answers (letter text, n integer, answer jsonb, rows jsonb, calls bigint,
    primary key (letter, n));
insert into floor_test.answers
select 'a', b.n, floor_test.push('a', 'set', b.n), floor_test.rows('a'), floor_test.set_based_calls()
from floor_test.batches b order by b.n;

-- B's pushes: every table with a trigger of its own, so every mutation goes through the loop.
create function floor_test.nothing() returns trigger language plpgsql as $$ begin return new; end $$;
grant execute on function floor_test.nothing() to ferry_client;
do $$
declare
    v_table text;
begin
    foreach v_table in array '{floor_lww,floor_other,floor_global,floor_insert_only,floor_readonly,floor_lock}'::text[] loop
        execute format('create trigger floor_nothing before insert or update on public.%I for each row execute function floor_test.nothing()',
            v_table);
    end loop;
end
$$;
insert into floor_test.answers
select 'b', b.n, floor_test.push('b', 'loop', b.n), floor_test.rows('b'), floor_test.set_based_calls()
from floor_test.batches b order by b.n;

select plan(37);

-- The loop's answers, as they are (their messages aside): so the comparison below is of
-- what the loop answers, not of two equal mistakes.
select is((select pg_catalog.jsonb_path_query_array(a.answer, '$.results[*] ? (@.status == "rejected").code') from floor_test.answers a
        where a.letter = 'b' and a.n = 2),
    '["constraint_violation", "constraint_violation", "forbidden", "unknown_column", "invalid_row", "invalid_row",
      "invalid_row", "invalid_row", "unknown_table", "read_only", "immutable", "lock_not_held", "forbidden"]'::jsonb,
    'batch 2 through the loop: a rejection of every code, in order');
select is((select pg_catalog.jsonb_path_query_array(a.answer, '$.results[*].status') from floor_test.answers a
        where a.letter = 'b' and a.n = 3),
    '["duplicate", "duplicate", "duplicate", "duplicate", "duplicate", "applied", "applied"]'::jsonb,
    'batch 3 through the loop: the retried ids are duplicates');
select is((select pg_catalog.jsonb_path_query_array(a.answer, '$.results[*].original') from floor_test.answers a
        where a.letter = 'b' and a.n = 3),
    '["applied", "rejected", "applied", "rejected", "rejected"]'::jsonb,
    'batch 3 through the loop: each duplicate with its original outcome');

-- The set-based path answers the same, batch by batch, and leaves the same rows.
select is((select a.answer from floor_test.answers a where a.letter = 'a' and a.n = b.n),
        (select a.answer from floor_test.answers a where a.letter = 'b' and a.n = b.n),
        pg_catalog.format('batch %s: the same answer, mutation by mutation', b.n))
    from floor_test.batches b order by b.n;
select is((select a.rows from floor_test.answers a where a.letter = 'a' and a.n = b.n),
        (select a.rows from floor_test.answers a where a.letter = 'b' and a.n = b.n),
        pg_catalog.format('batch %s: the same rows after it', b.n))
    from floor_test.batches b order by b.n;

-- A's took the set-based path, B's never did: the calls that wrote, counted as the
-- transaction goes (a call that fails is not counted). Batch 1 is one run; batch 2 has
-- eight runs of two or more, of which three write (positions 0-1, 3-4 and 27-28) and
-- five fail and go through the loop; batches 3 and 4 have one each; batch 5's one run
-- fails on its string key, batch 6's on its long value; batches 7 to 11 and 13 have one
-- each, batch 12 (all duplicates) none.
select is((select pg_catalog.array_agg(a.calls order by a.n) from floor_test.answers a where a.letter = 'a'),
    '{1,4,5,6,6,6,7,8,9,10,11,11,12}'::bigint[], 'A''s batches: the set-based statement wrote each run that it could');
select is((select pg_catalog.array_agg(a.calls order by a.n) from floor_test.answers a where a.letter = 'b'),
    '{12,12,12,12,12,12,12,12,12,12,12,12,12}'::bigint[], 'B''s batches, every table with a trigger of its own: never');
select is((select pg_catalog.jsonb_path_query_array(a.answer, '$.results[*].status') from floor_test.answers a
        where a.letter = 'a' and a.n = 6),
    '["applied", "applied", "rejected", "applied"]'::jsonb, 'batch 6: the value too long rejected, the others applied');
select is((select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(t.meta, t.code) order by t.id) from public.floor_lww t
        where t.user_id = '00000000-0000-4000-8000-00000000000a' and t.id like 'j%'),
    '[[{"a": 1}, "abc"], [null, "ab"], [[1, 2], "x"], [{"b": [1]}, "12"], [null, null], ["s", "a\"b"]]'::jsonb,
    'batches 6 and 7: the values as cast');
select is((select pg_catalog.jsonb_path_query_array(a.answer, '$.results[*].status') from floor_test.answers a
        where a.letter = 'a' and a.n = 5),
    '["applied", "rejected", "applied", "applied"]'::jsonb, 'batch 5: the string key rejected, the others applied');
select is((select pg_catalog.jsonb_path_query_array(a.answer, '$.results[*] ? (@.status == "rejected").code') from floor_test.answers a
        where a.letter = 'a' and a.n = 5),
    '["invalid_row"]'::jsonb, 'batch 5: invalid_row, as the loop answers it');
select is((select pg_catalog.jsonb_path_query_array(a.answer, '$.results[*] ? (@.status == "rejected").code') from floor_test.answers a
        where a.letter = 'a' and a.n = 10),
    '["invalid_row", "invalid_row", "invalid_row"]'::jsonb, 'batch 10: a row that is not an object rejects its mutation alone');
select is((select pg_catalog.jsonb_path_query_array(a.answer, '$.results[*].status') from floor_test.answers a
        where a.letter = 'a' and a.n = 11),
    '["applied", "applied", "duplicate", "applied"]'::jsonb, 'batch 11: an id that goes back is a duplicate');

select * from finish();
rollback;
