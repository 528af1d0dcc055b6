#!/usr/bin/env bash
# Ferry's SQL checks, beside the Swift suites (`make test` runs this; `make sql-test` alone):
#
#   1. plpgsql_check over every PL/pgSQL function of schema ferry (those register_table
#      generates too), failing on any error it reports; its warnings are fixed or listed
#      in Tests/sql/plpgsql_check.sql with the reason they stay.
#   2. The pgTAP tests Tests/sql/*.sql, by pg_prove.
#
# Both run in a scratch database of the development cluster (`ferry db`), migrated with
# sql/ferry and the examples (as `ferry dev` serves them), dropped afterwards. No
# reachable PostgreSQL, or a missing extension, fails the run and says why: nothing is
# skipped. Needs Debian's postgresql-15-plpgsql-check, postgresql-15-pgtap and
# libtap-parser-sourcehandler-pgtap-perl (`make deps`).
set -euo pipefail
cd "$(dirname "$0")/../.."

FERRY=${FERRY:-.build/debug/ferry}
owner_url=$("$FERRY" db url)
if ! psql -XqAt "$owner_url" -c 'select 1' >/dev/null; then
    echo "Tests/sql/run.sh: no PostgreSQL at $owner_url: start it (ferry db start, or make test)" >&2
    exit 1
fi
for extension in plpgsql_check pgtap; do
    if [ -z "$(psql -XqAt "$owner_url" -c "select 1 from pg_available_extensions where name = '$extension'")" ]; then
        echo "Tests/sql/run.sh: the server has no extension $extension: make deps (Debian's postgresql-<major>-${extension//_/-})" >&2
        exit 1
    fi
done
command -v pg_prove >/dev/null || {
    echo "Tests/sql/run.sh: no pg_prove: make deps (Debian's libtap-parser-sourcehandler-pgtap-perl)" >&2
    exit 1
}

scratch=ferry_sql_tests_$$
scratch_url=${owner_url%/*}/$scratch
psql -XqA "$owner_url" -c "create database $scratch"
trap 'psql -XqA "$owner_url" -c "drop database if exists $scratch with (force)"' EXIT
env -u FERRY_MIGRATE_DIRS "$FERRY" migrate --database-url "$scratch_url" --sql-root sql \
    --dir sql/examples/puzzle --dir sql/examples/tasks >/dev/null
# The email directory in the same scratch database (its own schema and ledger label),
# for Tests/sql/directory.sql.
"$FERRY" migrate --directory --database-url "$scratch_url" --sql-root sql >/dev/null
psql -XqA "$scratch_url" -c 'create extension plpgsql_check; create extension pgtap'

echo "plpgsql_check: every PL/pgSQL function of schema ferry"
psql -XqA -v ON_ERROR_STOP=1 "$scratch_url" -f Tests/sql/plpgsql_check.sql

echo "pgTAP: Tests/sql/*.sql"
# Every file but the plpgsql_check one is a pgTAP test.
mapfile -t tests < <(ls Tests/sql/*.sql | grep -v '/plpgsql_check\.sql$')
pg_prove --dbname "$scratch_url" "${tests[@]}"
