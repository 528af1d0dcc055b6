-- The history a cursor is made in (0009_history.sql; docs/ARCHITECTURE.md "A cursor
-- names its history"). Every /v1/pull cursor carries where it was made: Ferry's epoch,
-- the timeline, the WAL insert position read after its snapshot was taken (so every
-- commit it sees ends at or before that position) and when the server started. A cursor
-- is honoured when it was made in this epoch and on this timeline, or on an ancestor of
-- this timeline before the point where this timeline left it, and, if made before this
-- server started, at or before the end of the WAL its start replayed (a crash recovery
-- that lost commits: synchronous_commit off, or a transaction that wrote no WAL, whose
-- xid is handed out again); anything else is FR409 (409 cursor_expired).
--
--   a logical restore   another cluster or database: ferry.note_history says so, ferry
--                       serve refuses to serve until ferry.finish_restore (ferry
--                       restore-finish) has restamped the rows and raised the epoch
--   a PITR, a promotion a new timeline, whose history file names where it left its
--                       parent: cursors made past that point are expired, the others
--                       are kept (a failover that lost nothing expires nothing)
--
-- On a hot standby (a read replica, docs/OPERATIONS.md "Read replicas") a pull's cursor is
-- made in the primary's history: the gateway reads the primary's history_here() when the
-- pull arrives and hands it over with ferry.replica_caught_up (replicas.sql), which runs
-- the pull there only once the standby has replayed past its "lsn". A standby's cursor
-- then carries the primary's timeline and start and the standby's replay position read
-- after the snapshot (every commit it sees ends at or before it, and that WAL was flushed
-- on the primary, so no crash there loses it); history_left judges it as the primary
-- would. What only the primary knows, where its own start's recovery ended, it leaves
-- to the primary: a cursor made before the primary's start raises FRPRI on a standby.
--
-- WatermelonDB timestamps need no history of their own: the row naming a snapshot was
-- committed after every commit that snapshot sees, so if a recovery kept the row it
-- kept all they saw; ferry.finish_restore deletes them all.

-- The timeline WAL is being written on.
create or replace function ferry.current_timeline() returns integer
language sql volatile parallel safe
as $$
    select ('x' || pg_catalog.left(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 8))::bit(32)::integer
$$;

-- Where a cursor made now is made: {"epoch", "timeline", "lsn", "started"}, merged into
-- the cursor.
-- The position is read after the statement's snapshot was taken. PL/pgSQL, not SQL: a
-- SQL function that reads a table is planned again on every call, and every pull calls it.
-- On a standby (header): the primary's timeline and start as ferry.replica_caught_up
-- noted them in this transaction, and the replay position.
create or replace function ferry.history_here() returns jsonb
language plpgsql stable
as $$
declare
    v_epoch bigint;
    v_primary text;
begin
    select h.epoch into v_epoch from ferry.history h;
    if pg_catalog.pg_is_in_recovery() then
        v_primary := pg_catalog.current_setting('ferry.primary_history', true);
        if coalesce(v_primary, '') = '' then
            raise exception 'ferry: a pull on a standby runs after ferry.replica_caught_up, which names the primary''s history'
                using errcode = '55000';
        end if;
        return v_primary::jsonb || pg_catalog.jsonb_build_object('epoch', v_epoch,
            'lsn', pg_catalog.pg_last_wal_replay_lsn()::text);
    end if;
    return pg_catalog.jsonb_build_object('epoch', v_epoch, 'timeline', ferry.current_timeline(),
        'lsn', pg_catalog.pg_current_wal_insert_lsn()::text,
        'started', pg_catalog.extract('epoch', pg_catalog.pg_postmaster_start_time())::text);
end
$$;

-- Whether a cursor made at p_made ({"epoch", "timeline", "lsn", "started"} as history_here gave, or
-- none of them: a cursor from before migration 0009, made at most where the first epoch
-- began) comes from another history than p_here. A position past p_here's is from a
-- history this one lost (a crash that lost commits). Half a history raises 22023.
create or replace function ferry.history_left(p_made jsonb, p_here jsonb) returns boolean
language plpgsql stable
as $$
declare
    v_epoch bigint;
    v_timeline integer;
    v_lsn pg_lsn;
    v_started text;
begin
    -- The usual case, as one expression: this epoch, timeline and start, not ahead.
    if p_made -> 'epoch' = p_here -> 'epoch' and p_made -> 'timeline' = p_here -> 'timeline'
        and p_made -> 'started' = p_here -> 'started'
        and (p_made ->> 'lsn')::pg_lsn <= (p_here ->> 'lsn')::pg_lsn
    then
        return false;
    end if;
    if p_made ? 'epoch' or p_made ? 'timeline' or p_made ? 'lsn' or p_made ? 'started' then
        v_epoch := (p_made ->> 'epoch')::bigint;
        v_timeline := (p_made ->> 'timeline')::integer;
        v_lsn := (p_made ->> 'lsn')::pg_lsn;
        v_started := p_made ->> 'started';
        if v_epoch is null or v_timeline is null or v_lsn is null or v_started is null then
            raise exception 'pull: invalid cursor' using errcode = '22023';
        end if;
    else
        select 1, h.began_on_timeline, h.began_at_lsn into v_epoch, v_timeline, v_lsn from ferry.history h;
    end if;
    if v_epoch <> (p_here ->> 'epoch')::bigint or v_lsn > (p_here ->> 'lsn')::pg_lsn then
        return true;
    end if;
    -- Made before this server started, which replayed WAL to pg_last_wal_replay_lsn()
    -- (null after a clean shutdown): past that end, it saw commits this history lost.
    -- A standby knows neither (header): the primary judges.
    if v_started is distinct from (p_here ->> 'started') then
        if pg_catalog.pg_is_in_recovery() then
            raise exception 'pull: the cursor was made before the primary last started: the primary judges it'
                using errcode = 'FRPRI';
        end if;
        if v_lsn > pg_catalog.pg_last_wal_replay_lsn() then
            return true;
        end if;
    end if;
    if v_timeline = (p_here ->> 'timeline')::integer then
        return false;
    end if;
    -- Another timeline, which this one's ancestry decides; but only once it is noted
    -- (ferry.note_history, which the gateway runs when its listener reconnects after a
    -- failover): until then the ancestry is the old timeline's, and a good cursor would
    -- expire. Such a pull is told to retry (57P03, answered 503), as pulls racing the
    -- first moments of a new primary were in the failover drill.
    if not exists (select from ferry.history h where h.timeline = (p_here ->> 'timeline')::integer) then
        raise exception 'pull: timeline % is not noted yet; retry', p_here ->> 'timeline'
            using errcode = '57P03', hint = 'ferry.note_history() notes it';
    end if;
    -- Kept only if it is an ancestor of this one, left after the cursor was made.
    return not exists (
        select from ferry.history h join ferry.timeline_ancestry a on a.timeline = v_timeline
        where h.timeline = (p_here ->> 'timeline')::integer and a.ended_at >= v_lsn);
end
$$;

-- Notes the history the database is in now, as the gateway does before it serves and on
-- every /readyz probe and listener connection: 'restored' when the row came from another
-- cluster or database (a logical restore: ferry.finish_restore must run first), else
-- 'current', after recording a new timeline's ancestry from its history file (read as
-- this function's owner: a superuser or a member of pg_read_server_files; otherwise the
-- ancestry stays empty and every cursor of an earlier timeline is expired).
create or replace function ferry.note_history() returns text
language plpgsql security definer set search_path = ''
as $$
declare
    v_history ferry.history;
    v_timeline integer := ferry.current_timeline();
    v_file text;
begin
    select * into v_history from ferry.history h;
    if v_history.system_identifier <> (select s.system_identifier from pg_catalog.pg_control_system() s)
        or v_history.database_oid <> (select d.oid from pg_catalog.pg_database d where d.datname = pg_catalog.current_database())
    then
        return 'restored';
    end if;
    if v_history.timeline = v_timeline then
        return 'current';
    end if;
    select * into v_history from ferry.history h for update;
    if v_history.timeline = v_timeline then
        return 'current';
    end if;
    begin
        v_file := pg_catalog.pg_read_file(pg_catalog.format('pg_wal/%s.history',
            pg_catalog.lpad(pg_catalog.upper(pg_catalog.to_hex(v_timeline)), 8, '0')));
    exception when insufficient_privilege or undefined_file then
        raise warning 'ferry: cannot read the history file of timeline %: every cursor made on an earlier timeline expires', v_timeline
            using hint = 'let the role that ran ferry migrate read it (grant pg_read_server_files)';
    end;
    delete from ferry.timeline_ancestry;
    -- Lines "parent-timeline <tab> switch-point <tab> reason"; comments and blank lines skipped.
    insert into ferry.timeline_ancestry (timeline, ended_at)
        select m[1]::integer, m[2]::pg_lsn
        from pg_catalog.regexp_matches(coalesce(v_file, ''), '^\s*(\d+)\s+([0-9A-Fa-f]+/[0-9A-Fa-f]+)', 'gn') m;
    update ferry.history set timeline = v_timeline;
    return 'current';
end
$$;

-- After a logical restore (ferry restore-finish): every row of every synced table whose
-- _stamp this cluster's transaction counter has not passed gets this transaction's (so
-- a first pull sees it at once; updated_at and cues are left alone), the WatermelonDB
-- timestamps, the changed-tables and catalog-change notes and the purge horizon of the
-- old history go, and a new epoch begins in this cluster and database, expiring every
-- cursor made before.
-- Returns how many rows were restamped. Run it as the owner of the synced tables.
create or replace function ferry.finish_restore() returns bigint
language plpgsql set search_path = ''
as $$
declare
    v_table regclass;
    v_received boolean;
    v_rows bigint;
    v_total bigint := 0;
    v_floor xid8 := pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
begin
    perform from ferry.history for update;
    for v_table, v_received in
        select s.table_name, exists (select from ferry.replicated_tables r where r.table_name = s.table_name)
        from ferry.synced_tables s order by s.table_name::text
    loop
        -- A shared table received by logical replication refuses other writes
        -- (ferry_replica_only, shared_replication.sql), and its stamp trigger fires ALWAYS.
        execute pg_catalog.format('alter table %s disable trigger ferry_stamp, disable trigger ferry_cue_update%s',
            v_table, case when v_received then ', disable trigger ferry_replica_only' else '' end);
        execute pg_catalog.format('update %s t set _stamp = pg_catalog.pg_current_xact_id() where t._stamp >= $1', v_table)
            using v_floor;
        get diagnostics v_rows = row_count;
        v_total := v_total + v_rows;
        execute pg_catalog.format('alter table %s enable trigger ferry_cue_update%s', v_table,
            case when v_received then ', enable always trigger ferry_stamp, enable trigger ferry_replica_only'
                else ', enable trigger ferry_stamp' end);
    end loop;
    delete from ferry.watermelon_cursors;
    -- ferry.changes names the old history's transactions; the restamped rows are in none
    -- of its rows. It is complete again from here (0016_changes.sql, changes_since below),
    -- for the cursors of the new epoch, which all see this transaction.
    delete from ferry.changes;
    -- ferry.catalog_changes names the old history's transactions too, some perhaps above
    -- this cluster's counter, which would leave every push's cache stale until it passed
    -- them; this transaction's own note outdates any answer a session kept before it.
    delete from ferry.catalog_changes;
    perform ferry.note_catalog_change();
    update ferry.purge_horizon set purged_through = '0', purge_xid = null, purged_at = null;
    delete from ferry.timeline_ancestry;
    update ferry.history h set
        epoch = h.epoch + 1,
        system_identifier = (select s.system_identifier from pg_catalog.pg_control_system() s),
        database_oid = (select d.oid from pg_catalog.pg_database d where d.datname = pg_catalog.current_database()),
        timeline = ferry.current_timeline(),
        began_at_lsn = pg_catalog.pg_current_wal_insert_lsn(),
        began_on_timeline = ferry.current_timeline(),
        began_at = pg_catalog.now(),
        changes_since = pg_catalog.pg_current_xact_id();
    return v_total;
end
$$;

comment on function ferry.note_history() is
    'Notes the database''s history before serving: ''restored'' after a logical restore (run ferry restore-finish), else ''current'', recording a new timeline''s ancestry.';
comment on function ferry.finish_restore() is
    'After a logical restore: restamps the synced rows, drops the old history''s WatermelonDB timestamps and purge horizon, and begins a new epoch (ferry restore-finish).';

revoke all on function
    ferry.current_timeline(), ferry.history_here(), ferry.history_left(jsonb, jsonb), ferry.note_history(),
    ferry.finish_restore()
from public;
grant execute on function ferry.current_timeline(), ferry.history_here(), ferry.history_left(jsonb, jsonb)
to ferry_client;
grant execute on function ferry.note_history() to ferry_gateway;
