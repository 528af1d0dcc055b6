-- The email directory (docs/SCALING.md, "The email directory"): one small PostgreSQL
-- database of its own, shared by every shard's gateways, that maps each email to the
-- shard and user that own it, so that an email is unique across shards and a sign-in
-- finds its account's shard. Applied by `ferry migrate --directory`, never with
-- sql/ferry; its functions are in functions/directory.sql.
--
-- A claim is made before the shard commits its own change (link, or the confirmation
-- that makes an email its account's) and marked linked after: a row is `pending` from
-- the claim until the shard's commit is known. Only the shard that holds a pending claim
-- settles it (directory.settle_claim), against its own database.
create schema directory;
revoke all on schema directory from public;

create table directory.emails (
    -- Normalised by the gateway (EmailAddress.normalize); lowercased again here.
    email text primary key check (email = lower(email) and email <> ''),
    shard integer not null check (shard between 0 and 65535),
    user_id uuid not null,
    state text not null check (state in ('pending', 'linked')),
    -- When the claim was made or last renewed (a retried link renews its own claim).
    claimed_at timestamptz not null default now(),
    linked_at timestamptz,
    constraint linked_has_time check ((state = 'linked') = (linked_at is not null))
);
comment on table directory.emails is
    'email -> (shard, user): pending from the claim until the shard''s commit is known, then linked';
-- Each gateway's reconciliation scans its own shard's old pending claims.
create index emails_pending on directory.emails (shard, claimed_at) where state = 'pending';
revoke all on directory.emails from public;

-- The role the gateways' directory login is granted (or is): it runs the functions and
-- reads nothing else. `ferry migrate --directory` makes it when missing.
do $$
begin
    if not exists (select from pg_catalog.pg_roles where rolname = 'ferry_directory') then
        create role ferry_directory nologin;
    end if;
end
$$;
grant usage on schema directory to ferry_directory;
