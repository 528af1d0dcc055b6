-- What changes what push knows about the synced tables (ferry.push_tables, push.sql),
-- noted in ferry.catalog_changes (0017_catalog_changes.sql), one row per transaction:
-- DDL on a synced table or on what hangs off it (columns, defaults, triggers, policies,
-- indexes, rules, constraints), on a type, or in Ferry's own schema, noted by two event
-- triggers; and any change to the registry, noted by its statement trigger.
--
-- Event triggers can only be made by a superuser. Without them (a migration run by an
-- owner role), nothing is noted but the registry's changes, ferry.push_tables sees that
-- its triggers are missing and checks the catalog itself at every push, as before they
-- existed. Both must be enabled ALWAYS, so that DDL run with session_replication_role =
-- replica is noted too; push checks that at every push as well.

-- MARK: - Noting a change

-- Notes the calling transaction in ferry.catalog_changes, once however often it is called.
create or replace function ferry.note_catalog_change() returns void
language sql security definer set search_path = ''
as $$
    insert into ferry.catalog_changes default values on conflict do nothing;
$$;

comment on function ferry.note_catalog_change() is
    'Notes the calling transaction in ferry.catalog_changes (once): what push caches about the synced tables may have changed';

-- Whether a relation is a synced table or is inherited by one, at any depth (a column
-- added to a parent or a partitioned table is added to its children too).
create or replace function ferry.reaches_synced_table(p_relation oid) returns boolean
language sql stable set search_path = ''
as $$
    with recursive below (relid) as (
        select p_relation
        union
        select i.inhrelid from pg_catalog.pg_inherits i join below b on i.inhparent = b.relid
    )
    select exists (select from below b join ferry.synced_tables s on s.table_name::oid = b.relid)
$$;

comment on function ferry.reaches_synced_table(oid) is
    'Whether a relation is a synced table or a parent of one, at any depth: DDL on it may change what push caches';

-- ddl_command_end: notes the transaction when a command's object is, or hangs off, a
-- synced table or a parent of one, or is a type (a domain's default reaches a column's),
-- or is in schema ferry. Any other DDL (another table, a temporary one) is not noted.
create or replace function ferry.note_ddl() returns event_trigger
language plpgsql security definer set search_path = ''
as $$
begin
    if exists (
        select from pg_catalog.pg_event_trigger_ddl_commands() c
        where c.schema_name = 'ferry'
            or (c.classid = 'pg_catalog.pg_type'::regclass and c.schema_name is distinct from 'pg_temp')
            or ferry.reaches_synced_table(case c.classid
                when 'pg_catalog.pg_class'::regclass then coalesce(
                    (select i.indrelid from pg_catalog.pg_index i where i.indexrelid = c.objid), c.objid)
                when 'pg_catalog.pg_trigger'::regclass then (select t.tgrelid from pg_catalog.pg_trigger t where t.oid = c.objid)
                when 'pg_catalog.pg_policy'::regclass then (select p.polrelid from pg_catalog.pg_policy p where p.oid = c.objid)
                when 'pg_catalog.pg_attrdef'::regclass then (select d.adrelid from pg_catalog.pg_attrdef d where d.oid = c.objid)
                when 'pg_catalog.pg_constraint'::regclass then
                    (select k.conrelid from pg_catalog.pg_constraint k where k.oid = c.objid)
                when 'pg_catalog.pg_rewrite'::regclass then (select w.ev_class from pg_catalog.pg_rewrite w where w.oid = c.objid)
            end)
    ) then
        perform ferry.note_catalog_change();
    end if;
end
$$;

comment on function ferry.note_ddl() is
    'The event trigger ferry_note_ddl (ddl_command_end): notes DDL on a synced table or what hangs off it, on a type, or in schema ferry, in ferry.catalog_changes';

-- sql_drop: the same for what a command dropped. A dropped index no longer names its
-- table, so any index counts; a dropped column, default, trigger, policy, rule or
-- constraint is named with its table's schema and name.
create or replace function ferry.note_drop() returns event_trigger
language plpgsql security definer set search_path = ''
as $$
begin
    if exists (
        select from pg_catalog.pg_event_trigger_dropped_objects() o
        where not o.is_temporary
            and (o.schema_name = 'ferry' or o.object_type in ('index', 'type', 'domain')
                or ferry.reaches_synced_table(o.objid)
                or (o.object_type in ('table column', 'default value', 'trigger', 'policy', 'rule', 'table constraint')
                    and ferry.reaches_synced_table(
                        pg_catalog.to_regclass(pg_catalog.format('%I.%I', o.address_names[1], o.address_names[2]))::oid)))
    ) then
        perform ferry.note_catalog_change();
    end if;
end
$$;

comment on function ferry.note_drop() is
    'The event trigger ferry_note_drop (sql_drop): notes dropping what hangs off a synced table, an index, a type, or anything in schema ferry, in ferry.catalog_changes';

-- The registry's statement trigger: every change to ferry.synced_tables is noted.
create or replace function ferry.note_registry_change() returns trigger
language plpgsql security definer set search_path = ''
as $$
begin
    perform ferry.note_catalog_change();
    return null;
end
$$;

comment on function ferry.note_registry_change() is
    'The statement trigger ferry_note_change of ferry.synced_tables: notes the change in ferry.catalog_changes';

-- MARK: - Installing

create or replace trigger ferry_note_change
    after insert or update or delete or truncate on ferry.synced_tables
    for each statement execute function ferry.note_registry_change();

-- The event triggers, by a superuser only (no other role may make one); kept when they
-- exist, so that sessions' caches survive a migration that changes nothing they read.
do $$
begin
    if not (select r.rolsuper from pg_catalog.pg_roles r where r.rolname = current_user) then
        return;
    end if;
    if not exists (select from pg_catalog.pg_event_trigger e where e.evtname = 'ferry_note_ddl') then
        create event trigger ferry_note_ddl on ddl_command_end execute function ferry.note_ddl();
    end if;
    if not exists (select from pg_catalog.pg_event_trigger e where e.evtname = 'ferry_note_drop') then
        create event trigger ferry_note_drop on sql_drop execute function ferry.note_drop();
    end if;
    if exists (select from pg_catalog.pg_event_trigger e
            where e.evtname in ('ferry_note_ddl', 'ferry_note_drop') and e.evtenabled <> 'A') then
        alter event trigger ferry_note_ddl enable always;
        alter event trigger ferry_note_drop enable always;
    end if;
end
$$;

-- MARK: - Grants

revoke all on function ferry.note_catalog_change(), ferry.reaches_synced_table(oid), ferry.note_ddl(), ferry.note_drop(),
    ferry.note_registry_change()
from public;
