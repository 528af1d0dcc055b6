#!/usr/bin/env bash
# Clients that never read their answers (issue 10, item 1): CONNECTIONS connections each
# pipeline `GET /metrics` (64 KiB of requests in one write, then 500 at a time whenever the
# socket takes more) for SECONDS and read nothing. Prints how much the gateway's resident
# memory (VmRSS, sampled every ~50 ms) grew over its settled baseline, median of RUNS
# runs, each against a fresh gateway; the limit (MAX_GROWTH_MB, 64) is for 50 connections.
#
# Usage: bench/unread.sh   (env: CONNECTIONS="50 150" SECONDS_EACH=8 RUNS=3 LOOPS=2 POOL_SIZE=2
#                           MAX_GROWTH_MB=64 BASELINE=<commit>)
# BASELINE: also run the release `ferry` of that commit, interleaved with this checkout's
# (lib.bash's compared_binaries): before and after in the same run.
# Ferry is the release `ferry serve` as ferry_gateway against the embedded database
# (`make db`; the port follows FERRY_DEV_PG_PORT), migrated with sql/ferry first.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

CONNECTIONS=${CONNECTIONS:-"50 150"}
SECONDS_EACH=${SECONDS_EACH:-8}
RUNS=${RUNS:-3}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-2}
MAX_GROWTH_MB=${MAX_GROWTH_MB:-64}

build_release
compared_binaries "$FERRY"
migrate_database
make_scratch_folder

# Prints the growth in MB (10^6 bytes) of process $1's VmRSS while $2 connections to
# $port flood it for $3 seconds.
flood() {
    python3 - "$port" "$1" "$2" "$3" <<'PY'
import select, socket, sys, time, urllib.request

port, pid, count, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])

def resident_kib():
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

# Warm what every answer uses, then let the memory of starting up go back.
for _ in range(20):
    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read()
before = resident_kib()
for _ in range(50):
    time.sleep(0.1)
    now = resident_kib()
    if now >= before:
        break
    before = now

request = b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n"
sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
for s in sockets:
    s.sendall(request * (65536 // len(request)))
    s.setblocking(False)
chunk = request * 500
peak = before
end = time.monotonic() + seconds
while time.monotonic() < end and sockets:
    _, writable, _ = select.select([], sockets, [], 0.05)
    for s in writable:
        try:
            s.send(chunk)
        except BlockingIOError:
            pass
        except OSError:
            sockets.remove(s)  # the gateway closed it
    peak = max(peak, resident_kib())
print(f"{(peak - before) * 1024 / 1e6:.1f}")
PY
}

declare -A results
for _ in $(seq "$RUNS"); do
    for index in "${!binaries[@]}"; do
        FERRY=${binaries[$index]}
        for count in $CONNECTIONS; do
            choose_gateway_address
            start_gateways 1 127.0.0.1
            growth=$(flood "${gateway_pids[0]}" "$count" "$SECONDS_EACH")
            stop_gateways
            echo "${names[$index]} connections=$count growth_mb=$growth" >&2
            results[$index,$count]+="$growth "
        done
    done
done

printf '%-28s %12s %16s %s\n' binary connections growth_mb runs
for index in "${!binaries[@]}"; do
    for count in $CONNECTIONS; do
        runs=${results[$index,$count]}
        median_growth=$(printf '%s\n' $runs | median)
        verdict=""
        if [ "$count" = 50 ]; then
            verdict=$(awk -v g="$median_growth" -v m="$MAX_GROWTH_MB" 'BEGIN { print (g < m ? "PASS" : "FAIL") " (< " m " MB)" }')
        fi
        printf '%-28s %12s %16s %s %s\n' "${names[$index]}" "$count" "$median_growth" "[$runs]" "$verdict"
    done
done
