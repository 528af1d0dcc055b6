#!/usr/bin/env bash
# Through pgbouncer (issue 18, "pgbouncer"): GET /v1/pull and POST /v1/push through
# `ferry serve` (release) in three ways, in one run on the same database:
#
#   direct, prepared   FERRY_DATABASE_URL straight to PostgreSQL, statements prepared
#                      once per connection (the default)
#   direct, unnamed    the same with FERRY_PREPARED_STATEMENTS=off: what Ferry pays
#                      for unnamed statements (parsed and planned every time)
#   pgbouncer, unnamed FERRY_DATABASE_URL through Debian's pgbouncer in transaction
#                      mode (as many server connections as the gateway has), unnamed
#                      statements; the listener direct (FERRY_LISTEN_DATABASE_URL)
#
#   pull   PULL_USERS users, ROWS rows each in public.daily_challenges; every pull
#          answers CHANGES changed rows (bench/sync.sh's steady-state pull).
#   push   batches of BATCH upserts, increasing ids per device (bench/sync.sh's push).
#
# Prints the median rates and the ratios pgbouncer ÷ direct (prepared) and unnamed ÷
# prepared, for pull and push. No goal: a figure for docs/OPERATIONS.md. Median of RUNS
# runs, the three ways interleaved in each so drift hits all alike.
#
# Usage: bench/pgbouncer.sh   (env: RUNS=3 DURATION=10s CONNECTIONS=64 THREADS=2 LOOPS=2
#        POOL_SIZE=8 PULL_USERS=100 PUSH_DEVICES=256 ROWS=300 CHANGES=10 BATCH=50)
# Needs pgbouncer (Debian's, /usr/sbin/pgbouncer: make deps) and wrk (make bench installs
# it). pgbouncer runs as postgres when the script runs as root, on a free loopback port,
# auth_type trust (the embedded cluster trusts loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}
PULL_USERS=${PULL_USERS:-100}
PUSH_DEVICES=${PUSH_DEVICES:-256}
ROWS=${ROWS:-300}
CHANGES=${CHANGES:-10}
BATCH=${BATCH:-50}
# A device's previous batch must be answered before its turn comes again (ids increase
# per device), so devices must well outnumber the connections sending them.
[ "$PUSH_DEVICES" -ge $((2 * CONNECTIONS)) ] ||
    { echo "PUSH_DEVICES ($PUSH_DEVICES) must be at least twice CONNECTIONS ($CONNECTIONS)" >&2; exit 2; }
[ "$BATCH" -le 99 ] || { echo "BATCH must be at most 99 (two-digit id suffix)" >&2; exit 1; }
[ -x /usr/sbin/pgbouncer ] || { echo "no /usr/sbin/pgbouncer: apt-get install pgbouncer (make deps)" >&2; exit 1; }

build_release
migrate_database puzzle
make_scratch_folder

bouncer_pid=
on_exit() { [ -z "$bouncer_pid" ] || kill "$bouncer_pid" 2>/dev/null || true; }

# pgbouncer in transaction mode in front of the embedded cluster.
bouncer_port=$(free_port)
pg_host=$(psql -Atq "$OWNER_URL" -c "select coalesce(inet_server_addr()::text, '127.0.0.1')")
pg_host=${pg_host%/*}
pg_port=$(psql -Atq "$OWNER_URL" -c "show port")
chmod 777 "$tmp"
printf '"ferry_gateway" ""\n' > "$tmp/users.txt"
cat > "$tmp/pgbouncer.ini" <<INI
[databases]
* = host=$pg_host port=$pg_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $tmp/users.txt
pool_mode = transaction
default_pool_size = $((LOOPS * POOL_SIZE))
max_client_conn = 1000
logfile = $tmp/pgbouncer.log
INI
as_postgres=()
[ "$(id -u)" -ne 0 ] || as_postgres=(-u postgres)
/usr/sbin/pgbouncer "${as_postgres[@]}" "$tmp/pgbouncer.ini" 2>"$tmp/pgbouncer.err" &
bouncer_pid=$!
BOUNCER_URL=${GATEWAY_URL/:$pg_port/:$bouncer_port}
[ "$BOUNCER_URL" != "$GATEWAY_URL" ] || { echo "cannot point $GATEWAY_URL at pgbouncer" >&2; exit 1; }
for _ in $(seq 100); do psql -Atq "$BOUNCER_URL" -c 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
psql -Atq "$BOUNCER_URL" -c 'select 1' >/dev/null ||
    { echo "pgbouncer does not answer: $(cat "$tmp/pgbouncer.err" "$tmp/pgbouncer.log" 2>/dev/null)" >&2; exit 1; }

export FERRY_REQUESTS_PER_DEVICE=$CONNECTIONS FERRY_REQUESTS_PER_USER=$CONNECTIONS
export FERRY_PUSH_BYTES_PER_SECOND=1073741824
choose_gateway_address
start_gateways 1 127.0.0.1

# Users, rows and cursors, as bench/sync.sh makes them: pull.tsv (token, cursor) and
# push.tsv (tokens).
PULL_USERS=$PULL_USERS PUSH_DEVICES=$PUSH_DEVICES ROWS=$ROWS CHANGES=$CHANGES set_up_with_python <<'PY'
from concurrent.futures import ThreadPoolExecutor
from lib import *

pull_users, push_devices = int(env["PULL_USERS"]), int(env["PUSH_DEVICES"])
rows, changes = int(env["ROWS"]), int(env["CHANGES"])
users = sign_up_many(pull_users + push_devices)
pulls, pushes = users[:pull_users], users[pull_users:]
psql(f"""
insert into public.daily_challenges (user_id, day, seconds)
select u, date '2020-01-01' + g, g from unnest(array[{uuid_list(users)}]::uuid[]) u, generate_series(0, {rows - 1}) g;
analyze public.daily_challenges;
""")
def first_load(u):
    u["cursor"] = call("GET", "/v1/pull?limit=1000", u["token"])["cursor"]
with ThreadPoolExecutor(8) as pool:
    list(pool.map(first_load, pulls))
psql(f"""update public.daily_challenges set seconds = seconds + 1
         where user_id = any(array[{uuid_list(pulls)}]::uuid[]) and day < date '2020-01-01' + {changes};""")
with open(f"{tmp}/pull.tsv", "w") as tsv:
    for u in pulls:
        tsv.write(f"{u['token']}\t{u['cursor']}\n")
with open(f"{tmp}/push.tsv", "w") as tsv:
    for u in pushes:
        tsv.write(u["token"] + "\n")
PY
template=$(push_batch_template "$BATCH")
echo "$template" > "$tmp/push_template.json"

# One wrk run of "$@": requests/s; any non-2xx answer or duplicate batch voids the run.
rate() {
    local output
    output=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" "$@")
    if grep -q 'Non-2xx' <<<"$output" || grep -q 'duplicate batches: [1-9]' <<<"$output"; then
        echo "wrk $*: $output" >&2
        exit 1
    fi
    awk '/^Requests\/sec:/ { print $2 }' <<<"$output"
}

ways=(direct_prepared direct_unnamed bouncer_unnamed)
declare -A pull_runs push_runs
round=0
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
    for way in "${ways[@]}"; do
        case $way in
            direct_prepared) REQUEST_DATABASE_URL=$GATEWAY_URL PREPARED_STATEMENTS=on ;;
            direct_unnamed) REQUEST_DATABASE_URL=$GATEWAY_URL PREPARED_STATEMENTS=off ;;
            bouncer_unnamed) REQUEST_DATABASE_URL=$BOUNCER_URL PREPARED_STATEMENTS=off ;;
        esac
        start_gateways 1 127.0.0.1
        round=$((round + 1))
        pull_runs[$way]+="$(rate -s bench/pull.lua "$base" -- "$tmp/pull.tsv" 1000) "
        # Mutation-id numbers: each round above the last by far more than its requests.
        push_runs[$way]+="$(rate -s bench/push.lua "$base" -- "$tmp/push.tsv" "$THREADS" \
            "$tmp/push_template.json" $((round * 100000000))) "
    done
done
stop_gateways
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

median_of() { tr ' ' '\n' <<<"$1" | grep . | median; }
printf '%-30s %12s %12s   %s\n' "" "pull req/s" "push req/s" "runs (pull; push)"
for way in "${ways[@]}"; do
    printf '%-30s %12.0f %12.0f   %s; %s\n' "$way" "$(median_of "${pull_runs[$way]}")" \
        "$(median_of "${push_runs[$way]}")" "${pull_runs[$way]}" "${push_runs[$way]}"
done
ratio() { echo "$(median_of "$1") / $(median_of "$2")" | bc -l; }
printf '%-30s %12.3f %12.3f\n' "pgbouncer ÷ direct (prepared)" \
    "$(ratio "${pull_runs[bouncer_unnamed]}" "${pull_runs[direct_prepared]}")" \
    "$(ratio "${push_runs[bouncer_unnamed]}" "${push_runs[direct_prepared]}")"
printf '%-30s %12.3f %12.3f\n' "pgbouncer ÷ direct (unnamed)" \
    "$(ratio "${pull_runs[bouncer_unnamed]}" "${pull_runs[direct_unnamed]}")" \
    "$(ratio "${push_runs[bouncer_unnamed]}" "${push_runs[direct_unnamed]}")"
printf '%-30s %12.3f %12.3f\n' "unnamed ÷ prepared (direct)" \
    "$(ratio "${pull_runs[direct_unnamed]}" "${pull_runs[direct_prepared]}")" \
    "$(ratio "${push_runs[direct_unnamed]}" "${push_runs[direct_prepared]}")"
