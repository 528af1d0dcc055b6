-- Cues (docs/PROTOCOL.md "Streams", docs/ARCHITECTURE.md "Cues in SQL"): every write
-- to a synced table tells its owners' devices, through ferry.send_cue (a
-- pg_notify('ferry_cue', …)), that the table changed; and TRUNCATE, which would leave
-- devices no tombstone to pull, is refused. ferry.register_table installs the triggers
-- (registry.sql).
--
-- The payload, which the gateway parses, is '<owner> <device>@<xid> <table>': the owner
-- column's uuid as text, or * for a shared table (every user); ferry.device_id when set
-- (the pushing device), else - (an operator's psql, a cron job: they cue like a push),
-- with the writing transaction's id after the last @ (ferry.cue_device); the table's
-- name as clients know it, last, so it may hold anything. Notifications go out at commit,
-- so a rolled-back write cues nobody, and PostgreSQL folds identical payloads of one
-- transaction into one (one transaction, one xid: the id folds nothing apart).
--
-- The xid tells a gateway whether a device's cursor already saw the change (its snapshot
-- makes the xid visible), which lets it answer the shared part of a pull without
-- PostgreSQL (docs/ARCHITECTURE.md, "Shared-change storms"). It rides on the device word
-- so that a gateway of the previous version, which reads '<owner> <device> <table>',
-- still delivers every cue during an upgrade or after a rollback: it only names a
-- device@xid origin that no client takes for its own, and such a client pulls its own
-- echo, which is harmless.
--
-- ferry.skip_cues, a transaction-local setting, silences the triggers: 'on' for every
-- table (lock heartbeats; an operator's bulk maintenance clients need not hear of:
-- set_config('ferry.skip_cues', 'on', true)), or one table's name, which push sets
-- while it writes that table because it cues its own writes once per table.

-- MARK: - Sending a cue

-- The one way a cue is sent, whoever sends it: the triggers below, push and WatermelonDB
-- push cueing their own writes, and any later trigger (a shared table's row trigger). The
-- payload is the whole '<owner> <device>@<xid> <table>': a NOTIFY on ferry_cue, sent at commit
-- (push's cues reach it through ferry.queue_cue and ferry.send_queued_cues, below).
-- A one-SELECT SQL function, so the planner inlines it into the caller's query: no call
-- of its own per cue. Executable by everyone, like pg_notify itself, so a trigger fired
-- by any role that may write a synced table can cue.
create or replace function ferry.send_cue(p_payload text) returns void
language sql volatile
as $$
    select pg_catalog.pg_notify('ferry_cue', p_payload);
$$;

comment on function ferry.send_cue(text) is
    'Sends one cue, ''<owner uuid or *> <device or ->@<xid> <table>'': pg_notify on ferry_cue (at commit); the single entry point every cue goes through';

-- MARK: - Cues out of the push's commit

-- A NOTIFY takes PostgreSQL's cluster-wide notify lock before its transaction commits
-- and holds it through the commit's WAL flush: every notifying commit of the cluster
-- waits for the one before, so cueing each push in its own commit capped a cluster at
-- one push per disk flush (docs/ARCHITECTURE.md, "Cues out of the commit"). Push and
-- WatermelonDB push therefore queue their cues instead: ferry.queue_cue adds one to
-- ferry.queued_cues in the push's transaction and marks the transaction
-- (ferry.cues_queued, which their gateway statements return), and the gateway that
-- committed it then calls ferry.send_queued_cues, which sends every queued cue in one
-- transaction of its own, one lock for all the pushes committed meanwhile. Everything
-- else (the triggers: an operator's SQL, account operations) still sends at commit.
-- PL/pgSQL, which keeps its statement's plan for the session: as a SQL function of two
-- statements it was parsed and planned at every call (about 5% of a push).
create or replace function ferry.queue_cue(p_payload text) returns void
language plpgsql volatile
as $$
begin
    insert into ferry.queued_cues (payload) values (p_payload);
    perform pg_catalog.set_config('ferry.cues_queued', 'on', true);
end
$$;

comment on function ferry.queue_cue(text) is
    'Queues one cue in ferry.queued_cues for the gateway to send after this transaction commits (ferry.send_queued_cues), and sets ferry.cues_queued; push and WatermelonDB push cue their writes through it';

-- Sends the queued cues, each distinct payload once, as ferry.send_cue, and returns how
-- many. Rows another call is sending are skipped (locked), not waited for: that call
-- sends them. Its own commit need not wait for the WAL flush (synchronous_commit off):
-- a crash before the flush empties the unlogged table anyway, and the listeners'
-- reconnection cues every stream. Run by the gateway (ferry_gateway) after each commit
-- that queued a cue, and every second to send what a gateway that died between its
-- commit and this call left behind.
create or replace function ferry.send_queued_cues() returns integer
language plpgsql security definer set search_path = ''
as $$
declare
    v_sent integer;
begin
    -- Shared with every other send; ferry.send_queued_cues_then_notify waits for them all.
    perform pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('ferry.queued_cues'));
    perform pg_catalog.set_config('synchronous_commit', 'off', true);
    with taken as (
        delete from ferry.queued_cues q
        where q.ctid = any (array(select c.ctid from ferry.queued_cues c for update skip locked))
        returning q.payload
    ), sent as (
        select ferry.send_cue(d.payload) from (select distinct t.payload from taken t) d
    )
    select pg_catalog.count(*) into v_sent from sent;
    return v_sent;
end
$$;

comment on function ferry.send_queued_cues() is
    'Sends every queued cue (ferry.queued_cues) not being sent by another call, each distinct payload once, in this transaction, committed without waiting for the WAL flush; returns how many';

-- The barrier of a gateway's cache of shared changes (docs/ARCHITECTURE.md, "Shared-change
-- storms"): once the notification this sends on p_channel reaches a listener, every cue
-- committed before this call began has reached it too, queued ones included. It waits for
-- the sends in flight (their shared lock) so that no queued cue is passed by as locked
-- and sent after it, sends whatever is queued, then notifies; notifications reach a
-- listener in commit order. A device that pushed and then pulls is thereby known to have
-- changed its rows before its pull is decided. Run by the gateway (ferry_gateway).
create or replace function ferry.send_queued_cues_then_notify(p_channel text, p_payload text) returns integer
language plpgsql security definer set search_path = ''
as $$
declare
    v_sent integer;
begin
    -- Nothing queued, and nothing being sent (a send's deleted rows stay visible here
    -- until it commits): nothing to wait for.
    if exists (select from ferry.queued_cues) then
        perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('ferry.queued_cues'));
        v_sent := ferry.send_queued_cues();
    end if;
    perform pg_catalog.pg_notify(p_channel, p_payload);
    return coalesce(v_sent, 0);
end
$$;

comment on function ferry.send_queued_cues_then_notify(text, text) is
    'A barrier: waits for the queued-cue sends in flight, sends every queued cue, then notifies p_channel with p_payload; returns how many cues it sent';

-- MARK: - The cue triggers

-- ferry.device_id as a cue names it, one word the gateway can read (else '-'), and the
-- writing transaction's id after an @: '<device>@<xid>' (header of this file). The xid
-- is the top-level transaction's, the one a row's _stamp holds; pg_current_xact_id()
-- assigns one to a transaction that has none, which a transaction that wrote has.
-- Volatile for that reason: a push's queued cue carries the push's own xid.
-- PL/pgSQL: a SQL function with a FROM clause is never inlined, and was planned at every
-- call (every push, every cue trigger's statement).
create or replace function ferry.cue_device() returns text
language plpgsql volatile
as $$
declare
    v_device text := pg_catalog.current_setting('ferry.device_id', true);
begin
    return case when v_device is null or v_device = '' or pg_catalog.strpos(v_device, ' ') > 0
            or pg_catalog.length(v_device) > 200
        then '-' else v_device end || '@' || pg_catalog.pg_current_xact_id()::text;
end
$$;

-- The statement trigger of every synced table (ferry_cue_insert, _update, _delete: one
-- event each, since PostgreSQL allows transition tables only on a trigger with one).
-- Its argument is the table's owner column, none for a shared table. For each distinct
-- owner of the rows the statement touched (for UPDATE the owners of the old rows and of
-- the new: re-owning moves rows between users), it first notes the change in
-- ferry.changes (0016_changes.sql; the nil uuid for a shared table), whatever
-- ferry.skip_cues says, since a pull must find the rows; then, unless skip_cues silences
-- it, sends one notification. Deleting a tombstone (a purge, an operator's hard delete)
-- does neither: a pull would bring nothing.
--
-- No search_path (a SET clause costs a GUC save and restore per call); static SQL only,
-- so PL/pgSQL keeps its plans per table. The owners are read from the transition tables
-- once, as a DISTINCT array, for the notes and the cues both (ferry.changes takes one row
-- per owner, and each row written costs more than the hash).
create or replace function ferry.send_cues() returns trigger
language plpgsql
as $$
declare
    v_skip text := pg_catalog.current_setting('ferry.skip_cues', true);
    v_owners uuid[];
    v_suffix text;
begin
    -- Who the statement's rows belong to. (A query names only the transition tables its
    -- trigger has, so each event has its own.)
    if tg_nargs = 0 then
        -- shared: every user (the nil uuid), when any row was touched.
        if tg_op = 'DELETE' then
            if exists (select from old_rows o where not o._deleted) then
                v_owners := array['00000000-0000-0000-0000-000000000000'::uuid];
            end if;
        elsif exists (select from new_rows) then
            v_owners := array['00000000-0000-0000-0000-000000000000'::uuid];
        end if;
    elsif tg_argv[0] = 'user_id' then
        -- The default owner column, read directly (the generic branch costs a row's JSON).
        if tg_op = 'INSERT' then
            v_owners := array(select distinct n.user_id from new_rows n where n.user_id is not null);
        elsif tg_op = 'UPDATE' then
            v_owners := array(
                select distinct c.owner
                from (select n.user_id as owner from new_rows n union all select o.user_id from old_rows o) c
                where c.owner is not null);
        else
            v_owners := array(select distinct o.user_id from old_rows o where o.user_id is not null and not o._deleted);
        end if;
    elsif tg_op = 'INSERT' then
        v_owners := array(
            select distinct c.owner
            from (select (pg_catalog.to_jsonb(n) ->> tg_argv[0])::uuid as owner from new_rows n) c
            where c.owner is not null);
    elsif tg_op = 'UPDATE' then
        v_owners := array(
            select distinct c.owner
            from (
                select (pg_catalog.to_jsonb(n) ->> tg_argv[0])::uuid as owner from new_rows n
                union all
                select (pg_catalog.to_jsonb(o) ->> tg_argv[0])::uuid from old_rows o
            ) c
            where c.owner is not null);
    else
        v_owners := array(
            select distinct c.owner
            from (select (pg_catalog.to_jsonb(o) ->> tg_argv[0])::uuid as owner from old_rows o where not o._deleted) c
            where c.owner is not null);
    end if;
    if coalesce(pg_catalog.cardinality(v_owners), 0) = 0 then
        return null;
    end if;

    -- The notes, whatever ferry.skip_cues says: a pull must find the rows.
    insert into ferry.changes (owner, changed_by, table_name)
        select o, pg_catalog.pg_current_xact_id(), tg_table_name from pg_catalog.unnest(v_owners) o
        on conflict do nothing;
    if v_skip = 'on' or v_skip = tg_table_name then
        return null;
    end if;
    -- The cues, one per owner ('*' for a shared table's every user).
    v_suffix := ' ' || ferry.cue_device() || ' ' || tg_table_name;
    if tg_nargs = 0 then
        perform ferry.send_cue('*' || v_suffix);
    else
        perform ferry.send_cue(o::text || v_suffix) from pg_catalog.unnest(v_owners) o;
    end if;
    return null;
end
$$;

comment on function ferry.send_cues() is
    'Statement trigger of every synced table: notes each distinct owner the statement touched in ferry.changes, then sends one ferry.send_cue(''<owner uuid or *> <device or ->@<xid> <table>'') per owner unless ferry.skip_cues silences it (lock heartbeats, push''s own writes)';

-- MARK: - Rows logical replication applies

-- The row trigger of a shared table this cluster receives from an origin
-- (ferry_cue_replicated, ENABLE REPLICA: it fires only for the rows logical replication
-- applies, for which no statement trigger fires, so ferry.send_cues never sees them).
-- One cue for every user per row, folded by PostgreSQL into one per transaction; the
-- removal of a tombstone (the origin's purge) cues nobody, as in ferry.send_cues. It
-- notes nothing in ferry.changes: a pull probes a received table instead
-- (ferry.install_pull_rows), since not every way replication writes it fires this trigger.
create or replace function ferry.send_replicated_cue() returns trigger
language plpgsql
as $$
begin
    if tg_op = 'DELETE' and old._deleted then
        return null;
    end if;
    perform ferry.send_cue('* - ' || tg_table_name);
    return null;
end
$$;

comment on function ferry.send_replicated_cue() is
    'Row trigger (ENABLE REPLICA) of a shared table received by logical replication: ferry.send_cue(''* - <table>'') for each applied row but a purged tombstone';

-- MARK: - TRUNCATE

-- A BEFORE TRUNCATE statement trigger (ferry_refuse_truncate). TRUNCATE removes rows
-- without a tombstone, a row trigger or a cue: devices would keep the rows and push
-- them back. Tombstones (UPDATE ... SET _deleted = true, or a DELETE, which
-- ferry_tombstone_delete turns into one: deletes.sql) are what every device pulls. To
-- empty a table anyway (a
-- development database), in one transaction:
--     alter table t disable trigger ferry_refuse_truncate; truncate t;
--     alter table t enable trigger ferry_refuse_truncate;
create or replace function ferry.refuse_truncate() returns trigger
language plpgsql set search_path = ''
as $$
begin
    raise exception 'TRUNCATE of synced table %.% is refused: it leaves no tombstones, so devices would keep the rows',
        tg_table_schema, tg_table_name
        using errcode = '0A000',
            hint = 'Tombstone the rows instead (UPDATE ... SET _deleted = true): devices pull the deletes, and'
                ' ferry purge-tombstones removes the rows after the retention. To empty the table anyway,'
                ' disable the trigger ferry_refuse_truncate around the TRUNCATE in one transaction.';
end
$$;

comment on function ferry.refuse_truncate() is
    'BEFORE TRUNCATE trigger of every synced table: refuses it (0A000), since TRUNCATE leaves no tombstones for devices to pull';

-- MARK: - Installing

-- ferry.changes holds every change since the transaction that installed the triggers'
-- code above, this one (ferry.history.changes_since): a pull uses it only for a cursor
-- that sees this transaction. So that no writer still running the code before it commits
-- after it, it first takes SHARE locks on every synced table: it waits for the writers
-- in flight, and a writer that comes meanwhile waits for its commit, then runs this code.
-- Run again whenever this file changes, which only makes older cursors probe.
do $$
declare
    v_tables text;
begin
    select pg_catalog.string_agg(s.table_name::text, ', ') into v_tables from ferry.synced_tables s;
    if v_tables is not null then
        execute 'lock table ' || v_tables || ' in share mode';
    end if;
    update ferry.history set changes_since = pg_catalog.pg_current_xact_id();
end
$$;

-- MARK: - Grants

revoke all on function ferry.cue_device(), ferry.send_cues(), ferry.send_replicated_cue(), ferry.refuse_truncate(),
    ferry.queue_cue(text), ferry.send_queued_cues(), ferry.send_queued_cues_then_notify(text, text)
    from public;
grant execute on function ferry.send_cue(text) to public;
grant execute on function ferry.cue_device(), ferry.queue_cue(text) to ferry_client;
grant execute on function ferry.send_queued_cues(), ferry.send_queued_cues_then_notify(text, text) to ferry_gateway;
