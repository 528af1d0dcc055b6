#!/usr/bin/env bash
# Push's SQL before and after 0015 (final answers for what PostgreSQL cannot store), in
# one run on one database: pgbench, as the gateway sends it, the identity statement and
# the push statement in one pipeline, each client on its own device, batches of BATCH
# upserts of the caller's existing rows in public.daily_challenges (bench/sync.sh's
# push), runs interleaved so drift hits both alike.
#
#   before  0013's statement: the body cast to jsonb in the statement, the limit checked
#           there, then 0013's ferry.push, loaded as bench_shape.push_0013 from
#           sql/ferry/0013_push_upserts.sql of commit e9a775d (the history before sql/ferry
#           was squashed into its baseline; 0015 replaced ferry.push's body).
#   after   select ferry.push_body(body text, 1000): the cast in a subtransaction, then
#           ferry.push_mutations.
#
# Prints tx/s and PostgreSQL CPU per push (µs) for each, medians of RUNS runs, and
# after/before of the CPU per push with PASS when at most MAX_COST_RATIO (1.05).
#
# Usage: bench/push-shape.sh   (env: RUNS=5 DURATION=10 CLIENTS=8 THREADS=2 BATCH=50)
# The embedded database (`make db`; the port follows FERRY_DEV_PG_PORT) is migrated with
# sql/ferry and sql/examples/puzzle; the users it makes stay (`ferry db reset` clears).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-5}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-8}
THREADS=${THREADS:-2}
BATCH=${BATCH:-50}
MAX_COST_RATIO=${MAX_COST_RATIO:-1.05}
[ "$BATCH" -le 99 ] || { echo "BATCH must be at most 99 (two-digit id suffix)" >&2; exit 1; }

build_release
migrate_database puzzle
make_scratch_folder

grep -q 'from ferry.push_body($1, $2::integer) answer' Sources/FerryGateway/Queries/SyncQueries.swift ||
    { echo "the push statement changed: update bench/push-shape.sh" >&2; exit 1; }
# 0013's ferry.push under another name: its text, as applied, from the migration in git.
before_function=$(git show e9a775d:sql/ferry/0013_push_upserts.sql |
    awk '/^create or replace function ferry.push\(p_mutations jsonb\)/,/^\$\$;$/' |
    sed 's/^create or replace function ferry.push(p_mutations jsonb)/create or replace function bench_shape.push_0013(p_mutations jsonb)/')
[ -n "$before_function" ] || { echo "0013's ferry.push not found" >&2; exit 1; }

# One user and device per client, each with BATCH rows to upsert.
psql -q -v ON_ERROR_STOP=1 "$OWNER_URL" >&2 <<SQL
create schema if not exists bench_shape;
drop table if exists bench_shape.devices;
create table bench_shape.devices (n integer primary key, uid text, did text);
with made as (insert into ferry.users (id) select gen_random_uuid() from generate_series(1, $CLIENTS) returning id)
insert into bench_shape.devices select row_number() over () - 1, id::text, gen_random_uuid()::text from made;
insert into public.daily_challenges (user_id, day, seconds)
    select uid::uuid, date '2020-01-01' + g, g from bench_shape.devices, generate_series(0, $BATCH - 1) g
    on conflict do nothing;
grant usage on schema bench_shape to ferry_client, ferry_gateway;
grant select on bench_shape.devices to ferry_gateway;
$before_function
grant execute on function bench_shape.push_0013(jsonb) to ferry_client;
SQL

# The batch: BATCH upserts, with format()'s %1$s for the per-transaction number.
template=$(push_batch_template "$BATCH")
template=${template//@/%1\$s}

push_script bench_shape.devices "select case when pg_catalog.jsonb_typeof(body -> 'mutations') = 'array'
        and pg_catalog.jsonb_array_length(body -> 'mutations') > 1000
    then null else bench_shape.push_0013(body) end
from (select pg_catalog.format(:template, :seq::bigint)::jsonb as body) request;" >"$tmp/before.sql"
push_script bench_shape.devices "select ferry.push_body(pg_catalog.format(:template, :seq::bigint), 1000);" >"$tmp/after.sql"

find_postmaster
# Both statements apply a batch whole (checked in a transaction rolled back).
batch=${template//%1\$s/1}
check_push_statements bench_shape.devices \
    "select case when pg_catalog.jsonb_typeof(body -> 'mutations') = 'array' then bench_shape.push_0013(body) end from (select \$b\$$batch\$b\$::jsonb as body) request" \
    "select ferry.push_body(\$b\$$batch\$b\$, 1000)"

compare_push_scripts "$tmp/before.sql" "$tmp/after.sql" "before: 0013's statement ($BATCH upserts)" "after: ferry.push_body ($BATCH upserts)"
