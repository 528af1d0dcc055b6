-- A cursor made on another timeline (sql/ferry/functions/history.sql): kept when that
-- timeline is an ancestor of this one left after the cursor was made, expired when left
-- before, and, until ferry.note_history has noted this timeline (a pull reaching a new
-- primary before its gateway's listener reconnected), neither: the pull is retried
-- (57P03, 503), so a failover that lost nothing expires no cursor.
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;
select plan(4);

create schema history_test;
-- A cursor made on timeline 7 at 0/100, judged on timeline 8 of the same epoch and start.
create function history_test.left_on_8() returns boolean language sql
as $$
    select ferry.history_left(
        pg_catalog.jsonb_build_object('epoch', h.epoch, 'timeline', 7, 'lsn', '0/100', 'started', 's'),
        pg_catalog.jsonb_build_object('epoch', h.epoch, 'timeline', 8, 'lsn', '0/900', 'started', 's'))
    from ferry.history h
$$;

update ferry.history set timeline = 7;
delete from ferry.timeline_ancestry;
insert into ferry.timeline_ancestry (timeline, ended_at) values (6, '0/50');
select throws_ok('select history_test.left_on_8()', '57P03', 'pull: timeline 8 is not noted yet; retry',
    'before timeline 8 is noted, a cursor of timeline 7 is neither kept nor expired: the pull is retried');

update ferry.history set timeline = 8;
delete from ferry.timeline_ancestry;
insert into ferry.timeline_ancestry (timeline, ended_at) values (7, '0/200');
select is(history_test.left_on_8(), false, 'timeline 7 left after the cursor was made: kept');

update ferry.timeline_ancestry set ended_at = '0/80';
select is(history_test.left_on_8(), true, 'timeline 7 left before the cursor was made: expired');

delete from ferry.timeline_ancestry;
select is(history_test.left_on_8(), true, 'noted without an ancestry (its file unreadable): expired');

select * from finish();
rollback;
