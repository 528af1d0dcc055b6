-- The version of Ferry's SQL. ferry serve starts, and /readyz is ready, only while it is
-- at least the binary's Ferry.requiredSchemaVersion (Sources/FerryGateway/App/Ferry.swift):
-- at least, so that during a rolling deploy the older gateways stay ready after the
-- database moved on. Raise both together whenever the binary starts relying on changed
-- SQL (a function it calls that is new or answers differently, a column it reads); a
-- change the binary does not rely on (a fix inside a function, a comment) leaves it.
create or replace function ferry.schema_version() returns integer
language sql immutable parallel safe
as $$ select 3 $$;

revoke all on function ferry.schema_version() from public;
grant execute on function ferry.schema_version() to ferry_gateway;
