#!/usr/bin/env bash
# The hosted-backend load test (issue 19 §1): `ferry-load fleet` against release gateways,
# a fleet of simulated devices doing everything at once (sign-ups, first loads, streams,
# pulls on cues, pushes across the example's strategies, lock heartbeats, reconnects,
# sign-outs), then the convergence check. bench/README.md ("ferry-load fleet") has the
# mix file, the report and the scenarios.
#
# Usage: bench/fleet.sh   (env: DEVICES=2000 SECONDS_STEADY=30 APP=puzzle MIX=file.json
#        SCENARIO=steady|reconnect-storm|signup-burst GATEWAYS=1 (2 for reconnect-storm)
#        LOOPS=2 POOL_SIZE=8 FLEET_LOOPS=1 STORM_AFTER=10 REPORT=path.json
#        DURABILITY=dev|production)
# Each gateway is a release `ferry serve` on its own port, logged in as ferry_gateway, on
# the embedded database (`make db`; the port follows FERRY_DEV_PG_PORT) migrated with
# sql/ferry and sql/examples/$APP. reconnect-storm kills gateway 1 STORM_AFTER seconds
# into the steady phase; its devices move to the other gateway. DURABILITY=production
# turns fsync on for the run (synchronous_commit is on in the dev cluster already) and
# back off at the end. The users it signs up stay; `ferry db reset` clears them.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

DEVICES=${DEVICES:-2000}
SECONDS_STEADY=${SECONDS_STEADY:-30}
APP=${APP:-puzzle}
SCENARIO=${SCENARIO:-steady}
[ "$SCENARIO" = reconnect-storm ] && GATEWAYS=${GATEWAYS:-2} || GATEWAYS=${GATEWAYS:-1}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}
FLEET_LOOPS=${FLEET_LOOPS:-1}
STORM_AFTER=${STORM_AFTER:-10}
DURABILITY=${DURABILITY:-dev}

build_release ferry-load
LOAD=$BIN/ferry-load
migrate_database "$APP"
make_scratch_folder
find_postmaster

# DURABILITY: lib.bash's set_durability when it has one, else fsync by ALTER SYSTEM here.
if declare -F set_durability >/dev/null; then
    set_durability "$DURABILITY"
elif [ "$DURABILITY" = production ]; then
    psql -Atq -v ON_ERROR_STOP=1 "$OWNER_URL" -c "alter system set fsync = on" -c "alter system set synchronous_commit = on" \
        -c "select pg_reload_conf()" >/dev/null
    on_exit() {
        psql -Atq "$OWNER_URL" -c "alter system reset fsync" -c "alter system reset synchronous_commit" \
            -c "select pg_reload_conf()" >/dev/null
    }
fi
echo "durability $DURABILITY: fsync $(psql -Atq "$OWNER_URL" -c 'show fsync'), synchronous_commit $(psql -Atq "$OWNER_URL" -c 'show synchronous_commit')" >&2

# Gateways on ports of their own (start_gateways shares one port; the storm needs two URLs).
secret=$(head -c 32 /dev/urandom | base64)
urls=()
for i in $(seq "$GATEWAYS"); do
    port=$(free_port)
    env FERRY_DATABASE_URL=$GATEWAY_URL FERRY_LISTEN_DATABASE_URL=$GATEWAY_URL FERRY_JWT_SECRET=$secret \
        FERRY_LISTEN=127.0.0.1:$port FERRY_THREADS=$LOOPS FERRY_POOL_SIZE=$POOL_SIZE \
        FERRY_ANONYMOUS_SIGNUPS_PER_HOUR=1000000000 FERRY_ACCESS_TOKEN_TTL=86400 \
        FERRY_SIGNINS_PER_ACCOUNT_PER_HOUR=1000000000 FERRY_FAILED_SIGNINS_PER_HOUR=1000000000 FERRY_PASSWORD_HASHES_PER_ADDRESS=64 \
        "$FERRY" serve >"$tmp/gateway-$i.log" 2>&1 &
    gateway_pids+=($!)
    urls+=("http://127.0.0.1:$port")
    wait_until_answers "http://127.0.0.1:$port/readyz"
done
url_list=$(IFS=,; echo "${urls[*]}")

storm=()
[ "$SCENARIO" = reconnect-storm ] && storm=(--storm-after "$STORM_AFTER" --storm-command "kill ${gateway_pids[0]}")
mix=()
[ -n "${MIX:-}" ] && mix=(--mix "$MIX")
status=0
"$LOAD" fleet --urls "$url_list" --app "$APP" "${mix[@]}" --devices "$DEVICES" --seconds "$SECONDS_STEADY" \
    --loops "$FLEET_LOOPS" --scenario "$SCENARIO" --server-pids "$(pid_list)" --postgres-pid "$postmaster" \
    --report "${REPORT:-$tmp/fleet.json}" "${storm[@]}" || status=$?

# What the gateways logged as errors (a 5xx names its cause only there: a pool wait that
# timed out, a full wait queue, a statement timeout, a lost connection), counted by message.
echo "gateway errors logged, by message (KEEP_TMP=1 keeps the logs):"
# A text log line is `<time> <level> <message> key=value…`: a request answered 5xx is
# counted by route and status (its cause, when the database's, is the line before it);
# any other error by its message and fields, numbers folded to N.
awk '$2 == "error" && $3 == "request" { print $5, $6; next }
     $2 == "error" { $1 = ""; sub(/^ /, ""); gsub(/[0-9]+/, "N"); print }' "$tmp"/gateway-*.log |
    sort | uniq -c | sort -rn | head -20
exit "$status"
