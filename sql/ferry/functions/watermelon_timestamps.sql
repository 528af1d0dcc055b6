-- WatermelonDB's timestamps (docs/WATERMELONDB.md; watermelon.sql names the other files).
--
-- The timestamp (0005_watermelon_cursors.sql): a pull reads every table in one snapshot
-- S, stores (user, device, n, S) with n from a sequence, and answers n. The next pull
-- presents n, reads S(n) back and sends the rows whose _stamp is not visible in S(n)
-- (what /v1/pull does with its cursor, so out-of-order commits are never missed, and
-- S(n) is contained in the new snapshot because S(n)'s row committed before the client
-- could present it). A push refuses a record whose current version's _stamp is not
-- visible in S(n): that version was written after the pull, by someone else; the check
-- is the write's own WHERE, evaluated on the latest committed version under the row's
-- lock, so a change committed while the push waits is caught too. A transaction open
-- elsewhere changes neither side: a push right after a pull is never a conflict.
-- docs/WATERMELONDB.md, "Why the timestamp is correct", has the whole argument.
--
-- The cursor table is reached only through these SECURITY DEFINER functions, which act
-- on the caller's own user and device alone.

-- MARK: - Timestamps

-- How many timestamps a device keeps besides the one it presented
-- (ferry.issue_watermelon_cursor).
create or replace function ferry.watermelon_cursors_per_device() returns integer
language sql immutable parallel safe
as $$ select 8 $$;

-- The snapshot timestamp p_n names for the caller's device, or null.
create or replace function ferry.watermelon_cursor(p_n bigint) returns pg_snapshot
language plpgsql stable security definer set search_path = ''
as $$
declare
    v_snapshot pg_snapshot;
begin
    select c.snapshot into v_snapshot from ferry.watermelon_cursors c
        where c.user_id = ferry.uid() and c.device_id = ferry.device_id() and c.n = p_n;
    return v_snapshot;
end
$$;

-- A new timestamp naming p_snapshot for the caller's device. The device presented
-- p_presented (null on a first sync), so it stores that one and can never present an
-- older one again: those go. Of the others, the device keeps the presented one and
-- the newest ferry.watermelon_cursors_per_device(): pulls that present the same
-- timestamp again and again (or first syncs, one after another) would otherwise add
-- a row each until the purge. The device holds the presented one (if this answer is
-- lost) or one issued since (this answer, or a concurrent pull's that it applied:
-- WatermelonDB applies one of concurrent syncs, so only as many of those at once
-- could push it out).
create or replace function ferry.issue_watermelon_cursor(p_snapshot pg_snapshot, p_presented bigint) returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
    v_user uuid := ferry.uid();
    v_device text := ferry.device_id();
    v_n bigint := pg_catalog.nextval('ferry.watermelon_cursor_seq');
begin
    if v_user is null or v_device is null then
        raise exception 'no request identity: ferry.user_id and ferry.device_id must be set' using errcode = '28000';
    end if;
    insert into ferry.watermelon_cursors (user_id, device_id, n, snapshot) values (v_user, v_device, v_n, p_snapshot);
    delete from ferry.watermelon_cursors c
        where c.user_id = v_user and c.device_id = v_device and c.n is distinct from p_presented
            and (c.n < p_presented or c.n < (
                select o.n from ferry.watermelon_cursors o
                where o.user_id = v_user and o.device_id = v_device
                order by o.n desc offset ferry.watermelon_cursors_per_device() - 1 limit 1));
    return v_n;
end
$$;

-- The tombstone purge's share (ferry.purge_tombstones, retention.sql): deletes at most
-- p_batch timestamps issued more than p_older_than ago, except each device's newest
-- (which a device that stopped syncing still holds: its next pull is then checked
-- against the purge horizon, as a /v1/pull cursor is). Returns how many.
create or replace function ferry.trim_watermelon_cursors(p_older_than interval, p_batch integer) returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
    v_deleted bigint;
begin
    delete from ferry.watermelon_cursors c where (c.user_id, c.device_id, c.n) in (
        select o.user_id, o.device_id, o.n from ferry.watermelon_cursors o
        where o.issued_at < pg_catalog.now() - p_older_than
            and exists (
                select from ferry.watermelon_cursors newer
                where newer.user_id = o.user_id and newer.device_id = o.device_id and newer.n > o.n)
        limit p_batch
        for update skip locked);
    get diagnostics v_deleted = row_count;
    return v_deleted;
end
$$;

-- MARK: - Grants

revoke all on function
    ferry.watermelon_cursors_per_device(), ferry.watermelon_cursor(bigint),
    ferry.issue_watermelon_cursor(pg_snapshot, bigint), ferry.trim_watermelon_cursors(interval, integer)
from public;
grant execute on function ferry.watermelon_cursor(bigint), ferry.issue_watermelon_cursor(pg_snapshot, bigint)
to ferry_client;
