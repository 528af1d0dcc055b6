#!/usr/bin/env bash
# Pushes from a client that writes a request's head and its body in two writes with
# Nagle's algorithm on, as Python's httpx does (issue 10, item 13): its body waits for the
# ACK of its head, which Linux delays (~40 ms) unless the gateway asks for it at once
# (TCP_QUICKACK). One keep-alive connection, no TCP_NODELAY, PUSHES pushes of one upsert
# to public.daily_challenges, each timed from its first byte sent to its answer read;
# interleaved on the same connection with the same push written in one write (as curl
# does): the control. Prints the median and p90 of both, median of RUNS runs, each against
# a fresh gateway; the limit: the split push's median at most MAX_RATIO (2) times the
# one-write push's, in the same run.
#
# Usage: bench/split-push.sh   (env: PUSHES=200 RUNS=3 LOOPS=2 POOL_SIZE=2 MAX_RATIO=2
#                               BASELINE=<commit>)
# BASELINE: also run the release `ferry` of that commit, interleaved with this checkout's
# (lib.bash's compared_binaries): before and after in the same run.
# Ferry is the release `ferry serve` as ferry_gateway against the embedded database
# (`make db`; the port follows FERRY_DEV_PG_PORT), migrated with sql/ferry and
# sql/examples/puzzle. Each run signs up one anonymous user, who stays in the database.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

PUSHES=${PUSHES:-200}
RUNS=${RUNS:-3}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-2}
MAX_RATIO=${MAX_RATIO:-2}

build_release
compared_binaries "$FERRY"
migrate_database puzzle
make_scratch_folder

# Prints "<split p50> <split p90> <one-write p50> <one-write p90>" in ms for $1 pushes of
# each kind to $port.
pushes() {
    python3 - "$port" "$1" <<'PY'
import json, socket, statistics, sys, time, urllib.request, uuid

port, count = int(sys.argv[1]), int(sys.argv[2])
signup = urllib.request.Request(
    f"http://127.0.0.1:{port}/v1/auth/anonymous", method="POST",
    data=json.dumps({"device_id": str(uuid.uuid4())}).encode(), headers={"Content-Type": "application/json"})
token = json.load(urllib.request.urlopen(signup))["session"]["access_token"]

# Nagle's algorithm stays on (no TCP_NODELAY), as in httpx.
connection = socket.create_connection(("127.0.0.1", port))
received = b""

def read_answer():
    global received
    while b"\r\n\r\n" not in received:
        received += connection.recv(65536) or sys.exit("the gateway closed the connection")
    head, received = received.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(received) < length:
        received += connection.recv(65536) or sys.exit("the gateway closed the connection")
    body, received = received[:length], received[length:]
    return head.split(b" ")[1], body

times = {"split": [], "one": []}
mutation = 0
for _ in range(count):
    for kind in ("split", "one"):
        mutation += 1
        body = json.dumps({"mutations": [{"id": mutation, "table": "daily_challenges", "op": "upsert",
                                          "row": {"day": "2020-01-%02d" % (1 + mutation % 28), "seconds": mutation}}]}).encode()
        head = ("POST /v1/push HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer %s\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (token, len(body))).encode()
        started = time.perf_counter()
        if kind == "split":
            connection.sendall(head)
            connection.sendall(body)
        else:
            connection.sendall(head + body)
        status, answer = read_answer()
        times[kind].append((time.perf_counter() - started) * 1000)
        if status != b"200" or b'"applied"' not in answer:
            sys.exit(f"a push was not applied: {status} {answer}")

def p90(values):
    return sorted(values)[int(0.9 * (len(values) - 1))]

print("%.2f %.2f %.2f %.2f" % (statistics.median(times["split"]), p90(times["split"]),
                               statistics.median(times["one"]), p90(times["one"])))
PY
}

declare -A split one split90 one90
for _ in $(seq "$RUNS"); do
    for index in "${!binaries[@]}"; do
        FERRY=${binaries[$index]}
        choose_gateway_address
        start_gateways 1 127.0.0.1
        read -r s s90 o o90 < <(pushes "$PUSHES")
        stop_gateways
        echo "${names[$index]} split_ms_p50=$s split_ms_p90=$s90 one_write_ms_p50=$o one_write_ms_p90=$o90" >&2
        split[$index]+="$s "
        split90[$index]+="$s90 "
        one[$index]+="$o "
        one90[$index]+="$o90 "
    done
done

printf '%-28s %14s %14s %16s %16s %12s\n' binary split_ms_p50 split_ms_p90 one_write_ms_p50 one_write_ms_p90 split/one
for index in "${!binaries[@]}"; do
    s=$(printf '%s\n' ${split[$index]} | median)
    o=$(printf '%s\n' ${one[$index]} | median)
    ratio=$(echo "$s / $o" | bc -l)
    verdict=$(awk -v r="$ratio" -v m="$MAX_RATIO" 'BEGIN { print (r <= m ? "PASS" : "FAIL") " (<= " m ")" }')
    printf '%-28s %14s %14s %16s %16s %12.2f %s\n' "${names[$index]}" "$s" "$(printf '%s\n' ${split90[$index]} | median)" \
        "$o" "$(printf '%s\n' ${one90[$index]} | median)" "$ratio" "$verdict"
    echo "  runs: split ${split[$index]}; one write ${one[$index]}" >&2
done
if [ -n "${BASELINE:-}" ]; then
    before=$(printf '%s\n' ${split[0]} | median)
    after=$(printf '%s\n' ${split[1]} | median)
    printf 'split push median, before / after: %.1f\n' "$(echo "$before / $after" | bc -l)"
fi
