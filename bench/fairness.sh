#!/usr/bin/env bash
# Fairness: another user's GET /v1/pull while one client floods the gateway (issue 10,
# item 4). The probe is PROBE_CONNECTIONS wrk connections pulling as PROBE_USERS other
# users (a first load of PROBE_ROWS rows each), paced (PROBE_DELAY_MS between a
# connection's requests) so it measures latency, not saturation. Three scenarios, runs
# interleaved:
#   quiet     the probe alone.
#   flood     one anonymous device sends FLOOD_BATCH-upsert pushes (1,000: the default
#             limit) on FLOOD_CONNECTIONS connections at once, each connection sending the
#             next as soon as it has an answer (a flooder ignores Retry-After); mutation
#             ids increase, so each push writes.
#   row lock  a psql session holds one user's row (FOR UPDATE, in an open transaction),
#             and that user's LOCK_DEVICES devices push an upsert of that row on
#             LOCK_CONNECTIONS connections at once: every push waits on the lock.
# Prints, per scenario, the probe's p50 and p99 (medians of RUNS runs), its failed
# requests, what the flooder got (answers/s, non-2xx, duplicates), and the ratio p99
# under each flood / p99 quiet: of the medians, against the goal (MAX_RATIO, 3), and, for
# a noisy machine, the median of each run's own ratio.
#
# BEFORE_REF=<commit>: the same scenarios against a `ferry` built from that commit (a
# temporary `git worktree`, removed afterwards; a release build from scratch, minutes),
# printed beside: the code without the bound, for the record.
#
# Usage: bench/fairness.sh   (env: RUNS=3 DURATION=10s LOOPS=2 POOL_SIZE=8 PROBE_USERS=4
#        PROBE_ROWS=20 PROBE_CONNECTIONS=2 PROBE_DELAY_MS=5 FLOOD_CONNECTIONS=48
#        FLOOD_BATCH=1000 LOCK_DEVICES=4 LOCK_CONNECTIONS=40 MAX_RATIO=3 BEFORE_REF=)
# Ferry is the release `ferry serve` (access log on, to /dev/null) logged in as
# ferry_gateway, with its default limits per device and per user, against the embedded
# database (`make db`; the port follows FERRY_DEV_PG_PORT), which this script migrates
# with sql/ferry and sql/examples/puzzle. Its users stay in the database; `ferry db
# reset` clears it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}
PROBE_USERS=${PROBE_USERS:-4}
PROBE_ROWS=${PROBE_ROWS:-20}
PROBE_CONNECTIONS=${PROBE_CONNECTIONS:-2}
PROBE_DELAY_MS=${PROBE_DELAY_MS:-5}
FLOOD_CONNECTIONS=${FLOOD_CONNECTIONS:-48}
FLOOD_BATCH=${FLOOD_BATCH:-1000}
LOCK_DEVICES=${LOCK_DEVICES:-4}
LOCK_CONNECTIONS=${LOCK_CONNECTIONS:-40}
MAX_RATIO=${MAX_RATIO:-3}
BEFORE_REF=${BEFORE_REF:-}
[ "$FLOOD_BATCH" -le 9999 ] || { echo "FLOOD_BATCH must be at most 9999 (four-digit id suffix)" >&2; exit 2; }
seconds=${DURATION%s}
# Every flooding request ends within the statement timeout (10 s); wrk's default of 2 s
# would drop the slow ones from its figures.
WRK_TIMEOUT=30s

build_release
FERRY_AFTER=$FERRY
migrate_database puzzle
make_scratch_folder
locker_pid=
on_exit() {
    [ -n "$locker_pid" ] && kill "$locker_pid" 2>/dev/null
    if [ -d "$tmp/before" ]; then git worktree remove --force "$tmp/before" >/dev/null 2>&1; fi
}

FERRY_BEFORE=
if [ -n "$BEFORE_REF" ]; then
    git worktree add --detach "$tmp/before" "$BEFORE_REF" >&2
    (cd "$tmp/before" && swift build -c release --product ferry >&2)
    FERRY_BEFORE=$tmp/ferry-before
    cp "$(cd "$tmp/before" && swift build -c release --show-bin-path)/ferry" "$FERRY_BEFORE"
    git worktree remove --force "$tmp/before"
fi

choose_gateway_address
start_gateways 1 127.0.0.1

# Setup through the API: the probe's users (rows seeded as the owner), the flooding
# device, and the locked user: an email account signed in on LOCK_DEVICES devices.
# Writes probe.tsv, flood.tsv and lock.tsv (tokens) and lock_user (its id).
PROBE_USERS=$PROBE_USERS PROBE_ROWS=$PROBE_ROWS LOCK_DEVICES=$LOCK_DEVICES set_up_with_python <<'PY'
from lib import *

probes = [sign_up() for _ in range(int(env["PROBE_USERS"]))]
flooder = sign_up()
locked = sign_up()
lock_user, first = locked["uid"], locked["token"]
email, password = f"locked-{uuid.uuid4()}@example.com", "correct horse battery"
call("POST", "/v1/auth/link", first, {"email": email, "password": password})
lock_tokens = [first] + [
    call("POST", "/v1/auth/signin", body={"email": email, "password": password, "device_id": str(uuid.uuid4())})
    ["session"]["access_token"]
    for _ in range(int(env["LOCK_DEVICES"]) - 1)]
psql(f"""
insert into public.daily_challenges (user_id, day, seconds)
select u, date '2020-01-01' + g, g from unnest(array[{uuid_list(probes)}]::uuid[]) u, generate_series(0, {int(env["PROBE_ROWS"]) - 1}) g;
insert into public.daily_challenges (user_id, day, seconds) values ('{lock_user}', date '2020-01-01', 0);
analyze public.daily_challenges;
""")
for name, tokens in (("probe", [u["token"] for u in probes]), ("flood", [flooder["token"]]), ("lock", lock_tokens)):
    with open(f"{tmp}/{name}.tsv", "w") as tsv:
        tsv.write("".join(t + "\n" for t in tokens))
with open(f"{tmp}/lock_user", "w") as f:
    f.write(lock_user)
PY
lock_user=$(cat "$tmp/lock_user")

# The flood's batch: FLOOD_BATCH upserts of the flooder's rows (mutation k has id
# <request number><k as four digits>), and the row-lock pushes' one upsert of the locked
# row (day 2020-01-01); bench/push.lua fills in the numbers.
push_batch_template "$FLOOD_BATCH" 4 >"$tmp/flood_template.json"
push_batch_template 1 4 >"$tmp/lock_template.json"
check_push_batch "$base" "$(cat "$tmp/flood.tsv")" "$(cat "$tmp/flood_template.json")" "$FLOOD_BATCH"

# "p50_us p99_us requests failed" of one probe run (bench/pull-probe.lua): first loads as
# the probe's users in turn, PROBE_DELAY_MS apart per connection.
probe() {
    wrk -t1 -c"$PROBE_CONNECTIONS" -d"$DURATION" --timeout "$WRK_TIMEOUT" -s bench/pull-probe.lua "$base" -- \
        "$tmp/probe.tsv" "$PROBE_DELAY_MS" | awk '/^probe / { print $2, $3, $4, $5 }'
}

# Starts a flood of pushes in the background (wrk for DURATION + 2 s): tokens $1, template
# $2, connections $3, mutation-id base $4; its output goes to $tmp/flood.out.
start_flood() {
    wrk -t1 -c"$3" -d$((seconds + 2))s --timeout "$WRK_TIMEOUT" -s bench/push.lua "$base" -- "$1" 1 "$2" "$4" \
        >"$tmp/flood.out" 2>&1 &
    flood_pid=$!
    sleep 1
}

# "answers/s non-2xx duplicates" of the flood that ended: wrk's rate, its non-2xx answers
# (429s; or 5xx, when the pool or the statement timeout gave out), and its pushes answered
# with a duplicate (bench/push.lua; a batch overtaken by a later one of the device).
flood_figures() {
    awk '/^Requests\/sec:/ { rate = $2 } /Non-2xx or 3xx responses:/ { refused = $5 }
         /^duplicate batches:/ { duplicates = $3 }
         END { printf "%.0f %d %d\n", rate, refused, duplicates }' "$tmp/flood.out"
}

# One run of the three scenarios against the running gateway; $1 is the run's number
# (mutation ids of later runs start above earlier ones). Prints three lines:
# "<scenario> p50_us p99_us requests failed flood_rate flood_refused flood_duplicates".
run_scenarios() {
    local run=$1 figures
    echo "quiet $(probe) 0 0 0"

    start_flood "$tmp/flood.tsv" "$tmp/flood_template.json" "$FLOOD_CONNECTIONS" $((run * 1000000000))
    figures=$(probe)
    wait "$flood_pid"
    echo "flood $figures $(flood_figures)"

    # The psql session holds the locked user's row for the whole scenario, then rolls back.
    psql -Atq "$OWNER_URL" >/dev/null 2>&1 <<SQL &
begin;
select 1 from public.daily_challenges where user_id = '$lock_user' and day = date '2020-01-01' for update;
select pg_sleep($((seconds + 4)));
rollback;
SQL
    locker_pid=$!
    sleep 0.5
    start_flood "$tmp/lock.tsv" "$tmp/lock_template.json" "$LOCK_CONNECTIONS" $((run * 1000000000 + 500000000))
    figures=$(probe)
    wait "$flood_pid"
    echo "lock $figures $(flood_figures)"
    wait "$locker_pid" || true
    locker_pid=
    # Pushes the lock held answer once it is gone; let them drain before the next run.
    sleep 2
}

# Runs every scenario RUNS times against binary $1 and prints the table for $2 (a name).
measure() {
    FERRY=$1
    start_gateways 1 127.0.0.1
    local results=() run line
    echo "load average at start ($2): $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    for run in $(seq "$RUNS"); do
        while read -r line; do
            echo "run $run $2: $line" >&2
            results+=("$line")
        done < <(run_scenarios $((run + ${3:-0})))
    done
    echo "load average at end ($2): $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    # The median of column $2 over the lines of scenario $1.
    median_of() { printf '%s\n' "${results[@]}" | awk -v s="$1" -v c="$2" '$1 == s { print $c }' | median; }
    # The median over the runs of scenario $1's p99 / the same run's quiet p99.
    paired_ratio() {
        printf '%s\n' "${results[@]}" |
            awk -v s="$1" '$1 == "quiet" { quiet = $3 } $1 == s { printf "%.4f\n", $3 / quiet }' | median
    }
    local quiet_p99 scenario p99 ratio verdict
    quiet_p99=$(median_of quiet 3)
    printf '%-7s %-6s %10s %10s %9s %7s %12s %11s %10s %10s %10s\n' "$2" "" "pull p50" "pull p99" requests failed \
        "flood ans/s" "flood !2xx" "flood dup" "p99/quiet" "(per run)"
    for scenario in quiet flood lock; do
        p99=$(median_of "$scenario" 3)
        ratio=$(echo "$p99 / $quiet_p99" | bc -l)
        verdict=$( [ "$(echo "$ratio <= $MAX_RATIO" | bc -l)" -eq 1 ] && echo PASS || echo FAIL)
        [ "$scenario" = quiet ] && verdict=""
        printf '%-7s %-6s %8.2fms %8.2fms %9s %7s %12s %11s %10s %10.2f %10.2f %s\n' "$2" "$scenario" \
            "$(echo "$(median_of "$scenario" 2) / 1000" | bc -l)" "$(echo "$p99 / 1000" | bc -l)" \
            "$(median_of "$scenario" 4)" "$(median_of "$scenario" 5)" "$(median_of "$scenario" 6)" \
            "$(median_of "$scenario" 7)" "$(median_of "$scenario" 8)" "$ratio" "$(paired_ratio "$scenario")" \
            "$verdict"
    done
}

echo "goal: another user's pull p99 during each flood <= $MAX_RATIO x its p99 with no flood"
measure "$FERRY_AFTER" after
if [ -n "$FERRY_BEFORE" ]; then
    measure "$FERRY_BEFORE" "before" 100
fi
