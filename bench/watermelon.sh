#!/usr/bin/env bash
# WatermelonDB sync (GET/POST /v1/watermelon/sync) against Ferry's own pull and push of
# the same records, side by side in one run, through `ferry serve` (release) as
# ferry_gateway, with wrk.
#
#   pull   PULL_USERS users, ROWS rows each in public.tasks (the to-do example, lww). After
#          seeding, each user takes a /v1/pull cursor (a first load) and a WatermelonDB
#          timestamp (a first sync) through the API; then RECORDS rows per user change,
#          so every pull with that cursor or timestamp answers the same RECORDS records:
#          the steady-state cost of a pull. wrk rotates over the users -> requests/s.
#          (Each WatermelonDB pull stores the snapshot of its new timestamp and, since
#          the device keeps the presented one and its eight newest, deletes one.)
#   push   RECORDS new tasks per request, fresh ids each time, over PUSH_DEVICES devices
#          (each its own anonymous user; each wrk thread owns its devices):
#          /v1/push of RECORDS upserts (mutation ids increasing per device) against
#          /v1/watermelon/sync of RECORDS created records, as WatermelonDB sends them
#          (full raws with _status, _changed and updated_at), after the device's
#          first sync -> requests/s.
#
# Prints both figures, the ratios WatermelonDB / native (goal >= MIN_RATIO, 0.8) with
# PASS/FAIL, and CPU per request of PostgreSQL and the gateway. Median of RUNS runs,
# interleaved (native pull, WatermelonDB pull, native push, WatermelonDB push). Then
# the worst pushes: FAILING_RECORDS records that PostgreSQL refuses each, searched until
# the push is refused whole, and FAILING_RECORDS records of which SPREAD_FAILING,
# spread evenly, are refused and rejected alone (medians of RUNS), against half the
# statement timeout (MAX_FAILING_SECONDS, 5).
#
# Then (PARTS: "throughput big" by default; either alone) the big first sync: one user
# with BIG_RECORDS records (tasks of ~BIG_RECORD_BYTES bytes of JSON each, 1,000,000 of
# ~900 B by default: the answer is ~0.9 GB, as the 120k-record, 111 MB account of issue
# 17 scaled up), synced from nothing once alone and then twice at once (two devices of
# that user); each answer read whole by curl (a truncated chunked body is curl's exit
# 18, a failure), checked to end with its timestamp and to hold every record; the
# gateway's RSS sampled every 50 ms. Prints each sync's time, bytes and status, and the
# RSS growth over the gateway's RSS before the first against MAX_BIG_RSS_GROWTH_MB (64).
#
# Usage: bench/watermelon.sh   (env: RUNS=3 DURATION=10s CONNECTIONS=64 THREADS=2 LOOPS=2
#        POOL_SIZE=8 PULL_USERS=100 PUSH_DEVICES=256 ROWS=300 RECORDS=100 FAILING_RECORDS=20000
#        SPREAD_FAILING=300 PARTS="throughput big" BIG_RECORDS=1000000 BIG_RECORD_BYTES=900
#        MAX_BIG_RSS_GROWTH_MB=64)
# The embedded database (`make db`; the port follows FERRY_DEV_PG_PORT) is migrated with
# sql/ferry and sql/examples/tasks; it runs with fsync and synchronous_commit off, so a
# WatermelonDB pull's commit (it writes its timestamp's row, where /v1/pull only reads)
# costs no WAL flush here, as it would on a durable server. The users this script signs
# up stay in the database; `ferry db reset` clears it.
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
RECORDS=${RECORDS:-100}
MIN_RATIO=${MIN_RATIO:-0.8}
FAILING_RECORDS=${FAILING_RECORDS:-20000}
SPREAD_FAILING=${SPREAD_FAILING:-300}
MAX_FAILING_SECONDS=${MAX_FAILING_SECONDS:-5}
PARTS=${PARTS:-throughput big}
BIG_RECORDS=${BIG_RECORDS:-1000000}
BIG_RECORD_BYTES=${BIG_RECORD_BYTES:-900}
MAX_BIG_RSS_GROWTH_MB=${MAX_BIG_RSS_GROWTH_MB:-64}
[ "$PUSH_DEVICES" -ge $((2 * CONNECTIONS)) ] ||
    { echo "PUSH_DEVICES ($PUSH_DEVICES) must be at least twice CONNECTIONS ($CONNECTIONS)" >&2; exit 2; }
[ "$RECORDS" -le "$ROWS" ] && [ "$RECORDS" -le 999 ] ||
    { echo "RECORDS must be at most ROWS and at most 999" >&2; exit 2; }

build_release
migrate_database tasks
make_scratch_folder

# wrk's connections rotate over the users, so a user may have several requests in flight,
# and a device pushes faster than its budget: not what this measures (bench/fairness.sh).
export FERRY_REQUESTS_PER_DEVICE=$CONNECTIONS FERRY_REQUESTS_PER_USER=$CONNECTIONS
export FERRY_PUSH_BYTES_PER_SECOND=1073741824
choose_gateway_address
start_gateways 1 127.0.0.1
ferry_pid=${gateway_pids[0]}

# The gateway's resident set, KiB.
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$ferry_pid/status"; }

# The big first sync: BIG_RECORDS records of one user, synced from nothing by one
# device, then by two at once; prints each answer and the RSS growth against its goal.
big_first_sync() {
    BIG_RECORDS=$BIG_RECORDS BIG_RECORD_BYTES=$BIG_RECORD_BYTES set_up_with_python <<'PY'
import uuid
from lib import *
records, size = int(env["BIG_RECORDS"]), int(env["BIG_RECORD_BYTES"])
devices = sign_up_many(1)
# Two more devices of the same user: sign up, link one, sign the others in.
user = devices[0]
email = f"big-{uuid.uuid4()}@example.com"
call("POST", "/v1/auth/link", user["token"], {"email": email, "password": "correct horse battery"})
tokens = [user["token"]]
for n in range(2):
    signed = call("POST", "/v1/auth/signin", None,
                  {"email": email, "password": "correct horse battery", "device_id": str(uuid.uuid4())})
    tokens.append(signed["session"]["access_token"])
# The record's JSON is ~200 B of columns and updated_at besides the title.
psql(f"""
insert into public.tasks (user_id, id, title, position, metadata)
select '{user["uid"]}', 'big-' || g, repeat('x', {max(size - 200, 1)}), g, '{{"due_at": "2026-01-01"}}'
from generate_series(1, {records}) g;
analyze public.tasks;
""")
with open(f"{tmp}/big_tokens", "w") as f:
    f.write("\n".join(tokens) + "\n")
PY
    mapfile -t big_tokens < "$tmp/big_tokens"
    # One first sync as device $1 into $tmp/big-$1.json: "status bytes seconds curl-exit records".
    big_sync() {
        local out=$tmp/big-$1.json status
        status=$(curl -s -o "$out" -w '%{http_code} %{size_download} %{time_total}' --max-time 900 \
            -H "Authorization: Bearer ${big_tokens[$1]}" \
            "$base/v1/watermelon/sync?last_pulled_at=null&schema_version=1&migration=null") && exit=0 || exit=$?
        # Whole: the timestamp last, and every record once (ids are big-<n>).
        if [ "$exit" -eq 0 ] && tail -c 40 "$out" | grep -Eq '\},"timestamp":[0-9]+\}$'; then
            echo "$status $exit $(grep -o '"id" : "big-' "$out" | wc -l)"
        else
            echo "$status $exit 0"
        fi
        rm -f "$out"
    }
    sample_rss() { local peak=0 now; while kill -0 "$1" 2>/dev/null; do now=$(rss_kib); [ "$now" -gt "$peak" ] && peak=$now; sleep 0.05; done; echo "$peak"; }
    local before peak_one peak_two one two_a two_b
    before=$(rss_kib)
    big_sync 0 > "$tmp/big-one" &
    local sync=$!
    peak_one=$(sample_rss $sync)
    wait $sync
    one=$(cat "$tmp/big-one")
    big_sync 1 > "$tmp/big-two-a" &
    local sync_a=$!
    big_sync 2 > "$tmp/big-two-b" &
    local sync_b=$!
    peak_two=$( (sample_rss $sync_a; sample_rss $sync_b) | sort -n | tail -1)
    wait $sync_a $sync_b
    two_a=$(cat "$tmp/big-two-a")
    two_b=$(cat "$tmp/big-two-b")
    big_row() {
        local status bytes seconds exit records
        read -r status bytes seconds exit records <<<"$2"
        printf '%-52s %s, %d MB in %.1f s, %d records  %s\n' "$1" "$status" $((bytes / 1000000)) "$seconds" "$records" \
            "$( [ "$status" = 200 ] && [ "$exit" = 0 ] && [ "$records" = "$BIG_RECORDS" ] && echo PASS || echo "FAIL (curl exit $exit)")"
    }
    growth() {
        local mb=$(( ($1 - before) / 1024 ))
        printf '%-52s %6d MB  %s (goal <= %s MB; %d MB before)\n' "$2" "$mb" \
            "$( [ "$mb" -le "$MAX_BIG_RSS_GROWTH_MB" ] && echo PASS || echo FAIL)" "$MAX_BIG_RSS_GROWTH_MB" $((before / 1024))
    }
    big_row "first sync of $BIG_RECORDS records, alone" "$one"
    big_row "first sync of $BIG_RECORDS records, two at once (a)" "$two_a"
    big_row "first sync of $BIG_RECORDS records, two at once (b)" "$two_b"
    growth "$peak_one" "gateway RSS growth, one first sync"
    growth "$peak_two" "gateway RSS growth, two first syncs at once"
    psql -q "$OWNER_URL" -c "begin; set local ferry.hard_delete = on; delete from public.tasks where id like 'big-%'; commit;"
}

if [[ " $PARTS " == *" big "* ]]; then
    big_first_sync
fi
[[ " $PARTS " == *" throughput "* ]] || exit 0

# Setup through the API, rows seeded as the owner. Writes native_pull.tsv and
# watermelon_pull.tsv (token, path), push.tsv (tokens) and watermelon_push.tsv (token,
# path with the device's timestamp).
PULL_USERS=$PULL_USERS PUSH_DEVICES=$PUSH_DEVICES ROWS=$ROWS RECORDS=$RECORDS set_up_with_python <<'PY'
from concurrent.futures import ThreadPoolExecutor
from lib import *

pull_users, push_devices = int(env["PULL_USERS"]), int(env["PUSH_DEVICES"])
rows, records = int(env["ROWS"]), int(env["RECORDS"])
WATERMELON = "/v1/watermelon/sync?last_pulled_at={}&schema_version=1&migration=null"

users = sign_up_many(pull_users + push_devices)
pulls, pushes = users[:pull_users], users[pull_users:]

ids = uuid_list(pulls)
psql(f"""
insert into public.tasks (user_id, id, title, position, metadata)
select u, 'seed-' || g, 'task ' || g, g, '{{"due_at": "2026-01-01"}}'
from unnest(array[{ids}]::uuid[]) u, generate_series(1, {rows}) g;
analyze public.tasks;
""")

def first_pulls(u):
    native = call("GET", "/v1/pull?limit=5000", u["token"])
    assert not native["has_more"] and len(native["changes"]["tasks"]["upserts"]) == rows
    u["cursor"] = native["cursor"]
    watermelon = call("GET", WATERMELON.format("null"), u["token"])
    assert len(watermelon["changes"]["tasks"]["updated"]) == rows
    u["timestamp"] = watermelon["timestamp"]
with ThreadPoolExecutor(8) as pool:
    list(pool.map(first_pulls, pulls))

psql(f"""update public.tasks set position = position + 0.5
         where user_id = any(array[{ids}]::uuid[]) and id in (select 'seed-' || g from generate_series(1, {records}) g);""")
# Both answer exactly `records` rows with that cursor and that timestamp, every time.
for u in pulls[:3]:
    native = call("GET", f"/v1/pull?limit=5000&cursor={u['cursor']}", u["token"])
    assert len(native["changes"]["tasks"]["upserts"]) == records and not native["has_more"]
    for _ in range(2):
        watermelon = call("GET", WATERMELON.format(u["timestamp"]), u["token"])
        assert len(watermelon["changes"]["tasks"]["updated"]) == records, len(watermelon["changes"]["tasks"]["updated"])

with open(f"{tmp}/native_pull.tsv", "w") as native, open(f"{tmp}/watermelon_pull.tsv", "w") as watermelon:
    for u in pulls:
        native.write(f"{u['token']}\t/v1/pull?limit=5000&cursor={u['cursor']}\n")
        watermelon.write(f"{u['token']}\t{WATERMELON.format(u['timestamp'])}\n")
with open(f"{tmp}/push.tsv", "w") as native, open(f"{tmp}/watermelon_push.tsv", "w") as watermelon:
    for u in pushes:
        native.write(u["token"] + "\n")
        n = call("GET", WATERMELON.format("null"), u["token"])["timestamp"]
        watermelon.write(f"{u['token']}\t/v1/watermelon/sync?last_pulled_at={n}\n")
PY

# The push bodies, '@' where a per-request number goes (bench/push.lua fills it in):
# RECORDS new tasks each, task k's id b@-k. Native: mutation ids @<k as 3 digits>.
native_template='{"mutations": ['
watermelon_template='{"tasks": {"created": ['
for k in $(seq 1 "$RECORDS"); do
    [ "$k" -gt 1 ] && native_template+=', ' && watermelon_template+=', '
    native_template+=$(printf '{"id": @%03d, "table": "tasks", "op": "upsert", "row": {"id": "b@-%d", "title": "task %d", "position": %d, "parent_id": null, "metadata": {}}}' "$k" "$k" "$k" "$k")
    watermelon_template+=$(printf '{"id": "b@-%d", "title": "task %d", "position": %d, "parent_id": null, "metadata": "{}", "updated_at": 1764590400000, "_status": "created", "_changed": ""}' "$k" "$k" "$k")
done
native_template+=']}'
watermelon_template+='], "updated": [], "deleted": []}, "drafts": {"created": [], "updated": [], "deleted": []}}'
echo "$native_template" > "$tmp/native_push.json"
echo "$watermelon_template" > "$tmp/watermelon_push.json"

cat > "$tmp/pull.lua" <<'LUA'
-- Rotates over the (token, path) lines of its file; threads start apart.
local counter = 0
function setup(thread)
    counter = counter + 1
    thread:set("id", counter)
end
local requests = {}
local i = 0
function init(args)
    for line in io.lines(args[1]) do
        local token, path = line:match("^(%S+)\t(%S+)$")
        requests[#requests + 1] = wrk.format("GET", path, { ["Authorization"] = "Bearer " .. token })
    end
    i = (id * 37) % #requests
end
request = function()
    i = i % #requests + 1
    return requests[i]
end
LUA

cat > "$tmp/watermelon_push.lua" <<'LUA'
-- POST /v1/watermelon/sync: each thread owns the devices (token, path) of its file whose
-- index is its own modulo the thread count; "@" in the body is base + the thread's
-- request counter, so every request's ids are new.
local counter = 0
function setup(thread)
    counter = counter + 1
    thread:set("id", counter)
end
local devices, template, base, n = {}, nil, 0, 0
function init(args)
    local threads, index = tonumber(args[2]), 0
    for line in io.lines(args[1]) do
        local token, path = line:match("^(%S+)\t(%S+)$")
        if index % threads == id - 1 then devices[#devices + 1] = { "Bearer " .. token, path } end
        index = index + 1
    end
    local f = io.open(args[3]); template = f:read("*l"); f:close()
    base = tonumber(args[4]) + id * 10000000
end
request = function()
    n = n + 1
    local device = devices[n % #devices + 1]
    return wrk.format("POST", device[2],
        { ["Authorization"] = device[1], ["Content-Type"] = "application/json" },
        (template:gsub("@", tostring(base + n))))
end
LUA

# Both pushes as the benchmark sends them are applied whole.
token=$(head -1 "$tmp/push.tsv")
curl -fs -X POST "$base/v1/push" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "$(sed 's/@/1/g' "$tmp/native_push.json")" | python3 -c '
import json, sys
results = json.load(sys.stdin)["results"]
assert len(results) == '"$RECORDS"' and all(r["status"] == "applied" for r in results), results' ||
    { echo "the native push batch was not applied whole" >&2; exit 1; }
IFS=$'\t' read -r token path < "$tmp/watermelon_push.tsv"
answer=$(curl -s -X POST "$base$path" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    -d "$(sed 's/@/2/g' "$tmp/watermelon_push.json")")
[ "$answer" = "{}" ] || { echo "the WatermelonDB push was not applied whole: $answer" >&2; exit 1; }

find_postmaster
# "rate µs-of-PostgreSQL-CPU-per-request µs-of-gateway-CPU-per-request" for one wrk run.
measure() {
    local output rate count pg0 gw0 pg1 gw1
    pg0=$(cluster_ticks "$postmaster")
    gw0=$(process_ticks "$ferry_pid")
    output=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" "$@")
    if grep -q 'Non-2xx' <<<"$output"; then
        echo "wrk $*: $(grep 'Non-2xx' <<<"$output")" >&2
        exit 1
    fi
    if grep -q 'duplicate batches: [1-9]' <<<"$output"; then
        echo "wrk: $(grep 'duplicate batches' <<<"$output")" >&2
        exit 1
    fi
    grep 'Socket errors' <<<"$output" >&2 || true
    rate=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$output")
    count=$(awk '/ requests in / { print $1 }' <<<"$output")
    pg1=$(cluster_ticks "$postmaster")
    gw1=$(process_ticks "$ferry_pid")
    echo "$rate $(echo "($pg1 - $pg0) * 1000000 / $ticks_per_second / $count" | bc) $(echo "($gw1 - $gw0) * 1000000 / $ticks_per_second / $count" | bc)"
}
column() { local -n runs=$2; printf '%s\n' "${runs[@]}" | awk -v c="$1" '{ print $c }' | median; }
listed() { local -n runs=$2; printf '%s\n' "${runs[@]}" | awk -v c="$1" '{ printf "%s%.0f", (NR > 1 ? " / " : ""), $c }'; }

native_pull_runs=()
watermelon_pull_runs=()
native_push_runs=()
watermelon_push_runs=()
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for run in $(seq "$RUNS"); do
    native_pull_runs+=("$(measure -s "$tmp/pull.lua" "$base" -- "$tmp/native_pull.tsv")")
    watermelon_pull_runs+=("$(measure -s "$tmp/pull.lua" "$base" -- "$tmp/watermelon_pull.tsv")")
    # Mutation-id and task-id numbers: runs apart by far more than a run's requests.
    native_push_runs+=("$(measure -s bench/push.lua "$base" -- "$tmp/push.tsv" "$THREADS" \
        "$tmp/native_push.json" $((run * 100000000)))")
    watermelon_push_runs+=("$(measure -s "$tmp/watermelon_push.lua" "$base" -- "$tmp/watermelon_push.tsv" "$THREADS" \
        "$tmp/watermelon_push.json" $((run * 100000000)))")
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# The worst push: FAILING_RECORDS records (default: FERRY_WATERMELON_MAX_PUSH_RECORDS'
# default) that PostgreSQL refuses each (title null: not null). Finding refused records
# one by one stops after ferry.watermelon_max_failed_attempts() failed statements and
# refuses the push whole (400 invalid_request); it must end well inside the statement
# timeout (10 s): over it, the answer would be a retryable 503 sent again forever.
python3 - "$FAILING_RECORDS" > "$tmp/failing_push.json" <<'PY'
import json, sys
records = [{"id": f"f-{k}", "title": None, "_status": "created", "_changed": ""} for k in range(int(sys.argv[1]))]
print(json.dumps({"tasks": {"created": records, "updated": [], "deleted": []}}))
PY
# And the slowest push still answered 200: SPREAD_FAILING of those records refused,
# spread evenly among good ones (new ids each run), each found and rejected alone.
spread_push() {
    python3 - "$FAILING_RECORDS" "$SPREAD_FAILING" "$1" <<'PY'
import json, sys
total, failing, run = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
step = total // failing
records = [{"id": f"s{run}-{k}", "title": None if k % step == 0 and k // step < failing else f"task {k}",
            "_status": "created", "_changed": ""} for k in range(total)]
print(json.dumps({"tasks": {"created": records, "updated": [], "deleted": []}}))
PY
}
IFS=$'\t' read -r token path < <(sed -n 2p "$tmp/watermelon_push.tsv")
failing_runs=()
spread_runs=()
for run in $(seq "$RUNS"); do
    failing_runs+=("$(curl -s -o "$tmp/failing_answer.json" -w '%{http_code} %{time_total}' -X POST "$base$path" \
        -H "Authorization: Bearer $token" -H 'Content-Type: application/json' --data-binary @"$tmp/failing_push.json")")
    grep -q '"invalid_request".*refuses so many of its records' "$tmp/failing_answer.json" ||
        { echo "the failing push was not refused whole: $(head -c 300 "$tmp/failing_answer.json")" >&2; exit 1; }
    spread_push "$run" > "$tmp/spread_push.json"
    spread_runs+=("$(curl -s -o "$tmp/spread_answer.json" -w '%{http_code} %{time_total}' -X POST "$base$path" \
        -H "Authorization: Bearer $token" -H 'Content-Type: application/json' --data-binary @"$tmp/spread_push.json")")
    rejected=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["experimentalRejectedIds"]["tasks"]))' \
        "$tmp/spread_answer.json" 2>/dev/null || echo "not an answer: $(head -c 300 "$tmp/spread_answer.json")")
    [ "$rejected" = "$SPREAD_FAILING" ] ||
        { echo "the spread push rejected $rejected of $SPREAD_FAILING" >&2; exit 1; }
done
echo "runs spread push: $(printf '%s\n' "${spread_runs[@]}" | awk '{ printf "%s%s s", (NR > 1 ? " / " : ""), $2 }')" >&2
echo "runs failing push: $(printf '%s\n' "${failing_runs[@]}" | awk '{ printf "%s%s s", (NR > 1 ? " / " : ""), $2 }')" >&2
echo "timestamps stored: $(psql -Atq "$OWNER_URL" -c 'select count(*) from ferry.watermelon_cursors')" >&2

for name in native_pull watermelon_pull native_push watermelon_push; do
    echo "runs $name: rate $(listed 1 ${name}_runs); PostgreSQL µs/req $(listed 2 ${name}_runs); gateway µs/req $(listed 3 ${name}_runs)" >&2
done
native_pull=$(column 1 native_pull_runs)
watermelon_pull=$(column 1 watermelon_pull_runs)
native_push=$(column 1 native_push_runs)
watermelon_push=$(column 1 watermelon_push_runs)

verdict() { [ "$(echo "$1 >= $2" | bc -l)" -eq 1 ] && echo PASS || echo FAIL; }
pull_ratio=$(echo "$watermelon_pull / $native_pull" | bc -l)
push_ratio=$(echo "$watermelon_push / $native_push" | bc -l)
row() { printf '%-52s %8.0f req/s %8s µs %8s µs\n' "$1" "$2" "$(column 2 "$3")" "$(column 3 "$3")"; }
printf '%-52s %14s %11s %11s\n' "" "median rate" "PostgreSQL" "gateway"
row "GET /v1/pull ($RECORDS changed records)" "$native_pull" native_pull_runs
row "GET /v1/watermelon/sync ($RECORDS changed records)" "$watermelon_pull" watermelon_pull_runs
row "POST /v1/push ($RECORDS upserts of new rows)" "$native_push" native_push_runs
row "POST /v1/watermelon/sync ($RECORDS created records)" "$watermelon_push" watermelon_push_runs
printf '%-52s %8.3f  %s (goal %s)\n' "pull: WatermelonDB / native" "$pull_ratio" "$(verdict "$pull_ratio" "$MIN_RATIO")" "$MIN_RATIO"
printf '%-52s %8.3f  %s (goal %s)\n' "push: WatermelonDB / native" "$push_ratio" "$(verdict "$push_ratio" "$MIN_RATIO")" "$MIN_RATIO"
spread=$(printf '%s\n' "${spread_runs[@]}" | awk '{ print $2 }' | median)
printf '%-52s %8.2f s  %s (limit %s s, half the statement timeout)\n' \
    "POST /v1/watermelon/sync ($FAILING_RECORDS records, $SPREAD_FAILING rejected)" "$spread" \
    "$( [ "$(echo "$spread <= $MAX_FAILING_SECONDS" | bc -l)" -eq 1 ] && echo PASS || echo FAIL)" "$MAX_FAILING_SECONDS"
failing=$(printf '%s\n' "${failing_runs[@]}" | awk '{ print $2 }' | median)
printf '%-52s %8.2f s  %s (limit %s s, half the statement timeout)\n' \
    "POST /v1/watermelon/sync ($FAILING_RECORDS records, all refused: 400)" "$failing" \
    "$( [ "$(echo "$failing <= $MAX_FAILING_SECONDS" | bc -l)" -eq 1 ] && echo PASS || echo FAIL)" "$MAX_FAILING_SECONDS"
