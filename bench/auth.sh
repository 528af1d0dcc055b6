#!/usr/bin/env bash
# Accounts: anonymous sign-ups per second, and what authentication costs.
#
# The limit (MAX_RATIO, 1.10): a token-verified request costs at most 10 % more than the
# same request without a token. The cheap authenticated endpoint is HEAD /v1/events (the
# stream route's headers: the token check and nothing else), the unauthenticated one
# GET /healthz; both are sent the same Authorization header, so the bytes on the wire
# match. Two cases:
#   warm: one device's token on every request, as a device uses its token for an hour:
#         after the first request the gateway's verified-token cache holds it. THE LIMIT.
#   cold: COLD_TOKENS different tokens in turn (3 x the cache's 8192 slots), so nearly
#         every check misses the cache and verifies in full (base64url, HMAC-SHA256, the
#         claims); both routes go through the same wrk Lua script. Reported.
# Also reported, not held to the limit: GET /v1/auth/user (token check, the identity
# statement and ferry.current_account() in one pipeline) against GET /readyz (one statement:
# `select 1` until issue 10, now the schema check, `select ferry.schema_version()`):
# different SQL; and pgbench on the identity statement alone: `select 1` against the
# identity statement + `select 1` in one pipeline, as the gateway sends them.
#
# wrk -t2 -c64, median of RUNS runs, runs interleaved so drift on a shared machine hits all
# alike. Prints the rates, the ratios and PASS/FAIL for the warm token check.
#
# Usage: bench/auth.sh  (env: RUNS=5 DURATION=10s CONNECTIONS=64 THREADS=2 LOOPS=2 POOL_SIZE=8 MAX_RATIO=1.10
#                        COLD_TOKENS=24576)
# Ferry is the release `ferry serve`, access log on (to /dev/null), logged in as
# ferry_gateway like production, against the embedded database (`make db`; the port
# follows FERRY_DEV_PG_PORT), which this script migrates with sql/ferry first. Sign-ups
# add users to that database; `ferry db reset` clears it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}
MAX_RATIO=${MAX_RATIO:-1.10}
COLD_TOKENS=${COLD_TOKENS:-24576}

build_release ferry-load
FERRY_LOAD=$BIN/ferry-load
migrate_database
make_scratch_folder

# Numbers each wrk thread (`id`, from 1), for the scripts below.
thread_ids='local counter = 0
function setup(thread)
    counter = counter + 1
    thread:set("id", counter)
end'

# A version-4 UUID per request, from 16-bit pieces (LuaJIT formats them exactly).
# Each wrk thread seeds its own generator, so threads do not repeat each other.
{ echo "$thread_ids"; cat <<'LUA'; } > "$tmp/signup.lua"
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

# Each request carries the next of the tokens in the file named by the first argument
# after `--`, with the method of the second: the cold case, the same script for both routes.
{ echo "$thread_ids"; cat <<'LUA'; } > "$tmp/rotate.lua"
local headers = {}
function init(args)
    for line in io.lines(args[1]) do
        headers[#headers + 1] = { Authorization = "Bearer " .. line:match("\t(.*)$") }
    end
    wrk.method = args[2]
    next_token = (id * 7919) % #headers
end
request = function()
    next_token = next_token % #headers + 1
    return wrk.format(nil, nil, headers[next_token])
end
LUA

# The warm case sends one device's token on every connection on purpose, and
# GET /v1/auth/user reaches the database: the gateway's limits on requests in flight per
# device and user (FERRY_REQUESTS_PER_DEVICE, bench/fairness.sh) would refuse most of it.
export FERRY_REQUESTS_PER_DEVICE=$CONNECTIONS FERRY_REQUESTS_PER_USER=$CONNECTIONS
choose_gateway_address
start_gateways 1 127.0.0.1

# One anonymous user's access token for the warm runs; COLD_TOKENS users' for the cold ones.
token=$(curl -fs -X POST "$base/v1/auth/anonymous" -H 'Content-Type: application/json' \
    -d "{\"device_id\":\"$(python3 -c 'import uuid; print(uuid.uuid4())')\"}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["session"]["access_token"])')
curl -fs -o /dev/null -H "Authorization: Bearer $token" "$base/v1/auth/user" ||
    { echo "GET /v1/auth/user refused the fresh token" >&2; exit 1; }
"$FERRY_LOAD" signup --url "$base" --count "$COLD_TOKENS" --out "$tmp/tokens.tsv" >&2

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

# pgbench tx/s of one script, as ferry_gateway with the warm token's identity.
identity=$(python3 -c '
import base64, json, sys
payload = sys.argv[1].split(".")[1]
claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
print(claims["sub"], claims["did"], claims["sid"])' "$token")
read -r user_id device_id session_id <<<"$identity"
echo 'select 1;' > "$tmp/select1.sql"
cat > "$tmp/identity.sql" <<SQL
\startpipeline
select pg_catalog.set_config('role', 'ferry_client', true), pg_catalog.set_config('ferry.user_id', '$user_id', true),
    pg_catalog.set_config('ferry.device_id', '$device_id', true), pg_catalog.set_config('ferry.session_id', '$session_id', true);
select 1;
\endpipeline
SQL
transactions_per_second() {
    pgbench -n -M prepared -c 8 -j 2 -T "${DURATION%s}" -f "$1" "$GATEWAY_URL" 2>&1 |
        awk '/^tps = / { print $3 }'
}

warm_events=() warm_healthz=() cold_events=() cold_healthz=()
signup_runs=() user_runs=() readyz_runs=() select1_runs=() identity_runs=()
for _ in $(seq "$RUNS"); do
    warm_events+=("$(requests_per_second -s "$tmp/head.lua" -H "Authorization: Bearer $token" "$base/v1/events")")
    # The same Authorization header (ignored there): both requests carry the same bytes.
    warm_healthz+=("$(requests_per_second -H "Authorization: Bearer $token" "$base/healthz")")
    cold_events+=("$(requests_per_second -s "$tmp/rotate.lua" "$base/v1/events" -- "$tmp/tokens.tsv" HEAD)")
    cold_healthz+=("$(requests_per_second -s "$tmp/rotate.lua" "$base/healthz" -- "$tmp/tokens.tsv" GET)")
    signup_runs+=("$(requests_per_second -s "$tmp/signup.lua" "$base/v1/auth/anonymous")")
    user_runs+=("$(requests_per_second -H "Authorization: Bearer $token" "$base/v1/auth/user")")
    readyz_runs+=("$(requests_per_second "$base/readyz")")
    select1_runs+=("$(transactions_per_second "$tmp/select1.sql")")
    identity_runs+=("$(transactions_per_second "$tmp/identity.sql")")
done

median_of() { printf '%s\n' "$@" | median; }
ratio() { echo "$1 / $2" | bc -l; }
verdict() { [ "$(echo "$1 <= $MAX_RATIO" | bc -l)" -eq 1 ] && echo PASS || echo FAIL; }
row() {
    local name=$1
    shift
    printf '%-44s %10.0f /s   (runs %s)\n' "$name" "$(median_of "$@")" "$(printf '%.0f / ' "$@" | sed 's| / $||')"
}

row "HEAD /v1/events, warm token" "${warm_events[@]}"
row "GET /healthz, the same header" "${warm_healthz[@]}"
warm=$(ratio "$(median_of "${warm_healthz[@]}")" "$(median_of "${warm_events[@]}")")
printf '%-44s %10.3f      %s (limit %s)\n' "token check, warm: healthz / events" "$warm" "$(verdict "$warm")" "$MAX_RATIO"
row "HEAD /v1/events, $COLD_TOKENS tokens in turn" "${cold_events[@]}"
row "GET /healthz, the same headers" "${cold_healthz[@]}"
cold=$(ratio "$(median_of "${cold_healthz[@]}")" "$(median_of "${cold_events[@]}")")
printf '%-44s %10.3f      (reported)\n' "token check, cold: healthz / events" "$cold"
row "POST /v1/auth/anonymous" "${signup_runs[@]}"
row "GET /v1/auth/user (Bearer)" "${user_runs[@]}"
row "GET /readyz" "${readyz_runs[@]}"
printf '%-44s %10.3f      (reported: different SQL)\n' "readyz / user" \
    "$(ratio "$(median_of "${readyz_runs[@]}")" "$(median_of "${user_runs[@]}")")"
row "pgbench select 1" "${select1_runs[@]}"
row "pgbench identity statement + select 1" "${identity_runs[@]}"
printf '%-44s %10.3f      (reported)\n' "pgbench select 1 / identity + select 1" \
    "$(ratio "$(median_of "${select1_runs[@]}")" "$(median_of "${identity_runs[@]}")")"
