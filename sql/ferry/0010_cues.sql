-- 0010_cues: every write to a synced table cues its owners' devices (PROTOCOL.md "Streams",
-- docs/ARCHITECTURE.md "Cues in SQL", issue 5 item 1).
--
-- Adds
--   ferry.send_cues()        the one statement-level trigger function of every synced table.
--                            After each INSERT, UPDATE and DELETE statement it sends ONE
--                            notification on ferry_cue per distinct owner of the rows the
--                            statement touched (for UPDATE the owners of the old rows and of
--                            the new ones: re-owning moves rows between users), read from the
--                            statement's transition tables. A statement that touched no row
--                            sends nothing. The payload, which the gateway parses, is
--                                <owner> <device> <table>
--                            separated by single spaces: the owner column's uuid as text, or
--                            `*` for a shared table (one notification per statement, cueing
--                            every user); ferry.device_id when set (the pushing device), else
--                            `-` (an operator's psql, a cron job: they cue exactly like a
--                            push); the table's name as clients name it (its relname), last,
--                            so it may hold anything. About 120 bytes whatever the statement
--                            touched, far under NOTIFY's 8000. Notifications are sent at
--                            commit: a rolled-back transaction (or a rejected mutation's
--                            subtransaction) cues nobody, and PostgreSQL folds identical
--                            payloads of one transaction into one (so a push of many
--                            mutations of one user sends one). The function calls pg_notify
--                            per row and leaves the folding to PostgreSQL (documented
--                            behaviour of NOTIFY): see Cost below.
--   ferry.install_cue_triggers(table)
--                            the triggers ferry_cue_insert, ferry_cue_update, ferry_cue_delete
--                            (one per event: PostgreSQL refuses transition tables on a
--                            trigger with more than one event) with the table's owner column
--                            from ferry.synced_tables as the argument (none for shared).
-- Changes
--   ferry.register_table()   now also installs the cue triggers; 0007's wrapper is kept under
--                            the name ferry.register_table_0007 and called first (it calls
--                            0005's body and restricts the lock columns of device_lock tables).
--                            Every table registered before this migration gets them here.
--   ferry.heartbeat_lock()   does not cue: a heartbeat only moves _lock_heartbeat_at, every few
--                            seconds per held lock, and would make every device of the user
--                            pull for nothing. It sets the transaction-local setting
--                            ferry.skip_cues around its one UPDATE, which send_cues honours.
--                            A setting rather than a comparison of old and new rows inside
--                            the trigger: the trigger stays one cheap test per statement, and
--                            the rule lives with the one writer it is for. Claim, takeover and
--                            release do cue: a device that lost its lock hears it at once.
--                            The setting is a tool for operators' SQL too (bulk maintenance
--                            that clients need not hear of): set_config('ferry.skip_cues',
--                            'on', true).
--
-- Deleting a tombstone (ferry.purge_tombstones, or an operator's hard delete of one) cues
-- nobody: the client either holds the row as deleted or never had it, so a pull would
-- bring nothing. TRUNCATE fires none of these triggers (and bypasses tombstones anyway).
--
-- Cost: the trigger runs after every statement of every push. It is PL/pgSQL with static
-- SQL only, so its plans are kept per table for the session (PL/pgSQL compiles a trigger
-- function once per trigger); it sets no search_path (a SET clause costs a GUC save and
-- restore per call), naming only pg_catalog functions and the transition tables. The owner
-- is read with to_jsonb(row) ->> owner_column, which needs no dynamic SQL; for the default
-- owner column user_id the row's column is read directly. Per-row pg_notify instead of
-- DISTINCT: on a one-row upsert (what push runs, firing the INSERT and the UPDATE trigger)
-- the triggers cost about 18 µs of backend CPU with DISTINCT/UNION (a hash table per
-- statement) and 10 µs without, against about 140 µs for the upsert itself; a 10,000-row
-- statement pays one folded pg_notify call per row instead (a list or hash lookup each).
-- Push throughput with the triggers on and off: bench/cue-cost.sh, bench/RESULTS.md.

-- MARK: - The trigger function

create function ferry.send_cues() returns trigger
language plpgsql
as $$
declare
    v_device text;
    v_suffix text;
begin
    if pg_catalog.current_setting('ferry.skip_cues', true) = 'on' then
        return null;
    end if;
    -- A device id the gateway can read as one word; anything else is reported as unknown.
    v_device := pg_catalog.current_setting('ferry.device_id', true);
    if v_device is null or v_device = '' or pg_catalog.strpos(v_device, ' ') > 0
        or pg_catalog.length(v_device) > 200
    then
        v_device := '-';
    end if;
    v_suffix := ' ' || v_device || ' ' || tg_table_name;

    -- Each branch is one query over the transition tables, calling pg_notify per row: the
    -- identical payloads of a statement (and of its transaction) are folded into one by
    -- PostgreSQL, so each owner is notified once. Cheaper than DISTINCT, whose hash table per
    -- statement tripled the trigger's cost on the one-row statements of a push.
    if tg_nargs = 0 then
        -- shared: one cue for every user when any row was touched. (A query names only
        -- the transition tables its trigger has, so DELETE has its own.)
        if tg_op = 'DELETE' then
            if exists (select from old_rows o where not o._deleted) then
                perform pg_catalog.pg_notify('ferry_cue', '*' || v_suffix);
            end if;
        elsif exists (select from new_rows) then
            perform pg_catalog.pg_notify('ferry_cue', '*' || v_suffix);
        end if;
    elsif tg_argv[0] = 'user_id' then
        -- The default owner column, read directly (the generic branch costs a row's JSON).
        if tg_op = 'INSERT' then
            perform pg_catalog.pg_notify('ferry_cue', n.user_id::text || v_suffix)
                from new_rows n where n.user_id is not null;
        elsif tg_op = 'UPDATE' then
            perform pg_catalog.pg_notify('ferry_cue', c.owner::text || v_suffix)
                from (select n.user_id as owner from new_rows n union all select o.user_id from old_rows o) c
                where c.owner is not null;
        else
            perform pg_catalog.pg_notify('ferry_cue', o.user_id::text || v_suffix)
                from old_rows o where o.user_id is not null and not o._deleted;
        end if;
    else
        if tg_op = 'INSERT' then
            perform pg_catalog.pg_notify('ferry_cue', c.owner || v_suffix)
                from (select pg_catalog.to_jsonb(n) ->> tg_argv[0] as owner from new_rows n) c
                where c.owner is not null;
        elsif tg_op = 'UPDATE' then
            perform pg_catalog.pg_notify('ferry_cue', c.owner || v_suffix)
                from (
                    select pg_catalog.to_jsonb(n) ->> tg_argv[0] as owner from new_rows n
                    union all
                    select pg_catalog.to_jsonb(o) ->> tg_argv[0] from old_rows o
                ) c
                where c.owner is not null;
        else
            perform pg_catalog.pg_notify('ferry_cue', c.owner || v_suffix)
                from (select pg_catalog.to_jsonb(o) ->> tg_argv[0] as owner from old_rows o where not o._deleted) c
                where c.owner is not null;
        end if;
    end if;
    return null;
end
$$;

comment on function ferry.send_cues() is
    'Statement trigger of every synced table: one pg_notify(''ferry_cue'', ''<owner uuid or *> <device or -> <table>'') per distinct owner the statement touched; skipped while ferry.skip_cues is on (lock heartbeats)';

-- MARK: - Installing the triggers

create function ferry.install_cue_triggers(p_table regclass) returns void
language plpgsql set search_path = ''
as $$
declare
    v_owner name;
    v_argument text;
begin
    select s.owner_column into v_owner from ferry.synced_tables s where s.table_name = p_table;
    if not found then
        raise exception 'ferry.install_cue_triggers(%): not a synced table', p_table using errcode = '42P01';
    end if;
    v_argument := case when v_owner is null then '' else pg_catalog.quote_literal(v_owner) end;
    execute pg_catalog.format(
        'create or replace trigger ferry_cue_insert after insert on %s referencing new table as new_rows'
            ' for each statement execute function ferry.send_cues(%s)',
        p_table, v_argument);
    execute pg_catalog.format(
        'create or replace trigger ferry_cue_update after update on %s referencing old table as old_rows new table as new_rows'
            ' for each statement execute function ferry.send_cues(%s)',
        p_table, v_argument);
    execute pg_catalog.format(
        'create or replace trigger ferry_cue_delete after delete on %s referencing old table as old_rows'
            ' for each statement execute function ferry.send_cues(%s)',
        p_table, v_argument);
end
$$;

alter function ferry.register_table(regclass, text, name, jsonb) rename to register_table_0007;

create function ferry.register_table(
    p_table regclass, strategy text, owner_column name default 'user_id', options jsonb default '{}'
) returns void
language plpgsql set search_path = '' set client_min_messages = warning
as $$
begin
    perform ferry.register_table_0007(p_table, $2, $3, $4);
    perform ferry.install_cue_triggers(p_table);
end
$$;

comment on function ferry.register_table(regclass, text, name, jsonb) is
    'Makes a table synced with a strategy (lww, insert_only, set, device_lock, readonly, shared): sync columns, stamp trigger, cue triggers, (owner, _stamp) index, RLS, grants to ferry_client (column grants without the lock columns for device_lock), registry row. Idempotent.';

select ferry.install_cue_triggers(s.table_name) from ferry.synced_tables s;

-- MARK: - Heartbeats stay quiet

-- 0007's body, with ferry.skip_cues on around the UPDATE (see the header).
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

-- MARK: - Grants

revoke all on function
    ferry.send_cues(), ferry.install_cue_triggers(regclass),
    ferry.register_table_0007(regclass, text, name, jsonb), ferry.register_table(regclass, text, name, jsonb)
from public;
