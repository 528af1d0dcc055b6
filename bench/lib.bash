# Helpers every bench/*.sh script sources (after `cd` to the repository root); not a
# benchmark itself, so bench/run (which runs every *.sh) leaves it alone.

# The set-up every script starts with, in this order:
#   build_release [product…]     the release `ferry` (and ferry-load, …): BIN, FERRY
#   migrate_database [example…]  the embedded database, migrated: OWNER_URL, GATEWAY_URL
#   make_scratch_folder          $tmp, and the clean-up when the script exits

# The load generators and tools the scripts call, from Debian (not `make test`'s set-up):
# a script without one would print zeros, so every script stops first, saying what to install.
for tool in wrk pgbench psql bc python3; do
    command -v "$tool" >/dev/null ||
        { echo "bench: $tool not found (Debian: apt-get install -y wrk postgresql-client bc python3)" >&2; exit 1; }
done

# Builds the release `ferry` and each product named (ferry-load, ferry-client-bench), one
# `swift build` each (its --product takes one product). Sets BIN (their folder) and FERRY
# (its `ferry`).
build_release() {
    local product
    for product in ferry "$@"; do swift build -c release --product "$product" >&2; done
    BIN=$(swift build -c release --show-bin-path)
    FERRY=$BIN/ferry
}

# DURABILITY (every script's knob, read by migrate_database): "dev" (the default) leaves
# the embedded database as `ferry db start` makes it, fsync off; "production" sets fsync
# and synchronous_commit on (ALTER SYSTEM), restarts the database with them and checks
# both are on, so commits wait for the disk's flush as a hosted backend's do. The
# settings are reset and the database restarted again when the script exits (clean_up).
DURABILITY=${DURABILITY:-dev}
durability_changed=""

# Applies $DURABILITY to the embedded database at $OWNER_URL (with $FERRY).
apply_durability() {
    case "$DURABILITY" in
        dev) return 0 ;;
        production) ;;
        *) echo "DURABILITY must be dev or production, not $DURABILITY" >&2; exit 2 ;;
    esac
    psql -Atq -v ON_ERROR_STOP=1 "$OWNER_URL" -c 'alter system set fsync = on' \
        -c 'alter system set synchronous_commit = on' >&2
    durability_changed=1
    # Until make_scratch_folder's clean_up, which also resets them, takes over the trap.
    [ -n "$(trap -p EXIT)" ] || trap reset_durability EXIT
    restart_database
    [ "$(psql -Atq "$OWNER_URL" -c 'show fsync' -c 'show synchronous_commit' | paste -sd ' ')" = "on on" ] ||
        { echo "DURABILITY=production: the database did not come back with fsync and synchronous_commit on" >&2; exit 1; }
    echo "DURABILITY=production: fsync and synchronous_commit on" >&2
}

# Resets what apply_durability set and restarts the database (nothing when it set nothing).
reset_durability() {
    [ -n "$durability_changed" ] || return 0
    durability_changed=""
    psql -Atq "$OWNER_URL" -c 'alter system reset fsync' -c 'alter system reset synchronous_commit' >&2 || true
    restart_database || true
}

restart_database() {
    "$FERRY" db stop >&2
    "$FERRY" db start >&2
}

# Migrates the embedded database (`make db` starts it; its port follows FERRY_DEV_PG_PORT)
# with sql/ferry, then sql/examples/<name> for each name given (puzzle, tasks), using
# $FERRY, after applying $DURABILITY to it. Sets OWNER_URL (the superuser's URL, `ferry db url`) and GATEWAY_URL: the same
# database as ferry_gateway, the role the gateway logs in as in production (the dev
# cluster trusts loopback, so no password).
migrate_database() {
    local example directories=()
    for example in "$@"; do directories+=(--dir "sql/examples/$example"); done
    OWNER_URL=$("$FERRY" db url)
    apply_durability
    "$FERRY" migrate --database-url "$OWNER_URL" --sql-root sql "${directories[@]}" >&2
    GATEWAY_URL=${OWNER_URL/:\/\/postgres@/:\/\/ferry_gateway@}
}

# Makes the bench tables realtime.sh and storm.sh write, when missing, on $OWNER_URL:
# bench_items (id text, user_id uuid, n int; lww: a user's rows) and bench_news (id int,
# body text; shared: every user's).
make_bench_tables() {
    psql -q -v ON_ERROR_STOP=1 "$OWNER_URL" >/dev/null <<'SQL'
create table if not exists public.bench_items (id text primary key, user_id uuid not null, n int);
select ferry.register_table('public.bench_items', strategy => 'lww');
create table if not exists public.bench_news (id int primary key, body text);
select ferry.register_table('public.bench_news', strategy => 'shared');
SQL
}

# Makes the scratch folder $tmp and sets the EXIT trap: stop the gateways, then the
# script's own `on_exit` when it defines one (what else it started or changed), then
# delete $tmp (KEEP_TMP=1 keeps it, and says where).
make_scratch_folder() {
    tmp=$(mktemp -d)
    trap clean_up EXIT
}

clean_up() {
    stop_gateways
    if declare -F on_exit >/dev/null; then on_exit || true; fi
    reset_durability
    if [ -n "${KEEP_TMP:-}" ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}

# Runs the Python set-up on standard input (a here-document) with bench/lib.py to import
# (`from lib import *`): the gateway at $base, the owner's URL, the scratch folder; the
# script's knobs it reads reach it as variables set on this call. Its output goes to
# standard error, like the builds'.
set_up_with_python() {
    SETUP_BASE=$base OWNER_URL=$OWNER_URL TMP=$tmp PYTHONPATH=bench PYTHONDONTWRITEBYTECODE=1 python3 - >&2
}

# A free TCP port on loopback.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits (10 s at most) until `url` answers 2xx; says which one did not and fails.
wait_until_answers() {
    for _ in $(seq 100); do
        curl -fs -o /dev/null "$1" && return 0
        sleep 0.1
    done
    echo "nothing answers at $1" >&2
    return 1
}

# The median of the numbers on standard input, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# CPU time in clock ticks (getconf CLK_TCK a second): of process $1 with its reaped
# children (fields 14-17 of /proc/<pid>/stat), 0 once it is gone.
process_ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# Of the PostgreSQL cluster whose postmaster is $1: the postmaster with the backends it
# reaped, plus its live children.
cluster_ticks() {
    local total child
    total=$(process_ticks "$1")
    for child in $(pgrep -P "$1"); do total=$((total + $(process_ticks "$child"))); done
    echo "$total"
}

# Sets what the CPU-time figures read: postmaster (the process id of the cluster at
# OWNER_URL, for cluster_ticks) and ticks_per_second.
find_postmaster() {
    postmaster=$(head -1 "$(psql -Atq "$OWNER_URL" -c 'show data_directory')/postmaster.pid")
    ticks_per_second=$(getconf CLK_TCK)
}

# `ferry serve` processes (several share one port: FERRY_SHARE_PORT), for every script
# that runs the gateway. They read: FERRY (the binary), GATEWAY_URL, secret, port,
# base, LOOPS, POOL_SIZE, tmp, and for bench/pgbouncer.sh REQUEST_DATABASE_URL (requests'
# database when not GATEWAY_URL; the listener always GATEWAY_URL, direct) and
# PREPARED_STATEMENTS (on, off); the processes' ids are kept in gateway_pids.
gateway_pids=()

# Picks what start_gateways reads for a fresh deployment: a free port, its base URL on
# loopback, and a random token secret.
choose_gateway_address() {
    port=$(free_port)
    base="http://127.0.0.1:$port"
    secret=$(head -c 32 /dev/urandom | base64)
}

# Starts $1 gateways listening on host $2 (the port is $port), with the command prefix $3
# (taskset, or nothing), and waits until each answers /readyz.
start_gateways() {
    stop_gateways
    local i
    for i in $(seq "$1"); do
        env FERRY_DATABASE_URL=${REQUEST_DATABASE_URL:-$GATEWAY_URL} FERRY_LISTEN_DATABASE_URL=$GATEWAY_URL \
            FERRY_PREPARED_STATEMENTS=${PREPARED_STATEMENTS:-on} FERRY_JWT_SECRET=$secret \
            FERRY_LISTEN=$2:$port FERRY_SHARE_PORT=true FERRY_THREADS=$LOOPS FERRY_POOL_SIZE=$POOL_SIZE \
            FERRY_ANONYMOUS_SIGNUPS_PER_HOUR=1000000000 FERRY_ACCESS_TOKEN_TTL=86400 \
            ${3:-} "$FERRY" serve >/dev/null 2>"$tmp/gateway-$i.log" &
        gateway_pids+=($!)
    done
    wait_until_answers "$base/readyz"
    # Each connection lands on one of the processes; enough tries reach every one.
    for _ in $(seq $((20 * $1))); do curl -fs -o /dev/null "$base/readyz" || { sleep 0.2; continue; }; done
    wait_until_answers "$base/readyz"
    sleep 1
}

stop_gateways() {
    local pid
    for pid in "${gateway_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${gateway_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    gateway_pids=()
}

# The gateways' process ids, comma-separated.
pid_list() { local IFS=,; echo "${gateway_pids[*]}"; }

# The push batch bench/sync.sh, cue-cost.sh, push-shape.sh and fairness.sh send: $1
# upserts of the caller's rows in public.daily_challenges (days from 2020-01-01), with
# '@' where a per-request number goes: mutation k of a batch has id <number><k as $2
# digits, default two (so $1 at most 99)>, increasing per device as the number does.
push_batch_template() {
    local k template='{"mutations": ['
    for k in $(seq 1 "$1"); do
        [ "$k" -gt 1 ] && template+=', '
        template+=$(printf '{"id": @%0*d, "table": "daily_challenges", "op": "upsert", "row": {"day": "%s", "seconds": %d}}' \
            "${2:-2}" "$k" "$(date -u -d "2020-01-01 + $((k - 1)) days" +%F)" "$k")
    done
    echo "$template]}"
}

# Pushes the batch template $3 (mutation ids "@"; here 1) with token $2 to $1 and fails
# unless all $4 mutations were applied: bench/sync.sh's and cue-cost.sh's push check.
check_push_batch() {
    curl -fs -X POST "$1/v1/push" -H "Authorization: Bearer $2" -H 'Content-Type: application/json' \
        -d "${3//@/1}" | python3 -c '
import json, sys
results = json.load(sys.stdin)["results"]
assert len(results) == '"$4"' and all(r["status"] == "applied" for r in results), results' ||
        { echo "a push batch through the API was not applied whole" >&2; exit 1; }
}

# Fails unless every SQL push statement given (after the devices table $1, whose row
# n = 0 is the caller) applies a batch of $BATCH mutations whole, in a transaction rolled
# back: push-shape.sh's and push-outcomes.sh's check of what they compare.
check_push_statements() {
    local devices=$1 statement answer
    shift
    for statement in "$@"; do
        answer=$(psql -Atq -v ON_ERROR_STOP=1 "$GATEWAY_URL" <<SQL
begin;
select set_config('role', 'ferry_client', true), set_config('ferry.user_id', uid, true), set_config('ferry.device_id', did, true)
    from $devices where n = 0 \\g /dev/null
$statement;
rollback;
SQL
)
        python3 -c '
import json, sys
results = json.loads(sys.argv[1])["results"]
assert len(results) == int(sys.argv[2]) and all(r["status"] == "applied" for r in results), results' "$answer" "$BATCH" ||
            { echo "a push statement did not apply the batch whole: $answer" >&2; exit 1; }
    done
}

# A pgbench script pushing as the device of row n = :client_id of the devices table $1
# (columns uid, did): the identity statement (Identity.statementSQL with the gateway's
# TransactionSettings) and the push statement $2 in one pipeline; :seq counts the
# client's transactions. push-shape.sh's and push-outcomes.sh's, for measure_push_script.
push_script() {
    cat <<SQL
\\if :have = 0
select uid, did, 1 as have from $1 where n = :client_id
\\gset
\\endif
\\set seq :seq + 1
\\startpipeline
select pg_catalog.set_config('role', 'ferry_client', true), pg_catalog.set_config('ferry.user_id', :uid, true), pg_catalog.set_config('ferry.device_id', :did, true), pg_catalog.set_config('ferry.session_id', '', true), pg_catalog.set_config('statement_timeout', '10000', true), pg_catalog.set_config('TimeZone', 'UTC', true);
$2
\\endpipeline
SQL
}

# pgbench of the push script $1 (as push_script writes them: -D have, seq, template)
# with mutation numbers from $2, as $GATEWAY_URL, $CLIENTS clients, $THREADS threads,
# $DURATION s: "tx/s µs-of-PostgreSQL-CPU-per-push". Needs find_postmaster first.
measure_push_script() {
    local output count pg0 pg1
    pg0=$(cluster_ticks "$postmaster")
    output=$(pgbench -n -M prepared -c "$CLIENTS" -j "$THREADS" -T "$DURATION" -f "$1" -D have=0 -D seq="$2" \
        -D "template=$template" "$GATEWAY_URL" 2>&1) || { echo "pgbench: $output" >&2; exit 1; }
    if grep -q 'number of failed transactions: [1-9]' <<<"$output"; then
        echo "pgbench: $output" >&2
        exit 1
    fi
    count=$(awk '/^number of transactions actually processed:/ { print $NF }' <<<"$output")
    sleep 1 # let the postmaster reap pgbench's backends, so their CPU time is counted
    pg1=$(cluster_ticks "$postmaster")
    echo "$(awk '/^tps = / { print $3 }' <<<"$output") $(echo "($pg1 - $pg0) * 1000000 / $ticks_per_second / $count" | bc)"
}

# $RUNS interleaved runs of push scripts $1 (before) and $2 (after), labelled $3 and $4:
# prints each run on stderr, the medians of tx/s and PostgreSQL CPU per push, and
# after/before of the CPU with PASS when at most $MAX_COST_RATIO.
compare_push_scripts() {
    local run ratio name before_runs=() after_runs=()
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    for run in $(seq "$RUNS"); do
        # Mutation numbers: runs and variants apart by far more than a run's transactions.
        before_runs+=("$(measure_push_script "$1" $(((2 * run) * 100000000)))")
        after_runs+=("$(measure_push_script "$2" $(((2 * run + 1) * 100000000)))")
    done
    echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    column() { local -n runs=$2; printf '%s\n' "${runs[@]}" | awk -v c="$1" '{ print $c }' | median; }
    listed() { local -n runs=$2; printf '%s\n' "${runs[@]}" | awk -v c="$1" '{ printf "%s%.0f", (NR > 1 ? " / " : ""), $c }'; }
    for name in before after; do
        echo "runs $name: tx/s $(listed 1 ${name}_runs); PostgreSQL µs/push $(listed 2 ${name}_runs)" >&2
    done
    ratio=$(echo "$(column 2 after_runs) / $(column 2 before_runs)" | bc -l)
    printf '%-40s %10s %18s\n' "" "median tx/s" "PostgreSQL µs/push"
    printf '%-40s %10.0f %18.0f\n' "$3" "$(column 1 before_runs)" "$(column 2 before_runs)"
    printf '%-40s %10.0f %18.0f\n' "$4" "$(column 1 after_runs)" "$(column 2 after_runs)"
    printf '%-40s %10.3f  %s (goal at most %s)\n' "CPU per push: after / before" "$ratio" \
        "$([ "$(echo "$ratio <= $MAX_COST_RATIO" | bc -l)" -eq 1 ] && echo PASS || echo FAIL)" "$MAX_COST_RATIO"
}

# The release `ferry` of commit $1 (the "before" of a before/after benchmark): built once
# from `git archive` under .build/baseline/<commit> (ignored by git, kept between runs).
# Prints the binary's path.
baseline_ferry() {
    local commit dir
    commit=$(git rev-parse --short=12 "$1^{commit}")
    dir=.build/baseline/$commit
    if [ ! -x "$dir/.build/release/ferry" ]; then
        rm -rf "$dir"
        mkdir -p "$dir"
        git archive "$commit" | tar -x -C "$dir"
        (cd "$dir" && swift build -c release --product ferry) >&2
    fi
    echo "$PWD/$dir/.build/release/ferry"
}

# The binaries a before/after benchmark runs, interleaved: the release `ferry` of commit
# $BASELINE first when it is set (see baseline_ferry), then $1 (this checkout's). Sets the
# arrays `binaries` and `names` (how the results name each).
compared_binaries() {
    binaries=("$1")
    names=("this checkout ($(git rev-parse --short HEAD))")
    if [ -n "${BASELINE:-}" ]; then
        binaries=("$(baseline_ferry "$BASELINE")" "${binaries[@]}")
        names=("$(git rev-parse --short "$BASELINE")" "${names[@]}")
    fi
}
