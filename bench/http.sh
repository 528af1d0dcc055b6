#!/usr/bin/env bash
# HTTP: GET /healthz on Ferry against nginx (`return 200 "ok"`), with 1 and then 2
# loops / worker processes, wrk -t2 -c64 -d10s, median of 3 runs each (runs interleaved
# so that drift on a shared machine hits both alike). Prints requests/s and Ferry/nginx.
#
# Usage: bench/http.sh            (env: RUNS=3 DURATION=10s CONNECTIONS=64 THREADS=2 LOOPS="1 2")
# Ferry is the real release binary, `ferry serve`, with its default log level (info,
# to /dev/null: /healthz, a probe, is logged at debug, so not written) and metrics on:
# what an operator runs (FERRY_LOG_LEVEL=debug adds a log line per request). It needs the
# embedded database (`make db`), migrated here, only for its pools, listener and start-up
# check; /healthz itself touches no database.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.bash

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
LOOPS=${LOOPS:-"1 2"}

build_release
migrate_database
make_scratch_folder
pids=()
on_exit() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}

requests_per_second() {
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" "http://127.0.0.1:$1/healthz" | awk '/^Requests\/sec:/ { print $2 }'
}


start_nginx() { # workers port
    mkdir -p "$tmp/nginx-$1"
    cat > "$tmp/nginx-$1/nginx.conf" <<CONF
worker_processes $1;
pid $tmp/nginx-$1/nginx.pid;
error_log $tmp/nginx-$1/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx-$1/body;
    proxy_temp_path $tmp/nginx-$1/proxy;
    fastcgi_temp_path $tmp/nginx-$1/fastcgi;
    uwsgi_temp_path $tmp/nginx-$1/uwsgi;
    scgi_temp_path $tmp/nginx-$1/scgi;
    server {
        listen 127.0.0.1:$2;
        location / { return 200 "ok"; }
    }
}
CONF
    nginx -e "$tmp/nginx-$1/error.log" -p "$tmp/nginx-$1" -c "$tmp/nginx-$1/nginx.conf" -g 'daemon off;' &
    pids+=($!)
}

printf '%-6s %12s %12s %8s\n' loops ferry_rps nginx_rps ratio
for loops in $LOOPS; do
    ferry_port=$(free_port)
    FERRY_DATABASE_URL=$OWNER_URL FERRY_JWT_SECRET=bench-secret-bench-secret-bench-secret \
        FERRY_LISTEN=127.0.0.1:$ferry_port FERRY_THREADS=$loops "$FERRY" serve >/dev/null &
    ferry_pid=$!
    pids+=("$ferry_pid")
    nginx_port=$(free_port)
    start_nginx "$loops" "$nginx_port"
    nginx_pid=$!
    wait_until_answers "http://127.0.0.1:$ferry_port/healthz"
    wait_until_answers "http://127.0.0.1:$nginx_port/healthz"

    ferry_runs=()
    nginx_runs=()
    for _ in $(seq "$RUNS"); do
        ferry_runs+=("$(requests_per_second "$ferry_port")")
        nginx_runs+=("$(requests_per_second "$nginx_port")")
    done
    kill "$ferry_pid" "$nginx_pid" 2>/dev/null || true
    wait "$ferry_pid" "$nginx_pid" 2>/dev/null || true

    ferry=$(printf '%s\n' "${ferry_runs[@]}" | median)
    nginx=$(printf '%s\n' "${nginx_runs[@]}" | median)
    echo "loops=$loops ferry runs: ${ferry_runs[*]}; nginx runs: ${nginx_runs[*]}" >&2
    printf '%-6s %12.0f %12.0f %8.2f\n' "$loops" "$ferry" "$nginx" "$(echo "$ferry / $nginx" | bc -l)"
done
