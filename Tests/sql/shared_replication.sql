-- Shared tables received by logical replication (sql/ferry/functions/shared_replication.sql,
-- registry.sql's install_triggers, deletes.sql, cues.sql): the triggers' enabled states,
-- the rows "replication applies" (session_replication_role = replica, as the apply worker
-- runs) stamped, tombstoned and cued here, the origin's purge moving the purge horizon,
-- every other write refused, and the purge leaving such tables to their origin. The
-- end-to-end path with a real subscription is SharedReplicationTests (Swift).
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;
select plan(22);

select throws_ok($$select ferry.receive_shared('public.profiles')$$, '22023',
    'ferry.receive_shared(public.profiles): not a registered shared table', 'only a shared table can be received');

select lives_ok($$select ferry.receive_shared('public.daily_puzzles')$$, 'a shared table is readied to be received');
select lives_ok($$select ferry.receive_shared('public.daily_puzzles')$$, 'readying it again is harmless');
select results_eq(
    $$select tgname::text collate "C", tgenabled::text collate "C" from pg_catalog.pg_trigger
        where tgrelid = 'public.daily_puzzles'::regclass and tgname in
            ('ferry_stamp', 'ferry_tombstone_delete', 'ferry_cue_replicated', 'ferry_replica_only', 'ferry_cue_insert')
        order by 1$$,
    $$values ('ferry_cue_insert' collate "C", 'O' collate "C"), ('ferry_cue_replicated', 'R'), ('ferry_replica_only', 'O'),
        ('ferry_stamp', 'A'), ('ferry_tombstone_delete', 'A')$$,
    'stamp and tombstone fire always, the row cue only for replication, statement cues and the refusal never for it');
select lives_ok($$select ferry.rebuild_generated_code()$$, 'a migration rebuilding the generated code');
select is((select tgenabled::text from pg_catalog.pg_trigger
        where tgrelid = 'public.daily_puzzles'::regclass and tgname = 'ferry_stamp'), 'A',
    '... keeps the received table''s triggers');

-- Anyone but replication is refused.
select throws_ok($$insert into public.daily_puzzles (day, grid) values ('2026-01-01', '000000000000000000000000000000000000000000000000000000000000000000000000000000000')$$, '25006', null,
    'a local insert is refused');

-- What the apply worker does: the origin's row, with the origin's stamp.
listen ferry_cue;
set local session_replication_role = replica;
insert into public.daily_puzzles (day, grid, _stamp, updated_at)
    values ('2026-01-01', '111111111111111111111111111111111111111111111111111111111111111111111111111111111', '12345678', '2000-01-01'),
        ('2026-01-02', '222222222222222222222222222222222222222222222222222222222222222222222222222222222', '12345679', '2000-01-01');
select is((select pg_catalog.count(*)::int from public.daily_puzzles where _stamp = pg_catalog.pg_current_xact_id()), 2,
    'an applied row is stamped by this cluster''s transaction, not the origin''s');
select ok((select pg_catalog.bool_and(updated_at = pg_catalog.now()) from public.daily_puzzles),
    'and its updated_at is this cluster''s');
update public.daily_puzzles set grid = '333333333333333333333333333333333333333333333333333333333333333333333333333333333', _stamp = '1' where day = '2026-01-01';
select is((select _stamp from public.daily_puzzles where day = '2026-01-01'), pg_catalog.pg_current_xact_id(),
    'an applied update is stamped here too');

-- The origin's hard delete of a live row (it had ferry.hard_delete on) is a tombstone here.
delete from public.daily_puzzles where day = '2026-01-02';
select is((select _deleted from public.daily_puzzles where day = '2026-01-02'), true,
    'an applied delete of a live row leaves a tombstone');
-- The origin's purge of a tombstone removes it and moves the horizon.
select is((select purged_through from ferry.purge_horizon), '0'::xid8, 'no purge yet');
delete from public.daily_puzzles where day = '2026-01-02';
select is((select pg_catalog.count(*)::int from public.daily_puzzles where day = '2026-01-02'), 0,
    'an applied purge of a tombstone removes it');
select is((select purged_through from ferry.purge_horizon), pg_catalog.pg_current_xact_id(),
    'and moves the purge horizon to its stamp');
select is((select purge_xid from ferry.purge_horizon), pg_catalog.pg_current_xact_id(),
    'in the applying transaction');
-- The origin inserts the key again after its purge: no tombstone here is in the way.
insert into public.daily_puzzles (day, grid) values ('2026-01-02', '444444444444444444444444444444444444444444444444444444444444444444444444444444444');
select is((select grid from public.daily_puzzles where day = '2026-01-02'), '444444444444444444444444444444444444444444444444444444444444444444444444444444444',
    'the origin''s new row of a purged key arrives');
set local session_replication_role = origin;

-- The local purge leaves the table to the origin.
select is(ferry.count_purgeable_tombstones('0'), 0::bigint, 'the purge counts nothing of a received table');
select lives_ok($$select ferry.purge_tombstones('0', 100)$$, 'and purges around it');

-- After a logical restore of a cluster that receives it, finish_restore restamps it too,
-- and leaves it received.
select lives_ok($$select ferry.finish_restore()$$, 'finish_restore restamps a received table');
select is((select pg_catalog.bool_and(_stamp = pg_catalog.pg_current_xact_id()) from public.daily_puzzles), true,
    'every row of the received table restamped');
select is((select pg_catalog.array_agg(g.tgname::text || ' ' || g.tgenabled::text order by g.tgname) from pg_catalog.pg_trigger g
        where g.tgrelid = 'public.daily_puzzles'::regclass and g.tgname in ('ferry_stamp', 'ferry_replica_only', 'ferry_cue_update')),
    '{"ferry_cue_update O","ferry_replica_only O","ferry_stamp A"}'::text[], 'and its triggers as they were');

-- Undone, the table is an ordinary shared table again.
select ferry.stop_receiving_shared('public.daily_puzzles');
select lives_ok($$update public.daily_puzzles set grid = '555555555555555555555555555555555555555555555555555555555555555555555555555555555' where day = '2026-01-01'$$,
    'stop_receiving_shared makes it writable here again');

select * from finish();
rollback;
