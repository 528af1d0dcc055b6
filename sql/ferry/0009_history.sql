-- The history a cursor is made in (docs/ARCHITECTURE.md "A cursor names its history"):
-- a /v1/pull cursor compares change stamps (xids) and a WatermelonDB timestamp names a
-- snapshot, and both mean something only in the WAL history they were taken in. A
-- logical restore into another cluster (its xid counter elsewhere), a point-in-time
-- recovery or the promotion of a replica that had not received the last commits each
-- start another history, where the same xids name other transactions.
--
--   ferry.history            one row: the epoch (raised by ferry.finish_restore, after a
--                            logical restore), the cluster and database it belongs to,
--                            the timeline Ferry last noted and where this epoch began.
--   ferry.timeline_ancestry  the noted timeline's ancestors, from its timeline history
--                            file: timeline t was left at ended_at. Empty when the file
--                            could not be read (then every cursor of an earlier
--                            timeline is expired).
-- The functions are in functions/history.sql.

create table ferry.history (
    one boolean primary key default true check (one),
    epoch bigint not null default 1,
    -- pg_control_system().system_identifier and the database's oid: a logical restore
    -- brings this row into a database where they differ.
    system_identifier bigint not null,
    database_oid oid not null,
    -- The timeline ferry.note_history saw last (the one timeline_ancestry describes).
    timeline integer not null,
    -- Where this epoch began: a cursor issued before it carries no history and is taken
    -- as made here, on began_on_timeline.
    began_at_lsn pg_lsn not null,
    began_on_timeline integer not null,
    began_at timestamptz not null default now()
);

insert into ferry.history (system_identifier, database_oid, timeline, began_at_lsn, began_on_timeline)
select s.system_identifier, d.oid, t.timeline, pg_catalog.pg_current_wal_insert_lsn(), t.timeline
from pg_catalog.pg_control_system() s,
    pg_catalog.pg_database d,
    lateral (select ('x' || pg_catalog.left(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 8))::bit(32)::integer as timeline) t
where d.datname = pg_catalog.current_database();

create table ferry.timeline_ancestry (
    timeline integer primary key,
    ended_at pg_lsn not null
);

comment on table ferry.history is
    'One row: the epoch, cluster, database and timeline a cursor must name to be honoured (docs/ARCHITECTURE.md, "A cursor names its history").';
comment on table ferry.timeline_ancestry is
    'The noted timeline''s ancestors and where each was left, from its timeline history file.';

revoke all on ferry.history, ferry.timeline_ancestry from public;
-- ferry.pull runs as ferry_client and reads both in its own snapshot.
grant select on ferry.history, ferry.timeline_ancestry to ferry_client;
