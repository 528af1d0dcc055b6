#!/usr/bin/env bash
# Password hashing under a flood (issue 17, §2): a victim's correct sign-in while one
# client floods the gateway's password hasher. Three scenarios, one after the other in
# each of RUNS runs:
#   quiet         the victim alone.
#   link flood    one anonymous token sends POST /v1/auth/link with an email already in
#                 use on FLOOD_CONNECTIONS connections at once (wrk: each connection sends
#                 the next as soon as it has an answer, ignoring Retry-After).
#   signin flood  one client sends correct sign-ins to its own account the same way.
# The victim signs in to its own account VICTIM_TRIES times, one at a time, a new
# connection each (as a phone does), VICTIM_GAP_MS apart, from another client address
# (its socket bound to 127.0.0.2; the flood comes from 127.0.0.1); each scenario of each
# run has its own victim account, so the victim stays under the sign-ins-per-account
# limit. A flood starts FLOOD_WARMUP seconds before the victim and stops after it.
#
# Prints, per scenario, the victim's p50 and p99 over all runs and its answers other
# than 200, what the flooder got (answers/s; 429, 503 and others), and p99 under each
# flood / p99 quiet against the goal (MAX_RATIO, 2); PASS only when every victim sign-in
# answered 200 and both ratios are within the goal.
#
# Usage: bench/hasher-flood.sh   (env: RUNS=2 VICTIM_TRIES=20 VICTIM_GAP_MS=250
#        FLOOD_CONNECTIONS=64 FLOOD_WARMUP=2 LOOPS=2 POOL_SIZE=8 MAX_RATIO=2)
# Ferry is the release `ferry serve` (access log on, to /dev/null) logged in as
# ferry_gateway, with its default limits (sign-ups raised by lib.bash's start_gateways,
# for the set-up), against the embedded database (`make db`; the port follows
# FERRY_DEV_PG_PORT), which this script migrates with sql/ferry. Its users and sign-in
# attempts stay in the database (each run's emails are new); `ferry db reset` clears it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-2}
VICTIM_TRIES=${VICTIM_TRIES:-20}
VICTIM_GAP_MS=${VICTIM_GAP_MS:-250}
FLOOD_CONNECTIONS=${FLOOD_CONNECTIONS:-64}
FLOOD_WARMUP=${FLOOD_WARMUP:-2}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}
MAX_RATIO=${MAX_RATIO:-2}

build_release
migrate_database
make_scratch_folder
choose_gateway_address
start_gateways 1 127.0.0.1

# The accounts: the attacker's anonymous token and its own email account, an email in
# use (another user's), and one victim account per scenario per run.
RUNS=$RUNS set_up_with_python <<'PY'
import json
from lib import *
tag = uuid.uuid4().hex[:8]
password = "a password of eight or more"
def email_account(name):
    user = sign_up()
    call("POST", "/v1/auth/link", user["token"], {"email": name, "password": password})
    return name
attacker = sign_up()
accounts = {
    "password": password,
    "attacker_token": attacker["token"],
    "taken": email_account("taken-%s@example.com" % tag),
    "attacker_email": email_account("attacker-%s@example.com" % tag),
    "victims": [email_account("victim-%s-%d@example.com" % (tag, i)) for i in range(3 * int(env["RUNS"]))],
}
json.dump(accounts, open(tmp + "/accounts.json", "w"))
PY
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$tmp/accounts.json" "$1"; }
victim_email() {
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["victims"][int(sys.argv[2])])' \
        "$tmp/accounts.json" "$1"
}
password=$(field password)

# wrk scripts: the request, and the flood's answers counted by status.
count_statuses='local threads = {}
function setup(thread) table.insert(threads, thread) end
c429, c503, other = 0, 0, 0
function response(status, headers, body)
    if status == 429 then c429 = c429 + 1 elseif status == 503 then c503 = c503 + 1
    elseif status >= 300 then other = other + 1 end
end
function done(summary, latency, requests)
    local a, b, c = 0, 0, 0
    for _, t in ipairs(threads) do a = a + t:get("c429"); b = b + t:get("c503"); c = c + t:get("other") end
    io.stderr:write(string.format("FLOOD %.1f %d %d %d\n", summary.requests / (summary.duration / 1e6), a, b, c))
end'
cat > "$tmp/link.lua" <<LUA
$count_statuses
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $(field attacker_token)"
wrk.body = '{"email": "$(field taken)", "password": "not the owner password"}'
LUA
cat > "$tmp/signin.lua" <<LUA
$count_statuses
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"email": "$(field attacker_email)", "password": "$password", "device_id": "$(python3 -c 'import uuid; print(uuid.uuid4())')"}'
LUA

# The victim: VICTIM_TRIES sign-ins to $1, one line each: milliseconds and status.
victim() {
    python3 - "$port" "$1" "$password" "$VICTIM_TRIES" "$VICTIM_GAP_MS" <<'PY'
import http.client, json, sys, time, uuid
port, email, password, tries, gap = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
for _ in range(tries):
    body = json.dumps({"email": email, "password": password, "device_id": str(uuid.uuid4())})
    start = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.2", 0))
    try:
        connection.request("POST", "/v1/auth/signin", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        status = response.status
    except Exception:
        status = 0
    finally:
        connection.close()
    print("%.1f %d" % ((time.monotonic() - start) * 1000, status), flush=True)
    time.sleep(gap / 1000)
PY
}

# Runs the victim against account $2 during scenario $1, appending to $tmp/<scenario>.
measure() {
    local scenario=$1 email=$2 flood=""
    if [ "$scenario" != quiet ]; then
        wrk -t2 -c"$FLOOD_CONNECTIONS" -d600s -s "$tmp/$scenario.lua" "$base/v1/auth/$scenario" \
            >/dev/null 2>>"$tmp/$scenario.flood" &
        flood=$!
        sleep "$FLOOD_WARMUP"
    fi
    victim "$email" >>"$tmp/$scenario.victim"
    # wrk prints its summary (done()) on SIGINT.
    if [ -n "$flood" ]; then kill -INT "$flood"; wait "$flood" || true; fi
}

scenarios=(quiet link signin)
index=0
for run in $(seq "$RUNS"); do
    for scenario in "${scenarios[@]}"; do
        echo "run $run: $scenario" >&2
        measure "$scenario" "$(victim_email "$index")"
        index=$((index + 1))
        sleep 1
    done
done

percentile() { # $1: 50 or 99, numbers on standard input
    sort -n | awk -v p="$1" '{ v[NR] = $1 } END { i = int((NR * p + 99) / 100); if (i < 1) i = 1; print v[i] }'
}

echo
echo "Victim's correct sign-in from another address (${VICTIM_TRIES} x ${RUNS} runs per scenario):"
printf '%-14s %9s %9s %10s   %s\n' scenario p50_ms p99_ms not_200 "flooder: answers/s, 429, 503, other"
declare -A p99
failed=0
for scenario in "${scenarios[@]}"; do
    file=$tmp/$scenario.victim
    p50=$(cut -d' ' -f1 "$file" | percentile 50)
    p99[$scenario]=$(cut -d' ' -f1 "$file" | percentile 99)
    bad=$(awk '$2 != 200' "$file" | wc -l)
    failed=$((failed + bad))
    flood="-"
    if [ -f "$tmp/$scenario.flood" ]; then
        flood=$(awk '/^FLOOD/ { r += $2; a += $3; b += $4; c += $5; n++ }
            END { printf "%.0f/s, %d, %d, %d", r / n, a, b, c }' "$tmp/$scenario.flood")
    fi
    printf '%-14s %9s %9s %10s   %s\n' "$scenario" "$p50" "${p99[$scenario]}" "$bad" "$flood"
done
echo
verdict=PASS
[ "$failed" -eq 0 ] || verdict=FAIL
for scenario in link signin; do
    ratio=$(awk -v a="${p99[$scenario]}" -v b="${p99[quiet]}" 'BEGIN { printf "%.2f", a / b }')
    ok=$(awk -v r="$ratio" -v m="$MAX_RATIO" 'BEGIN { print (r <= m) ? "within" : "over" }')
    [ "$ok" = within ] || verdict=FAIL
    echo "p99 during the $scenario flood / quiet p99: $ratio ($ok the goal of $MAX_RATIO)"
done
echo "victim sign-ins not answered 200: $failed (goal: 0)"
echo "$verdict"
