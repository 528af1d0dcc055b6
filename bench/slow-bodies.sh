#!/usr/bin/env bash
# Unauthenticated slow bodies (issue 17, item 1): CONNECTIONS (48) connections with no token
# each send the head of a 16 MiB `POST /v1/watermelon/sync` and then its body slowly
# (CHUNK_BYTES every PAUSE_MS ms) until the gateway answers and closes, or SECONDS pass.
# Then AUTHENTICATED (8) connections with a token each send a whole 16 MiB body at once
# (each is buffered, or refused 503 by the body budget), to see memory come back after
# large bodies and answers. Prints, against the goals in the same run: the gateway's VmRSS
# growth over its settled start while the slow bodies are sent (goal < 64 MB), and its
# VmRSS once every connection has closed (goal within 16 MB of the start), and the answers
# the connections got.
#
# Usage: bench/slow-bodies.sh   (env: CONNECTIONS=48 SECONDS_EACH=30 CHUNK_BYTES=16384 PAUSE_MS=100
#                                AUTHENTICATED=8 LOOPS=2 POOL_SIZE=2 BASELINE=<commit>)
# BASELINE: also run the release `ferry` of that commit first (lib.bash's compared_binaries).
# Ferry is the release `ferry serve` as ferry_gateway against the embedded database
# (`make db`; the port follows FERRY_DEV_PG_PORT), migrated with sql/ferry.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

CONNECTIONS=${CONNECTIONS:-48}
SECONDS_EACH=${SECONDS_EACH:-30}
CHUNK_BYTES=${CHUNK_BYTES:-16384}
PAUSE_MS=${PAUSE_MS:-100}
AUTHENTICATED=${AUTHENTICATED:-8}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-2}
GROWTH_GOAL_MB=64
AFTER_GOAL_MB=16

build_release
compared_binaries "$FERRY"
migrate_database
make_scratch_folder

# Prints "start_mb peak_growth_mb after_close_delta_mb answers" for the gateway $1 on $port.
slow_bodies() {
    local token
    token=$(curl -fs -X POST "$base/v1/auth/anonymous" -H 'Content-Type: application/json' \
        -d "{\"device_id\":\"$(python3 -c 'import uuid; print(uuid.uuid4())')\"}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["session"]["access_token"])')
    python3 - "$port" "$1" "$CONNECTIONS" "$SECONDS_EACH" "$CHUNK_BYTES" "$PAUSE_MS" "$AUTHENTICATED" "$token" <<'PY'
import collections, select, socket, sys, time, urllib.request

port, pid, count, seconds, chunk_bytes, pause_ms, authenticated, token = sys.argv[1:]
port, count, seconds, chunk_bytes = int(port), int(count), float(seconds), int(chunk_bytes)
pause, authenticated = int(pause_ms) / 1000, int(authenticated)
body_bytes = 16 << 20

def resident_kib():
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

def settled(seconds=10):
    """VmRSS once it stops falling (0.5 s without a new low), at most `seconds`."""
    low, since, end = resident_kib(), time.monotonic(), time.monotonic() + seconds
    while time.monotonic() < end and time.monotonic() - since < 0.5:
        time.sleep(0.05)
        now = resident_kib()
        if now < low:
            low, since = now, time.monotonic()
    return low

for _ in range(20):
    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read()
start = settled()

def head(authorization=""):
    return (f"POST /v1/watermelon/sync?last_pulled_at=1 HTTP/1.1\r\nHost: bench\r\n{authorization}"
            f"Content-Type: application/json\r\nContent-Length: {body_bytes}\r\n\r\n").encode()

answers = collections.Counter()
def status_of(received):
    line = received.split(b"\r\n", 1)[0].split(b" ")
    return line[1].decode() if len(line) > 1 else "none"

# Phase 1: the slow unauthenticated bodies.
open_sockets = {}
for _ in range(count):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(head())
    s.setblocking(False)
    open_sockets[s] = [0, b""]  # body bytes sent, bytes received
chunk = b" " * chunk_bytes
peak = start
end = time.monotonic() + seconds
while open_sockets and time.monotonic() < end:
    for s, state in list(open_sockets.items()):
        try:
            if state[0] < body_bytes:
                state[0] += s.send(chunk[: body_bytes - state[0]])
        except BlockingIOError:
            pass
        except OSError:
            answers[status_of(state[1])] += 1
            del open_sockets[s]
            s.close()
            continue
        try:
            received = s.recv(65536)
            if not received:
                answers[status_of(state[1])] += 1
                del open_sockets[s]
                s.close()
            else:
                state[1] += received
        except BlockingIOError:
            pass
        except OSError:
            answers[status_of(state[1])] += 1
            del open_sockets[s]
            s.close()
    peak = max(peak, resident_kib())
    time.sleep(pause)
for s, state in open_sockets.items():
    answers[status_of(state[1]) + "-still-open"] += 1
    s.close()
peak = max(peak, resident_kib())

# Phase 2: whole bodies with a token, all at once.
whole = head(f"Authorization: Bearer {token}\r\n") + b"{}" + b" " * (body_bytes - 2)
sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(authenticated)]
for s in sockets:
    s.setblocking(False)
progress = {s: [0, b""] for s in sockets}
end = time.monotonic() + 60
while progress and time.monotonic() < end:
    _, writable, _ = select.select([], [s for s, p in progress.items() if p[0] < len(whole)], [], 0.01)
    for s in writable:
        try:
            progress[s][0] += s.send(whole[progress[s][0]:progress[s][0] + (1 << 20)])
        except OSError:
            pass
    readable, _, _ = select.select(list(progress), [], [], 0.01)
    for s in readable:
        try:
            received = s.recv(65536)
        except OSError:
            received = b""
        progress[s][1] += received
        if not received or b"\r\n\r\n" in progress[s][1]:
            answers["token:" + status_of(progress[s][1])] += 1
            del progress[s]
            s.close()
for s in progress:
    answers["token:none"] += 1
    s.close()

after = settled()
summary = " ".join(f"{status}x{n}" for status, n in sorted(answers.items()))
print(f"{start / 1000:.1f} {(peak - start) * 1024 / 1e6:.1f} {(after - start) * 1024 / 1e6:.1f} {summary}")
PY
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
printf '%-28s %10s %16s %20s  %s\n' binary start_mb growth_mb after_close_mb answers
for index in "${!binaries[@]}"; do
    FERRY=${binaries[$index]}
    choose_gateway_address
    start_gateways 1 127.0.0.1
    read -r start growth after answers < <(slow_bodies "${gateway_pids[0]}")
    stop_gateways
    verdict_growth=$(awk -v g="$growth" -v m="$GROWTH_GOAL_MB" 'BEGIN { print (g < m ? "PASS" : "FAIL") }')
    verdict_after=$(awk -v a="$after" -v m="$AFTER_GOAL_MB" 'BEGIN { d = a < 0 ? -a : a; print (d <= m ? "PASS" : "FAIL") }')
    printf '%-28s %10s %10s %-5s %14s %-5s  %s\n' "${names[$index]}" "$start" "$growth" "$verdict_growth" \
        "$after" "$verdict_after" "$answers"
done
echo "goals: growth < $GROWTH_GOAL_MB MB while $CONNECTIONS unauthenticated bodies arrive;" \
    "after close within $AFTER_GOAL_MB MB of the start" >&2
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
