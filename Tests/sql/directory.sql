-- The email directory (sql/directory, functions/directory.sql): a claim is pending until
-- its shard's commit is known, another (shard, user) is refused it, only its own shard
-- settles it, and a stale claim is released only if nobody renewed it since.
--
-- Run by Tests/sql/run.sh, which migrates the directory into the scratch database
-- (ferry migrate --directory); everything is made in one transaction and rolled back.

\set ON_ERROR_STOP 1
\set QUIET 1
\pset format unaligned
\pset tuples_only true
\pset pager off

begin;
select plan(22);

select is(outcome, 'claimed',
    'a free email is claimed') from directory.claim('Ann@Example.com', 1, '00010000-0000-8000-8000-000000000001');
select is(state, 'pending', 'a claim starts pending') from directory.lookup('ann@example.com');
select is(outcome, 'in_use',
    'another shard''s user is refused a pending claim') from directory.claim('ann@example.com', 2, '00020000-0000-8000-8000-000000000002');
select is(outcome, 'in_use',
    'another user of the same shard is refused it too') from directory.claim('ann@example.com', 1, '00010000-0000-8000-8000-000000000009');
select is(outcome, 'claimed',
    'the holder''s retry claims it again') from directory.claim('ann@example.com', 1, '00010000-0000-8000-8000-000000000001');
select ok(directory.mark_linked('ann@example.com', 1, '00010000-0000-8000-8000-000000000001'),
    'the holder marks it linked');
select is((shard, user_id, state), (1, '00010000-0000-8000-8000-000000000001'::uuid, 'linked'::text),
    'lookup finds the shard and user') from directory.lookup('ANN@example.com');
select is(outcome, 'linked',
    'a linked email is still its holder''s') from directory.claim('ann@example.com', 1, '00010000-0000-8000-8000-000000000001');
select is(state, 'linked', 'and a retry leaves it linked') from directory.lookup('ann@example.com');
select is(outcome, 'in_use',
    'another is refused a linked email') from directory.claim('ann@example.com', 2, '00020000-0000-8000-8000-000000000002');
select ok(not directory.mark_linked('ann@example.com', 2, '00020000-0000-8000-8000-000000000002'),
    'only the holder marks it linked');
select ok(not directory.release('ann@example.com', 2, '00020000-0000-8000-8000-000000000002'),
    'only the holder releases it');

-- Deletion: unlink (pending again), the shard deletes, release.
select ok(directory.unlink('ann@example.com', 1, '00010000-0000-8000-8000-000000000001'),
    'the holder turns it pending before deleting');
select ok(directory.release('ann@example.com', 1, '00010000-0000-8000-8000-000000000001'),
    'and releases it after');
select is(count(*)::integer, 0, 'a released email is free') from directory.lookup('ann@example.com');

-- Stale claims: only their shard's, only old ones.
insert into directory.emails (email, shard, user_id, state, claimed_at) values
    ('old1@example.com', 1, '00010000-0000-8000-8000-000000000011', 'pending', now() - interval '1 hour'),
    ('old2@example.com', 1, '00010000-0000-8000-8000-000000000012', 'pending', now() - interval '2 hours'),
    ('new1@example.com', 1, '00010000-0000-8000-8000-000000000013', 'pending', now()),
    ('old3@example.com', 2, '00020000-0000-8000-8000-000000000014', 'pending', now() - interval '1 hour');
select is(array_agg(email order by claimed_at), array['old2@example.com', 'old1@example.com'],
    'stale_claims lists its shard''s old pending claims, oldest first') from directory.stale_claims(1, 600, 100);
select is(directory.settle_claim('old1@example.com', 1, '00010000-0000-8000-8000-000000000011',
    (select claimed_at from directory.emails where email = 'old1@example.com'), true), 'linked',
    'a claim whose shard committed is marked linked');
select is(directory.settle_claim('old2@example.com', 1, '00010000-0000-8000-8000-000000000012',
    (select claimed_at from directory.emails where email = 'old2@example.com') - interval '1 second', false),
    'unchanged', 'a claim renewed since it was seen stays');
select is(directory.settle_claim('old2@example.com', 1, '00010000-0000-8000-8000-000000000012',
    (select claimed_at from directory.emails where email = 'old2@example.com'), false), 'released',
    'a claim its shard never committed is released');
select is(directory.settle_claim('old3@example.com', 1, '00020000-0000-8000-8000-000000000014',
    (select claimed_at from directory.emails where email = 'old3@example.com'), false), 'unchanged',
    'a shard cannot release another shard''s claim');

set local role ferry_client;
select throws_ok($$select directory.lookup('x@example.com')$$, '42501', null,
    'a request''s role cannot reach the directory');
reset role;
set local role ferry_directory;
select lives_ok($$select directory.lookup('x@example.com')$$, 'the directory role runs its functions');
reset role;

select * from finish();
rollback;
