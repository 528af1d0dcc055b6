-- Shards (docs/SCALING.md, "Shards"): a cluster knows its shard number, and the user
-- ids its sign-ups mint name it (ferry.new_user_id, functions/shards.sql), so that
-- haproxy routes every request of a user to its shard by the access token's sub
-- without a lookup. 0, the default, is unsharded: ids stay version 4 UUIDs, random as
-- before. ferry.set_shard sets the number once, before the first user.
create table ferry.shard (
    only_row boolean primary key default true check (only_row),
    number integer not null default 0 check (number between 0 and 65535)
);
insert into ferry.shard default values;
revoke all on ferry.shard from public;

