-- Every cue goes through ferry.send_cue (sql/ferry/functions/cues.sql), the one SQL entry
-- point a change of how cues travel reroutes: no other function names the ferry_cue
-- channel, send_cue is inlined into its callers' queries (no call of its own per cue),
-- and every role that may write a synced table can run it. Push's cues are queued
-- (ferry.queue_cue) for the gateway to send after the commit (ferry.send_queued_cues).
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;
select plan(13);

create schema cues_test;
create function cues_test.plan_of(p_query text) returns text language plpgsql as $$
declare
    v_line text;
    v_plan text := '';
begin
    for v_line in execute 'explain (verbose, costs off) ' || p_query loop
        v_plan := v_plan || v_line || E'\n';
    end loop;
    return v_plan;
end
$$;

select is(
    (select pg_catalog.string_agg(n.nspname || '.' || p.proname, ', ' order by n.nspname, p.proname)
        from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
        where n.nspname not in ('pg_catalog', 'information_schema')
            and p.prosrc ilike '%''ferry_cue''%'),
    'ferry.send_cue',
    'only ferry.send_cue names the ferry_cue channel: every cue goes through it');

select matches(
    cues_test.plan_of('select ferry.send_cue(x::text) from pg_catalog.generate_series(1, 2) x'),
    'Output: pg_notify\(''ferry_cue''::text',
    'ferry.send_cue is inlined into the query calling it');

select ok(pg_catalog.has_function_privilege('ferry_client', 'ferry.send_cue(text)', 'execute'),
    'ferry_client (whose pushes fire the triggers) may send a cue');

select ok(pg_catalog.has_function_privilege('public', 'ferry.send_cue(text)', 'execute'),
    'every role may send a cue, as pg_notify itself: an operator''s plain-SQL write cues');

-- Push's cues wait in ferry.queued_cues for the gateway (ferry.send_queued_cues).
select is((select c.relpersistence from pg_catalog.pg_class c where c.oid = 'ferry.queued_cues'::regclass),
    'u', 'ferry.queued_cues is unlogged: a queued cue costs a push no WAL');

select ok(pg_catalog.has_function_privilege('ferry_client', 'ferry.queue_cue(text)', 'execute')
        and pg_catalog.has_table_privilege('ferry_client', 'ferry.queued_cues', 'insert'),
    'ferry_client (push) may queue a cue');

select ok(not pg_catalog.has_function_privilege('ferry_client', 'ferry.send_queued_cues()', 'execute')
        and not pg_catalog.has_table_privilege('ferry_client', 'ferry.queued_cues', 'select')
        and not pg_catalog.has_table_privilege('ferry_client', 'ferry.queued_cues', 'delete'),
    'ferry_client may neither send nor read nor take the queued cues');

select ok(pg_catalog.has_function_privilege('ferry_gateway', 'ferry.send_queued_cues()', 'execute'),
    'the gateway sends them');

-- A lock's claim and release queue their cue too (locks.sql); a heartbeat cues nobody.
-- Each call as device d1 of a user, in this transaction; the cues queued since, as the
-- owner reads them, and what the call left of ferry.skip_cues and ferry.cues_queued.
insert into ferry.users (id) values ('00000000-0000-4000-8000-0000000000c1');
create function cues_test.lock_call(p_call text) returns jsonb language plpgsql as $$
declare
    v_before tid[] := array(select q.ctid from ferry.queued_cues q);
    v_answer jsonb;
    v_queued text[];
begin
    perform pg_catalog.set_config('ferry.cues_queued', '', true);
    perform pg_catalog.set_config('role', 'ferry_client', true),
        pg_catalog.set_config('ferry.user_id', '00000000-0000-4000-8000-0000000000c1', true),
        pg_catalog.set_config('ferry.device_id', 'd1', true);
    execute 'select ' || p_call into v_answer;
    perform pg_catalog.set_config('role', 'none', true);
    select pg_catalog.array_agg(pg_catalog.regexp_replace(q.payload, '@[0-9]+', '@xid'))
        into v_queued from ferry.queued_cues q where not q.ctid = any (v_before);
    return pg_catalog.jsonb_build_object('status', v_answer ->> 'status', 'queued', coalesce(v_queued, '{}'),
        'cues_queued', pg_catalog.current_setting('ferry.cues_queued', true),
        'skip_cues', coalesce(pg_catalog.current_setting('ferry.skip_cues', true), ''));
end
$$;
select is(cues_test.lock_call($c$ferry.claim_lock('active_game', 'main')$c$),
    '{"status": "ok", "queued": ["00000000-0000-4000-8000-0000000000c1 d1@xid active_game"], "cues_queued": "on", "skip_cues": ""}'::jsonb,
    'a claim that makes the row and takes the lock queues one cue, and leaves skip_cues as it was');
select is(cues_test.lock_call($c$ferry.heartbeat_lock('active_game', 'main')$c$),
    '{"status": "ok", "queued": [], "cues_queued": "", "skip_cues": ""}'::jsonb, 'a heartbeat queues nothing');
select is(cues_test.lock_call($c$ferry.release_lock('active_game', 'main')$c$),
    '{"status": "ok", "queued": ["00000000-0000-4000-8000-0000000000c1 d1@xid active_game"], "cues_queued": "on", "skip_cues": ""}'::jsonb,
    'a release that frees the lock queues one cue');
select is(cues_test.lock_call($c$ferry.release_lock('active_game', 'main')$c$),
    '{"status": "ok", "queued": [], "cues_queued": "", "skip_cues": ""}'::jsonb, 'a release of a lock not held writes nothing, queues nothing');
select is(cues_test.lock_call($c$ferry.claim_lock('active_game', 'main')$c$) - 'queued' - 'status',
    '{"cues_queued": "on", "skip_cues": ""}'::jsonb, 'a claim of an existing row queues its cue as well');

select * from finish();
rollback;
