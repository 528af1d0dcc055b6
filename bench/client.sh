#!/usr/bin/env bash
# FerryClient (issue 13, "Benchmarks"): the SDK's local costs beside bare SQLite, in one
# run, through the release ferry-client-bench against a release `ferry serve` on the
# embedded database (migrated with sql/ferry and both examples).
#
#   enqueue     FerryClient.enqueue against a bare prepared INSERT of the same row in one
#               transaction (both WAL, synchronous=NORMAL): goal >= 0.5 x
#   first load  LocalStore.merge of a real first load (ROWS rows of tasks, the pull
#               answers captured once) against a bare bulk INSERT of the same rows in one
#               transaction: goal >= 0.5 x; also reported with the answers' JSON parsed
#   cue -> store  a second device of the same user (signed in with FerryClient, holding its
#               cue stream) against a bare `GET /v1/pull`: the first device pushes a row
#               (a bare `POST /v1/push`); from the push's answer to the second device's
#               store holding the row (its observer fired), beside one bare pull round trip
#               of the same change in the same round; CUES rounds, p50: goal at most 5 ms more
#
# Usage: bench/client.sh   (env: ROUNDS=5 ENQUEUES=2000 ROWS=10000 CUES=40)
# Medians of ROUNDS interleaved rounds. The users it signs up stay in the database.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

ROUNDS=${ROUNDS:-5}
ENQUEUES=${ENQUEUES:-2000}
ROWS=${ROWS:-10000}
CUES=${CUES:-40}
LOOPS=${LOOPS:-2}
POOL_SIZE=${POOL_SIZE:-8}

build_release ferry-client-bench
migrate_database puzzle tasks
make_scratch_folder

export FERRY_PUSH_BYTES_PER_SECOND=1073741824 FERRY_ANONYMOUS_SIGNUPS_PER_HOUR=1000000
choose_gateway_address
start_gateways 1 127.0.0.1

${BENCH_WRAPPER:-} "$BIN/ferry-client-bench" --server "$base" --rounds "$ROUNDS" --enqueues "$ENQUEUES" --rows "$ROWS" --cues "$CUES" --dir "$tmp"
