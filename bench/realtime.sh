#!/usr/bin/env bash
# Realtime: cue latency, idle-stream memory and broadcast through `ferry serve` (issue 5,
# "Benchmarks"), driven by ferry-load (Sources/ferry-load; usage in bench/README.md).
#
#   latency    LATENCY_STREAMS (1,000 and 10,000) WebSocket streams open, one per user; a
#              libpq writer commits an upsert into bench_items (lww) for a random user
#              among them, RATE a second for WRITE_SECONDS. Commit -> cue at that user's
#              stream, p50/p99/max, and in the same run commit -> NOTIFY at a bare libpq
#              `LISTEN ferry_cue` connection: the floor. "Commit" is the instant the
#              writer sends its one-statement transaction; both latencies start there.
#              Goal at 10,000 streams: Ferry minus floor < 1 ms at p50, < 5 ms at p99.
#   idle       IDLE_STREAMS (10,000 and 50,000) idle streams per transport; the gateways'
#              VmRSS (/proc/<pid>/status) after every stream said hello and SETTLE
#              seconds passed, minus before any opened, over the streams.
#              Goals: < 4 KiB per SSE stream, < 12 KiB per WebSocket stream.
#   broadcast  with BROADCAST_STREAMS (50,000) streams open, one upsert on bench_news
#              (a `shared` table) per round, ROUNDS rounds: commit -> the last stream's
#              cue. Goal: < 250 ms (the median round). The 50,000-stream idle figures
#              come from these runs (memory is read before the first round). Also the
#              CPU time a round cost the gateways and the ferry-load processes, which
#              share the machine's cores with them. In the same run, the floor: as many
#              bare loopback TCP connections, one 120-byte write to each and an epoll
#              reader (bench/tcp-floor.c, built here with cc): what delivering one small
#              message per connection costs this machine's kernel with no gateway at all.
#
# Each figure is the median of RUNS runs; every idle and broadcast run starts fresh
# gateways, so memory freed by an earlier run cannot hide a later run's. The
# streams come from ferry-load worker processes on source addresses spread over
# 127.0.0.0/8 (one address per 20,000 streams: ~28,000 ephemeral ports per address).
#
# One process can hold at most `ulimit -Hn` descriptors, and raising the hard limit needs
# CAP_SYS_RESOURCE. The script raises the soft limit to the hard one; when one gateway
# cannot hold the streams (e.g. 50,000 with a hard limit of 20,000), it runs as many
# `ferry serve` processes as needed on one port (FERRY_SHARE_PORT=true: SO_REUSEPORT spreads
# the connections), each with its own LISTEN connection, as several gateways behind a load
# balancer have (docs/OPERATIONS.md, "Several gateways"), and sums their memory. The latency runs always use one gateway. It prints how many.
#
# Usage: bench/realtime.sh   (env: RUNS=3 LATENCY_STREAMS="1000 10000" IDLE_STREAMS=10000
#        BROADCAST_STREAMS=50000 RATE=200 WRITE_SECONDS=20 ROUNDS=5 SETTLE=3 LOOPS=2
#        POOL_SIZE=2 TRANSPORTS="websocket sse" OPEN_TIMEOUT=300; LATENCY_STREAMS="" or
#        IDLE_STREAMS="" skip those runs; REALTIME_SKIP_CUE_COST=1 skips cue-cost.sh;
#        OPEN_TIMEOUT: seconds the streams of an idle or broadcast run have to open, more on
#        a machine other work keeps busy)
# Ferry is the release `ferry serve` logged in as ferry_gateway, against the embedded
# database (`make db`; the port follows FERRY_DEV_PG_PORT), migrated with sql/ferry; the
# bench tables are created here. The users it signs up stay; `ferry db reset` clears them.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
LATENCY_STREAMS=${LATENCY_STREAMS-"1000 10000"}
IDLE_STREAMS=${IDLE_STREAMS-10000}
BROADCAST_STREAMS=${BROADCAST_STREAMS:-50000}
TRANSPORTS=${TRANSPORTS:-"websocket sse"}
RATE=${RATE:-200}
WRITE_SECONDS=${WRITE_SECONDS:-20}
ROUNDS=${ROUNDS:-5}
SETTLE=${SETTLE:-3}
OPEN_TIMEOUT=${OPEN_TIMEOUT:-300}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-2}
GOAL_ADDED_P50_MS=${GOAL_ADDED_P50_MS:-1}
GOAL_ADDED_P99_MS=${GOAL_ADDED_P99_MS:-5}
GOAL_SSE_BYTES=${GOAL_SSE_BYTES:-4096}
GOAL_WEBSOCKET_BYTES=${GOAL_WEBSOCKET_BYTES:-12288}
GOAL_BROADCAST_MS=${GOAL_BROADCAST_MS:-250}

build_release ferry-load
LOAD=$BIN/ferry-load
make_scratch_folder
# The broadcast's floor: bare loopback TCP, one write per connection (bench/tcp-floor.c).
FLOOR=$tmp/tcp-floor
cc -O2 -o "$FLOOR" bench/tcp-floor.c
migrate_database
make_bench_tables

# Every stream is a descriptor, in the gateway and in ferry-load.
ulimit -n "$(ulimit -Hn)"
streams_per_gateway=$(($(ulimit -n) - 1000))
most=$BROADCAST_STREAMS
for n in $LATENCY_STREAMS $IDLE_STREAMS; do [ "$n" -gt "$most" ] && most=$n; done
gateways_for() { echo $((($1 + streams_per_gateway - 1) / streams_per_gateway)); }
echo "open-file limit $(ulimit -n): up to $streams_per_gateway streams per gateway process" >&2

choose_gateway_address

# One user and token per stream, signed up through the API once, reused by every run.
start_gateways 1 127.0.0.1
echo "signing up $most anonymous users" >&2
"$LOAD" signup --url "$base" --count "$most" --out "$tmp/tokens.tsv" >&2

# Runs ferry-load, keeps its output in $tmp/$1.out (name), and fails loudly when it does.
load() {
    local name=$1
    shift
    if ! "$LOAD" "$@" --url "$base" --tokens "$tmp/tokens.tsv" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
        echo "ferry-load $1 failed:" >&2
        cat "$tmp/$name.out" "$tmp/$name.err" >&2
        exit 1
    fi
    cat "$tmp/$name.out" >>"$tmp/all.out"
}
figure() { awk -v key="$2" '$1 == key { print $2 }' "$tmp/$1.out"; }
# Appends figure $3 of run output $2 to the file of runs $1.
keep() { figure "$2" "$3" >>"$tmp/runs.$1"; }
median_of() { median <"$tmp/runs.$1"; }
listed() { paste -sd/ "$tmp/runs.$1" | sed 's|/| / |g'; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
    for n in $LATENCY_STREAMS; do
        echo "run $run: cue latency, $n WebSocket streams, $RATE writes/s for $WRITE_SECONDS s" >&2
        start_gateways 1 127.0.0.1
        load "latency-$n-$run" latency --streams "$n" --transport websocket --database-url "$OWNER_URL" \
            --table bench_items --rate "$RATE" --seconds "$WRITE_SECONDS" --server-pids "$(pid_list)" \
            --settle-seconds 1
        for f in ferry_cue_ms_p50 ferry_cue_ms_p99 ferry_cue_ms_max floor_ms_p50 floor_ms_p99 floor_ms_max \
            ferry_added_ms_p50 ferry_added_ms_p99 ferry_cue_missing floor_missing writes; do
            keep "latency-$n-$f" "latency-$n-$run" "$f"
        done
    done
    for transport in $TRANSPORTS; do
        for n in $IDLE_STREAMS; do
            echo "run $run: $n idle $transport streams" >&2
            start_gateways "$(gateways_for "$n")" 127.0.0.1
            load "idle-$transport-$n-$run" idle --streams "$n" --transport "$transport" \
                --server-pids "$(pid_list)" --settle-seconds "$SETTLE" --open-timeout "$OPEN_TIMEOUT"
            keep "idle-$transport-$n" "idle-$transport-$n-$run" server_bytes_per_stream
        done
        n=$BROADCAST_STREAMS
        echo "run $run: broadcast to $n $transport streams ($(gateways_for "$n") gateways)" >&2
        start_gateways "$(gateways_for "$n")" 127.0.0.1
        load "broadcast-$transport-$run" broadcast --streams "$n" --transport "$transport" \
            --database-url "$OWNER_URL" --table bench_news --rounds "$ROUNDS" --server-pids "$(pid_list)" \
            --settle-seconds "$SETTLE" --open-timeout "$OPEN_TIMEOUT"
        keep "idle-$transport-$n" "broadcast-$transport-$run" server_bytes_per_stream
        keep "broadcast-$transport" "broadcast-$transport-$run" broadcast_last_ms_median
        keep "broadcast-$transport-server-cpu" "broadcast-$transport-$run" broadcast_server_cpu_ms_per_round
        keep "broadcast-$transport-client-cpu" "broadcast-$transport-$run" broadcast_client_cpu_ms_per_round
        keep "broadcast-$transport-server-system" "broadcast-$transport-$run" broadcast_server_system_cpu_ms_per_round
        keep "broadcast-$transport-client-system" "broadcast-$transport-$run" broadcast_client_system_cpu_ms_per_round
        grep '^broadcast_round' "$tmp/broadcast-$transport-$run.out" >&2
    done
    stop_gateways
    # The floor in the same run: as many connections, split over one writer and one reader
    # process per gateway process (+1, so no process needs more descriptors than a gateway).
    echo "run $run: bare TCP floor, $BROADCAST_STREAMS connections" >&2
    "$FLOOR" "$BROADCAST_STREAMS" "$(($(gateways_for "$BROADCAST_STREAMS") + 1))" 120 "$ROUNDS" >"$tmp/floor-$run.out"
    grep '^floor_round' "$tmp/floor-$run.out" >&2
    keep floor "floor-$run" floor_last_ms_median
done
stop_gateways
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# PASS when $1 is a number below $2 (a run that timed out reports `inf`).
below() { [[ $1 =~ ^-?[0-9.]+$ ]] && [ "$(echo "$1 < $2" | bc -l)" -eq 1 ] && echo PASS || echo FAIL; }
if [ -n "${LATENCY_STREAMS// /}" ]; then
echo
echo "Cue latency, commit -> cue (ms, median of $RUNS runs; WebSocket; $RATE writes/s for $WRITE_SECONDS s)"
printf '%-8s %28s %28s %20s %10s\n' streams "Ferry p50 / p99 / max" "floor p50 / p99 / max" "added p50 / p99" missing
for n in $LATENCY_STREAMS; do
    printf '%-8s %28s %28s %20s %10s\n' "$n" \
        "$(median_of "latency-$n-ferry_cue_ms_p50") / $(median_of "latency-$n-ferry_cue_ms_p99") / $(median_of "latency-$n-ferry_cue_ms_max")" \
        "$(median_of "latency-$n-floor_ms_p50") / $(median_of "latency-$n-floor_ms_p99") / $(median_of "latency-$n-floor_ms_max")" \
        "$(median_of "latency-$n-ferry_added_ms_p50") / $(median_of "latency-$n-ferry_added_ms_p99")" \
        "$(listed "latency-$n-ferry_cue_missing")"
    echo "  runs, added p50: $(listed "latency-$n-ferry_added_ms_p50"); added p99: $(listed "latency-$n-ferry_added_ms_p99")"
done
fi
echo
echo "Idle streams: gateway resident memory per stream (bytes, median of $RUNS runs)"
for transport in $TRANSPORTS; do
    for n in $IDLE_STREAMS $BROADCAST_STREAMS; do
        printf '  %-10s %6s streams (%s gateway process(es)): %8s   runs %s\n' "$transport" "$n" \
            "$(gateways_for "$n")" "$(median_of "idle-$transport-$n")" "$(listed "idle-$transport-$n")"
    done
done
echo
echo "Broadcast: one shared-table statement -> the last of $BROADCAST_STREAMS streams cued (ms; median round, median of $RUNS runs)"
for transport in $TRANSPORTS; do
    printf '  %-10s %8s   runs %s\n' "$transport" "$(median_of "broadcast-$transport")" "$(listed "broadcast-$transport")"
    printf '  %-10s CPU per round: gateways %s ms (system %s), ferry-load %s ms (system %s)\n' "" \
        "$(median_of "broadcast-$transport-server-cpu")" "$(median_of "broadcast-$transport-server-system")" \
        "$(median_of "broadcast-$transport-client-cpu")" "$(median_of "broadcast-$transport-client-system")"
done
printf '  %-10s %8s   runs %s   (bench/tcp-floor.c: %s bare loopback TCP connections, one 120-byte write each)\n' \
    floor "$(median_of floor)" "$(listed floor)" "$BROADCAST_STREAMS"
echo
if [ -n "${LATENCY_STREAMS// /}" ]; then
    largest=${LATENCY_STREAMS##* }
    added50=$(median_of "latency-$largest-ferry_added_ms_p50")
    added99=$(median_of "latency-$largest-ferry_added_ms_p99")
    printf '%-58s %10s  %s (goal < %s)\n' "cue latency added at p50, $largest streams (ms)" "$added50" \
        "$(below "$added50" "$GOAL_ADDED_P50_MS")" "$GOAL_ADDED_P50_MS"
    printf '%-58s %10s  %s (goal < %s)\n' "cue latency added at p99, $largest streams (ms)" "$added99" \
        "$(below "$added99" "$GOAL_ADDED_P99_MS")" "$GOAL_ADDED_P99_MS"
fi
for transport in $TRANSPORTS; do
    goal=$GOAL_WEBSOCKET_BYTES
    [ "$transport" = sse ] && goal=$GOAL_SSE_BYTES
    for n in $IDLE_STREAMS $BROADCAST_STREAMS; do
        value=$(median_of "idle-$transport-$n")
        printf '%-58s %10s  %s (goal < %s)\n' "memory per idle $transport stream, $n streams (bytes)" "$value" \
            "$(below "$value" "$goal")" "$goal"
    done
    value=$(median_of "broadcast-$transport")
    printf '%-58s %10s  %s (goal < %s; floor %s, ratio %.2f)\n' \
        "broadcast to $BROADCAST_STREAMS $transport streams (ms)" "$value" \
        "$(below "$value" "$GOAL_BROADCAST_MS")" "$GOAL_BROADCAST_MS" "$(median_of floor)" \
        "$(echo "$value / $(median_of floor)" | bc -l)"
done

# The write cost of cues (another benchmark), when it is there.
if [ -x bench/cue-cost.sh ] && [ "${REALTIME_SKIP_CUE_COST:-0}" != 1 ]; then
    echo
    echo "== bench/cue-cost.sh"
    # With its own defaults: RUNS here means this script's runs.
    env -u RUNS bench/cue-cost.sh
fi
