-- A user id names its shard (sql/ferry/functions/shards.sql): shard 0 mints version 4
-- ids as before, shard N version 8 ids whose first 16 bits are N; ferry.shard_of reads
-- it back; ferry.set_shard is the owner's, and refused once a user exists.
--
-- Run by Tests/sql/run.sh (make test); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;
select plan(13);

delete from ferry.users;
select is(ferry.shard(), 0, 'a cluster is shard 0 until set');
select is(pg_catalog.substr(ferry.new_user_id()::text, 15, 1), '4', 'shard 0 mints version 4 ids, as before');
select is(ferry.shard_of(pg_catalog.gen_random_uuid()), 0, 'a version 4 id (every id minted before) names shard 0');

select lives_ok('select ferry.set_shard(258)', 'an empty cluster takes a shard number');
select is(ferry.shard(), 258, 'the number is kept');
select is(pg_catalog.substr(ferry.new_user_id()::text, 1, 4), '0102', 'shard 258 ids start with 0102');
select is(ferry.shard_of(ferry.new_user_id()), 258, 'shard_of reads the shard an id was minted in');
select isnt(ferry.new_user_id(), ferry.new_user_id(), 'the rest of the id is random');

select is(ferry.shard_of(user_id), 258, 'a sign-up mints an id of its shard')
from ferry.sign_up_anonymous('device-1', 'hash-1');
select throws_ok('select ferry.set_shard(3)', '55000', 'this cluster has users: its shard number stays 258',
    'a cluster with users keeps its shard number');
select throws_ok('select ferry.set_shard(65536)', '22023', 'a shard number is from 0 to 65535, not 65536',
    'a number outside 16 bits is refused');

-- Only the database owner sets it: not the gateway, not a request.
set local role ferry_gateway;
select throws_ok('select ferry.set_shard(0)', '42501', null, 'the gateway role may not set the shard');
reset role;
set local role ferry_client;
select throws_ok('select ferry.set_shard(0)', '42501', null, 'a request may not set the shard');
reset role;

select * from finish();
rollback;
