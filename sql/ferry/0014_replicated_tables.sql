-- Shared tables this cluster receives from an origin cluster by PostgreSQL logical
-- replication (docs/SCALING.md, "Shared tables across shards"). ferry.receive_shared
-- adds a table (functions/shared_replication.sql); ferry.install_triggers reads this to
-- give it the triggers that stamp, cue and turn deletes into tombstones for the rows
-- replication applies, and to refuse every other write.
create table ferry.replicated_tables (
    table_name regclass primary key references ferry.synced_tables (table_name) on delete cascade,
    received_since timestamptz not null default now()
);
revoke all on ferry.replicated_tables from public;

comment on table ferry.replicated_tables is
    'Shared tables this cluster receives from an origin by logical replication (ferry.receive_shared): written only by replication, stamped and cued here as they arrive.';
