-- The two roles Ferry runs as, and who may use schema ferry (docs/OPERATIONS.md "Roles").
--
--   ferry_client   NOLOGIN NOBYPASSRLS: every request runs as it (the gateway switches
--                  per transaction, set_config('role', 'ferry_client', true)), so Row
--                  Level Security decides what each request sees.
--   ferry_gateway  LOGIN, no other power, owns nothing: the role ferry serve logs in as;
--                  a member of ferry_client, which lets it switch. No password here.
--
-- Schema ferry and its ledger ferry.schema_migrations are created by the migrator
-- before it reads the ledger (Migrator.bootstrapSQL, Sources/FerryGateway/Migrator.swift).
-- The schema is closed to PUBLIC: only ferry_client (and the gateway, its member) may use
-- it. Functions still get EXECUTE for PUBLIC when created, so every function requests
-- must not call revokes it itself.
--
-- Roles belong to the cluster, and the tests migrate many databases of one cluster at
-- once: two sessions creating one role make one fail with duplicate_object or
-- unique_violation, either way with the role there, so each creation catches both.

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
