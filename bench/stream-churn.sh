#!/usr/bin/env bash
# Stream churn: does a closed stream leave memory behind in the gateway? (issue 10, item 3)
#
# STREAMS streams (one per user, the same users every round) open, each says hello, then
# every client hangs up; ROUNDS times, PAUSE seconds apart, through `ferry serve`
# (release) with ferry-load's `churn`. The figure is the gateway's VmRSS growth from the
# end of the first round (which warms the allocator and the token cache) to the end of
# the last, over the stream lifecycles in between: bytes per stream lifecycle. Each run
# starts a fresh gateway; median of RUNS runs per transport.
# Goal: < GOAL_BYTES (64) bytes per stream lifecycle, WebSocket and SSE.
#
# Usage: bench/stream-churn.sh   (env: RUNS=3 STREAMS=1000 ROUNDS=40 PAUSE=0
#        TRANSPORTS="websocket sse" LOOPS=2 POOL_SIZE=2 GOAL_BYTES=64; FERRY=path/to/ferry serves
#        with another build, e.g. one of the commit before a change)
# Ferry is the release `ferry serve` logged in as ferry_gateway, against the embedded
# database (`make db`; the port follows FERRY_DEV_PG_PORT), migrated with sql/ferry. The
# users it signs up stay; `ferry db reset` clears them.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
STREAMS=${STREAMS:-1000}
ROUNDS=${ROUNDS:-40}
PAUSE=${PAUSE:-0}
TRANSPORTS=${TRANSPORTS:-"websocket sse"}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-2}
GOAL_BYTES=${GOAL_BYTES:-64}

served_by=${FERRY:-}
build_release ferry-load
FERRY=${served_by:-$FERRY}
LOAD=$BIN/ferry-load
migrate_database
make_scratch_folder

choose_gateway_address
start_gateways 1 127.0.0.1
echo "signing up $STREAMS anonymous users" >&2
"$LOAD" signup --url "$base" --count "$STREAMS" --out "$tmp/tokens.tsv" >&2

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
    for transport in $TRANSPORTS; do
        echo "run $run: $ROUNDS rounds of $STREAMS $transport streams" >&2
        start_gateways 1 127.0.0.1
        out=$tmp/churn-$transport-$run.out
        pause=()
        [ "$PAUSE" != 0 ] && pause=(--pause-seconds "$PAUSE")
        if ! "$LOAD" churn --url "$base" --tokens "$tmp/tokens.tsv" --streams "$STREAMS" --rounds "$ROUNDS" \
            "${pause[@]}" --transport "$transport" --server-pids "$(pid_list)" >"$out" 2>"$out.err"; then
            echo "ferry-load churn failed:" >&2
            cat "$out" "$out.err" >&2
            exit 1
        fi
        awk '$1 ~ /^server_rss_/ { printf "  %s %s\n", $1, $2 }' "$out" >&2
        awk '$1 == "server_bytes_per_stream_lifecycle" { print $2 }' "$out" >>"$tmp/runs.$transport"
    done
done
stop_gateways
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo
echo "Gateway memory growth per stream lifecycle (bytes; $ROUNDS rounds of $STREAMS streams, pause ${PAUSE} s; median of $RUNS runs)"
for transport in $TRANSPORTS; do
    value=$(median <"$tmp/runs.$transport")
    verdict=FAIL
    [ "$value" -lt "$GOAL_BYTES" ] && verdict=PASS
    printf '  %-10s %8s  %s (goal < %s)   runs %s\n' "$transport" "$value" "$verdict" "$GOAL_BYTES" \
        "$(paste -sd/ "$tmp/runs.$transport" | sed 's|/| / |g')"
done
