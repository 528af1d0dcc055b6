-- Which transactions changed what push knows about the synced tables: one row per
-- transaction that changed the registry (ferry.synced_tables) or ran DDL on a synced
-- table, its columns, defaults, triggers, policies, indexes, rules or constraints, on a
-- type, or on Ferry's own schema. Written by Ferry's event triggers and a statement
-- trigger of the registry (functions/catalog_changes.sql).
--
-- A session keeps what push reads from the catalog about a table (ferry.push_tables,
-- functions/push.sql) with the snapshot it was read after, and trusts it while no row
-- here is invisible in that snapshot: one index range per push instead of reading seven
-- catalogs. Insert-only, so two DDL transactions never wait on each other's row.
create table ferry.catalog_changes (
    changed_by xid8 primary key default pg_catalog.pg_current_xact_id()
);

revoke all on ferry.catalog_changes from public;
grant select on ferry.catalog_changes to ferry_client;

comment on table ferry.catalog_changes is
    'The transactions that changed the synced tables'' definitions, the registry, a type or Ferry''s schema: written by Ferry''s event triggers and the registry''s statement trigger, read by ferry.push_tables to know when its session cache is stale.';
