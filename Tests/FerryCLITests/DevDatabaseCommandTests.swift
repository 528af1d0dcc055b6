import FerryPostgres
import FerryTestSupport
import Foundation
import Glibc
import Testing

/// `ferry db start|stop|status|url|reset` and `ferry dev`, the built binary, as
/// docs/OPERATIONS.md ("The embedded development database") describes them. Each test
/// makes a cluster of its own in a throwaway `.ferry` directory on a free port
/// (``ThrowawayDevState``), never the checkout's `.ferry` nor the cluster the suite runs
/// on, and stops it however the test ends.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct DevDatabaseCommandTests {
    // MARK: - ferry db

    @Test func startStatusURLStopAndResetTakeTheClusterThroughItsStates() async throws {
        try await ThrowawayDevState.with { dev in
            let absent = try await dev.db("status")
            #expect(absent.status == 3 && absent.output.hasPrefix("no cluster yet in "), "\(absent.output)")
            let none = try await dev.db("url")
            #expect(none.status == 3 && none.output.isEmpty, "no URL before any start: \(none.output)")
            #expect(none.errors.hasPrefix("ferry db url: no development database here ("), "\(none.errors)")

            let created = try await dev.db("start")
            #expect(created.status == 0, "\(created.output)\(created.errors)")
            #expect(created.output.contains("creating a PostgreSQL "), "\(created.output)")
            #expect(created.output.contains("started PostgreSQL ") && created.output.contains(" at \(dev.url) "))
            let running = try await dev.db("status")
            #expect(running.status == 0 && running.output.hasPrefix("running (pid "), "\(running.output)")
            #expect(running.output.contains(" at \(dev.url), log "), "\(running.output)")
            #expect(try await dev.query("select current_database(), current_user") == ["ferry", "postgres"])
            try await dev.query("create table kept (n int); insert into kept values (7)")

            let again = try await dev.db("start")
            #expect(again.status == 0 && again.output.hasPrefix("PostgreSQL already running (pid "), "\(again.output)")
            // Asked for another port, the running cluster keeps its own, and says so.
            let elsewhere = try freePort()
            let moved = try await dev.db("start", port: elsewhere)
            #expect(
                moved.output.contains("(port \(elsewhere) asked for: run 'ferry db stop' first to move it)"),
                "\(moved.output)")
            #expect(try await dev.db("url", port: elsewhere).lines == [dev.url])
            // Another folder's `ferry db url` names no database, though this one answers on its port.
            let otherFolder = dev.root.appendingPathComponent("elsewhere/.ferry").path
            let outside = try await runFerry(
                ["db", "url"], databaseURL: nil,
                environment: ["FERRY_DEV_STATE_DIR": otherFolder, "FERRY_DEV_PG_PORT": String(dev.port)])
            #expect(outside.status == 3 && outside.output.isEmpty, "\(outside.output)")
            #expect(outside.errors.contains("no development database here"), "\(outside.errors)")

            let stopped = try await dev.db("stop")
            #expect(stopped.status == 0 && stopped.lines == ["stopped PostgreSQL"], "\(stopped.output)")
            #expect(try await dev.db("stop").lines == ["PostgreSQL was not running"])
            let down = try await dev.db("status")
            #expect(down.status == 3 && down.output.hasPrefix("stopped (cluster in "), "\(down.output)")
            await #expect(throws: PostgresError.self) { try await dev.query("select 1") }
            let stoppedURL = try await dev.db("url")
            #expect(stoppedURL.status == 3 && stoppedURL.output.isEmpty, "\(stoppedURL.output)")
            #expect(stoppedURL.errors.contains(" is stopped (ferry db start starts it)"), "\(stoppedURL.errors)")

            // Started again, the cluster is the same one: its data stayed.
            let restarted = try await dev.db("start")
            #expect(restarted.status == 0 && !restarted.output.contains("creating"), "\(restarted.output)")
            #expect(try await dev.query("select n::text from kept") == ["7"])

            // Reset stops it and deletes the cluster; the dev secret stays.
            try "kept-secret\n".write(
                to: dev.stateDirectory.appendingPathComponent("dev-secret"), atomically: true, encoding: .utf8)
            let reset = try await dev.db("reset")
            #expect(
                reset.status == 0
                    && reset.lines == ["deleted the development cluster; 'ferry db start' creates a new one"],
                "\(reset.output)\(reset.errors)")
            #expect(!FileManager.default.fileExists(atPath: dev.stateDirectory.appendingPathComponent("cluster").path))
            #expect(
                FileManager.default.fileExists(atPath: dev.stateDirectory.appendingPathComponent("dev-secret").path))
            #expect(try await dev.db("status").status == 3)
            await #expect(throws: PostgresError.self) { try await dev.query("select 1") }
        }
    }

    /// With synchronous_commit off, an immediate stop loses the last commits and hands
    /// their transaction ids out again, which no cursor can tell apart (OPERATIONS.md,
    /// "Backups and restores"); the dev cluster keeps it on though fsync is off.
    @Test func aCrashOfPostgreSQLAloneLosesNoAcknowledgedCommit() async throws {
        try await ThrowawayDevState.with { dev in
            let started = try await dev.db("start")
            #expect(started.status == 0, "\(started.output)\(started.errors)")
            #expect(try await dev.query("show synchronous_commit") == ["on"])
            _ = try await dev.query("create table acknowledged (n int)")
            for n in 1...39 { _ = try await dev.query("insert into acknowledged values (\(n))") }
            let last = "insert into acknowledged values (40) returning pg_current_xact_id()::text"
            let before = try #require(Int(try await dev.query(last)[0] ?? ""))

            // What the OOM killer or `pg_ctl stop -m immediate` does: no shutdown checkpoint.
            let cluster = dev.stateDirectory.appendingPathComponent("cluster/data").resolvingSymlinksInPath().path
            let major = try String(contentsOfFile: cluster + "/PG_VERSION", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            let pgCtl = "/usr/lib/postgresql/\(major)/bin/pg_ctl"
            let stop = ["stop", "-D", cluster, "-m", "immediate", "-w"]
            let (status, output) =
                getuid() == 0
                ? try ChildProcess.run("/usr/sbin/runuser", ["-u", "postgres", "--", pgCtl] + stop, timeout: 60)
                : try ChildProcess.run(pgCtl, stop, timeout: 60)
            try #require(status == 0, "\(output)")

            let again = try await dev.db("start")
            #expect(again.status == 0, "\(again.output)\(again.errors)")
            #expect(try await dev.query("select count(*)::text from acknowledged") == ["40"])
            let next = "insert into acknowledged values (41) returning pg_current_xact_id()::text"
            let after = try #require(Int(try await dev.query(next)[0] ?? ""))
            #expect(after > before, "a transaction id handed out again: \(after) after \(before)")
        }
    }

    @Test func anUnknownActionOrNoneIsABadSetting() async throws {
        try await ThrowawayDevState.with { dev in
            let unknown = try await dev.db("restart")
            #expect(unknown.status == 2 && unknown.errors.contains("unknown action 'restart'"), "\(unknown.errors)")
            let none = try await runFerry(["db"], databaseURL: nil, environment: dev.environment(port: dev.port))
            #expect(none.status == 2 && none.errors.contains("expected one of start, stop, status, url, reset"))
            #expect(!FileManager.default.fileExists(atPath: dev.stateDirectory.path), "nothing was created")
        }
    }

    // MARK: - ferry dev

    @Test func devStartsTheDatabaseMigratesServesAndStopsBothOnSIGTERM() async throws {
        try await ThrowawayDevState.with { dev in
            let (child, port, log) = try await dev.startDev()
            #expect(try get("/healthz", port: port).text == #"{"status":"ok"}"#)
            // Migrated (Ferry's SQL and the puzzle example), and serving as ferry_gateway.
            try await eventually("/readyz answering 200", seconds: 60) {
                (try? get("/readyz", port: port))?.status == 200
            }
            let ledger = try await dev.query("select name from ferry.schema_migrations order by name")
            #expect(ledger.contains("ferry/0001_roles.sql") && ledger.contains("puzzle/0001_tables.sql"), "\(ledger)")
            let signedUp = try await call(
                "POST", "/v1/auth/anonymous", port: port, json: ["device_id": UUID().uuidString])
            #expect(signedUp.status == 201, "\(signedUp)")
            // Its connections (pool and listener) log in as ferry_gateway, as in production.
            let roles = try await dev.query(
                """
                select distinct usename::text from pg_stat_activity
                where application_name like 'ferry%' and application_name <> '\(ThrowawayDevState.queryApplicationName)'
                """)
            #expect(roles == ["ferry_gateway"], "\(roles)")

            child.send(SIGTERM)
            let (ending, killed) = try await offload { child.wait(seconds: 60) }
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(ending == .exited(0) && !killed, "\(output)")
            #expect(output.contains("stopped PostgreSQL"), "\(output)")
            #expect(try await dev.db("status").status == 3, "ferry dev stops the database it started")
        }
    }

    @Test func devWithExampleNoneAndADirServesTheAppsOwnTablesAlone() async throws {
        let app = try MigrationFiles(
            [
                "0001_notes.sql": """
                create table public.notes (
                    id text not null, user_id uuid not null, body text not null default '', primary key (user_id, id));
                select ferry.register_table('public.notes', strategy => 'lww');
                """
            ], label: "notes_app")
        defer { app.remove() }
        try await ThrowawayDevState.with { dev in
            let (child, port, log) = try await dev.startDev(["--example", "none", "--dir", app.directory.path])
            let ledger = try await dev.query("select name from ferry.schema_migrations order by name")
            #expect(ledger.contains("notes_app/0001_notes.sql"), "\(ledger)")
            #expect(
                !ledger.contains { $0?.hasPrefix("puzzle/") == true || $0?.hasPrefix("tasks/") == true }, "\(ledger)")
            #expect(try await dev.query("select to_regclass('public.daily_challenges')::text") == [nil])

            // The app's table syncs through the gateway: a push applied, then pulled back.
            let signedUp = try await call(
                "POST", "/v1/auth/anonymous", port: port, json: ["device_id": UUID().uuidString])
            let token = try #require(signedUp.string("session", "access_token"), "\(signedUp)")
            let pushed = try await call(
                "POST", "/v1/push", port: port, token: token,
                json: [
                    "mutations": [
                        ["id": 1, "table": "notes", "op": "upsert", "row": ["id": "n1", "body": "mine"]]
                            as [String: Any]
                    ]
                ])
            let results = pushed.value("results") as? [[String: Any]]
            #expect(results?.first?["status"] as? String == "applied", "\(pushed)")
            let pulled = try await call("GET", "/v1/pull", port: port, token: token)
            let notes = (pulled.value("changes") as? [String: Any])?["notes"] as? [String: Any]
            let upserts = notes?["upserts"] as? [[String: Any]]
            #expect(upserts?.map { $0["body"] as? String } == ["mine"], "\(pulled)")

            child.send(SIGTERM)
            let (ending, killed) = try await offload { child.wait(seconds: 60) }
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(ending == .exited(0) && !killed, "\(output)")
            #expect(output.contains(", migrations ferry, notes_app)"), "the banner names what it applied: \(output)")
        }
    }

    @Test func devRefusesAnUnknownExampleOrAMissingDirBeforeStartingAnything() async throws {
        try await ThrowawayDevState.with { dev in
            let environment = dev.environment(port: dev.port)
            let example = try await runFerry(
                ["dev", "--example", "chess", "--sql-root", TestRepository.sqlRoot], databaseURL: nil,
                environment: environment)
            #expect(example.status == 2, "\(example.errors)")
            #expect(example.errors == "ferry dev: invalid --example: chess (expected puzzle, tasks or none)\n")
            let directory = try await runFerry(
                ["dev", "--example", "none", "--dir", "/nonexistent/migrations", "--sql-root", TestRepository.sqlRoot],
                databaseURL: nil, environment: environment)
            #expect(directory.status == 2, "\(directory.errors)")
            #expect(directory.errors == "ferry dev: invalid --dir: /nonexistent/migrations is not a directory\n")
            #expect(!FileManager.default.fileExists(atPath: dev.stateDirectory.path), "nothing was created")
        }
    }

    @Test func devLeavesADatabaseThatWasAlreadyRunningRunning() async throws {
        try await ThrowawayDevState.with { dev in
            #expect(try await dev.db("start").status == 0)
            let (child, _, log) = try await dev.startDev()
            child.send(SIGTERM)
            let (ending, killed) = try await offload { child.wait(seconds: 60) }
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(ending == .exited(0) && !killed, "\(output)")
            #expect(output.contains("left PostgreSQL running (it was running before ferry dev started)"), "\(output)")
            #expect(try await dev.db("status").status == 0)
        }
    }
}

/// A `.ferry` directory of its own under the temporary directory, and a free port, for a
/// test of `ferry db` or `ferry dev`: `FERRY_DEV_STATE_DIR` and `FERRY_DEV_PG_PORT` point
/// the binary there, so the checkout's development cluster is never touched.
struct ThrowawayDevState {
    /// The temporary directory holding `.ferry` (and a `ferry dev` log).
    let root: URL
    /// The port the cluster is asked to use.
    let port: Int

    /// `<root>/.ferry`.
    var stateDirectory: URL { root.appendingPathComponent(".ferry") }
    /// The superuser URL `ferry db url` prints for it.
    var url: String { "postgresql://postgres@127.0.0.1:\(port)/ferry" }

    /// Makes the directory and picks the port, runs `body`, then stops the cluster (if
    /// it runs) and deletes the directory, however `body` ends.
    static func with(_ body: (ThrowawayDevState) async throws -> Void) async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-dev-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let dev = ThrowawayDevState(root: root, port: try freePort())
        do {
            try await body(dev)
        } catch {
            await dev.remove()
            throw error
        }
        await dev.remove()
    }

    /// The environment that points `ferry db` and `ferry dev` here (at `port`).
    func environment(port: Int) -> [String: String] {
        ["FERRY_DEV_STATE_DIR": stateDirectory.path, "FERRY_DEV_PG_PORT": String(port)]
    }

    /// `ferry db <action>`, asking for `port` (this state's unless given).
    func db(_ action: String, port: Int? = nil) async throws -> FerryRun {
        try await runFerry(["db", action], databaseURL: nil, environment: environment(port: port ?? self.port))
    }

    /// The application name of ``query(_:)``'s connections: a closed one can stay in
    /// `pg_stat_activity` for a moment, and must not pass for one of the gateway's.
    static let queryApplicationName = "ferry-tests-query"

    /// Runs `sql` (statements separated by `;`) on the cluster's `ferry` database as the
    /// superuser; returns the cells of the last statement's rows, row after row.
    @discardableResult
    func query(_ sql: String) async throws -> [String?] {
        let client = try await PostgresClient.connect(
            PostgresConfiguration(url, applicationName: Self.queryApplicationName, connectTimeoutMilliseconds: 5_000))
        do {
            let last = try await client.execute(sql).last
            await client.close()
            return last?.rows.flatMap(\.values) ?? []
        } catch {
            await client.close()
            throw error
        }
    }

    /// Starts `ferry dev` (with `arguments` besides) on a free port of 127.0.0.1 with the
    /// checkout's `sql/` and waits (120 s at most: initdb, start, migrations) until it
    /// answers `/healthz`. Returns the process, its port and the file its output goes to.
    func startDev(_ arguments: [String] = []) async throws -> (ChildProcess, port: Int, log: String) {
        let port = try freePort()
        let log = root.appendingPathComponent("dev.log").path
        let child = try ChildProcess(
            try TestRepository.ferryExecutable().path,
            ["dev", "--listen", "127.0.0.1:\(port)", "--sql-root", TestRepository.sqlRoot] + arguments,
            environment: ["PATH": "/usr/bin:/bin"].merging(environment(port: self.port)) { _, given in given },
            output: log, errors: log)
        try await eventually("ferry dev answering /healthz on 127.0.0.1:\(port)", seconds: 120) {
            !child.isRunning || (try? get("/healthz", port: port))?.status == 200
        }
        guard child.isRunning else {
            throw ChildProcessError(
                description: "ferry dev ended (\(String(describing: child.ended))): "
                    + ((try? String(contentsOfFile: log, encoding: .utf8)) ?? ""))
        }
        return (child, port, log)
    }

    /// Stops the cluster if it runs and deletes the directory.
    func remove() async {
        _ = try? await db("stop")
        try? FileManager.default.removeItem(at: root)
    }
}
