#!/usr/bin/env bash
# Sync: GET /v1/pull and POST /v1/push through Ferry against pgbench running the same SQL
# the gateway sends, in one run on the same database (issue 4, "Benchmark (not a test)").
#
#   pull   PULL_USERS users, ROWS rows each in public.daily_challenges (lww); each user's
#          cursor is taken after seeding (a first-load pull through the API), then CHANGES
#          rows per user are updated, so every pull with that cursor answers the same
#          CHANGES rows: the steady-state cost of a pull.
#          Ferry: wrk rotating over the (token, cursor) pairs -> requests/s.
#          pgbench "pipeline": what the gateway sends, the identity statement and
#          `select ... from ferry.pull(raw cursor, limit)` in one \startpipeline block
#          (one Sync, one implicit transaction, one round trip), one script per user
#          (pgbench picks one per transaction) -> tx/s.
#          pgbench "one statement": the same identity settings and pull as ONE statement
#          (set_config in a lateral-joined subquery ahead of ferry.pull) -> tx/s.
#   push   batches of BATCH upserts to public.daily_challenges (existing rows of the
#          caller: days 0..BATCH-1), mutation ids strictly increasing per device.
#          Ferry: wrk over PUSH_DEVICES devices (each its own anonymous user and token),
#          each wrk thread owning its devices -> requests/s and mutations/s.
#          pgbench: the identity statement and the gateway's push statement in one
#          pipeline, each client on its own device -> tx/s x BATCH mutations/s.
#   floors (issue 19 §4), pgbench, the same identity statement first in one pipeline:
#          pull floor: ONE statement reading the user's CHANGES changed rows by the
#          (user_id, _stamp) index as JSON (jsonb_agg of to_jsonb less Ferry's columns);
#          push floor: ONE `insert … select … on conflict do update` of the batch's rows
#          (read from the same batch text) into the same table, cues skipped -> rows/s.
#
# Prints the figures, the ratios Ferry/pgbench (goal >= MIN_RATIO, 0.7) and
# pipeline/one-statement for the pull's SQL (goal >= MIN_STATEMENT_RATIO, 0.9), and the
# floors': Ferry push mutations/s / floor rows/s (goal >= MIN_FLOOR_PUSH, 0.5), a pull's
# cost / the pull floor's, as time per operation and as PostgreSQL CPU per operation
# (goal <= MAX_FLOOR_PULL, 2), with PASS/FAIL. Median of RUNS runs, the runs interleaved
# (Ferry pull, pgbench pull, pull floor, pgbench one-statement pull, Ferry push, pgbench
# push, push floor) so drift hits all alike.
#
# Usage: bench/sync.sh   (env: RUNS=3 DURATION=10s CONNECTIONS=64 THREADS=2 LOOPS=2
#        POOL_SIZE=8 PGBENCH_CLIENTS=LOOPS*POOL_SIZE PGBENCH_THREADS=2 PULL_USERS=100
#        PUSH_DEVICES=256 ROWS=300 CHANGES=10 BATCH=50 PULL_LIMIT=1000
#        MIN_FLOOR_PUSH=0.5 MAX_FLOOR_PULL=2)
# Ferry is the release `ferry serve` (access log on, to /dev/null) logged in as
# ferry_gateway; pgbench logs in as ferry_gateway too, -M prepared, as many clients as
# the gateway has database connections. The embedded database (`make db`; the port
# follows FERRY_DEV_PG_PORT) is migrated with sql/ferry and sql/examples/puzzle. The
# users this script signs up stay in the database; `ferry db reset` clears it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}
PGBENCH_CLIENTS=${PGBENCH_CLIENTS:-$((LOOPS * POOL_SIZE))}
PGBENCH_THREADS=${PGBENCH_THREADS:-2}
PULL_USERS=${PULL_USERS:-100}   # pgbench takes at most 128 scripts: one per user
PUSH_DEVICES=${PUSH_DEVICES:-256}
ROWS=${ROWS:-300}
CHANGES=${CHANGES:-10}
# A device's previous batch must be answered before its turn comes again (ids increase
# per device), so devices must well outnumber the connections sending them.
[ "$PUSH_DEVICES" -ge $((2 * CONNECTIONS)) ] ||
    { echo "PUSH_DEVICES ($PUSH_DEVICES) must be at least twice CONNECTIONS ($CONNECTIONS)" >&2; exit 2; }
BATCH=${BATCH:-50}
PULL_LIMIT=${PULL_LIMIT:-1000}
MIN_RATIO=${MIN_RATIO:-0.7}
MIN_STATEMENT_RATIO=${MIN_STATEMENT_RATIO:-0.9}
MIN_FLOOR_PUSH=${MIN_FLOOR_PUSH:-0.5}
MAX_FLOOR_PULL=${MAX_FLOOR_PULL:-2}
[ "$PULL_USERS" -le 120 ] || { echo "PULL_USERS must be at most 120 (pgbench scripts)" >&2; exit 1; }
[ "$BATCH" -le 99 ] || { echo "BATCH must be at most 99 (two-digit id suffix)" >&2; exit 1; }

build_release
migrate_database puzzle
make_scratch_folder


# wrk's connections rotate over PULL_USERS users, so a user may have a few pulls in flight
# at once, and a push device may push faster than a device's budget; the limits on
# requests in flight and push bytes (bench/fairness.sh) are not what this measures.
export FERRY_REQUESTS_PER_DEVICE=$CONNECTIONS FERRY_REQUESTS_PER_USER=$CONNECTIONS
export FERRY_PUSH_BYTES_PER_SECOND=1073741824
choose_gateway_address
start_gateways 1 127.0.0.1
ferry_pid=${gateway_pids[0]}

# The identity statement (Identity.statementSQL) and the push and pull statements
# (Queries/SyncQueries.swift), as the gateway sends them.
identity_sql="select pg_catalog.set_config('role', 'ferry_client', true), pg_catalog.set_config('ferry.user_id', :uid, true), pg_catalog.set_config('ferry.device_id', :did, true), pg_catalog.set_config('ferry.session_id', :sid, true), pg_catalog.set_config('statement_timeout', '10000', true), pg_catalog.set_config('TimeZone', 'UTC', true);"
grep -q "set_config('ferry.session_id', \$3, true)," Sources/FerryGateway/Queries/IdentityStatement.swift &&
    grep -qF "set_config('statement_timeout', \\(timeout), true)" Sources/FerryGateway/Queries/TransactionSettings.swift &&
    grep -q "set_config('TimeZone', 'UTC', true)" Sources/FerryGateway/Queries/TransactionSettings.swift ||
    { echo "Identity.statementSQL changed: update bench/sync.sh" >&2; exit 1; }
grep -q "from ferry.pull(\$1, \$2::integer) answer" Sources/FerryGateway/Queries/SyncQueries.swift ||
    { echo "the pull statement changed: update bench/sync.sh" >&2; exit 1; }
grep -q 'from ferry.push_body($1, $2::integer) answer' Sources/FerryGateway/Queries/SyncQueries.swift &&
    grep -q "current_setting('ferry.cues_queued', true) = 'on' as cues_queued" Sources/FerryGateway/Queries/SyncQueries.swift ||
    { echo "the push statement changed: update bench/sync.sh" >&2; exit 1; }

# Setup: sign-ups through the API, rows seeded as the owner, cursors through the API.
# Writes: pull.tsv (token, sealed cursor), pull_<i>.sql and one_<i>.sql (pgbench pull
# scripts with that user's identity and raw cursor), push.tsv (tokens), and the table
# bench_sync.push_devices (pgbench push clients' identities, by client id).
PULL_USERS=$PULL_USERS PUSH_DEVICES=$PUSH_DEVICES PGBENCH_CLIENTS=$PGBENCH_CLIENTS ROWS=$ROWS CHANGES=$CHANGES \
    PULL_LIMIT=$PULL_LIMIT set_up_with_python <<'PY'
import base64
import json
from concurrent.futures import ThreadPoolExecutor
from lib import *

pull_users, push_devices, clients = int(env["PULL_USERS"]), int(env["PUSH_DEVICES"]), int(env["PGBENCH_CLIENTS"])
rows, changes, limit = int(env["ROWS"]), int(env["CHANGES"]), int(env["PULL_LIMIT"])

users = sign_up_many(pull_users + push_devices + clients)
pulls, pushes, bench = users[:pull_users], users[pull_users:pull_users + push_devices], users[pull_users + push_devices:]

ids = uuid_list(users)
psql(f"""
insert into public.daily_challenges (user_id, day, seconds)
select u, date '2020-01-01' + g, g from unnest(array[{ids}]::uuid[]) u, generate_series(0, {rows - 1}) g;
create schema if not exists bench_sync;
drop table if exists bench_sync.push_devices;
create table bench_sync.push_devices (n integer primary key, uid text, did text, sid text);
grant usage on schema bench_sync to ferry_gateway;
grant select on bench_sync.push_devices to ferry_gateway;
analyze public.daily_challenges;
""")
values = ",".join("(%d, '%s', '%s', '%s')" % (n, u["uid"], u["did"], u["sid"]) for n, u in enumerate(bench))
psql(f"insert into bench_sync.push_devices values {values};")

# The cursor after seeding: a first load through the API (every row fits in one page).
def first_load(u):
    answer = call("GET", f"/v1/pull?limit={limit}", u["token"])
    assert not answer["has_more"] and len(answer["changes"]["daily_challenges"]["upserts"]) == rows, answer.keys()
    u["cursor"] = answer["cursor"]
    sealed = answer["cursor"].split(".")[0]
    u["raw"] = base64.urlsafe_b64decode(sealed + "=" * (-len(sealed) % 4)).decode()
with ThreadPoolExecutor(8) as pool:
    list(pool.map(first_load, pulls))

pull_ids = uuid_list(pulls)
psql(f"""update public.daily_challenges set seconds = seconds + 1
         where user_id = any(array[{pull_ids}]::uuid[]) and day < date '2020-01-01' + {changes};""")
# Each cursor now answers exactly `changes` rows.
for u in pulls[:3]:
    answer = call("GET", f"/v1/pull?limit={limit}&cursor={u['cursor']}", u["token"])
    got = len(answer["changes"]["daily_challenges"]["upserts"])
    assert got == changes and not answer["has_more"], got

def lit(text):
    return "'" + text.replace("'", "''") + "'"
identity = ("select pg_catalog.set_config('role', 'ferry_client', true), pg_catalog.set_config('ferry.user_id', {uid}, true), "
            "pg_catalog.set_config('ferry.device_id', {did}, true), pg_catalog.set_config('ferry.session_id', {sid}, true), "
            "pg_catalog.set_config('statement_timeout', '10000', true), pg_catalog.set_config('TimeZone', 'UTC', true)")
with open(f"{tmp}/pull.tsv", "w") as tsv:
    for i, u in enumerate(pulls):
        tsv.write(f"{u['token']}\t{u['cursor']}\n")
        ident = identity.format(uid=lit(u["uid"]), did=lit(u["did"]), sid=lit(u["sid"]))
        with open(f"{tmp}/pull_{i}.sql", "w") as f:
            f.write("\\startpipeline\n" + ident + ";\n"
                    f"select answer ->> 'cursor', (answer - 'cursor')::text from ferry.pull({lit(u['raw'])}, {limit}::integer) answer;\n"
                    "\\endpipeline\n")
        # The pull's floor: one statement reading the same changed rows of the table by its
        # (user_id, _stamp) index as JSON (pull's row form), after the same identity.
        since = json.loads(u["raw"])["since"]
        with open(f"{tmp}/floor_pull_{i}.sql", "w") as f:
            f.write("\\startpipeline\n" + ident + ";\n"
                    "select pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t) - '{_stamp,_deleted,_lock_device,_lock_heartbeat_at}'::text[] "
                    "order by t._stamp, t.day)::text from public.daily_challenges t "
                    f"where t.user_id = {lit(u['uid'])} and t._stamp >= pg_catalog.pg_snapshot_xmin({lit(since)}) "
                    f"and not pg_catalog.pg_visible_in_snapshot(t._stamp, {lit(since)});\n"
                    "\\endpipeline\n")
        with open(f"{tmp}/one_{i}.sql", "w") as f:
            f.write(f"select answer ->> 'cursor', (answer - 'cursor')::text from ({ident} offset 0) identity(r, u, d, s) "
                    f"cross join lateral ferry.pull(case when identity.s is not null then {lit(u['raw'])} end, {limit}::integer) answer;\n")
with open(f"{tmp}/push.tsv", "w") as tsv:
    for u in pushes:
        tsv.write(u["token"] + "\n")
PY

# A push batch: BATCH upserts of the caller's rows, '@' for a per-request number.
template=$(push_batch_template "$BATCH")
echo "$template" > "$tmp/push_template.json"



# pgbench push: each client looks its device up once (client-side \if, no round trip
# afterwards), then per transaction the identity statement and the gateway's push
# statement in one pipeline. The batch text is the template with its number filled in
# by format(), the only difference from the gateway's statement ($1, the body as text).
cat > "$tmp/push.sql" <<SQL
\\if :have = 0
select uid, did, sid, 1 as have from bench_sync.push_devices where n = :client_id
\\gset
\\endif
\\set seq :seq + 1
\\startpipeline
$identity_sql
select answer, pg_catalog.current_setting('ferry.cues_queued', true) = 'on' as cues_queued from ferry.push_body(pg_catalog.format(:template, :seq::bigint), 1000) answer;
\\endpipeline
SQL
pg_template=${template//@/%1\$s}

# The push's floor: the same rows (read from the same batch text) written by ONE set-based
# statement, `insert … select … on conflict do update`, after the same identity (as
# ferry_client, under RLS, the table's triggers firing). Its statement triggers' cues are
# skipped (ferry.skip_cues, set in the identity statement): a floor, not a push.
cat > "$tmp/floor_push.sql" <<SQL
\\if :have = 0
select uid, did, sid, 1 as have from bench_sync.push_devices where n = :client_id
\\gset
\\endif
\\set seq :seq + 1
\\startpipeline
${identity_sql%;}, pg_catalog.set_config('ferry.skip_cues', 'daily_challenges', true);
insert into public.daily_challenges as t (user_id, day, seconds) select (select ferry.uid()), (m -> 'row' ->> 'day')::date, (m -> 'row' ->> 'seconds')::integer from pg_catalog.jsonb_array_elements(pg_catalog.format(:template, :seq::bigint)::jsonb -> 'mutations') m on conflict (user_id, day) do update set seconds = excluded.seconds, _deleted = false;
\\endpipeline
SQL

# The batch as both sides send it is applied whole: one push through the API, one
# pgbench transaction (then their devices' numbers restart above these).
token=$(head -1 "$tmp/push.tsv")
check_push_batch "$base" "$token" "$template" "$BATCH"

# CPU time, as a check on the rates (the machine is shared, so a rate also says how
# much of it this run got): clock ticks of this cluster (the postmaster with the reaped
# backends of earlier runs, plus its live children) and of the gateway.
find_postmaster
# "rate µs-of-PostgreSQL-CPU-per-op µs-of-gateway-CPU-per-op" for one run of "$@".
measure() {
    local kind=$1 output rate count pg0 gw0 pg1 gw1
    shift
    pg0=$(cluster_ticks "$postmaster")
    gw0=$(process_ticks "$ferry_pid")
    if [ "$kind" = wrk ]; then
        # A run with any non-2xx answer is an error, not a figure.
        output=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" "$@")
        if grep -q 'Non-2xx' <<<"$output"; then
            echo "wrk $*: $(grep 'Non-2xx' <<<"$output")" >&2
            exit 1
        fi
        grep 'Socket errors' <<<"$output" >&2 || true
        if grep -q 'duplicate batches: [1-9]' <<<"$output"; then
            echo "wrk: $(grep 'duplicate batches' <<<"$output")" >&2
            exit 1
        fi
        grep 'duplicate batches' <<<"$output" >&2 || true
        rate=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$output")
        count=$(awk '/ requests in / { print $1 }' <<<"$output")
    else
        # No vacuum, prepared, as ferry_gateway; a failed transaction is an error.
        output=$(pgbench -n -M prepared -c "$PGBENCH_CLIENTS" -j "$PGBENCH_THREADS" -T "${DURATION%s}" "$@" \
            "$GATEWAY_URL" 2>&1) || { echo "pgbench: $output" >&2; exit 1; }
        if grep -q 'number of failed transactions: [1-9]' <<<"$output"; then
            echo "pgbench: $output" >&2
            exit 1
        fi
        rate=$(awk '/^tps = / { print $3 }' <<<"$output")
        count=$(awk '/^number of transactions actually processed:/ { print $NF }' <<<"$output")
        # pgbench's backends exit as it ends: let the postmaster reap them (their CPU time
        # moves to its children's times) before reading, or some would be counted nowhere.
        sleep 1
    fi
    pg1=$(cluster_ticks "$postmaster")
    gw1=$(process_ticks "$ferry_pid")
    echo "$rate $(echo "($pg1 - $pg0) * 1000000 / $ticks_per_second / $count" | bc) $(echo "($gw1 - $gw0) * 1000000 / $ticks_per_second / $count" | bc)"
}
# column $1 of the runs in array $2: median, and the runs joined by " / "
column() { local -n runs=$2; printf '%s\n' "${runs[@]}" | awk -v c="$1" '{ print $c }' | median; }
listed() { local -n runs=$2; printf '%s\n' "${runs[@]}" | awk -v c="$1" '{ printf "%s%.0f", (NR > 1 ? " / " : ""), $c }'; }

pull_scripts=()
one_scripts=()
floor_scripts=()
for i in $(seq 0 $((PULL_USERS - 1))); do
    pull_scripts+=(-f "$tmp/pull_$i.sql")
    floor_scripts+=(-f "$tmp/floor_pull_$i.sql")
    one_scripts+=(-f "$tmp/one_$i.sql")
done

ferry_pull_runs=()
pg_pull_runs=()
one_pull_runs=()
ferry_push_runs=()
pg_push_runs=()
floor_pull_runs=()
floor_push_runs=()
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
    ferry_pull_runs+=("$(measure wrk -s bench/pull.lua "$base" -- "$tmp/pull.tsv" "$PULL_LIMIT")")
    pg_pull_runs+=("$(measure pgbench "${pull_scripts[@]}")")
    floor_pull_runs+=("$(measure pgbench "${floor_scripts[@]}")")
    one_pull_runs+=("$(measure pgbench "${one_scripts[@]}")")
    # Mutation-id numbers: runs apart by far more than a run's requests.
    ferry_push_runs+=("$(measure wrk -s bench/push.lua "$base" -- "$tmp/push.tsv" "$THREADS" \
        "$tmp/push_template.json" $((run * 100000000)))")
    pg_push_runs+=("$(measure pgbench -f "$tmp/push.sql" -D have=0 -D seq=$((run * 100000000)) \
        -D "template=$pg_template")")
    floor_push_runs+=("$(measure pgbench -f "$tmp/floor_push.sql" -D have=0 -D seq=$((run * 100000000 + 50000000)) \
        -D "template=$pg_template")")
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

for name in ferry_pull pg_pull floor_pull one_pull ferry_push pg_push floor_push; do
    echo "runs $name: rate $(listed 1 ${name}_runs); PostgreSQL µs/op $(listed 2 ${name}_runs); gateway µs/op $(listed 3 ${name}_runs)" >&2
done
ferry_pull=$(column 1 ferry_pull_runs)
pg_pull=$(column 1 pg_pull_runs)
one_pull=$(column 1 one_pull_runs)
ferry_push=$(column 1 ferry_push_runs)
pg_push=$(column 1 pg_push_runs)
floor_pull=$(column 1 floor_pull_runs)
floor_push=$(column 1 floor_push_runs)

verdict() { [ "$(echo "$1 >= $2" | bc -l)" -eq 1 ] && echo PASS || echo FAIL; }
pull_ratio=$(echo "$ferry_pull / $pg_pull" | bc -l)
push_ratio=$(echo "$ferry_push / $pg_push" | bc -l)
statement_ratio=$(echo "$pg_pull / $one_pull" | bc -l)
row() { printf '%-46s %8.0f %-6s %8s µs %8s µs\n' "$1" "$2" "$3" "$(column 2 "$4")" "$(column 3 "$4")"; }
printf '%-46s %15s %11s %11s\n' "" "median rate" "PostgreSQL" "gateway"
row "Ferry GET /v1/pull ($CHANGES changed rows)" "$ferry_pull" "req/s" ferry_pull_runs
row "pgbench pull: identity + pull, one pipeline" "$pg_pull" "tx/s" pg_pull_runs
row "pgbench pull: one statement" "$one_pull" "tx/s" one_pull_runs
row "pgbench pull floor: one indexed read as JSON" "$floor_pull" "tx/s" floor_pull_runs
row "Ferry POST /v1/push ($BATCH upserts)" "$ferry_push" "req/s" ferry_push_runs
row "pgbench push: identity + push, one pipeline" "$pg_push" "tx/s" pg_push_runs
row "pgbench push floor: one set-based upsert" "$floor_push" "tx/s" floor_push_runs
printf '%-46s %8.0f mutations/s Ferry, %.0f pgbench; floor %.0f rows/s\n' "push mutations/s" \
    "$(echo "$ferry_push * $BATCH" | bc -l)" "$(echo "$pg_push * $BATCH" | bc -l)" "$(echo "$floor_push * $BATCH" | bc -l)"
printf '%-46s %8.3f  %s (goal %s)\n' "pull: Ferry / pgbench" "$pull_ratio" "$(verdict "$pull_ratio" "$MIN_RATIO")" "$MIN_RATIO"
printf '%-46s %8.3f  %s (goal %s)\n' "push: Ferry / pgbench" "$push_ratio" "$(verdict "$push_ratio" "$MIN_RATIO")" "$MIN_RATIO"
printf '%-46s %8.3f  %s (goal %s)\n' "pull SQL: pipeline / one statement" "$statement_ratio" \
    "$(verdict "$statement_ratio" "$MIN_STATEMENT_RATIO")" "$MIN_STATEMENT_RATIO"
# The SQL floors (issue 19 §4). Push: mutations/s through Ferry ÷ rows/s of the set-based
# upsert of the same rows (goal at least MIN_FLOOR_PUSH, 0.5). Pull: its cost over the
# floor's, as time per operation at the same concurrency (the floor's rate ÷ the pull's;
# pgbench both, the same identity, one pipeline each) and as PostgreSQL CPU per operation
# (goal at most MAX_FLOOR_PULL, 2, on both).
at_most() { [ "$(echo "$1 <= $2" | bc -l)" -eq 1 ] && echo PASS || echo FAIL; }
floor_push_ratio=$(echo "$ferry_push / $floor_push" | bc -l)
floor_pg_push_ratio=$(echo "$pg_push / $floor_push" | bc -l)
floor_pull_time=$(echo "$floor_pull / $pg_pull" | bc -l)
floor_pull_cpu=$(echo "$(column 2 pg_pull_runs) / $(column 2 floor_pull_runs)" | bc -l)
floor_ferry_pull_cpu=$(echo "$(column 2 ferry_pull_runs) / $(column 2 floor_pull_runs)" | bc -l)
printf '%-46s %8.3f  %s (goal at least %s)\n' "push floor: Ferry mutations/s / floor rows/s" "$floor_push_ratio" \
    "$(verdict "$floor_push_ratio" "$MIN_FLOOR_PUSH")" "$MIN_FLOOR_PUSH"
printf '%-46s %8.3f\n' "push floor: pgbench mutations/s / floor rows/s" "$floor_pg_push_ratio"
printf '%-46s %8.3f  %s (goal at most %s)\n' "pull floor: time per pull / floor's (pgbench)" "$floor_pull_time" \
    "$(at_most "$floor_pull_time" "$MAX_FLOOR_PULL")" "$MAX_FLOOR_PULL"
printf '%-46s %8.3f  %s (goal at most %s)\n' "pull floor: PostgreSQL CPU per pull / floor's" "$floor_pull_cpu" \
    "$(at_most "$floor_pull_cpu" "$MAX_FLOOR_PULL")" "$MAX_FLOOR_PULL"
printf '%-46s %8.3f\n' "pull floor: same, Ferry's pull / floor's" "$floor_ferry_pull_cpu"
