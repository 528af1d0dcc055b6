-- Tombstone retention (docs/OPERATIONS.md "Purging tombstones"): deleting tombstones
-- older than a retention period, and moving the purge horizon (ferry.purge_horizon)
-- that ferry.pull checks cursors against (docs/ARCHITECTURE.md, "The purge horizon").
-- Both functions are SECURITY DEFINER and granted to ferry_gateway.

-- Deletes at most p_batch tombstones (_deleted and updated_at < now() - p_older_than)
-- over every registered table, table by table in name order, and advances the horizon
-- in the same transaction; returns how many. Call it until it returns 0 (ferry
-- purge-tombstones does, one transaction per call). A purge that deletes nothing leaves
-- the horizon alone (no new purge_xid). FOR UPDATE SKIP LOCKED: a tombstone a push is
-- reviving is left for the next run. No index on updated_at is made: each call scans
-- each table for old tombstones. Each call also trims at most p_batch WatermelonDB
-- timestamps as old, each device keeping its newest (ferry.trim_watermelon_cursors,
-- watermelon.sql) and at most p_batch remembered rejections as old
-- (ferry.trim_rejected_mutations, outcomes.sql), and compacts ferry.changes
-- (ferry.compact_changes, below); they are not counted in the answer.
-- Its DELETEs are for good (ferry.hard_delete, deletes.sql), not tombstones of tombstones.
-- Shared tables this cluster receives from an origin are left out: the origin purges
-- them, and replication applies its purge here (ferry.tombstone_delete).
create or replace function ferry.purge_tombstones(p_older_than interval, p_batch integer) returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
    v_hard text;
    v_table regclass;
    v_left bigint := p_batch;
    v_deleted bigint;
    v_max xid8;
    v_total bigint := 0;
    v_through xid8;
begin
    if p_older_than is null or p_older_than < interval '0' or p_batch is null or p_batch < 1 then
        raise exception 'purge_tombstones: older_than must be >= 0 and batch a positive integer'
            using errcode = '22023';
    end if;
    v_hard := ferry.hard_delete_begin();
    for v_table in
        select s.table_name from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        where not exists (select from ferry.replicated_tables r where r.table_name = s.table_name)
        order by c.relname
    loop
        execute pg_catalog.format($sql$
            with gone as (
                delete from %1$s t where t.ctid = any (array(
                    select x.ctid from %1$s x
                    where x._deleted and x.updated_at < pg_catalog.now() - $1
                    limit $2
                    for update skip locked))
                returning t._stamp
            )
            select pg_catalog.count(*), pg_catalog.max(g._stamp) from gone g
            $sql$, v_table)
            into v_deleted, v_max
            using p_older_than, v_left;
        if v_deleted > 0 then
            v_total := v_total + v_deleted;
            v_left := v_left - v_deleted;
            v_through := greatest(v_through, v_max);
        end if;
        exit when v_left <= 0;
    end loop;
    perform ferry.trim_watermelon_cursors(p_older_than, p_batch);
    perform ferry.trim_rejected_mutations(p_older_than, p_batch);
    perform ferry.compact_changes(p_batch);
    if v_total > 0 then
        update ferry.purge_horizon h
            set purged_through = greatest(h.purged_through, v_through),
                purge_xid = pg_catalog.pg_current_xact_id(),
                purged_at = pg_catalog.now();
    end if;
    perform ferry.hard_delete_end(v_hard);
    return v_total;
end
$$;

comment on function ferry.purge_tombstones(interval, integer) is
    'Deletes at most batch tombstones older than older_than over the synced tables and advances ferry.purge_horizon; returns the count (call until 0).';

-- ferry.changes (0016_changes.sql) gains a row per owner, table and writing transaction.
-- Compacting replaces all of an owner's rows for one table, when there are several, by
-- one row of this transaction, for at most p_batch (owner, table) groups; returns how
-- many rows it removed. Only rows of transactions that ended before this one's snapshot
-- are touched (none a writer in flight adds). A cursor that missed any of them was made
-- before it committed, so before this transaction commits: it misses the new row too, and
-- still finds the table. A cursor that saw them all may read the table once for nothing.
create or replace function ferry.compact_changes(p_batch integer) returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
    v_before xid8 := pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
    v_removed bigint;
begin
    with crowded as (
        select c.owner, c.table_name from ferry.changes c
        where c.changed_by < v_before
        group by c.owner, c.table_name
        having pg_catalog.count(*) > 1
        limit p_batch
    ), gone as (
        delete from ferry.changes c using crowded w
        where c.owner = w.owner and c.table_name = w.table_name and c.changed_by < v_before
        returning c.owner, c.table_name
    ), kept as (
        insert into ferry.changes (owner, changed_by, table_name)
        select distinct g.owner, pg_catalog.pg_current_xact_id(), g.table_name from gone g
        on conflict do nothing
    )
    select pg_catalog.count(*) into v_removed from gone;
    return v_removed;
end
$$;

comment on function ferry.compact_changes(integer) is
    'Replaces the ferry.changes rows of at most batch (owner, table) groups that have several by one row of this transaction; returns how many rows went (called by ferry.purge_tombstones).';

-- What a purge would delete now (ferry purge-tombstones --dry-run).
create or replace function ferry.count_purgeable_tombstones(p_older_than interval) returns bigint
language plpgsql stable security definer set search_path = ''
as $$
declare
    v_table regclass;
    v_count bigint;
    v_total bigint := 0;
begin
    for v_table in
        select s.table_name from ferry.synced_tables s
        where not exists (select from ferry.replicated_tables r where r.table_name = s.table_name)
    loop
        execute pg_catalog.format(
            'select pg_catalog.count(*) from %s t where t._deleted and t.updated_at < pg_catalog.now() - $1', v_table)
            into v_count using p_older_than;
        v_total := v_total + v_count;
    end loop;
    return v_total;
end
$$;

comment on function ferry.count_purgeable_tombstones(interval) is
    'How many tombstones ferry.purge_tombstones would delete now (ferry purge-tombstones --dry-run).';

revoke all on function ferry.purge_tombstones(interval, integer), ferry.count_purgeable_tombstones(interval),
    ferry.compact_changes(integer)
    from public;
grant execute on function ferry.purge_tombstones(interval, integer), ferry.count_purgeable_tombstones(interval)
    to ferry_gateway;
