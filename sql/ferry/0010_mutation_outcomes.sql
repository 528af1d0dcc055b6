-- What became of a device's rejected mutations (docs/PROTOCOL.md "Push"), so that a
-- retried push whose first answer was lost is answered `duplicate` with the mutation's
-- original outcome: "rejected" with its code when a row is here, "applied" when not.
--
-- A device remembers outcomes from mutation id outcomes_from on: every rejection of a
-- mutation at or above it is stored here, so a missing row means applied. The tombstone
-- purge (functions/retention.sql) deletes rejections older than its retention and raises
-- outcomes_from past them; a duplicate below it carries no original. The functions that
-- read and write both are in functions/outcomes.sql.

alter table ferry.devices add column outcomes_from bigint not null default 0;
-- Devices that pushed before outcomes were kept: what their earlier mutations did is not known.
update ferry.devices set outcomes_from = last_mutation_id + 1;

create table ferry.rejected_mutations (
    user_id uuid not null,
    device_id text not null,
    mutation_id bigint not null,
    code text not null,
    message text not null,
    rejected_at timestamptz not null default now(),
    primary key (user_id, device_id, mutation_id),
    foreign key (user_id, device_id) references ferry.devices on delete cascade
);

-- The purge reads the oldest first.
create index rejected_mutations_rejected_at on ferry.rejected_mutations (rejected_at);

comment on table ferry.rejected_mutations is
    'Each device''s rejected mutations from its outcomes_from on, so a retried push''s duplicate carries the original outcome (docs/PROTOCOL.md "Push"); purged with tombstone retention.';

-- Requests reach it through SECURITY DEFINER functions acting on the caller's own device.
revoke all on ferry.rejected_mutations from public;
