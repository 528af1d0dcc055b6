#!/usr/bin/env bash
# Accounts: anonymous sign-ups per second (POST /v1/auth/anonymous, a fresh device UUID
# per request), and the cost of authentication: GET /v1/auth/user (Bearer token checked,
# identity statement + ferry.current_account() in one pipeline, one round trip) against
# GET /readyz (no token, `select 1`, one round trip); and the token check alone, with no
# database on either side: HEAD /v1/events (the stream route's headers after the check)
# against GET /healthz, both sent the same Authorization header. wrk -t2 -c64 -d10s, median of 3
# runs each, runs interleaved (sign-up, user, readyz, HEAD events, healthz) so that drift on a shared machine
# hits all alike. Prints the rates, readyz/user (what an authenticated request costs
# relative to an unauthenticated one) and PASS/FAIL against MAX_RATIO (1.10).
#
# Usage: bench/auth.sh            (env: RUNS=3 DURATION=10s CONNECTIONS=64 THREADS=2 LOOPS=2 MAX_RATIO=1.10)
# Ferry is the release `ferry serve`, access log on (to /dev/null), logged in as
# ferry_gateway like production, against the embedded database (`make db`; the port
# follows FERRY_DEV_PG_PORT), which this script migrates with sql/ferry first. Sign-ups
# add users to that database; `ferry db reset` clears it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
LOOPS=${LOOPS:-2}
MAX_RATIO=${MAX_RATIO:-1.10}

swift build -c release --product ferry >&2
FERRY=$(swift build -c release --show-bin-path)/ferry
OWNER_URL=$("$FERRY" db url)
"$FERRY" migrate --database-url "$OWNER_URL" --sql-root sql >&2
# The request path logs in as ferry_gateway (as `ferry dev` does); the dev cluster
# trusts loopback, so no password.
GATEWAY_URL=$(echo "$OWNER_URL" | sed 's|://postgres@|://ferry_gateway@|')

tmp=$(mktemp -d)
ferry_pid=""
cleanup() {
    if [ -n "$ferry_pid" ]; then kill "$ferry_pid" 2>/dev/null || true; wait "$ferry_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT


# A version-4 UUID per request, from 16-bit pieces (LuaJIT formats them exactly).
# Each wrk thread seeds its own generator, so threads do not repeat each other.
cat > "$tmp/signup.lua" <<'LUA'
local counter = 0
function setup(thread)
    counter = counter + 1
    thread:set("id", counter)
end
function init(args)
    math.randomseed(os.time() * 1000 + id)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local random = math.random
request = function()
    local device = string.format("%04x%04x-%04x-4%03x-%04x-%04x%04x%04x",
        random(0, 0xffff), random(0, 0xffff), random(0, 0xffff), random(0, 0xfff),
        random(0x8000, 0xbfff), random(0, 0xffff), random(0, 0xffff), random(0, 0xffff))
    return wrk.format(nil, nil, nil, '{"device_id":"' .. device .. '"}')
end
LUA

# HEAD: the stream route's headers, after the token check and nothing else.
cat > "$tmp/head.lua" <<'LUA'
wrk.method = "HEAD"
LUA

port=$(free_port)
base="http://127.0.0.1:$port"
env -u FERRY_LISTEN_DATABASE_URL FERRY_DATABASE_URL=$GATEWAY_URL FERRY_JWT_SECRET=$(head -c 32 /dev/urandom | base64) \
    FERRY_LISTEN=127.0.0.1:$port FERRY_THREADS=$LOOPS FERRY_ANONYMOUS_SIGNUPS_PER_HOUR=1000000000 \
    "$FERRY" serve >/dev/null &
ferry_pid=$!
wait_until_answers "$base/readyz"

# One anonymous user's access token for the authenticated runs.
token=$(curl -fs -X POST "$base/v1/auth/anonymous" -H 'Content-Type: application/json' \
    -d "{\"device_id\":\"$(python3 -c 'import uuid; print(uuid.uuid4())')\"}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["session"]["access_token"])')
curl -fs -o /dev/null -H "Authorization: Bearer $token" "$base/v1/auth/user" ||
    { echo "GET /v1/auth/user refused the fresh token" >&2; exit 1; }

# requests/s of one wrk run; a run with any non-2xx answer is an error, not a figure.
requests_per_second() {
    local output
    output=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" "$@")
    if grep -q 'Non-2xx' <<<"$output"; then
        echo "wrk $*: $(grep 'Non-2xx' <<<"$output")" >&2
        exit 1
    fi
    awk '/^Requests\/sec:/ { print $2 }' <<<"$output"
}


signup_runs=()
user_runs=()
readyz_runs=()
token_only_runs=()
healthz_runs=()
for _ in $(seq "$RUNS"); do
    signup_runs+=("$(requests_per_second -s "$tmp/signup.lua" "$base/v1/auth/anonymous")")
    user_runs+=("$(requests_per_second -H "Authorization: Bearer $token" "$base/v1/auth/user")")
    readyz_runs+=("$(requests_per_second "$base/readyz")")
    token_only_runs+=("$(requests_per_second -s "$tmp/head.lua" -H "Authorization: Bearer $token" "$base/v1/events")")
    # The same Authorization header (ignored there): both requests carry the same bytes.
    healthz_runs+=("$(requests_per_second -H "Authorization: Bearer $token" "$base/healthz")")
done

signup=$(printf '%s\n' "${signup_runs[@]}" | median)
user=$(printf '%s\n' "${user_runs[@]}" | median)
readyz=$(printf '%s\n' "${readyz_runs[@]}" | median)
token_only=$(printf '%s\n' "${token_only_runs[@]}" | median)
healthz=$(printf '%s\n' "${healthz_runs[@]}" | median)
ratio=$(echo "$readyz / $user" | bc -l)
token_ratio=$(echo "$healthz / $token_only" | bc -l)
echo "runs: sign-up ${signup_runs[*]}; /v1/auth/user ${user_runs[*]}; /readyz ${readyz_runs[*]};" \
    "HEAD /v1/events ${token_only_runs[*]}; /healthz ${healthz_runs[*]}" >&2
verdict=$(echo "$ratio <= $MAX_RATIO" | bc -l)
token_verdict=$(echo "$token_ratio <= $MAX_RATIO" | bc -l)

printf '%-28s %12.0f req/s\n' "POST /v1/auth/anonymous" "$signup"
printf '%-28s %12.0f req/s\n' "GET /v1/auth/user (Bearer)" "$user"
printf '%-28s %12.0f req/s\n' "GET /readyz" "$readyz"
printf '%-28s %12.3f  %s (limit %s)\n' "readyz / user" "$ratio" \
    "$([ "$verdict" -eq 1 ] && echo PASS || echo FAIL)" "$MAX_RATIO"
# The token check alone: no database on either side, the same token sent to both.
printf '%-28s %12.0f req/s\n' "HEAD /v1/events (Bearer)" "$token_only"
printf '%-28s %12.0f req/s\n' "GET /healthz (token ignored)" "$healthz"
printf '%-28s %12.3f  %s (limit %s)\n' "healthz / HEAD events" "$token_ratio" \
    "$([ "$token_verdict" -eq 1 ] && echo PASS || echo FAIL)" "$MAX_RATIO"
