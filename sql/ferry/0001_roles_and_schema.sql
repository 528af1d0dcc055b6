-- 0001_roles_and_schema: the two roles Ferry runs as, and who may use schema ferry.
--
-- Adds
--   ferry_client   NOLOGIN NOBYPASSRLS: every request runs as this role. The gateway
--                  switches to it per transaction (set_config('role', 'ferry_client', true)),
--                  so Row Level Security decides what each request may see.
--   ferry_gateway  LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE, owns nothing:
--                  the role `ferry serve` logs in as. Member of ferry_client, which is what
--                  lets it switch. No password here: operators set one (docs/OPERATIONS.md);
--                  the development cluster trusts loopback connections.
--   privileges     schema ferry closed to PUBLIC, USAGE for ferry_client only, so only
--                  ferry_client (and the gateway, its member) can reach what lives there.
--                  Functions still get EXECUTE for PUBLIC when created (a per-schema default
--                  cannot take that away), so a function requests must not call revokes it
--                  itself: revoke execute on function … from public.
--
-- The schema ferry and the ledger ferry.schema_migrations are created by the migrator
-- itself, before it reads the ledger (Migrator.bootstrapSQL in
-- Sources/FerryGateway/Migrator.swift): they are defined there and only there.
--
-- Roles belong to the cluster, not to a database, and the tests migrate many databases
-- of one cluster at once. Two sessions running "create role" together make one fail with
-- duplicate_object (it saw the role) or unique_violation (both inserted it): either way
-- the role is there, so each creation catches both.

do $$
begin
    create role ferry_client nologin nobypassrls;
exception
    when duplicate_object or unique_violation then null;
end
$$;

do $$
begin
    create role ferry_gateway login nosuperuser nobypassrls nocreatedb nocreaterole;
exception
    when duplicate_object or unique_violation then null;
end
$$;

-- A role made earlier by hand may carry powers that would bypass Row Level Security.
-- Altered only when wrong: concurrent ALTERs of one role fail with "tuple concurrently updated".
do $$
begin
    if exists (
        select from pg_roles
        where rolname = 'ferry_client' and (rolcanlogin or rolbypassrls or rolsuper)
    ) then
        alter role ferry_client nologin nobypassrls nosuperuser;
    end if;
    if exists (
        select from pg_roles
        where rolname = 'ferry_gateway'
            and (not rolcanlogin or rolsuper or rolbypassrls or rolcreatedb or rolcreaterole)
    ) then
        alter role ferry_gateway login nosuperuser nobypassrls nocreatedb nocreaterole;
    end if;
end
$$;

do $$
begin
    if not pg_has_role('ferry_gateway', 'ferry_client', 'member') then
        grant ferry_client to ferry_gateway;
    end if;
exception
    when duplicate_object or unique_violation then null;
end
$$;

revoke all on schema ferry from public;
grant usage on schema ferry to ferry_client;
revoke all on table ferry.schema_migrations from public;
