-- Shards (docs/SCALING.md, "Shards"; the table: 0013_shards.sql). A user id
-- names its shard: on shard N > 0 it is a version 8 UUID whose first 16 bits (its first
-- four hex digits) are N, then 32 random bits, the version (8), 12 random bits, the
-- variant (binary 10) and 62 random bits: 106 random bits in all. On shard 0 (unsharded) it is a version 4
-- UUID, as random as before sharding (122 bits), and so is every id minted before.
-- haproxy reads the same bits from the access token's sub (deploy/haproxy-shards.cfg).

-- This cluster's shard number: 0 until ferry.set_shard. The gateway needs none: the
-- user id it answers names the shard (the refresh token's prefix, Shard.of).
create or replace function ferry.shard() returns integer
language sql stable security definer set search_path = ''
as $$ select s.number from ferry.shard s $$;

-- The shard a user id names: the first 16 bits of a version 8 UUID, else 0.
create or replace function ferry.shard_of(p_id uuid) returns integer
language sql immutable strict parallel safe
as $$
    select case when pg_catalog.substr(p_id::text, 15, 1) = '8'
        then ('x' || pg_catalog.substr(p_id::text, 1, 4))::bit(16)::integer
        else 0 end
$$;

-- The id of a new user of this cluster's shard: every sign-up's (ferry.sign_up_anonymous).
create or replace function ferry.new_user_id() returns uuid
language sql volatile set search_path = ''
as $$
    select case when s.number = 0 then pg_catalog.gen_random_uuid()
        else (pg_catalog.lpad(pg_catalog.to_hex(s.number), 4, '0') || pg_catalog.substr(r.hex, 5, 8)
            || '8' || pg_catalog.substr(r.hex, 14))::uuid
        end
    from ferry.shard s,
        lateral (select pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '') as hex) r
$$;

-- The operator's, once per cluster before its first user: sets its shard number.
-- Refused once a user exists (their ids, and the refresh tokens issued, name the shard
-- they were made in). Gateways read the number at start: restart any started before.
create or replace function ferry.set_shard(p_number integer) returns void
language plpgsql
as $$
begin
    if p_number is null or p_number < 0 or p_number > 65535 then
        raise exception 'a shard number is from 0 to 65535, not %', p_number using errcode = '22023';
    end if;
    -- No sign-up commits between the check and the update.
    lock table ferry.users in share row exclusive mode;
    if exists (select from ferry.users) and p_number <> (select s.number from ferry.shard s) then
        raise exception 'this cluster has users: its shard number stays %', (select s.number from ferry.shard s)
            using errcode = '55000';
    end if;
    update ferry.shard set number = p_number;
end
$$;

revoke all on function ferry.shard(), ferry.shard_of(uuid), ferry.new_user_id(), ferry.set_shard(integer) from public;
grant execute on function ferry.shard(), ferry.shard_of(uuid) to ferry_client;
