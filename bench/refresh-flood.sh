#!/usr/bin/env bash
# Refresh flood (issue 17, item 5): one session refreshing as fast as it is answered, on
# FLOOD_CONNECTIONS connections (one session on one connection ran 584 refreshes/s before
# the bound, each adding a row to ferry.refresh_tokens for good). RUNS rounds, each a
# quiet probe of ROUND then a flood of ROUND with the probe beside it (the flood goes on
# from round to round with the session's latest token: RUNS x ROUND of flood in all, 60 s
# by default). Measures:
#   - ferry.refresh_tokens (rows and bytes, pg_total_relation_size) before the first
#     flood, every 5 s during the floods and after the last: the goal is a flat table
#     (rows after <= rows before + 1, the flooder's session holding its two tokens; bytes
#     grown <= 64 KiB);
#   - another user's GET /v1/pull (PROBE_CONNECTIONS wrk connections pulling as
#     PROBE_USERS other users, PROBE_ROWS rows each, PROBE_DELAY_MS apart,
#     bench/pull-probe.lua): the goal is p99 during the flood <= MAX_RATIO x p99 quiet, of
#     the medians over the rounds (and, for a noisy machine, the median of each round's
#     own ratio).
# Prints the figures against both goals, and what the flooder got (answers/s, 200s, 429s).
#
# Usage: bench/refresh-flood.sh   (env: RUNS=3 ROUND=20s LOOPS=2 POOL_SIZE=8
#        PROBE_USERS=4 PROBE_ROWS=20 PROBE_CONNECTIONS=2 PROBE_DELAY_MS=5
#        FLOOD_CONNECTIONS=1 MAX_RATIO=2)
# Ferry is the release `ferry serve` with its default refresh limits (10 a minute per
# session, 600 per address) against the embedded database (`make db`; the port follows
# FERRY_DEV_PG_PORT), which this script migrates with sql/ferry and sql/examples/puzzle.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
ROUND=${ROUND:-20s}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}
PROBE_USERS=${PROBE_USERS:-4}
PROBE_ROWS=${PROBE_ROWS:-20}
PROBE_CONNECTIONS=${PROBE_CONNECTIONS:-2}
PROBE_DELAY_MS=${PROBE_DELAY_MS:-5}
FLOOD_CONNECTIONS=${FLOOD_CONNECTIONS:-1}
MAX_RATIO=${MAX_RATIO:-2}
seconds=${ROUND%s}

build_release
migrate_database puzzle
make_scratch_folder
sampler_pid=
on_exit() { [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null; true; }
choose_gateway_address
start_gateways 1 127.0.0.1

# The probe's users (rows seeded as the owner) and the flooder: probe.tsv holds the
# probe's access tokens, flood_token the flooder's first refresh token.
PROBE_USERS=$PROBE_USERS PROBE_ROWS=$PROBE_ROWS set_up_with_python <<'PY'
from lib import *

probes = [sign_up() for _ in range(int(env["PROBE_USERS"]))]
flooder = sign_up()
psql(f"""
insert into public.daily_challenges (user_id, day, seconds)
select u, date '2020-01-01' + g, g from unnest(array[{uuid_list(probes)}]::uuid[]) u, generate_series(0, {int(env["PROBE_ROWS"]) - 1}) g;
analyze public.daily_challenges;
""")
with open(f"{tmp}/probe.tsv", "w") as tsv:
    tsv.write("".join(u["token"] + "\n" for u in probes))
with open(f"{tmp}/flood_token", "w") as f:
    f.write(flooder["refresh"])
PY

# "p50_us p99_us requests failed" of a probe run of $1 (bench/pull-probe.lua).
probe() {
    wrk -t1 -c"$PROBE_CONNECTIONS" -d"$1" --timeout 30s -s bench/pull-probe.lua "$base" -- \
        "$tmp/probe.tsv" "$PROBE_DELAY_MS" | awk '/^probe / { print $2, $3, $4, $5 }'
}

# "rows bytes" of ferry.refresh_tokens.
table_figures() {
    psql -Atq -F' ' "$OWNER_URL" -c \
        "select count(*), pg_total_relation_size('ferry.refresh_tokens') from ferry.refresh_tokens"
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
read -r rows_before bytes_before < <(table_figures)
(while sleep 5; do table_figures; done) >"$tmp/samples" &
sampler_pid=$!
results=()
flood_answers=0
flood_refused=0
for run in $(seq "$RUNS"); do
    quiet=$(probe "$ROUND")
    wrk -t1 -c"$FLOOD_CONNECTIONS" -d$((seconds + 2))s --timeout 30s -s bench/refresh.lua "$base" -- \
        "$tmp/flood_token" >"$tmp/flood.out" 2>&1 &
    flood_pid=$!
    sleep 1
    flood=$(probe "$ROUND")
    wait "$flood_pid"
    answers=$(awk '/requests in/ { print $1 }' "$tmp/flood.out")
    refused=$(awk '/Non-2xx or 3xx responses:/ { print $5 }' "$tmp/flood.out")
    flood_answers=$((flood_answers + answers))
    flood_refused=$((flood_refused + ${refused:-0}))
    echo "run $run: quiet $quiet; flood $flood; flooder $answers answers, ${refused:-0} non-2xx" >&2
    results+=("$quiet $flood")
done
kill "$sampler_pid" 2>/dev/null || true
sampler_pid=
read -r rows_after bytes_after < <(table_figures)
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# Columns of a result: quiet p50 p99 requests failed, flood p50 p99 requests failed.
median_of() { printf '%s\n' "${results[@]}" | awk -v c="$1" '{ print $c }' | median; }
quiet_p50=$(median_of 1) quiet_p99=$(median_of 2) quiet_requests=$(median_of 3) quiet_failed=$(median_of 4)
flood_p50=$(median_of 5) flood_p99=$(median_of 6) flood_requests=$(median_of 7) flood_failed=$(median_of 8)
paired=$(printf '%s\n' "${results[@]}" | awk '{ printf "%.4f\n", $6 / $2 }' | median)
max_rows=$(awk '{ print $1 }' "$tmp/samples" | sort -n | tail -1)
max_bytes=$(awk '{ print $2 }' "$tmp/samples" | sort -n | tail -1)
ratio=$(echo "$flood_p99 / $quiet_p99" | bc -l)
verdict() { [ "$(echo "$1" | bc -l)" -eq 1 ] && echo PASS || echo FAIL; }

echo "flood: $FLOOD_CONNECTIONS connection(s) refreshing one session, $RUNS x $ROUND:" \
    "$flood_answers answers, $((flood_answers - flood_refused)) 200, $flood_refused non-2xx (429)"
printf 'ferry.refresh_tokens  rows %s before, %s at most during, %s after; bytes %s before, %s at most during, %s after\n' \
    "$rows_before" "${max_rows:-?}" "$rows_after" "$bytes_before" "${max_bytes:-?}" "$bytes_after"
echo "goal: rows after <= rows before + 1: $(verdict "$rows_after <= $rows_before + 1");" \
    "bytes grown <= 64 KiB: $(verdict "$bytes_after - $bytes_before <= 65536")"
printf 'pull (another user, medians of %s rounds)  quiet p50 %.2f ms p99 %.2f ms (%s requests, %s failed); flood p50 %.2f ms p99 %.2f ms (%s requests, %s failed)\n' \
    "$RUNS" "$(echo "$quiet_p50 / 1000" | bc -l)" "$(echo "$quiet_p99 / 1000" | bc -l)" "$quiet_requests" "$quiet_failed" \
    "$(echo "$flood_p50 / 1000" | bc -l)" "$(echo "$flood_p99 / 1000" | bc -l)" "$flood_requests" "$flood_failed"
printf 'goal: pull p99 during the flood <= %s x quiet: %.2f x (per round, median: %.2f x): %s\n' "$MAX_RATIO" "$ratio" \
    "$paired" "$(verdict "$ratio <= $MAX_RATIO")"
