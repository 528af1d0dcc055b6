-- Read replicas (docs/OPERATIONS.md "Read replicas"; docs/ARCHITECTURE.md "Pulls on a
-- read replica"). The gateway sends a pull to a hot standby as one pipeline: this check,
-- the identity statement, the pull. p_primary is the primary's ferry.history_here() read
-- after the pull arrived (so after every commit whose cue the client had seen): the check
-- passes only once this standby has replayed past its "lsn", and notes it for this
-- transaction, where ferry.history_here builds the standby's cursors from it
-- (history.sql). Otherwise it raises, and the rest of the pipeline does not run:
--   FRLAG  not replayed that far yet: the gateway asks again until its wait is over,
--          then runs the pull on the primary
--   FRPRI  not a standby (promoted, or the URL reaches a primary): the primary serves
-- The check never waits itself: a statement that waits holds a snapshot, and a standby
-- may hold back its replay for a query's snapshot (a recovery conflict).
create or replace function ferry.replica_caught_up(p_primary jsonb) returns boolean
language plpgsql volatile
as $$
begin
    if not pg_catalog.pg_is_in_recovery() then
        raise exception 'ferry: the read database is not a standby' using errcode = 'FRPRI';
    end if;
    if pg_catalog.jsonb_typeof(p_primary -> 'lsn') is distinct from 'string'
        or pg_catalog.jsonb_typeof(p_primary -> 'timeline') is distinct from 'number'
        or not p_primary ? 'started'
    then
        raise exception 'ferry: not a primary''s history: %', p_primary using errcode = '22023';
    end if;
    if pg_catalog.pg_last_wal_replay_lsn() is null
        or pg_catalog.pg_last_wal_replay_lsn() < (p_primary ->> 'lsn')::pg_lsn
    then
        raise exception 'ferry: the standby has replayed to %, the pull needs %',
            pg_catalog.pg_last_wal_replay_lsn(), p_primary ->> 'lsn' using errcode = 'FRLAG';
    end if;
    perform pg_catalog.set_config('ferry.primary_history', p_primary::text, true);
    return true;
end
$$;

comment on function ferry.replica_caught_up(jsonb) is
    'Before a pull on a hot standby: true once replayed past the primary''s position in p_primary (ferry.history_here() there), else FRLAG; FRPRI when not a standby.';

revoke all on function ferry.replica_caught_up(jsonb) from public;
grant execute on function ferry.replica_caught_up(jsonb) to ferry_gateway;
