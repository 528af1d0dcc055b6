-- Shared tables across clusters (docs/SCALING.md, "Shared tables across shards"): one
-- cluster, the origin, is where the operator writes a shared table; every other cluster
-- (shard) receives it by PostgreSQL logical replication, a publication at the origin
-- and a subscription here. ferry.receive_shared readies a table for that here: the rows
-- replication applies are stamped and cued as local writes would be (registry.sql,
-- ferry.install_triggers), and anything else that writes the table is refused, so it
-- stays what the origin has.

-- BEFORE row trigger of a received shared table (ferry_replica_only): an ordinary
-- trigger, so it never fires for the rows replication applies, only for everyone
-- else's writes.
create or replace function ferry.refuse_replica_write() returns trigger
language plpgsql set search_path = ''
as $$
begin
    raise exception 'table %.% is received from its origin by logical replication: write it at the origin',
        tg_table_schema, tg_table_name
        using errcode = '25006',
            hint = 'select ferry.stop_receiving_shared(''' || tg_table_schema || '.' || tg_table_name
                || ''') makes it writable here again (drop the subscription first)';
end
$$;

comment on function ferry.refuse_replica_write() is
    'BEFORE row trigger of a shared table received by logical replication (ferry_replica_only): refuses every write but the ones replication applies (25006).';

-- Readies a shared table of this cluster to be received from an origin: call it (as the
-- database owner) for each table the subscription will carry, before creating the
-- subscription. Idempotent.
create or replace function ferry.receive_shared(p_table regclass) returns void
language plpgsql set search_path = ''
as $$
begin
    if not exists (select from ferry.synced_tables s where s.table_name = p_table and s.strategy = 'shared') then
        raise exception 'ferry.receive_shared(%): not a registered shared table', p_table
            using errcode = '22023', hint = 'register it with ferry.register_table(…, strategy => ''shared'') first';
    end if;
    insert into ferry.replicated_tables (table_name) values (p_table) on conflict do nothing;
    perform ferry.install_triggers(p_table);
    -- A received table is probed by a steady-state pull, not looked up in ferry.changes.
    perform ferry.install_pull_rows();
end
$$;

comment on function ferry.receive_shared(regclass) is
    'Readies a shared table to be received from an origin by logical replication: applied rows stamped and cued here, other writes refused.';

-- Undoes ferry.receive_shared (this cluster becomes the table's origin, or stops
-- receiving it): its triggers are a local table's again.
create or replace function ferry.stop_receiving_shared(p_table regclass) returns void
language plpgsql set search_path = ''
as $$
begin
    delete from ferry.replicated_tables r where r.table_name = p_table;
    if exists (select from ferry.synced_tables s where s.table_name = p_table) then
        perform ferry.install_triggers(p_table);
        perform ferry.install_pull_rows();
    end if;
end
$$;

comment on function ferry.stop_receiving_shared(regclass) is
    'Makes a shared table received by logical replication a local one again (triggers as ferry.register_table installs them).';

revoke all on function ferry.refuse_replica_write(), ferry.receive_shared(regclass),
    ferry.stop_receiving_shared(regclass) from public;
