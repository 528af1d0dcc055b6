#!/usr/bin/env bash
# Cost of cues on writes (issue 5, "Benchmark"): POST /v1/push throughput through Ferry with
# the cue triggers (sql/ferry/functions/cues.sql) on versus off, on the same table in the same run.
#
#   push   batches of BATCH upserts to public.daily_challenges (lww; existing rows of the
#          caller: days 0..BATCH-1), mutation ids strictly increasing per device, wrk over
#          PUSH_DEVICES devices (each its own anonymous user and token), each wrk thread
#          owning its devices: bench/sync.sh's push. Each batch touches one owner, so with
#          cues on every push commits one notification (PostgreSQL folds the batch's
#          identical payloads), which the gateway's own LISTEN connection receives.
#   on     the triggers ferry_cue_insert/_update/_delete enabled (as registered), and push
#          cueing its own writes once per table (sql/ferry/functions/push.sql)
#   off    the same three disabled (alter table … disable trigger …) and ferry.skip_cues on
#          for the gateway's sessions (a database setting; the gateway is restarted so its
#          connections start with it), so push sends no cue either
#
# Prints the median requests/s (and mutations/s) of each, CPU per push of PostgreSQL and
# the gateway, and on ÷ off with PASS/FAIL against MIN_RATIO (0.8). Median of RUNS runs,
# runs interleaved on, off, on, off, … so drift hits both alike. BATCH=1 is the worst case
# (one statement and one notifying commit per push).
#
# Usage: bench/cue-cost.sh   (env: RUNS=5 DURATION=10s CONNECTIONS=64 THREADS=2 LOOPS=2
#        POOL_SIZE=8 PUSH_DEVICES=256 BATCH=50 MIN_RATIO=0.8)
# Ferry is the release `ferry serve` (access log on, to /dev/null) logged in as
# ferry_gateway, listening on ferry_cue as always. The embedded database (`make db`; the
# port follows FERRY_DEV_PG_PORT) is migrated with sql/ferry and sql/examples/puzzle. The
# users this script signs up stay in the database; `ferry db reset` clears it. The triggers
# are enabled again when the script exits.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-5}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}
PUSH_DEVICES=${PUSH_DEVICES:-256}
BATCH=${BATCH:-50}
MIN_RATIO=${MIN_RATIO:-0.8}
# A device's previous batch must be answered before its turn comes again (ids increase
# per device), so devices must well outnumber the connections sending them.
[ "$PUSH_DEVICES" -ge $((2 * CONNECTIONS)) ] ||
    { echo "PUSH_DEVICES ($PUSH_DEVICES) must be at least twice CONNECTIONS ($CONNECTIONS)" >&2; exit 2; }
[ "$BATCH" -ge 1 ] && [ "$BATCH" -le 99 ] || { echo "BATCH must be 1 to 99 (two-digit id suffix)" >&2; exit 1; }

build_release
migrate_database puzzle

triggers="ferry_cue_insert ferry_cue_update ferry_cue_delete"
# Enables or disables the three cue triggers of daily_challenges, and resets or sets
# ferry.skip_cues for new sessions of the database; prints how many triggers are enabled.
cue_triggers() {
    local action="" trigger setting
    for trigger in $triggers; do action+="${action:+, }$1 trigger $trigger"; done
    [ "$1" = enable ] && setting="reset ferry.skip_cues" || setting="set ferry.skip_cues = on"
    psql -Atq -v ON_ERROR_STOP=1 "$OWNER_URL" -c "alter table public.daily_challenges $action" \
        -c "do \$\$ begin execute format('alter database %I $setting', current_database()); end \$\$" \
        -c "select count(*) from pg_trigger where tgrelid = 'public.daily_challenges'::regclass
            and tgname like 'ferry_cue_%' and tgenabled <> 'D'"
}
[ "$(cue_triggers enable)" = 3 ] || { echo "daily_challenges lacks its three cue triggers (ferry.install_triggers)" >&2; exit 1; }
# Cues on or off for the runs that follow: the triggers, the setting, a gateway whose
# connections start with the setting.
cues() {
    local enabled
    enabled=$(cue_triggers "$([ "$1" = on ] && echo enable || echo disable)")
    [ "$enabled" = "$([ "$1" = on ] && echo 3 || echo 0)" ] || { echo "could not turn cues $1" >&2; exit 1; }
    start_gateways 1 127.0.0.1
    ferry_pid=${gateway_pids[0]}
}

make_scratch_folder
on_exit() { cue_triggers enable >/dev/null; }

# Devices push faster than a device's budget; that limit (bench/fairness.sh) is not measured here.
export FERRY_PUSH_BYTES_PER_SECOND=1073741824
choose_gateway_address
start_gateways 1 127.0.0.1
ferry_pid=${gateway_pids[0]}
grep -q 'from ferry.push_body($1, $2::integer) answer' Sources/FerryGateway/Queries/SyncQueries.swift ||
    { echo "the push statement changed: check bench/cue-cost.sh" >&2; exit 1; }

# Setup: sign-ups through the API, each device's rows seeded as the owner, push.tsv (tokens).
PUSH_DEVICES=$PUSH_DEVICES BATCH=$BATCH set_up_with_python <<'PY'
from lib import *

devices, batch = int(env["PUSH_DEVICES"]), int(env["BATCH"])
users = sign_up_many(devices)
psql(f"""
insert into public.daily_challenges (user_id, day, seconds)
select u, date '2020-01-01' + g, g from unnest(array[{uuid_list(users)}]::uuid[]) u, generate_series(0, {batch - 1}) g;
analyze public.daily_challenges;
""")
with open(f"{tmp}/push.tsv", "w") as tsv:
    for u in users:
        tsv.write(u["token"] + "\n")
PY

# A push batch: BATCH upserts of the caller's rows, '@' for a per-request number.
template=$(push_batch_template "$BATCH")
echo "$template" > "$tmp/push_template.json"

# The batch is applied whole through the API (then the devices' numbers restart above it).
token=$(head -1 "$tmp/push.tsv")
check_push_batch "$base" "$token" "$template" "$BATCH"

# CPU time (bench/sync.sh): clock ticks of this cluster (postmaster with its reaped
# children, plus live children) and of the gateway.
find_postmaster
# "rate µs-of-PostgreSQL-CPU-per-push µs-of-gateway-CPU-per-push" for one wrk run; $1 is
# the mutation-id base of the run.
measure() {
    local output rate count pg0 gw0 pg1 gw1
    pg0=$(cluster_ticks "$postmaster")
    gw0=$(process_ticks "$ferry_pid")
    output=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s bench/push.lua "$base" -- "$tmp/push.tsv" \
        "$THREADS" "$tmp/push_template.json" "$1")
    if grep -q 'Non-2xx' <<<"$output"; then
        echo "wrk: $(grep 'Non-2xx' <<<"$output")" >&2
        exit 1
    fi
    grep 'Socket errors' <<<"$output" >&2 || true
    if grep -q 'duplicate batches: [1-9]' <<<"$output"; then
        echo "wrk: $(grep 'duplicate batches' <<<"$output")" >&2
        exit 1
    fi
    rate=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$output")
    count=$(awk '/ requests in / { print $1 }' <<<"$output")
    pg1=$(cluster_ticks "$postmaster")
    gw1=$(process_ticks "$ferry_pid")
    echo "$rate $(echo "($pg1 - $pg0) * 1000000 / $ticks_per_second / $count" | bc) $(echo "($gw1 - $gw0) * 1000000 / $ticks_per_second / $count" | bc)"
}
column() { local -n runs=$2; printf '%s\n' "${runs[@]}" | awk -v c="$1" '{ print $c }' | median; }
listed() { local -n runs=$2; printf '%s\n' "${runs[@]}" | awk -v c="$1" '{ printf "%s%.0f", (NR > 1 ? " / " : ""), $c }'; }

on_runs=()
off_runs=()
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
    # Mutation-id numbers: runs apart by far more than a run's requests.
    cues on
    on_runs+=("$(measure $((run * 200000000)))")
    cues off
    off_runs+=("$(measure $((run * 200000000 + 100000000)))")
done
cue_triggers enable >/dev/null
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

for name in on off; do
    echo "runs cues $name: rate $(listed 1 ${name}_runs); PostgreSQL µs/push $(listed 2 ${name}_runs); gateway µs/push $(listed 3 ${name}_runs)" >&2
done
on=$(column 1 on_runs)
off=$(column 1 off_runs)
ratio=$(echo "$on / $off" | bc -l)
verdict() { [ "$(echo "$1 >= $2" | bc -l)" -eq 1 ] && echo PASS || echo FAIL; }
row() {
    printf '%-40s %8.0f req/s %8.0f mutations/s %8s µs %8s µs\n' "$1" "$2" "$(echo "$2 * $BATCH" | bc -l)" \
        "$(column 2 "$3")" "$(column 3 "$3")"
}
printf '%-40s %14s %20s %11s %11s\n' "" "median rate" "" "PostgreSQL" "gateway"
row "Ferry POST /v1/push ($BATCH upserts), cues on" "$on" on_runs
row "Ferry POST /v1/push ($BATCH upserts), cues off" "$off" off_runs
printf '%-40s %8.3f  %s (goal %s)\n' "push: cues on / cues off" "$ratio" "$(verdict "$ratio" "$MIN_RATIO")" "$MIN_RATIO"
