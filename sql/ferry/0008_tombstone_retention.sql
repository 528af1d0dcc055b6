-- 0008_tombstone_retention: purging old tombstones, the purge horizon, and cursor_expired
-- in pull (docs/ARCHITECTURE.md "Sync", PROTOCOL.md "Pull", issue 4 item 4).
--
-- Adds
--   ferry.purge_horizon             one row: what purges have removed so far
--       purged_through xid8         the highest change stamp (_stamp) of any tombstone ever
--                                   purged ('0' before the first purge)
--       purge_xid xid8              the transaction of the latest purge that deleted anything
--       purged_at timestamptz       when it ran
--   ferry.purge_tombstones(older_than interval, batch integer) returns bigint
--       Deletes at most `batch` tombstones (_deleted and updated_at < now() - older_than)
--       over every registered table (ferry.synced_tables; nothing else is touched), table
--       by table in name order, and advances the horizon in the same transaction. Returns
--       how many it deleted: call it until it returns 0 (ferry purge-tombstones does, one
--       transaction per call). Granted to ferry_gateway; SECURITY DEFINER.
--   ferry.count_purgeable_tombstones(older_than interval) returns bigint
--       what a purge would delete now (--dry-run). Granted to ferry_gateway.
-- Changes
--   ferry.pull   a cursor older than the horizon raises SQLSTATE 'FR409', which the
--                gateway answers 409 cursor_expired. A pull without a cursor never does.
--
-- The horizon, thought through. A cursor is a snapshot S: the client holds every change
-- visible in S. The next pull sends the rows whose stamp is not visible in S, tombstones
-- included. A purged tombstone t is lost to exactly the cursors S in which t's stamp is
-- not visible: they still hold the row and will never hear of its delete. So a cursor is
-- safe from a purge P when every tombstone P deleted is visible in S. Two sufficient tests:
--   1. pg_snapshot_xmin(S) > purged_through. Every purged stamp is <= purged_through, so
--      below S's xmin; a transaction below xmin has finished, and these committed (their
--      rows existed), so each is visible in S.
--   2. P's own transaction is visible in S: P committed before S was taken, and every row
--      P deleted was committed before P's snapshot, hence before S; all visible in S.
-- pull raises cursor_expired only when both fail:
--      pg_snapshot_xmin(S) <= purged_through and not pg_visible_in_snapshot(purge_xid, S)
-- (1) is the usual way out: purged_through is a tombstone's stamp from retention-ago, far
-- below any live cursor's xmin, so a cursor younger than the retention period passes; an
-- older one may have missed a purged delete and must start over. (2) makes "a cursor taken
-- after the purge works" hold even while some old transaction keeps every new snapshot's
-- xmin low (else a client told to start over could get an expired cursor again and again).
-- The row keeps one purge_xid (the latest) and purged_through as a maximum over all purges:
-- purges serialize on the row's lock, so a snapshot that sees the latest purge sees every
-- earlier one too, and (1) over the maximum is conservative. The price of keeping one row:
-- a cursor taken between two purges, with its xmin below the first purge's stamps, is
-- expired by the second even if it missed nothing (only possible when a transaction older
-- than the retention period is still running, or with a retention of seconds in tests).
-- The check runs in pull's one snapshot, the one the data is read in: a pull concurrent
-- with a purge either sees the purge (and the horizon) or neither, never half.
--
-- Which snapshot of a cursor is checked: its `since`; for a first-load paging cursor
-- (`since` null) its `until`, which becomes the next `since`: a row sent on an early page
-- and then deleted and purged before paging ends would otherwise lose its delete.
-- A purge that deletes nothing leaves the row alone (no new purge_xid to fail test 2).
--
-- Cost: each call scans each table for tombstones older than the limit (no index on
-- updated_at is made; a table with many tombstones can get one, on (updated_at) where
-- _deleted). FOR UPDATE SKIP LOCKED: a tombstone being revived by a push is left for the
-- next run.

-- MARK: - The horizon

create table ferry.purge_horizon (
    one boolean primary key default true check (one),
    purged_through xid8 not null default '0',
    purge_xid xid8,
    purged_at timestamptz
);

insert into ferry.purge_horizon default values;

comment on table ferry.purge_horizon is
    'One row: the highest _stamp of any purged tombstone and the latest purging transaction; ferry.pull expires cursors it could have cut short (see 0008_tombstone_retention.sql).';

revoke all on ferry.purge_horizon from public;
-- pull runs as ferry_client and reads the row in its own snapshot.
grant select on ferry.purge_horizon to ferry_client;

-- MARK: - Purging

create function ferry.purge_tombstones(p_older_than interval, p_batch integer) returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
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
    for v_table in
        select s.table_name from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
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
    if v_total > 0 then
        update ferry.purge_horizon h
            set purged_through = greatest(h.purged_through, v_through),
                purge_xid = pg_catalog.pg_current_xact_id(),
                purged_at = pg_catalog.now();
    end if;
    return v_total;
end
$$;

comment on function ferry.purge_tombstones(interval, integer) is
    'Deletes at most batch tombstones older than older_than over the synced tables and advances ferry.purge_horizon; returns the count (call until 0).';

create function ferry.count_purgeable_tombstones(p_older_than interval) returns bigint
language plpgsql stable security definer set search_path = ''
as $$
declare
    v_table regclass;
    v_count bigint;
    v_total bigint := 0;
begin
    for v_table in select s.table_name from ferry.synced_tables s loop
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

-- MARK: - pull checks the horizon

-- 0006's ferry.pull with the horizon check where its TOMBSTONES comment was; nothing else
-- changes. create or replace keeps its owner, comment and grants (ferry_client).
create or replace function ferry.pull(p_cursor text, p_limit integer) returns jsonb
language plpgsql stable
as $$
declare
    v_cursor jsonb;
    v_since pg_snapshot;
    v_until pg_snapshot;
    v_last bigint;
    v_after_table name;
    v_after_stamp xid8;
    v_after_key jsonb;
    v_remaining integer := p_limit;
    v_changes jsonb := '{}';
    v_has_more boolean := false;
    v_position jsonb;
    v_table record;
    v_fetched integer;
    v_upserts jsonb;
    v_deletes jsonb;
    v_reached jsonb;
begin
    if p_limit is null or p_limit < 1 then
        raise exception 'pull: limit must be a positive integer' using errcode = '22023';
    end if;
    -- A malformed cursor raises 22P02 (bad JSON or snapshot text) or 22023 (bad shape).
    if p_cursor is not null then
        v_cursor := p_cursor::jsonb;
        if pg_catalog.jsonb_typeof(v_cursor) <> 'object' then
            raise exception 'pull: invalid cursor' using errcode = '22023';
        end if;
        v_since := (v_cursor ->> 'since')::pg_snapshot;
        if v_cursor ? 'until' then
            v_until := (v_cursor ->> 'until')::pg_snapshot;
            v_last := (v_cursor ->> 'last_mutation_id')::bigint;
            v_after_table := v_cursor ->> 'table';
            v_after_stamp := (v_cursor ->> 'stamp')::xid8;
            v_after_key := v_cursor -> 'key';
            if v_until is null or v_last is null or v_after_table is null or v_after_stamp is null
                or pg_catalog.jsonb_typeof(v_after_key) is distinct from 'object'
            then
                raise exception 'pull: invalid cursor' using errcode = '22023';
            end if;
        elsif v_since is null then
            raise exception 'pull: invalid cursor' using errcode = '22023';
        end if;
        -- The purge horizon (header of this file): a tombstone this cursor has not seen
        -- may be gone. Checked in this statement's snapshot, the one the rows are read in.
        if exists (
            select from ferry.purge_horizon h
            where pg_catalog.pg_snapshot_xmin(coalesce(v_since, v_until)) <= h.purged_through
                and not pg_catalog.pg_visible_in_snapshot(h.purge_xid, coalesce(v_since, v_until))
        ) then
            raise exception 'pull: the cursor is older than the tombstone purge horizon'
                using errcode = 'FR409', hint = 'pull without a cursor';
        end if;
    end if;
    if v_until is null then
        v_until := pg_catalog.pg_current_snapshot();
        select d.last_mutation_id into v_last from ferry.devices d
            where d.user_id = ferry.uid() and d.device_id = ferry.device_id();
        v_last := coalesce(v_last, 0);
    end if;

    for v_table in
        select c.relname as name, c.oid::regclass as rel, k.order_list, k.object_args, k.after_list
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        cross join lateral (
            select pg_catalog.string_agg(pg_catalog.format('t.%I', a.attname), ', ' order by p.position) as order_list,
                pg_catalog.string_agg(pg_catalog.format('%L, t.%I', a.attname, a.attname), ', ' order by p.position)
                    as object_args,
                pg_catalog.string_agg(pg_catalog.format('p.%I', a.attname), ', ' order by p.position) as after_list
            from pg_catalog.pg_index i
            cross join lateral pg_catalog.unnest(i.indkey::smallint[]) with ordinality as p(attnum, position)
            join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = p.attnum
            where i.indrelid = c.oid and i.indisprimary
        ) k
        where pg_catalog.has_table_privilege(s.table_name, 'select')
            and (v_after_table is null or c.relname >= v_after_table)
        order by c.relname
    loop
        -- remaining + 1 rows: one more than fits says has_more (with 0 left, whether any remain).
        execute pg_catalog.format($sql$
            select pg_catalog.count(*)::integer,
                pg_catalog.jsonb_agg(r.body order by r.n) filter (where r.n <= $1 and not r.deleted),
                pg_catalog.jsonb_agg(r.key order by r.n) filter (where r.n <= $1 and r.deleted),
                (pg_catalog.array_agg(pg_catalog.jsonb_build_object('stamp', r.stamp::text, 'key', r.key)
                    order by r.n desc) filter (where r.n <= $1))[1]
            from (
                select pg_catalog.row_number() over (order by t._stamp, %1$s) as n,
                    t._stamp as stamp, t._deleted as deleted,
                    pg_catalog.to_jsonb(t) - '{_stamp,_deleted,_lock_device,_lock_heartbeat_at}'::text[] as body,
                    pg_catalog.jsonb_build_object(%2$s) as key
                from %3$s t %4$s
                where t._stamp >= $2 and t._stamp < pg_catalog.pg_snapshot_xmax($3)
                    and pg_catalog.pg_visible_in_snapshot(t._stamp, $3)
                    and %5$s %6$s
                order by t._stamp, %1$s
                limit $1 + 1
            ) r
            $sql$,
            v_table.order_list, v_table.object_args, v_table.rel,
            case when v_table.name = v_after_table
                then pg_catalog.format(', pg_catalog.jsonb_populate_record(null::%s, $5) p', v_table.rel) else '' end,
            case when v_since is null then 'not t._deleted'
                else 'not pg_catalog.pg_visible_in_snapshot(t._stamp, $4)' end,
            case when v_table.name = v_after_table
                then pg_catalog.format('and (t._stamp, %s) > ($6, %s)', v_table.order_list, v_table.after_list) else '' end)
            into v_fetched, v_upserts, v_deletes, v_reached
            using v_remaining, coalesce(pg_catalog.pg_snapshot_xmin(v_since), '0'::xid8), v_until, v_since,
                v_after_key, v_after_stamp;

        if v_upserts is not null or v_deletes is not null then
            v_changes := v_changes || pg_catalog.jsonb_build_object(v_table.name, pg_catalog.jsonb_build_object(
                'upserts', coalesce(v_upserts, '[]'), 'deletes', coalesce(v_deletes, '[]')));
        end if;
        if v_reached is not null then
            v_position := v_reached || pg_catalog.jsonb_build_object('table', v_table.name);
        end if;
        if v_fetched > v_remaining then
            v_has_more := true;
            exit;
        end if;
        v_remaining := v_remaining - v_fetched;
    end loop;

    return pg_catalog.jsonb_build_object(
        'changes', v_changes,
        'cursor', case
            when v_has_more then (pg_catalog.jsonb_build_object(
                'since', v_since::text, 'until', v_until::text, 'last_mutation_id', v_last) || v_position)::text
            else pg_catalog.jsonb_build_object('since', v_until::text)::text
        end,
        'has_more', v_has_more,
        'last_mutation_id', v_last);
end
$$;
