-- A retried push's duplicates carry their original outcome (sql/ferry/functions/outcomes.sql,
-- docs/PROTOCOL.md "Push"): rejected with its code, applied, or nothing once the tombstone
-- purge has trimmed the device's remembered rejections.
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;

create table public.outcome_rows (user_id uuid not null, id text not null, title text not null,
    primary key (user_id, id));
insert into ferry.users (id) values ('00000000-0000-4000-8000-0000000000c3');
select ferry.register_table('public.outcome_rows', strategy => 'insert_only');

create schema outcome_test;
grant usage on schema outcome_test to ferry_client;

-- One push by device d1 of the caller, as a request makes it; the answer's results.
create function outcome_test.push(p_mutations jsonb) returns jsonb language plpgsql
as $$
declare
    v_answer jsonb;
begin
    perform pg_catalog.set_config('role', 'ferry_client', true),
        pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000c3', true),
        pg_catalog.set_config('ferry.device_id', 'd1', true);
    v_answer := ferry.push(p_mutations);
    perform pg_catalog.set_config('role', 'none', true);
    return v_answer -> 'results';
end
$$;

-- 1 is applied, 2 rejected (no title: constraint_violation), 3 rejected (immutable).
select outcome_test.push('[{"id": 1, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "x"}},
    {"id": 2, "table": "outcome_rows", "op": "insert", "row": {"id": "b"}},
    {"id": 3, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "y"}}]');

select plan(7);

select is(outcome_test.push('[{"id": 1, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "x"}},
        {"id": 2, "table": "outcome_rows", "op": "insert", "row": {"id": "b"}},
        {"id": 3, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "y"}}]')
        #- '{1,message}' #- '{2,message}',
    '[{"id": 1, "status": "duplicate", "original": "applied"},
      {"id": 2, "status": "duplicate", "original": "rejected", "code": "constraint_violation"},
      {"id": 3, "status": "duplicate", "original": "rejected", "code": "immutable"}]',
    'a retried batch: each duplicate carries its original outcome');
select ok(outcome_test.push('[{"id": 3, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "y"}}]')
        -> 0 ->> 'message' like '%exists under this key%', 'a remembered rejection keeps its message');

-- Twice in one batch: the second is a duplicate of the first's outcome, before it is stored.
select is(outcome_test.push('[{"id": 4, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "z"}},
        {"id": 4, "table": "outcome_rows", "op": "insert", "row": {"id": "c", "title": "z"}}]') -> 1 #- '{message}',
    '{"id": 4, "status": "duplicate", "original": "rejected", "code": "immutable"}',
    'an id repeated within a batch carries the first one''s outcome');

-- Only rejections are stored: one row per rejected mutation, none for the applied one.
select is((select pg_catalog.array_agg(r.mutation_id order by r.mutation_id) from ferry.rejected_mutations r
        where r.user_id = '00000000-0000-4000-8000-0000000000c3'), '{2,3,4}'::bigint[],
    'the device''s rejections are remembered, its applied mutations are not');

-- The purge trims rejections older than retention and forgets what came before them.
update ferry.rejected_mutations set rejected_at = pg_catalog.now() - interval '40 days' where mutation_id in (2, 3);
select is(ferry.trim_rejected_mutations(interval '30 days', 1000), 2::bigint, 'the trim deletes the old rejections');
select is(outcome_test.push('[{"id": 1, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "x"}},
        {"id": 3, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "y"}},
        {"id": 4, "table": "outcome_rows", "op": "insert", "row": {"id": "a", "title": "z"}}]') #- '{2,message}',
    '[{"id": 1, "status": "duplicate"}, {"id": 3, "status": "duplicate"},
      {"id": 4, "status": "duplicate", "original": "rejected", "code": "immutable"}]',
    'below the trimmed rejections a duplicate carries no original; above, it still does');
select is(outcome_test.push('[{"id": 5, "table": "outcome_rows", "op": "insert", "row": {"id": "d", "title": "x"}}]')
        || outcome_test.push('[{"id": 5, "table": "outcome_rows", "op": "insert", "row": {"id": "d", "title": "x"}}]'),
    '[{"id": 5, "status": "applied"}, {"id": 5, "status": "duplicate", "original": "applied"}]',
    'a mutation after the trim is remembered as applied');

select * from finish();
rollback;
