#!/usr/bin/env bash
# Broadcast with the clients in their own network namespace: realtime.sh's broadcast
# (issue 5: BROADCAST_STREAMS streams open, one upsert on bench_news, a `shared` table;
# commit -> the last stream's cue; goal < 250 ms), asking what the gateways need when the
# clients' receive processing is not charged to them.
#
# On loopback a `write` runs the receiving socket's TCP processing (and the wake-up of the
# client's epoll) inside the sender's system call, so realtime.sh's "gateway" CPU holds part
# of the client's work. Here the ferry-load stream workers run in a network namespace this
# script makes (`ip netns exec`, `ferry-load --worker-netns`), reached over a veth pair:
#
#   root namespace: ferry-gw0 10.201.0.1/16      namespace ferry-bcast: ferry-cl0 10.201.0.2,
#                                                 and 10.201.B.1.. for the streams
#
# with RPS (receive packet steering) sending what arrives at ferry-cl0 (gateway -> clients)
# to the client processor and what arrives at ferry-gw0 (the clients' ACKs) to the gateway
# processor, so the clients' receive path runs there, in a softirq, not in the gateway's
# `write`. Each run measures, interleaved on this noisy machine:
#
#   loopback      as realtime.sh: workers on 127.x.y.z source addresses, nothing pinned
#   netns         workers in the namespace, RPS as above; nothing pinned
#   netns-pinned  as netns, and the gateways pinned to GATEWAY_CPU, ferry-load (coordinator
#                 and workers) to CLIENT_CPU (taskset); PostgreSQL is not pinned
#   netns-norps   (not by default) the namespace without RPS: like loopback, the receiver's
#                 path runs in the sender's system call; what the veth pair itself costs
#
# Every run starts fresh gateways (3 `ferry serve` processes on one port, FERRY_SHARE_PORT=true,
# for 50,000 streams with an open-file limit of 20,000, as realtime.sh), listening on 0.0.0.0 so both the
# loopback and the namespace clients reach them. A netns run takes a fresh block of source
# addresses (10.201.B.1..) so one run's TIME_WAIT sockets never meet the next run's.
# Figures: the median round of ROUNDS, median of RUNS runs; CPU per round of the gateways and
# of ferry-load (their /proc/<pid>/stat) and of each processor (/proc/stat: whoever used it,
# including softirqs that ran while a processor was otherwise idle, and other work).
#
# Usage (as root, `make db` running): bench/broadcast-netns.sh
#   env: RUNS=3 BROADCAST_STREAMS=50000 ROUNDS=5 SETTLE=3 LOOPS=2 POOL_SIZE=2
#        TRANSPORTS="websocket sse" MODES="loopback netns netns-pinned" GATEWAY_CPU=0 CLIENT_CPU=1
# Traffic stays on loopback and the veth pair; the namespace and the pair go on exit.
# Mind, on a virtual machine: RPS hands packets over with about one inter-processor
# interrupt each, which costs more than the receive path it moves (bench/RESULTS.md); the
# script prints each run's CAL / RES interrupt counts.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
BROADCAST_STREAMS=${BROADCAST_STREAMS:-50000}
TRANSPORTS=${TRANSPORTS:-"websocket sse"}
MODES=${MODES:-"loopback netns netns-pinned"}
ROUNDS=${ROUNDS:-5}
SETTLE=${SETTLE:-3}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-2}
GATEWAY_CPU=${GATEWAY_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
GOAL_BROADCAST_MS=${GOAL_BROADCAST_MS:-250}
NETNS=ferry-bcast
GATEWAY_VETH=ferry-gw0
CLIENT_VETH=ferry-cl0
GATEWAY_ADDRESS=10.201.0.1
STREAMS_PER_SOURCE=20000

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
    echo "broadcast-netns.sh needs root and ip (iproute2) to make a network namespace; skipped" >&2
    exit 0
fi
if [ "$(nproc)" -le "$((GATEWAY_CPU > CLIENT_CPU ? GATEWAY_CPU : CLIENT_CPU))" ]; then
    echo "needs processors $GATEWAY_CPU and $CLIENT_CPU; this machine has $(nproc)" >&2
    exit 1
fi

build_release ferry-load
LOAD=$BIN/ferry-load
migrate_database
psql -q -v ON_ERROR_STOP=1 "$OWNER_URL" >/dev/null <<'SQL'
create table if not exists public.bench_news (id int primary key, body text);
select ferry.register_table('public.bench_news', strategy => 'shared');
SQL

ulimit -n "$(ulimit -Hn)"
streams_per_gateway=$(($(ulimit -n) - 1000))
gateways=$(((BROADCAST_STREAMS + streams_per_gateway - 1) / streams_per_gateway))
sources=$(((BROADCAST_STREAMS + STREAMS_PER_SOURCE - 1) / STREAMS_PER_SOURCE))

remove_namespace() {
    ip netns del "$NETNS" 2>/dev/null || true
    ip link del "$GATEWAY_VETH" 2>/dev/null || true
}
make_scratch_folder
on_exit() { remove_namespace; }

# The namespace, the veth pair, and RPS: each side's receive processing on its own processor.
cpu_mask() { printf '%x' $((1 << $1)); }
in_netns() { ip netns exec "$NETNS" "$@"; }
remove_namespace
ip netns add "$NETNS"
ip link add "$GATEWAY_VETH" type veth peer name "$CLIENT_VETH"
ip link set "$CLIENT_VETH" netns "$NETNS"
ip addr add "$GATEWAY_ADDRESS/16" dev "$GATEWAY_VETH"
ip link set "$GATEWAY_VETH" up
in_netns ip link set lo up
in_netns ip addr add 10.201.0.2/16 dev "$CLIENT_VETH"
in_netns ip link set "$CLIENT_VETH" up
# RPS on (masks of one processor each) or off (0 0).
steer() {
    echo "$1" >"/sys/class/net/$GATEWAY_VETH/queues/rx-0/rps_cpus"
    in_netns sh -c "echo $2 >/sys/class/net/$CLIENT_VETH/queues/rx-0/rps_cpus"
}
block=0
# Adds a fresh block of client addresses 10.201.B.1.. in the namespace (B = ++block).
new_source_block() {
    block=$((block + 1))
    local i
    for i in $(seq "$sources"); do
        in_netns ip addr add "10.201.$block.$i/16" dev "$CLIENT_VETH"
    done
}

choose_gateway_address

start_gateways 1 0.0.0.0
echo "signing up $BROADCAST_STREAMS anonymous users" >&2
"$LOAD" signup --url "$base" --count "$BROADCAST_STREAMS" --out "$tmp/tokens.tsv" >&2
in_netns curl -fs -o /dev/null "http://$GATEWAY_ADDRESS:$port/readyz" ||
    { echo "the gateway does not answer from the namespace" >&2; exit 1; }

# One broadcast run: mode $1, transport $2, run $3; output in $tmp/<mode>-<transport>-<run>.out.
broadcast() {
    local mode=$1 transport=$2 run=$3 gateway_prefix="" load_prefix="" url=$base
    local -a where=()
    case $mode in
        loopback) ;;
        netns | netns-pinned | netns-norps)
            url="http://$GATEWAY_ADDRESS:$port"
            if [ "$mode" = netns-norps ]; then steer 0 0; else steer "$(cpu_mask "$GATEWAY_CPU")" "$(cpu_mask "$CLIENT_CPU")"; fi
            new_source_block
            where=(--worker-netns "$NETNS" --source-base "10.201.$block.1"
                --streams-per-source "$STREAMS_PER_SOURCE")
            if [ "$mode" = netns-pinned ]; then
                gateway_prefix="taskset -c $GATEWAY_CPU"
                load_prefix="taskset -c $CLIENT_CPU"
            fi
            ;;
        *) echo "unknown mode $mode" >&2; exit 1 ;;
    esac
    local name="$mode-$transport-$run"
    echo "run $run: $mode, broadcast to $BROADCAST_STREAMS $transport streams ($gateways gateways)" >&2
    start_gateways "$gateways" 0.0.0.0 "$gateway_prefix"
    local ipis_before
    ipis_before=$(interprocessor_interrupts)
    if ! $load_prefix "$LOAD" broadcast --url "$url" --tokens "$tmp/tokens.tsv" --streams "$BROADCAST_STREAMS" \
        --transport "$transport" --database-url "$OWNER_URL" --table bench_news --rounds "$ROUNDS" \
        --server-pids "$(pid_list)" --settle-seconds "$SETTLE" "${where[@]}" \
        >"$tmp/$name.out" 2>"$tmp/$name.err"; then
        echo "ferry-load broadcast failed:" >&2
        cat "$tmp/$name.out" "$tmp/$name.err" >&2
        exit 1
    fi
    grep '^broadcast_round' "$tmp/$name.out" >&2
    # The whole run's (opening the streams too): RPS raises one per wake-up of the other processor.
    echo "interprocessor interrupts in the run, function call / rescheduling:" \
        "$(paste -d' ' <(echo "$ipis_before") <(interprocessor_interrupts) | awk '{ print $3 - $1 " / " $4 - $2 }')" >&2
    local figure cpu kind figures=(broadcast_last_ms_median broadcast_server_cpu_ms_per_round
        broadcast_server_system_cpu_ms_per_round broadcast_client_cpu_ms_per_round
        broadcast_client_system_cpu_ms_per_round)
    for cpu in $GATEWAY_CPU $CLIENT_CPU; do
        for kind in user system softirq idle; do figures+=("broadcast_cpu${cpu}_${kind}_ms_per_round"); done
    done
    for figure in "${figures[@]}"; do
        awk -v key="$figure" '$1 == key { print $2 }' "$tmp/$name.out" >>"$tmp/runs.$mode-$transport-$figure"
    done
}
# Function-call (CAL) and rescheduling (RES) interrupts so far, every processor summed.
interprocessor_interrupts() {
    awk '$1 == "CAL:" || $1 == "RES:" { n = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i; v[$1] = n }
        END { print v["CAL:"], v["RES:"] }' /proc/interrupts
}
median_of() { median <"$tmp/runs.$1"; }
listed() { paste -sd/ "$tmp/runs.$1" | sed 's|/| / |g'; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
    for transport in $TRANSPORTS; do
        for mode in $MODES; do broadcast "$mode" "$transport" "$run"; done
    done
done
stop_gateways
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

below() { [[ $1 =~ ^-?[0-9.]+$ ]] && [ "$(echo "$1 < $2" | bc -l)" -eq 1 ] && echo PASS || echo FAIL; }
echo
echo "Broadcast: one shared-table statement -> the last of $BROADCAST_STREAMS streams cued"
echo "(ms; median round of $ROUNDS, median of $RUNS runs; CPU in ms per round, medians)"
for transport in $TRANSPORTS; do
    for mode in $MODES; do
        key="$mode-$transport"
        printf '  %-10s %-13s %8s ms   runs %s\n' "$transport" "$mode" \
            "$(median_of "$key-broadcast_last_ms_median")" "$(listed "$key-broadcast_last_ms_median")"
        printf '  %-24s gateways %s (system %s), ferry-load %s (system %s)\n' "" \
            "$(median_of "$key-broadcast_server_cpu_ms_per_round")" \
            "$(median_of "$key-broadcast_server_system_cpu_ms_per_round")" \
            "$(median_of "$key-broadcast_client_cpu_ms_per_round")" \
            "$(median_of "$key-broadcast_client_system_cpu_ms_per_round")"
        for cpu in $GATEWAY_CPU $CLIENT_CPU; do
            printf '  %-24s cpu%s: user %s, system %s, softirq %s, idle %s\n' "" "$cpu" \
                "$(median_of "$key-broadcast_cpu${cpu}_user_ms_per_round")" \
                "$(median_of "$key-broadcast_cpu${cpu}_system_ms_per_round")" \
                "$(median_of "$key-broadcast_cpu${cpu}_softirq_ms_per_round")" \
                "$(median_of "$key-broadcast_cpu${cpu}_idle_ms_per_round")"
        done
    done
done
echo
for transport in $TRANSPORTS; do
    for mode in $MODES; do
        value=$(median_of "$mode-$transport-broadcast_last_ms_median")
        printf '%-58s %10s  %s (goal < %s)\n' "broadcast to $BROADCAST_STREAMS $transport streams, $mode (ms)" \
            "$value" "$(below "$value" "$GOAL_BROADCAST_MS")" "$GOAL_BROADCAST_MS"
    done
done
