# Ferry's two commands on a fresh Debian machine (README.md):
#   make run    install what is missing, build (ferry and ferry-demo), start the embedded PostgreSQL, migrate, serve
#   make test   the same set-up, then swift-format lint and every test
# The other targets are the steps they are made of. Works as root (CI) or as a user.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.PHONY: help deps build deb db db-stop db-reset run web test sql-test lint format schema docs bench clean

# The toolchain lives in /opt/swift on the project's machines; elsewhere it is on PATH.
ifeq ($(shell command -v swift 2>/dev/null),)
export PATH := /opt/swift/usr/bin:$(PATH)
endif

FERRY := .build/debug/ferry
# The commit `ferry version` names (Package.swift reads it; empty without git: "unknown").
ifndef FERRY_COMMIT
FERRY_COMMIT := $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && \
	{ git diff --quiet HEAD 2>/dev/null && echo "$$c" || echo "$$c-modified"; })
endif
export FERRY_COMMIT
# The whole suite takes about five minutes on two cores; a hung test fails the run after
# this long instead of holding CI to its own limit.
TEST_TIMEOUT ?= 1200
# At most this many tests run at once. Most of them wait (on sockets, tokens' ends, child
# processes); unbounded, all ~860 start together on two cores and the ones with a window
# of seconds (a lock wait, a token's refresh) miss it behind the CPU-heavy ones.
TEST_WIDTH ?= 16
DEBIAN_PACKAGES := libuv1-dev libpq-dev libhttp-parser-dev libwslay-dev libsodium-dev libssl-dev libsqlite3-dev libcurl4-openssl-dev postgresql python3-httpx python3-websockets nodejs postgresql-15-plpgsql-check postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl python3-aiosmtpd dpkg-dev systemd curl openssl haproxy patroni etcd-server gettext-base pgbouncer node-typescript node-ws chromium chromium-driver python3-selenium

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /  make \1\t/' | expand -t 18

deps: ## install the Debian packages that are missing (apt-get as root; otherwise says what to run)
	@if ! command -v dpkg >/dev/null; then \
	  echo "not a Debian system: install the equivalents of $(DEBIAN_PACKAGES) yourself"; \
	else \
	  missing=""; \
	  for package in $(DEBIAN_PACKAGES); do \
	    dpkg -s "$$package" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$package"; \
	  done; \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" -ne 0 ]; then \
	      echo "missing Debian packages:$$missing"; \
	      echo "run: sudo apt-get update && sudo apt-get install -y$$missing"; \
	      exit 1; \
	    fi; \
	    echo "installing$$missing"; \
	    apt-get update -q; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	  fi; \
	fi
	@command -v swift >/dev/null || { echo "swift not found on PATH nor in /opt/swift/usr/bin: install Swift 6.3 (swift.org)"; exit 1; }

build: ## build the ferry binary (.build/debug/ferry)
	swift build --product ferry

# The release build with the Swift runtime linked in takes about 1.5 minutes on two
# cores; later runs rebuild only what changed.
deb: deps ## build the Debian package (.build/deb/ferry_<version>_<arch>.deb; deploy/debian/build.sh)
	deploy/debian/build.sh

db: build ## start the embedded PostgreSQL under .ferry/ (FERRY_DEV_PG_PORT, default 15329)
	@$(FERRY) db start

db-stop: build ## stop the embedded PostgreSQL
	@$(FERRY) db stop

db-reset: build ## stop the embedded PostgreSQL and delete its data
	@$(FERRY) db reset

# `ferry dev` starts the database itself (as `make db` would), so that Ctrl-C stops
# both; a database that was already running is left running.
# ferry-demo too: the README's walk-through runs it against this server.
run: deps build ## build ferry and ferry-demo, start PostgreSQL, migrate, serve the example app on 127.0.0.1:8080
	swift build --product ferry-demo
	$(FERRY) dev

# The page on one origin (serve.py, WEB_PORT) and `ferry dev --example tasks` on another
# (FERRY_LISTEN, 127.0.0.1:8080 by default), the page's origin allowed by CORS; Ctrl-C
# stops both. docs/CLIENT-JS.md, "The web example".
WEB_PORT ?= 8081
web: deps build ## serve the tasks web example on http://127.0.0.1:8081/ with `ferry dev --example tasks` (Ctrl-C stops both)
	tsc -p clients/js
	@/usr/bin/env python3 clients/js/examples/tasks-web/serve.py --port $(WEB_PORT) & server=$$!; \
	trap 'kill $$server 2>/dev/null || true' EXIT; \
	FERRY_CORS_ORIGINS="$${FERRY_CORS_ORIGINS:-http://127.0.0.1:$(WEB_PORT),http://localhost:$(WEB_PORT)}" \
	  $(FERRY) dev --example tasks

lint: ## swift-format lint, failing on any finding
	swift format lint --strict --recursive Sources Tests

format: ## rewrite Sources and Tests with swift-format
	swift format format --in-place --recursive Sources Tests

# The package is built first, alone, rather than by its test (DebianPackageTests, which
# then finds it up to date): a release build on both cores beside the tests would crowd
# the ones with a window of seconds.
# The database is stopped afterwards only when this target started it; the exit
# status is the tests': the Swift suites', then the SQL checks' (Tests/sql/run.sh), both
# run whatever the other's outcome. The failing tests' lines are repeated last, where a
# log's tail shows them.
test: deps build deb lint ## lint, build the Debian package, start PostgreSQL, run every test against it (Swift in parallel, then the SQL checks)
	@started=""; \
	if ! $(FERRY) db status >/dev/null; then $(FERRY) db start; started=yes; fi; \
	stop_database() { if [ -n "$$started" ]; then $(FERRY) db stop; fi; }; \
	trap 'stop_database; exit 130' INT TERM; \
	status=0; \
	FERRY_TEST_DATABASE_URL="$$($(FERRY) db url)" timeout --kill-after=15s $(TEST_TIMEOUT) swift test --parallel \
	  --experimental-maximum-parallelization-width $(TEST_WIDTH) 2>&1 \
	  | tee .build/swift-test.log || status=$$?; \
	if [ "$$status" -eq 124 ] || [ "$$status" -eq 137 ]; then \
	  echo "make test: the tests did not finish within $(TEST_TIMEOUT) s: a test hung (see the last 'started' lines)"; \
	fi; \
	sql_status=0; FERRY=$(FERRY) Tests/sql/run.sh || sql_status=$$?; \
	if [ "$$sql_status" -ne 0 ]; then echo "make test: the SQL checks failed (exit $$sql_status)"; \
	  if [ "$$status" -eq 0 ]; then status=$$sql_status; fi; fi; \
	stop_database; \
	if [ "$$status" -ne 0 ]; then \
	  grep -E '^✘ Test .*(recorded an issue|failed)' .build/swift-test.log | cut -c1-400 | head -20 \
	    | sed 's/^/make test: /' || true; \
	  echo "make test: tests failed (exit $$status)"; fi; \
	exit "$$status"

sql-test: deps build db ## plpgsql_check over Ferry's PL/pgSQL and the pgTAP tests (Tests/sql/run.sh)
	FERRY=$(FERRY) Tests/sql/run.sh

schema: db ## regenerate sql/ferry/schema.sql (pg_dump of a scratch database migrated with sql/ferry)
	sql/schema.sh

# DocC without the swift-docc-plugin package (none can be fetched): a build of
# FerryClient alone, in a scratch folder of its own so that it compiles (and emits its
# symbol graph) whatever .build holds, then the toolchain's `docc convert`.
DOCS_SCRATCH := .build/docs-scratch
docs: ## build FerryClient's API reference from its /// comments (DocC) into .build/docs/FerryClient.doccarchive
	@rm -rf .build/docs/FerryClient.doccarchive
	@mkdir -p $(DOCS_SCRATCH)/symbol-graphs $(DOCS_SCRATCH)/ferry-client .build/docs
	swift build --scratch-path $(DOCS_SCRATCH) --target FerryClient \
	  -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc $(CURDIR)/$(DOCS_SCRATCH)/symbol-graphs \
	  -Xswiftc -symbol-graph-minimum-access-level -Xswiftc public
	cp $(DOCS_SCRATCH)/symbol-graphs/FerryClient*.symbols.json $(DOCS_SCRATCH)/ferry-client/
	docc convert Sources/FerryClient/FerryClient.docc --additional-symbol-graph-dir $(DOCS_SCRATCH)/ferry-client \
	  --fallback-display-name FerryClient --fallback-bundle-identifier org.ferry.FerryClient \
	  --output-path .build/docs/FerryClient.doccarchive --warnings-as-errors
	@echo "wrote .build/docs/FerryClient.doccarchive (serve it with any static server, or open it in Xcode)"

# The benchmarks' load generator and the baseline bench/http.sh compares with; a
# target-specific value, so `make bench`'s deps installs them too and `make test`'s does not.
bench: DEBIAN_PACKAGES += wrk nginx-light
bench: deps build db ## run the benchmarks in bench/
	@if [ -x bench/run ]; then bench/run; else echo "no benchmarks yet (see bench/README.md)"; fi

clean: ## delete build products (keeps .ferry/: make db-reset deletes the database)
	swift package clean
