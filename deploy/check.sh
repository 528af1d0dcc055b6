#!/bin/bash
# Runs every ```sh block of docs/DEPLOY.md, in order, as the document gives them, on
# this machine without touching it: into a throwaway root ($ROOT) and a throwaway
# PostgreSQL 15 cluster, both deleted at the end. DebianPackageTests runs it.
#
#   deploy/check.sh [package.deb]      (default: the one `make deb` builds)
#
# What stands in for the server (small programs first on PATH, in $work/bin):
#   apt-get install ./ferry_*.deb   unpacks the package into $ROOT as dpkg would (a
#                                   conffile already there is kept) and runs its
#                                   postinst, whose users and file modes land in $ROOT;
#   apt-get install <other>         checks that Debian package is installed here;
#   systemctl start|restart|enable --now <unit>
#                                   runs the packaged unit's ExecStart= with only its
#                                   EnvironmentFile='s variables (a oneshot to its end,
#                                   a service in the background); stop ends it;
#   sudo -u postgres <command>      runs it against the throwaway cluster's superuser;
#   getent, groupadd, useradd, dpkg-statoverride
#                                   the postinst's, on $ROOT's passwd, group and
#                                   statoverride files.
# In each block /etc/ferry, /srv/app become $ROOT's, and the ports 5432 and 8080 free
# ones. Then it checks what the document promises: the gateway ready, and the owner's
# login in no file or process environment the gateway can read.
set -euo pipefail

repository=$(cd "$(dirname "$0")/.." && pwd)
package=${1:-}
if [ -z "$package" ]; then
    package=$(cd "$repository" && make -s deb | tail -n 1)
fi
package=$(realpath "$package")

work=$(mktemp -d /tmp/ferry-deploy-check.XXXXXX)
chmod 0755 "$work"
export ROOT="$work/root" CHECK_WORK="$work" CHECK_PACKAGE="$package"
mkdir -p "$ROOT/etc" "$ROOT/var/lib/dpkg" "$work/bin" "$work/units" "$work/logs"
: >"$ROOT/etc/passwd"
: >"$ROOT/etc/group"
: >"$ROOT/var/lib/dpkg/statoverride"

fail() {
    echo "deploy/check.sh: $*" >&2
    exit 1
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pg_port=$(free_port)
http_port=$(free_port)
export CHECK_PG_PORT="$pg_port" CHECK_PG_SOCKET="$work/pg"

# The throwaway cluster: initdb and postgres refuse to run as root, so as root they run
# as the postgres user, as Debian's own cluster does.
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_bin=/usr/lib/postgresql/15/bin
[ -x "$pg_bin/initdb" ] || fail "PostgreSQL 15's server is not installed (apt-get install postgresql-15)"
mkdir -p "$work/pg"
[ "$(id -u)" -ne 0 ] || chown postgres: "$work/pg"
as_postgres "$pg_bin/initdb" -D "$work/pg/data" -U postgres --auth=trust >"$work/pg/initdb.log" 2>&1 ||
    fail "initdb failed: $(cat "$work/pg/initdb.log")"

cleanup() {
    for pid in "$work"/units/*.pid; do
        [ -f "$pid" ] && kill -TERM "$(cat "$pid")" 2>/dev/null || true
    done
    as_postgres "$pg_bin/pg_ctl" -D "$work/pg/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
as_postgres "$pg_bin/pg_ctl" -D "$work/pg/data" -l "$work/pg/postgres.log" -w \
    -o "-p $pg_port -k $work/pg -c listen_addresses=127.0.0.1" start >/dev/null ||
    fail "PostgreSQL did not start: $(cat "$work/pg/postgres.log")"

# --- the stand-ins -----------------------------------------------------------------

cat >"$work/bin/apt-get" <<'EOF'
#!/bin/bash
# apt-get install [-y] [--allow-downgrades] <package or ./ferry_*.deb>…
set -euo pipefail
[ "$1" = install ] || { echo "check.sh apt-get: only install is stood in for" >&2; exit 1; }
shift
for argument in "$@"; do
    case $argument in
    -*) ;;
    ./ferry_*.deb)
        unpacked="$CHECK_WORK/unpacked"
        rm -rf "$unpacked"
        mkdir -p "$unpacked"
        dpkg-deb -x "$CHECK_PACKAGE" "$unpacked/files"
        dpkg-deb -e "$CHECK_PACKAGE" "$unpacked/DEBIAN"
        # dpkg keeps a conffile the administrator has (an unchanged one it would replace
        # with the package's, which here is the same file).
        while read -r conffile; do
            [ -e "$ROOT$conffile" ] && rm "$unpacked/files$conffile"
        done <"$unpacked/DEBIAN/conffiles"
        # As dpkg does, a new file replaces the old one (a running binary keeps its own).
        cp -a --remove-destination "$unpacked/files/." "$ROOT/"
        while read -r owner group mode path; do
            chmod "$mode" "$ROOT$path"
        done <"$ROOT/var/lib/dpkg/statoverride"
        previous=$(cat "$ROOT/var/lib/dpkg/ferry.version" 2>/dev/null || true)
        bash "$unpacked/DEBIAN/postinst" configure "$previous"
        dpkg-deb -f "$CHECK_PACKAGE" Version >"$ROOT/var/lib/dpkg/ferry.version"
        ;;
    *) dpkg -s "$argument" 2>/dev/null | grep -q '^Status: install ok installed' ||
        { echo "check.sh apt-get: $argument is not installed on this machine" >&2; exit 1; } ;;
    esac
done
EOF

# The postinst's tools, on $ROOT's files.
cat >"$work/bin/getent" <<'EOF'
#!/bin/bash
grep "^$2:" "$ROOT/etc/$1"
EOF
cat >"$work/bin/groupadd" <<'EOF'
#!/bin/bash
echo "${@: -1}:x:$((900 + $(wc -l <"$ROOT/etc/group"))):" >>"$ROOT/etc/group"
EOF
cat >"$work/bin/useradd" <<'EOF'
#!/bin/bash
echo "${@: -1}:x:$((900 + $(wc -l <"$ROOT/etc/passwd"))):0::/nonexistent:/usr/sbin/nologin" >>"$ROOT/etc/passwd"
EOF
cat >"$work/bin/dpkg-statoverride" <<'EOF'
#!/bin/bash
# --list <path> | --update --add <owner> <group> <mode> <path>
set -euo pipefail
case $1 in
--list) grep -q " $2\$" "$ROOT/var/lib/dpkg/statoverride" ;;
--update)
    [ "$2" = --add ] || exit 1
    grep -q "^$4:" "$ROOT/etc/group" || [ "$4" = root ] || { echo "dpkg-statoverride: no group $4" >&2; exit 2; }
    echo "$3 $4 $5 $6" >>"$ROOT/var/lib/dpkg/statoverride"
    chmod "$5" "$ROOT$6"
    ;;
esac
EOF

cat >"$work/bin/systemctl" <<'EOF'
#!/bin/bash
# systemctl daemon-reload | start | restart | stop | enable [--now] <unit>…
set -euo pipefail
action=$1
shift
now=""
units=()
for argument in "$@"; do
    case $argument in
    --now) now=yes ;;
    -*) ;;
    *) units+=("${argument%.service}") ;;
    esac
done
stop() {
    local pid_file="$CHECK_WORK/units/$1.pid"
    [ -f "$pid_file" ] || return 0
    local pid
    pid=$(cat "$pid_file")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$pid_file"
}
start() {
    local file="$ROOT/lib/systemd/system/$1.service"
    [ -f "$file" ] || { echo "check.sh systemctl: no unit $1 in the package" >&2; exit 1; }
    local environment=("PATH=/usr/bin:/bin")
    local environment_file line
    while read -r environment_file; do
        environment_file=${environment_file#-}
        while IFS= read -r line; do
            case $line in '' | '#'*) continue ;; esac
            environment+=("$line")
        done <"$ROOT$environment_file"
    done < <(sed -n 's/^EnvironmentFile=//p' "$file")
    local command
    command=$(sed -n 's/^ExecStart=//p' "$file")
    command=${command//\/usr\/bin\/ferry/$ROOT\/usr\/bin\/ferry}
    local log="$CHECK_WORK/logs/$1.log"
    if grep -q '^Type=oneshot' "$file"; then
        # shellcheck disable=SC2086 # ExecStart= is split on spaces, as systemd does here
        env -i "${environment[@]}" $command >>"$log" 2>&1 ||
            { echo "check.sh systemctl: $1 failed:" >&2; cat "$log" >&2; exit 1; }
    else
        # shellcheck disable=SC2086
        env -i "${environment[@]}" $command >>"$log" 2>&1 &
        echo $! >"$CHECK_WORK/units/$1.pid"
    fi
}
for unit in "${units[@]}"; do
    case $action in
    daemon-reload) ;;
    start) start "$unit" ;;
    restart) stop "$unit"; start "$unit" ;;
    stop) stop "$unit" ;;
    enable) [ -z "$now" ] || start "$unit" ;;
    *) echo "check.sh systemctl: $action is not stood in for" >&2; exit 1 ;;
    esac
done
EOF

cat >"$work/bin/sudo" <<'EOF'
#!/bin/bash
# sudo -u postgres <command>…: the throwaway cluster's superuser.
[ "$1" = -u ] && [ "$2" = postgres ] || { echo "check.sh sudo: only -u postgres is stood in for" >&2; exit 1; }
shift 2
exec env PGHOST="$CHECK_PG_SOCKET" PGPORT="$CHECK_PG_PORT" PGUSER=postgres "$@"
EOF
chmod +x "$work/bin/"*

# --- the document's blocks -------------------------------------------------------

# The blocks run in one shell, in order, as one session at the server would: a variable
# set in one (a password) is there in the next.
document="$repository/docs/DEPLOY.md"
script="$work/deploy.sh"
blocks=0
inside=""
while IFS= read -r line; do
    if [ -z "$inside" ] && [ "$line" = '```sh' ]; then
        inside=yes
        blocks=$((blocks + 1))
        printf 'echo "deploy/check.sh: block %s"\n' "$blocks"
        # The package's settings name the same ports and folders as the document.
        printf '[ ! -d "$ROOT/etc/ferry" ] || sed -i -e "s|127\\.0\\.0\\.1:5432|127.0.0.1:%s|g" -e "s|:8080|:%s|g" -e "s|=/srv/app|=%s/srv/app|" "$ROOT"/etc/ferry/*.env\n' \
            "$pg_port" "$http_port" "$ROOT"
    elif [ -n "$inside" ] && [ "$line" = '```' ]; then
        inside=""
    elif [ -n "$inside" ]; then
        printf '%s\n' "$line" |
            sed -e "s|/etc/ferry|$ROOT/etc/ferry|g" -e "s|/srv/app|$ROOT/srv/app|g" \
                -e "s|127\\.0\\.0\\.1:5432|127.0.0.1:$pg_port|g" -e "s|:8080|:$http_port|g"
    fi
done <"$document" >"$script"
[ "$blocks" -gt 0 ] || fail "no \`\`\`sh block in docs/DEPLOY.md"
(cd "$work" && PATH="$work/bin:$PATH" timeout 300 bash -euo pipefail "$script") ||
    fail "a block of docs/DEPLOY.md failed (the last one named above); the units' logs:"$'\n'"$(tail -n 20 "$work"/logs/*.log 2>/dev/null)"

# --- what the document promises ----------------------------------------------------

[ -f "$work/units/ferry.pid" ] || fail "the gateway is not running at the end"
pid=$(cat "$work/units/ferry.pid")
curl -fsS "http://127.0.0.1:$http_port/readyz" >/dev/null || fail "the gateway is not ready at the end"
grep -q '^ferry:' "$ROOT/etc/passwd" || fail "the postinst made no ferry user"
[ "$(grep -c '^ferry:' "$ROOT/etc/passwd")" -eq 1 ] || fail "the postinst made the ferry user twice"
[ "$(stat -c %a "$ROOT/etc/ferry/ferry.env")" = 640 ] || fail "ferry.env is not 0640"
[ "$(stat -c %a "$ROOT/etc/ferry/migrate.env")" = 600 ] || fail "migrate.env is not 0600"
grep -q "^root ferry 0640 /etc/ferry/ferry.env$" \
    "$ROOT/var/lib/dpkg/statoverride" || fail "ferry.env is not root:ferry"
grep -q '^root root 0600 /etc/ferry/migrate.env$' "$ROOT/var/lib/dpkg/statoverride" ||
    fail "migrate.env is not root:root"
! grep -q app_owner "$ROOT/etc/ferry/ferry.env" || fail "ferry.env holds the owner's login"
! tr '\0' '\n' <"/proc/$pid/environ" | grep -q -e app_owner -e FERRY_MIGRATE ||
    fail "the gateway's environment holds the owner's login"
grep -q '^InaccessiblePaths=-/etc/ferry/migrate.env$' "$ROOT/lib/systemd/system/ferry.service" ||
    fail "ferry.service may read migrate.env"
echo "deploy/check.sh: ran the $blocks blocks of docs/DEPLOY.md; the gateway serves, without the owner's login"
