-- Which synced tables changed for whom, and in which transaction: one row per owner,
-- table and writing transaction, written by the synced tables' statement triggers
-- (ferry.send_cues, functions/cues.sql) whatever ferry.skip_cues says. A steady-state
-- pull asks it which tables have something new for its caller (ferry.pull_steady,
-- functions/registry.sql) instead of probing every table, one index probe each.
--
-- Insert-only, so that two writers never wait on each other's row: a writer adds
-- (owner, its xid, table) once per statement and owner (ON CONFLICT DO NOTHING folds a
-- transaction's repeats). The owner of a `shared` table's rows is the nil uuid (every
-- user). ferry.purge_tombstones compacts it (functions/retention.sql). A pull trusts it
-- only for a cursor that sees ferry.history.changes_since, the transaction since which it
-- holds every change (functions/cues.sql, registry.sql, history.sql): older cursors probe
-- every table, as before it existed (docs/ARCHITECTURE.md, "Which tables changed").
create table ferry.changes (
    owner uuid not null,
    changed_by xid8 not null,
    table_name name not null,
    primary key (owner, changed_by, table_name)
);

-- Every role that may write a synced table fires the triggers that write it (as it may
-- call ferry.send_cue): anyone may add a row, which at worst makes a pull read a table
-- with nothing new. A client reads its own rows and the shared tables' (the policy calls
-- ferry.uid(), so functions/pull.sql makes it).
alter table ferry.changes enable row level security;
revoke all on ferry.changes from public;
grant insert on ferry.changes to public;
grant select on ferry.changes to ferry_client;
create policy ferry_note on ferry.changes for insert to public with check (true);

comment on table ferry.changes is
    'Which synced tables changed for whom (owner; the nil uuid for a shared table) in which transaction: written by the statement triggers, read by ferry.pull_steady, compacted by ferry.purge_tombstones.';

-- Null until functions/cues.sql installs the triggers that write ferry.changes.
alter table ferry.history add column changes_since xid8;

comment on column ferry.history.changes_since is
    'The transaction since which ferry.changes holds every change to the synced tables: a pull trusts ferry.changes only for a cursor that sees it.';
