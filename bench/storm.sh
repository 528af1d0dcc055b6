#!/usr/bin/env bash
# The shared-change storm (issue 19 §2): one operator write to a `shared` table with
# DEVICES (20,000) streaming devices, through `ferry-load storm` (bench/README.md,
# "ferry-load storm") against fresh release gateways. Each device holds a stream
# (WebSocket and SSE, half each), a keep-alive connection and a cursor, and pulls after
# hello and on every cue. Per round, first 100 devices' own rows change (10 rows each in
# bench_items, one statement): the PostgreSQL CPU of those 100 ordinary pulls is the
# limit; then one upsert of bench_news row 1 (registered `shared`): from the statement's
# answer until each device's pull answer held the row, and PostgreSQL's CPU (the
# postmaster and its backends, the writer's own backend apart) over the whole storm.
#
# Goals: every device has the row within 2 s of the commit; the storm's PostgreSQL CPU
# is below what the 100 ordinary pulls cost (ratio < 1).
#
# The gateway's FERRY_SHARED_PULL_CACHE (on|off: shared tables' recent changes answered
# from a per-loop cache, not PostgreSQL) is compared in the same invocation: RUNS pairs
# of runs, off then on, each on fresh gateways. A gateway without the setting ignores
# it (every pull goes to PostgreSQL); the script says so.
#
# Usage: bench/storm.sh   (env: DEVICES=20000 ROUNDS=3 RUNS=1 CACHES="off on"
#        DEVICES_PER_GATEWAY=9000 LOOPS=1 POOL_SIZE=8 ROUND_TIMEOUT=300
#        DURABILITY=dev|production)
# One gateway process holds about 9,000 devices' sockets (two each) under this machine's
# 20,000 open-file limit, so DEVICES / DEVICES_PER_GATEWAY gateways run, each a release
# `ferry serve` on its own port as ferry_gateway, with keep-alive connections kept an hour
# (FERRY_IDLE_TIMEOUT) so pulls find them open; the devices spread over them. The users it
# signs up stay; `ferry db reset` clears them.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

DEVICES=${DEVICES:-20000}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-1}
CACHES=${CACHES:-"off on"}
DEVICES_PER_GATEWAY=${DEVICES_PER_GATEWAY:-9000}
LOOPS=${LOOPS:-1}
POOL_SIZE=${POOL_SIZE:-8}
ROUND_TIMEOUT=${ROUND_TIMEOUT:-300}
GOAL_LAST_MS=${GOAL_LAST_MS:-2000}

build_release ferry-load
LOAD=$BIN/ferry-load
migrate_database
make_scratch_folder
find_postmaster
make_bench_tables

ulimit -n "$(ulimit -Hn)"
gateways=$(((DEVICES + DEVICES_PER_GATEWAY - 1) / DEVICES_PER_GATEWAY))
if "$FERRY" help serve 2>&1 | grep -q FERRY_SHARED_PULL_CACHE; then
    echo "the gateway has FERRY_SHARED_PULL_CACHE: comparing $CACHES" >&2
else
    echo "the gateway has no FERRY_SHARED_PULL_CACHE setting: every pull goes to PostgreSQL, off and on are the same" >&2
fi
secret=$(head -c 32 /dev/urandom | base64)

# Starts $gateways fresh gateways on ports of their own with FERRY_SHARED_PULL_CACHE=$1;
# sets url_list.
start_storm_gateways() {
    local i port urls=()
    stop_gateways
    for i in $(seq "$gateways"); do
        port=$(free_port)
        env FERRY_DATABASE_URL=$GATEWAY_URL FERRY_LISTEN_DATABASE_URL=$GATEWAY_URL FERRY_JWT_SECRET=$secret \
            FERRY_LISTEN=127.0.0.1:$port FERRY_THREADS=$LOOPS FERRY_POOL_SIZE=$POOL_SIZE FERRY_IDLE_TIMEOUT=3600 \
            FERRY_ANONYMOUS_SIGNUPS_PER_HOUR=1000000000 FERRY_ACCESS_TOKEN_TTL=86400 FERRY_SHARED_PULL_CACHE=$1 \
            "$FERRY" serve >/dev/null 2>"$tmp/gateway-$i.log" &
        gateway_pids+=($!)
        urls+=("http://127.0.0.1:$port")
        # Ready once its listener connected: on a loaded machine that can take longer than one wait.
        for _ in 1 2 3; do wait_until_answers "http://127.0.0.1:$port/readyz" 2>/dev/null && break; done
        wait_until_answers "http://127.0.0.1:$port/readyz"
    done
    url_list=$(IFS=,; echo "${urls[*]}")
}

# One user and token per device, signed up once, used by every run.
start_storm_gateways off
echo "signing up $DEVICES anonymous users" >&2
"$LOAD" signup --url "${url_list%%,*}" --count "$DEVICES" --out "$tmp/tokens.tsv" >&2

figure() { awk -v key="$2" '$1 == key { print $2 }' "$tmp/$1.out"; }
keep() { figure "$2" "$3" >>"$tmp/runs.$1"; }
median_of() { median <"$tmp/runs.$1"; }
listed() { paste -sd/ "$tmp/runs.$1" | sed 's|/| / |g'; }
figures=(storm_devices_with_row storm_device_ms_p50 storm_device_ms_p99 storm_last_device_ms storm_postgres_cpu_ms
    ordinary_pulls_100_postgres_cpu_ms storm_to_ordinary_pulls_100_postgres_cpu_ratio storm_gateway_cpu_ms
    storm_client_cpu_ms storm_pulls ready_seconds)

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
    for cache in $CACHES; do
        echo "run $run: FERRY_SHARED_PULL_CACHE=$cache, $DEVICES devices on $gateways gateways, $ROUNDS rounds" >&2
        start_storm_gateways "$cache"
        name=storm-$cache-$run
        if ! "$LOAD" storm --urls "$url_list" --devices "$DEVICES" --tokens "$tmp/tokens.tsv" \
            --database-url "$OWNER_URL" --rounds "$ROUNDS" --round-timeout "$ROUND_TIMEOUT" \
            --postgres-pid "$postmaster" --server-pids "$(pid_list)" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
            echo "ferry-load storm failed (FERRY_SHARED_PULL_CACHE=$cache, run $run):" >&2
            cat "$tmp/$name.out" "$tmp/$name.err" >&2
            exit 1
        fi
        grep -E '^(ordinary_round|storm_round|pull_errors|device_failures)' "$tmp/$name.out" >&2
        for f in "${figures[@]}"; do keep "$cache-$f" "$name" "$f"; done
        stop_gateways
    done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo "Shared-change storm: $DEVICES devices (half WebSocket, half SSE) on $gateways gateways, DURABILITY=$DURABILITY"
echo "(median of $RUNS runs of the median round of $ROUNDS; the machine is shared: CPU figures are"
echo " PostgreSQL's postmaster and backends, the writer's backend apart)"
for cache in $CACHES; do
    echo "FERRY_SHARED_PULL_CACHE=$cache"
    for f in "${figures[@]}"; do printf '  %-48s %12s   runs %s\n' "$f" "$(median_of "$cache-$f")" "$(listed "$cache-$f")"; done
done
echo "Goals:"
for cache in $CACHES; do
    got=$(median_of "$cache-storm_devices_with_row")
    last=$(median_of "$cache-storm_last_device_ms")
    ratio=$(median_of "$cache-storm_to_ordinary_pulls_100_postgres_cpu_ratio")
    printf '  cache %-3s every device within %s ms: %s of %s, last %s ms  %s\n' "$cache" "$GOAL_LAST_MS" "$got" \
        "$DEVICES" "$last" "$([ "$got" -eq "$DEVICES" ] && [ "$(echo "$last < $GOAL_LAST_MS" | bc -l)" -eq 1 ] &&
            echo PASS || echo FAIL)"
    printf '  cache %-3s storm PostgreSQL CPU / 100 ordinary pulls: %s  %s (goal below 1)\n' "$cache" "$ratio" \
        "$([ "$(echo "$ratio < 1" | bc -l)" -eq 1 ] && echo PASS || echo FAIL)"
done
set -- $CACHES
if [ $# -eq 2 ]; then
    for f in storm_last_device_ms storm_postgres_cpu_ms storm_gateway_cpu_ms; do
        printf '  %s: %s / %s = %.4f\n' "$f" "$2" "$1" "$(echo "$(median_of "$2-$f") / $(median_of "$1-$f")" | bc -l)"
    done
fi
