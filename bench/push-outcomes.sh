#!/usr/bin/env bash
# Push's SQL before and after remembered outcomes (migration 0010: a duplicate carries
# its original outcome; a revived tombstone starts from the columns given), in one run
# on one database: pgbench, as the gateway sends it, the identity statement and the push
# statement in one pipeline, each client on its own device, batches of BATCH upserts of
# the caller's existing rows in public.daily_challenges (bench/sync.sh's push), runs
# interleaved so drift hits both alike.
#
#   before  ferry.push_mutations as of BEFORE (default 0ac4544, the commit this work
#           started from), loaded as bench_outcomes.push_mutations from that commit's
#           sql/ferry/functions/push.sql
#   after   ferry.push_mutations as migrated now
# Both are called on the body cast to jsonb; both call the same ferry.upsert_row (the
# static upserts as generated now), so the revive's extra test per column is in both.
#
# Prints tx/s and PostgreSQL CPU per push (µs) for each, medians of RUNS runs, and
# after/before of the CPU per push with PASS when at most MAX_COST_RATIO (1.05).
#
# Usage: bench/push-outcomes.sh   (env: RUNS=5 DURATION=10 CLIENTS=8 THREADS=2 BATCH=50 BEFORE=0ac4544)
# The embedded database (`make db`; the port follows FERRY_DEV_PG_PORT) is migrated with
# sql/ferry and sql/examples/puzzle by the debug `ferry` (`make build`; only SQL is measured).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-5}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-8}
THREADS=${THREADS:-2}
BATCH=${BATCH:-50}
MAX_COST_RATIO=${MAX_COST_RATIO:-1.05}
BEFORE=${BEFORE:-0ac4544}
[ "$BATCH" -le 99 ] || { echo "BATCH must be at most 99 (two-digit id suffix)" >&2; exit 1; }

FERRY=.build/debug/ferry
migrate_database puzzle
make_scratch_folder

before_function=$(git show "$BEFORE:sql/ferry/functions/push.sql" |
    awk '/^create or replace function ferry.push_mutations\(p_mutations jsonb, p_unstorable jsonb\)/,/^\$\$;$/' |
    sed 's/^create or replace function ferry.push_mutations(/create or replace function bench_outcomes.push_mutations(/')
[ -n "$before_function" ] || { echo "ferry.push_mutations of $BEFORE not found" >&2; exit 1; }

# One user and device per client, each with BATCH rows to upsert.
psql -q -v ON_ERROR_STOP=1 "$OWNER_URL" >&2 <<SQL
create schema if not exists bench_outcomes;
drop table if exists bench_outcomes.devices;
create table bench_outcomes.devices (n integer primary key, uid text, did text);
with made as (insert into ferry.users (id) select gen_random_uuid() from generate_series(1, $CLIENTS) returning id)
insert into bench_outcomes.devices select row_number() over () - 1, id::text, gen_random_uuid()::text from made;
insert into public.daily_challenges (user_id, day, seconds)
    select uid::uuid, date '2020-01-01' + g, g from bench_outcomes.devices, generate_series(0, $BATCH - 1) g
    on conflict do nothing;
grant usage on schema bench_outcomes to ferry_client, ferry_gateway;
grant select on bench_outcomes.devices to ferry_gateway;
$before_function
grant execute on function bench_outcomes.push_mutations(jsonb, jsonb) to ferry_client;
SQL

# The batch: BATCH upserts, with format()'s %1$s for the per-transaction number.
template=$(push_batch_template "$BATCH")
template=${template//@/%1\$s}

push_script bench_outcomes.devices "select bench_outcomes.push_mutations(pg_catalog.format(:template, :seq::bigint)::jsonb, null);" >"$tmp/before.sql"
push_script bench_outcomes.devices "select ferry.push_mutations(pg_catalog.format(:template, :seq::bigint)::jsonb, null);" >"$tmp/after.sql"

find_postmaster
# Both statements apply a batch whole (checked in a transaction rolled back).
batch=${template//%1\$s/1}
check_push_statements bench_outcomes.devices \
    "select bench_outcomes.push_mutations(\$b\$$batch\$b\$::jsonb, null)" \
    "select ferry.push_mutations(\$b\$$batch\$b\$::jsonb, null)"

compare_push_scripts "$tmp/before.sql" "$tmp/after.sql" "before: $BEFORE's push ($BATCH upserts)" "after: outcomes kept ($BATCH upserts)"
