-- Sync (docs/ARCHITECTURE.md "Sync"): the registry of synced tables, which
-- ferry.register_table fills (functions/registry.sql), and each device's last pushed
-- mutation id.

-- One row per registered table. pull_reader names the table's generated pull reader.
create table ferry.synced_tables (
    table_name regclass primary key,
    strategy text not null
        check (strategy in ('lww', 'insert_only', 'set', 'device_lock', 'readonly', 'shared')),
    -- null for shared tables, which belong to nobody.
    owner_column name,
    options jsonb not null default '{}',
    registered_at timestamptz not null default now(),
    pull_reader text,
    constraint owner_unless_shared check ((owner_column is null) = (strategy = 'shared'))
);

revoke all on ferry.synced_tables from public;
-- The schema endpoint reads the registry as the caller.
grant select on ferry.synced_tables to ferry_client;

-- Per device of a user, the last mutation id pushed (docs/PROTOCOL.md "Push"), stored in
-- the same transaction as the writes. ferry_client reads its own rows (pull reports the
-- id); its policy is made with the functions that write it (functions/push.sql).
create table ferry.devices (
    user_id uuid not null references ferry.users on delete cascade,
    device_id text not null,
    last_mutation_id bigint not null default 0,
    primary key (user_id, device_id)
);
alter table ferry.devices enable row level security;
alter table ferry.devices force row level security;
revoke all on ferry.devices from public;
grant select on ferry.devices to ferry_client;
