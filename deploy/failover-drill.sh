#!/usr/bin/env bash
# The failover drill: a Patroni cluster (three etcd members, two PostgreSQL 15 nodes in
# synchronous mode) behind haproxy's /primary check, two `ferry serve` gateways on it,
# writers and streams (deploy/patroni/drill_client.py), and the primary failed over, a
# few times each way:
#
#   switchover   patronictl switchover to the synchronous standby (a planned move)
#   kill         kill -9 of the primary's postmaster (a crash; Patroni fails over)
#
# Each round prints time to a new primary, time until every writer was acknowledged
# again, how long each gateway's /readyz was not 200, the acknowledged pushes lost and
# applied twice (both must be 0), whether every stream had a cue after the writes came
# back, and expired cursors; the end prints the medians (bench/RESULTS.md has them).
# docs/HA.md explains it.
#
# Everything runs on loopback under a temporary directory, as the postgres user
# (initdb refuses root), and stops on exit, however it exits.
#
#   deploy/failover-drill.sh [ROUNDS]      ROUNDS of each kind, default 3
#
# Environment: FERRY_BIN (default .build/release/ferry, else .build/debug/ferry),
# DRILL_BASE_PORT (default 25500: it uses 25500–25560), DRILL_DEVICES (default 4),
# DRILL_KINDS (default "switchover kill"), DRILL_KEEP=1 keeps the directory.
# Exit status: 0 when no acknowledged push was lost or applied twice in any round.
set -euo pipefail

rounds=${1:-3}
base_port=${DRILL_BASE_PORT:-25500}
devices=${DRILL_DEVICES:-4}
kinds=${DRILL_KINDS:-switchover kill}
repo=$(cd "$(dirname "$0")/.." && pwd)
templates=$repo/deploy/patroni
pg_bin=/usr/lib/postgresql/15/bin

say() { printf '%s drill: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { say "$*"; exit 2; }

# --- What it needs -------------------------------------------------------------------
needed=()
command -v patroni >/dev/null || needed+=(patroni)
command -v etcd >/dev/null || needed+=(etcd-server)
command -v haproxy >/dev/null || needed+=(haproxy)
command -v envsubst >/dev/null || needed+=(gettext-base)
[ -x "$pg_bin/initdb" ] || needed+=(postgresql-15)
python=/usr/bin/python3  # Debian's, which has python3-httpx (not a pyenv's)
"$python" -c 'import httpx' 2>/dev/null || needed+=(python3-httpx)
if [ ${#needed[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        die "missing Debian packages: ${needed[*]}; run: sudo apt-get install -y ${needed[*]}"
    fi
    say "installing the Debian packages the drill needs: ${needed[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${needed[@]}" >&2
fi
ferry=${FERRY_BIN:-}
if [ -z "$ferry" ]; then
    for candidate in "$repo/.build/release/ferry" "$repo/.build/debug/ferry"; do
        [ -x "$candidate" ] && { ferry=$candidate; break; }
    done
fi
[ -n "$ferry" ] && [ -x "$ferry" ] || die "no ferry binary: run 'swift build -c release' (or set FERRY_BIN)"

# Every server runs as postgres: as root through runuser (start, below), otherwise as ourselves.
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || die "no postgres user (install postgresql-15)"
else
    [ "$(id -un)" = postgres ] || die "run as root or as the postgres user"
fi

# --- Where -----------------------------------------------------------------------------
work=$(mktemp -d /tmp/ferry-drill.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
    local status=$?
    set +e
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    # Patroni stops its PostgreSQL when it gets TERM; give everything a few seconds.
    for _ in $(seq 50); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    # A postmaster Patroni left behind (killed before it could stop it).
    for data in "$work"/pg*/data; do
        [ -f "$data/postmaster.pid" ] && kill -KILL "$(head -1 "$data/postmaster.pid")" 2>/dev/null
    done
    wait 2>/dev/null
    if [ "${DRILL_KEEP:-0}" = 1 ]; then say "kept $work"; else rm -rf "$work"; fi
    exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port() { echo $((base_port + $1)); }
secret() { head -c 18 /dev/urandom | base64 | tr -d '/+='; }
export SUPERUSER_PASSWORD=$(secret) REPLICATION_PASSWORD=$(secret) REWIND_PASSWORD=$(secret)
gateway_password=$(secret)
export CLIENT_NETWORK=127.0.0.1/32 REPLICATION_NETWORK=127.0.0.1/32 PG_BIN_DIR=$pg_bin
etcd_hosts="127.0.0.1:$(port 21),127.0.0.1:$(port 22),127.0.0.1:$(port 23)"
initial_cluster="etcd1=http://127.0.0.1:$(port 31),etcd2=http://127.0.0.1:$(port 32),etcd3=http://127.0.0.1:$(port 33)"

# Fills the ${…} of a template in with the variables named (and only those).
render() {
    local template=$1 out=$2; shift 2
    local names="" name
    for name in "$@"; do names="$names \${$name}"; done
    envsubst "$names" <"$template" >"$out"
}

wait_for() { # SECONDS WHAT COMMAND…: runs COMMAND every 0.2 s until it succeeds
    local seconds=$1 what=$2; shift 2
    local until=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $until ] || die "$what did not happen within ${seconds}s (logs: $work, DRILL_KEEP=1 keeps them)"
        sleep 0.2
    done
}

start() { # NAME COMMAND…: runs COMMAND as postgres in the background, logging to NAME.log
    local name=$1; shift
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@" >"$work/$name.log" 2>&1 &
    else
        "$@" >"$work/$name.log" 2>&1 &
    fi
    pids+=($!)
}

# --- etcd ------------------------------------------------------------------------------
for i in 1 2 3; do
    mkdir -p "$work/etcd$i"
    ETCD_NAME=etcd$i ETCD_DATA_DIR=$work/etcd$i/data ETCD_CLIENT_URL=http://127.0.0.1:$(port 2$i) \
        ETCD_PEER_URL=http://127.0.0.1:$(port 3$i) ETCD_INITIAL_CLUSTER=$initial_cluster \
        render "$templates/etcd.yml" "$work/etcd$i/etcd.yml" \
        ETCD_NAME ETCD_DATA_DIR ETCD_CLIENT_URL ETCD_PEER_URL ETCD_INITIAL_CLUSTER
done
chown -R postgres "$work"
for i in 1 2 3; do start etcd$i etcd --config-file "$work/etcd$i/etcd.yml"; done
say "etcd: three members on ports $(port 21)-$(port 23)"
etcd_healthy() {
    for i in 1 2 3; do curl -fsS "http://127.0.0.1:$(port 2$i)/health" | grep -q '"health":"true"' || return 1; done
}
wait_for 60 "an etcd quorum" etcd_healthy

# --- Patroni and PostgreSQL ------------------------------------------------------------
for i in 1 2; do
    mkdir -p "$work/pg$i"
    PATRONI_NAME=pg$i PATRONI_REST_ADDRESS=127.0.0.1:$(port 1$i) PG_ADDRESS=127.0.0.1:$(port 0$i) \
        PG_DATA_DIR=$work/pg$i/data PG_SOCKET_DIR=$work/pg$i PG_PASS_FILE=$work/pg$i/pgpass \
        ETCD_HOSTS=$etcd_hosts \
        render "$templates/patroni.yml" "$work/pg$i/patroni.yml" \
        PATRONI_NAME PATRONI_REST_ADDRESS PG_ADDRESS PG_DATA_DIR PG_BIN_DIR PG_SOCKET_DIR PG_PASS_FILE \
        ETCD_HOSTS SUPERUSER_PASSWORD REPLICATION_PASSWORD REWIND_PASSWORD CLIENT_NETWORK REPLICATION_NETWORK
done
chown -R postgres "$work"
chmod 700 "$work"/pg?
start pg1 patroni "$work/pg1/patroni.yml"
wait_for 120 "pg1 to bootstrap as the primary" curl -fsS "http://127.0.0.1:$(port 11)/primary"
start pg2 patroni "$work/pg2/patroni.yml"
sync_standby() { curl -fsS "http://127.0.0.1:$(port 11)/sync" || curl -fsS "http://127.0.0.1:$(port 12)/sync"; }
wait_for 120 "a synchronous standby" sync_standby
say "patroni: pg1 and pg2 on ports $(port 01)/$(port 02), REST $(port 11)/$(port 12)"

# --- haproxy ---------------------------------------------------------------------------
mkdir -p "$work/haproxy"
HAPROXY_PRIMARY_ADDRESS=127.0.0.1:$(port 40) HAPROXY_STATS_ADDRESS=127.0.0.1:$(port 41) \
    PG1_ADDRESS=127.0.0.1:$(port 01) PG2_ADDRESS=127.0.0.1:$(port 02) \
    PG1_REST_PORT=$(port 11) PG2_REST_PORT=$(port 12) HAPROXY_PID_FILE=$work/haproxy/haproxy.pid \
    render "$templates/haproxy.cfg" "$work/haproxy/haproxy.cfg" \
    HAPROXY_PRIMARY_ADDRESS HAPROXY_STATS_ADDRESS PG1_ADDRESS PG2_ADDRESS PG1_REST_PORT PG2_REST_PORT \
    HAPROXY_PID_FILE
chown -R postgres "$work/haproxy"
start haproxy haproxy -db -f "$work/haproxy/haproxy.cfg"
owner_base="postgresql://postgres:$SUPERUSER_PASSWORD@127.0.0.1:$(port 40)"
# Until its health checks mark the standby down, haproxy sends connections to both nodes
# in turn (a database made on the standby fails: read-only): wait until four connections
# in a row reach the primary.
only_primary() {
    local n
    for n in 1 2 3 4; do
        [ "$(psql -X -At "$owner_base/postgres" -c "select pg_is_in_recovery()" 2>/dev/null)" = f ] || return 1
    done
}
wait_for 30 "haproxy to reach the primary only" only_primary
say "haproxy: the primary at 127.0.0.1:$(port 40)"

# --- Ferry -----------------------------------------------------------------------------
psql -X -q -v ON_ERROR_STOP=1 "$owner_base/postgres" -c "create database app" >&2
owner_url="$owner_base/app"
"$ferry" migrate --database-url "$owner_url" --sql-root "$repo/sql" --dir "$templates/drill-sql" >"$work/migrate.log" 2>&1 ||
    { cat "$work/migrate.log" >&2; die "ferry migrate failed"; }
psql -X -q -v ON_ERROR_STOP=1 "$owner_url" -c "alter role ferry_gateway password '$gateway_password'" >&2
gateway_url="postgresql://ferry_gateway:$gateway_password@127.0.0.1:$(port 40)/app"
jwt_secret=$(head -c 48 /dev/urandom | base64)
for i in 1 2; do
    env FERRY_DATABASE_URL="$gateway_url" FERRY_LISTEN_DATABASE_URL="$gateway_url" \
        FERRY_LISTEN=127.0.0.1:$(port 5$i) FERRY_JWT_SECRET="$jwt_secret" FERRY_THREADS=1 \
        FERRY_ANONYMOUS_SIGNUPS_PER_HOUR=100000 FERRY_LOG_LEVEL=info \
        "$ferry" serve >"$work/gateway$i.log" 2>&1 &
    pids+=($!)
done
for i in 1 2; do wait_for 60 "gateway $i to be ready" curl -fsS "http://127.0.0.1:$(port 5$i)/readyz"; done
say "gateways: 127.0.0.1:$(port 51) and 127.0.0.1:$(port 52), database through haproxy"

# --- Rounds ----------------------------------------------------------------------------
primary_name() {
    for i in 1 2; do curl -fsS "http://127.0.0.1:$(port 1$i)/primary" >/dev/null 2>&1 && { echo pg$i; return; }; done
    return 1
}
healthy() { primary_name && sync_standby; }
results=()
round=0
for n in $(seq "$rounds"); do
    for kind in $kinds; do
        round=$((round + 1))
        wait_for 120 "the cluster to be whole again (a primary and a synchronous standby)" healthy
        # Patroni's /sync flips before haproxy and the gateways have settled: let them.
        for i in 1 2; do wait_for 60 "gateway $i to be ready" curl -fsS "http://127.0.0.1:$(port 5$i)/readyz"; done
        leader=$(primary_name)
        case $kind in
            switchover)
                candidate=$([ "$leader" = pg1 ] && echo pg2 || echo pg1)
                trigger="patronictl -c $work/$leader/patroni.yml switchover --leader $leader --candidate $candidate --force"
                ;;
            kill)
                trigger="kill -9 \$(head -1 $work/$leader/data/postmaster.pid)"
                ;;
            *) die "unknown kind $kind (switchover, kill)" ;;
        esac
        cat >"$work/round$round.json" <<EOF
{"gateways": ["http://127.0.0.1:$(port 51)", "http://127.0.0.1:$(port 52)"],
 "patroni": {"pg1": "http://127.0.0.1:$(port 11)", "pg2": "http://127.0.0.1:$(port 12)"},
 "devices": $devices, "owner_url": "$owner_url",
 "trigger_name": "$kind", "trigger": "$trigger"}
EOF
        say "round $round: $kind of $leader"
        status=0
        "$python" "$templates/drill_client.py" "$work/round$round.json" "$work/result$round.json" || status=$?
        [ -f "$work/result$round.json" ] || die "round $round produced no result"
        results+=("$work/result$round.json")
    done
done

# --- Summary ---------------------------------------------------------------------------
"$python" - "${results[@]}" <<'EOF'
import json, statistics, sys
rows = [json.load(open(p)) for p in sys.argv[1:]]
def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None
bad = 0
for kind in sorted({r["trigger"] for r in rows}):
    mine = [r for r in rows if r["trigger"] == kind]
    lost = sum(r["lost"] for r in mine)
    twice = sum(r["applied_twice"] for r in mine)
    bad += lost + twice
    print("%s: %d rounds" % (kind, len(mine)))
    print("  new primary after       %s s (median; each: %s)" % (
        median(r["seconds_to_new_primary"] for r in mine), [r["seconds_to_new_primary"] for r in mine]))
    print("  writes acknowledged at  %s s (median; each: %s)" % (
        median(r["seconds_writes_back"] for r in mine), [r["seconds_writes_back"] for r in mine]))
    unready = [max(r["seconds_unready"].values()) for r in mine]
    print("  gateways unready        %s s (median of the longer of the two; each: %s)" % (median(unready), unready))
    print("  acknowledged pushes     %d, lost %d, applied twice %d" % (sum(r["acknowledged"] for r in mine), lost, twice))
    print("  streams cued after      %d of %d" % (
        sum(r["streams_cued_after_recovery"] for r in mine), sum(r["streams"] for r in mine)))
    print("  stream reconnects       %d, cursors expired %d, unanswered at stop %d" % (
        sum(r["stream_reconnects"] for r in mine), sum(r["cursors_expired"] for r in mine),
        sum(r["unanswered_at_stop"] for r in mine)))
sys.exit(1 if bad else 0)
EOF
