-- Device locks on device_lock tables (docs/PROTOCOL.md "Locks"). The lock is the row,
-- keyed (owner, <key column>) with the path's key cast to that column's type; its
-- holder and heartbeat are _lock_device and _lock_heartbeat_at, by the server's clock.
--
-- Claim, heartbeat and release are granted to ferry_client and SECURITY DEFINER: they
-- write the lock columns, which register_table's column grants keep from the request
-- role, and act only on the caller's row (owner = ferry.uid(), holder =
-- ferry.device_id()). Each returns {"status", …}:
--   ok          {"holder", "heartbeat_at"} (release: the status alone)
--   lock_held   claim: another device holds a fresh lock; {"holder", "heartbeat_age_ms"}
--   lock_lost   heartbeat: this device does not hold it (any more); {"holder"}
--   not_found   no device_lock table of that name
--   invalid     the key does not cast to the key column's type, or claiming could not
--               create the row (a non-key column without a default); {"message"}
-- Every claim, heartbeat and release updates the row, so its _stamp moves and the other
-- devices pull it again; claims and releases cue them, heartbeats do not. A claim's or a
-- release's cue is queued (ferry.queue_cue), as push's are: its writes run with
-- ferry.skip_cues set to the table, and the gateway sends the cue after the commit, so
-- the commit does not hold NOTIFY's cluster-wide lock (cues.sql).
--
-- Not closed here: a ferry_client session can still UPDATE a row's own columns while
-- another device holds its lock (the lock_not_held check lives in ferry.push, which the
-- gateway is the only caller of).

-- MARK: - The lock row

-- The device_lock table named p_table (a bare name, as push names tables) and its key
-- column; a null rel when there is none.
create or replace function ferry.lock_table(
    p_table text, out rel regclass, out owner_column name, out key_column name, out key_type text,
    out stale_seconds numeric
)
language plpgsql stable security definer set search_path = ''
as $$
begin
    select s.table_name, s.owner_column, k.name, pg_catalog.format_type(a.atttypid, a.atttypmod),
            coalesce((s.options ->> 'stale_seconds')::numeric, 30)
        into rel, owner_column, key_column, key_type, stale_seconds
        from ferry.synced_tables s
        join pg_catalog.pg_class c on c.oid = s.table_name
        cross join lateral ferry.primary_key(c.oid) k
        join pg_catalog.pg_attribute a on a.attrelid = c.oid and a.attnum = k.attnum
        where s.strategy = 'device_lock' and c.relname = p_table and k.name <> s.owner_column;
    if ferry.uid() is null or ferry.device_id() is null then
        raise exception 'no request identity: ferry.user_id and ferry.device_id must be set' using errcode = '28000';
    end if;
end
$$;

-- The ok answer of claim and heartbeat.
create or replace function ferry.lock_answer(p_holder text, p_at timestamptz) returns jsonb
language sql immutable set search_path = ''
as $$
    select pg_catalog.jsonb_build_object('status', 'ok', 'holder', p_holder,
        'heartbeat_at', pg_catalog.to_char(p_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'));
$$;

-- MARK: - Quiet writes, one queued cue

-- Before a claim's or a release's writes: ferry.skip_cues set to the table (unless it is
-- on), so its cue triggers stay quiet. Returns the setting to restore.
create or replace function ferry.quiet_lock_writes(p_table text) returns text
language plpgsql set search_path = ''
as $$
declare
    v_skip text := pg_catalog.current_setting('ferry.skip_cues', true);
begin
    if v_skip is distinct from 'on' then
        perform pg_catalog.set_config('ferry.skip_cues', p_table, true);
    end if;
    return v_skip;
end
$$;

-- After them: the setting restored, and, when they wrote (and cues were not off), the
-- one cue for the caller's other devices queued.
create or replace function ferry.cue_lock_writes(p_table text, p_skip text, p_wrote boolean) returns void
language plpgsql set search_path = ''
as $$
begin
    perform pg_catalog.set_config('ferry.skip_cues', coalesce(p_skip, ''), true);
    if p_wrote and p_skip is distinct from 'on' then
        perform ferry.queue_cue(ferry.uid()::text || ' ' || ferry.cue_device() || ' ' || p_table);
    end if;
end
$$;

-- MARK: - Claim, heartbeat, release

-- Claim creates the row when missing (owner = caller, other columns at their defaults)
-- and succeeds when it is free, held by this device, stale (the heartbeat older than
-- the table's options->>'stale_seconds', default 30) or forced. A claim on a tombstone
-- keeps it a tombstone: the holder's upsert revives it.
create or replace function ferry.claim_lock(p_table text, p_key text, p_force boolean default false) returns jsonb
language plpgsql security definer set search_path = ''
as $$
declare
    v_user uuid := ferry.uid();
    v_device text := ferry.device_id();
    v_lock record;
    v_select text;
    v_found boolean;
    v_holder text;
    v_at timestamptz;
    v_now timestamptz := pg_catalog.now();
    v_skip text;
begin
    select * into v_lock from ferry.lock_table(p_table);
    if v_lock.rel is null then
        return pg_catalog.jsonb_build_object('status', 'not_found',
            'message', pg_catalog.format('%s is not a device_lock table', pg_catalog.to_json(p_table)));
    end if;
    v_select := pg_catalog.format('select true, t._lock_device, t._lock_heartbeat_at from %s t where t.%I = $1 and t.%I = $2::%s for update',
        v_lock.rel, v_lock.owner_column, v_lock.key_column, v_lock.key_type);
    v_skip := ferry.quiet_lock_writes(p_table);
    begin
        execute v_select into v_found, v_holder, v_at using v_user, p_key;
        if v_found is null then
            -- Missing: made free (a concurrent claim's insert wins the race, then is read).
            execute pg_catalog.format('insert into %s (%I, %I) values ($1, $2::%s) on conflict do nothing',
                v_lock.rel, v_lock.owner_column, v_lock.key_column, v_lock.key_type) using v_user, p_key;
            execute v_select into v_found, v_holder, v_at using v_user, p_key;
        end if;
    exception
        when data_exception or integrity_constraint_violation then
            perform ferry.cue_lock_writes(p_table, v_skip, false);
            return pg_catalog.jsonb_build_object('status', 'invalid', 'message', sqlerrm);
    end;

    if v_holder is not null and v_holder <> v_device and not coalesce(p_force, false)
        and v_at > v_now - pg_catalog.make_interval(secs => v_lock.stale_seconds)
    then
        -- Only a row that was there can be held: nothing was written.
        perform ferry.cue_lock_writes(p_table, v_skip, false);
        return pg_catalog.jsonb_build_object('status', 'lock_held', 'holder', v_holder,
            'heartbeat_age_ms', pg_catalog.floor(extract(epoch from v_now - v_at) * 1000)::bigint);
    end if;
    execute pg_catalog.format('update %s t set _lock_device = $3, _lock_heartbeat_at = $4 where t.%I = $1 and t.%I = $2::%s',
        v_lock.rel, v_lock.owner_column, v_lock.key_column, v_lock.key_type) using v_user, p_key, v_device, v_now;
    perform ferry.cue_lock_writes(p_table, v_skip, true);
    return ferry.lock_answer(v_device, v_now);
end
$$;

-- A heartbeat only moves _lock_heartbeat_at, every few seconds per held lock: with
-- ferry.skip_cues on around its UPDATE it cues nobody, where every device of the user
-- would pull for nothing.
create or replace function ferry.heartbeat_lock(p_table text, p_key text) returns jsonb
language plpgsql security definer set search_path = ''
as $$
declare
    v_user uuid := ferry.uid();
    v_device text := ferry.device_id();
    v_lock record;
    v_holder text;
    v_now timestamptz := pg_catalog.now();
    v_skip_cues text := pg_catalog.current_setting('ferry.skip_cues', true);
begin
    select * into v_lock from ferry.lock_table(p_table);
    if v_lock.rel is null then
        return pg_catalog.jsonb_build_object('status', 'not_found',
            'message', pg_catalog.format('%s is not a device_lock table', pg_catalog.to_json(p_table)));
    end if;
    begin
        execute pg_catalog.format('select t._lock_device from %s t where t.%I = $1 and t.%I = $2::%s for update',
            v_lock.rel, v_lock.owner_column, v_lock.key_column, v_lock.key_type) into v_holder using v_user, p_key;
    exception
        when data_exception then
            return pg_catalog.jsonb_build_object('status', 'invalid', 'message', sqlerrm);
    end;
    if v_holder is distinct from v_device then
        return pg_catalog.jsonb_build_object('status', 'lock_lost', 'holder', v_holder);
    end if;
    perform pg_catalog.set_config('ferry.skip_cues', 'on', true);
    execute pg_catalog.format('update %s t set _lock_heartbeat_at = $3 where t.%I = $1 and t.%I = $2::%s',
        v_lock.rel, v_lock.owner_column, v_lock.key_column, v_lock.key_type) using v_user, p_key, v_now;
    perform pg_catalog.set_config('ferry.skip_cues', coalesce(v_skip_cues, ''), true);
    return ferry.lock_answer(v_device, v_now);
end
$$;

-- Releasing a lock this device does not hold changes nothing and is not an error.
create or replace function ferry.release_lock(p_table text, p_key text) returns jsonb
language plpgsql security definer set search_path = ''
as $$
declare
    v_lock record;
    v_skip text;
    v_released integer;
begin
    select * into v_lock from ferry.lock_table(p_table);
    if v_lock.rel is null then
        return pg_catalog.jsonb_build_object('status', 'not_found',
            'message', pg_catalog.format('%s is not a device_lock table', pg_catalog.to_json(p_table)));
    end if;
    v_skip := ferry.quiet_lock_writes(p_table);
    begin
        execute pg_catalog.format(
            'update %s t set _lock_device = null, _lock_heartbeat_at = null where t.%I = $1 and t.%I = $2::%s and t._lock_device = $3',
            v_lock.rel, v_lock.owner_column, v_lock.key_column, v_lock.key_type)
            using ferry.uid(), p_key, ferry.device_id();
        get diagnostics v_released = row_count;
    exception
        when data_exception then
            perform ferry.cue_lock_writes(p_table, v_skip, false);
            return pg_catalog.jsonb_build_object('status', 'invalid', 'message', sqlerrm);
    end;
    perform ferry.cue_lock_writes(p_table, v_skip, v_released > 0);
    return pg_catalog.jsonb_build_object('status', 'ok');
end
$$;

-- MARK: - Grants

revoke all on function
    ferry.lock_table(text), ferry.lock_answer(text, timestamptz), ferry.quiet_lock_writes(text),
    ferry.cue_lock_writes(text, text, boolean),
    ferry.claim_lock(text, text, boolean), ferry.heartbeat_lock(text, text), ferry.release_lock(text, text)
from public;

grant execute on function
    ferry.claim_lock(text, text, boolean), ferry.heartbeat_lock(text, text), ferry.release_lock(text, text)
to ferry_client;
