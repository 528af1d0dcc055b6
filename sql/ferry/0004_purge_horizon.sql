-- The purge horizon (docs/ARCHITECTURE.md "The purge horizon"): what tombstone purges
-- have removed so far, which ferry.pull checks cursors against.
--
--   purged_through   the highest change stamp (_stamp) of any tombstone ever purged
--                    ('0' before the first purge)
--   purge_xid        the transaction of the latest purge that deleted anything
--   purged_at        when it ran

create table ferry.purge_horizon (
    one boolean primary key default true check (one),
    purged_through xid8 not null default '0',
    purge_xid xid8,
    purged_at timestamptz
);

insert into ferry.purge_horizon default values;

comment on table ferry.purge_horizon is
    'One row: the highest _stamp of any purged tombstone and the latest purging transaction; ferry.pull expires cursors it could have cut short (docs/ARCHITECTURE.md, "The purge horizon").';

revoke all on ferry.purge_horizon from public;
-- pull runs as ferry_client and reads the row in its own snapshot.
grant select on ferry.purge_horizon to ferry_client;
