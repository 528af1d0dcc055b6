-- plpgsql_check over every PL/pgSQL function of schema ferry, those register_table
-- generates included (Tests/sql/run.sh runs it in a database migrated with sql/ferry
-- and the examples). Fails on any error and on any warning not excused below (so the
-- count stays at zero and a new one is seen); lists what it found.
--
-- A trigger function is checked against a table it fires on (the examples' tasks table,
-- which has every trigger Ferry installs), with the transition tables its cue triggers
-- declare. Dynamic SQL (EXECUTE) is not checked by plpgsql_check: the pgTAP tests and
-- the Swift suites run it.

\set ON_ERROR_STOP 1
\pset pager off

create temp table findings as
select p.oid::regprocedure::text as function, r.level, r.message, r.lineno, r.statement, r.detail, r.hint
from pg_catalog.pg_proc p
join pg_catalog.pg_language l on l.oid = p.prolang
cross join lateral plpgsql_check_function_tb(p.oid,
    relid => case when p.prorettype = 'trigger'::regtype then 'public.tasks'::regclass else 0 end,
    newtable => case when p.proname = 'send_cues' then 'new_rows' end,
    oldtable => case when p.proname = 'send_cues' then 'old_rows' end,
    fatal_errors => false, other_warnings => true, performance_warnings => false, extra_warnings => true,
    security_warnings => true) r
where p.pronamespace = 'ferry'::regnamespace and l.lanname = 'plpgsql';

-- Warnings that stay, each with its reason, matched by function and message. A new
-- function that needs one is added here by name, after a review, not by a wider pattern.
--
-- "text type variable is not sanitized": plpgsql_check cannot follow a value through a
-- variable, so it flags every EXECUTE whose text takes a text variable through %s. In
-- these functions each such variable holds identifiers from the catalog, already quoted
-- by format('%I') or quote_ident, a regclass's text (quoted), or a type from
-- format_type (locks.sql's key type); values go through USING. Push and the locks take
-- the table from ferry.synced_tables, never from the request's text.
create temp table excused (function text, message text, reason text);
insert into excused
select f, 'text type variable is not sanitized', 'identifiers from the catalog, quoted when built (see above)'
from pg_catalog.unnest(array[
    'ferry.claim_lock(text,text,boolean)', 'ferry.heartbeat_lock(text,text)', 'ferry.release_lock(text,text)',
    'ferry.move_user_rows(uuid,uuid)', 'ferry.push_mutations(jsonb,jsonb)',
    'ferry.register_table(regclass,text,name,jsonb)', 'ferry.restrict_lock_columns(regclass)',
    'ferry.tombstone_delete()', 'ferry.watermelon_write(regclass,text,name,pg_snapshot,jsonb,text[])',
    'ferry.shared_changes(pg_snapshot)']) f
union all
-- column_default evaluates a column's default as the catalog holds it (pg_get_expr of an
-- operator's migration), and only after checking its tree holds nothing but constants and
-- immutable functions and operators: no text of a request reaches it.
select 'ferry.column_default(regclass,smallint)', 'text type variable is not sanitized',
    'a default expression from the catalog, checked to be constants and immutable calls'
union all
-- The generated reader opens the cursor its caller names: the parameter's value is the
-- portal's name, which OPEN reads without plpgsql_check seeing a read.
select 'ferry.watermelon_open(pg_snapshot,text[],refcursor)', 'parameter "p_cursor" is never read',
    'OPEN names the portal by the parameter''s value'
union all
-- shared_changes returns its rows with RETURN QUERY EXECUTE, one query per shared table,
-- which fills the OUT columns without plpgsql_check seeing an assignment.
select 'ferry.shared_changes(pg_snapshot)', pg_catalog.format('OUT variable "%s" is maybe unmodified', c),
    'RETURN QUERY EXECUTE fills the result'
from pg_catalog.unnest(array['table_name', 'stamp', 'deleted', 'key', 'body']) c;

create temp table reported as
select f.* from findings f
where f.level = 'error' or not exists (select from excused e where f.function = e.function and f.message = e.message);

\pset footer off
select r.function, r.level, r.lineno, r.message, r.detail from reported r order by r.function, r.lineno;

select (select pg_catalog.count(*) from reported where level = 'error') as errors,
    (select pg_catalog.count(*) from reported where level <> 'error') as warnings,
    (select pg_catalog.count(*) from findings where level <> 'error') - (select pg_catalog.count(*) from reported where level <> 'error')
        as excused,
    (select pg_catalog.count(*) from pg_catalog.pg_proc p join pg_catalog.pg_language l on l.oid = p.prolang
        where p.pronamespace = 'ferry'::regnamespace and l.lanname = 'plpgsql') as functions
\gset
\echo plpgsql_check: :functions functions, :errors errors, :warnings warnings, :excused excused warnings
select (:errors = 0 and :warnings = 0) as clean \gset
\if :clean
\else
do $$ begin raise exception 'plpgsql_check: errors, or warnings not excused (listed above)'; end $$;
\endif
