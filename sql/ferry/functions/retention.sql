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
-- (ferry.trim_rejected_mutations, outcomes.sql); they are not counted in the answer.
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

revoke all on function ferry.purge_tombstones(interval, integer), ferry.count_purgeable_tombstones(interval)
    from public;
grant execute on function ferry.purge_tombstones(interval, integer), ferry.count_purgeable_tombstones(interval)
    to ferry_gateway;
