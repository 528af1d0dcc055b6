import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// The `ferry` binary's own commands and answers: help, version, and how `ferry migrate`
/// reports what it cannot do.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct CommandLineTests {
    @Test func helpListsTheCommandsAndHelpOfACommandItsSettings() async throws {
        let list = try await runFerry(["help"], databaseURL: nil)
        #expect(list.status == 0)
        for command in ["serve", "dev", "migrate", "db", "version", "help"] {
            #expect(list.output.contains("\n  \(command) "), "\(list.output)")
        }
        let migrate = try await runFerry(["help", "migrate"], databaseURL: nil)
        #expect(migrate.status == 0)
        #expect(migrate.output.hasPrefix("usage: ferry migrate") && migrate.output.contains("--dir <value>"))
        let unknown = try await runFerry(["help", "nothing"], databaseURL: nil)
        #expect(unknown.status == 2 && unknown.errors.contains("unknown command 'nothing'"), "\(unknown.errors)")
    }

    @Test func versionNamesTheCommitItWasBuiltFrom() async throws {
        let run = try await runFerry(["version"], databaseURL: nil)
        #expect(run.status == 0)
        // The binary and these tests come from one build: the same commit, or both unknown.
        #expect(
            run.lines.first
                == "ferry \(Ferry.version) (\(Ferry.commit.map { "commit \($0)" } ?? "commit unknown: built without FERRY_COMMIT (make build sets it)"))",
            "\(run.output)")
        if let given = ProcessInfo.processInfo.environment["FERRY_COMMIT"], !given.isEmpty {
            #expect(Ferry.commit == given, "make test exports FERRY_COMMIT; the build must have used it")
        }
        #expect(
            run.lines.dropFirst().first
                == "schema version \(Ferry.requiredSchemaVersion) or newer, protocol \(Ferry.protocolVersion)")
    }

    @Test func migrateWithoutAURLSaysHowToReachARunningDevelopmentDatabase() async throws {
        let empty = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-state-\(UUID().uuidString)")
        let elsewhere = try await runFerry(
            ["migrate"], databaseURL: nil, environment: ["FERRY_DEV_STATE_DIR": empty.path])
        #expect(elsewhere.status == 2)
        #expect(elsewhere.errors.contains("FERRY_MIGRATE_DATABASE_URL") && !elsewhere.errors.contains("ferry dev"))

        // The checkout's development database, which make test runs (its port is the test server's).
        let port = try TestDatabase.maintenanceConfiguration().parameters["port"] ?? "15329"
        let development = ["FERRY_DEV_STATE_DIR": TestRepository.root + "/.ferry", "FERRY_DEV_PG_PORT": port]
        let status = try await runFerry(["db", "status"], databaseURL: nil, environment: development)
        let here = try await runFerry(["migrate"], databaseURL: nil, environment: development)
        #expect(here.status == 2)
        if status.status == 0 {
            #expect(here.errors.contains("the development database (ferry dev, ferry db) runs here"), "\(here.errors)")
            #expect(
                here.errors.contains("--database-url postgresql://postgres@127.0.0.1:\(port)/ferry"), "\(here.errors)")
        } else {
            #expect(!here.errors.contains("ferry dev"), "no development database runs: \(status.output)")
        }
    }

    @Test func migrateWithADirectoryThatDoesNotExistIsABadSetting() async throws {
        let run = try await runFerry(
            ["migrate", "--sql-root", TestRepository.sqlRoot, "--dir", "/nonexistent/migrations"],
            databaseURL: "postgresql://nobody@127.0.0.1:1/none")
        #expect(run.status == 2)
        #expect(run.errors == "ferry migrate: invalid --dir: /nonexistent/migrations is not a directory\n")
        let root = try await runFerry(
            ["migrate", "--sql-root", "/nonexistent"], databaseURL: "postgresql://nobody@127.0.0.1:1/none")
        #expect(root.status == 2 && root.errors.contains("/nonexistent/ferry is not a directory"), "\(root.errors)")
    }

    @Test func migrateStatusListsLedgerRowsOfDirectoriesNotGiven() async throws {
        try await MigratedDatabase.with(prefix: "ferry_cli", examples: ["puzzle"]) { migrated in
            let database = migrated.database
            let run = try await runFerry(
                ["migrate", "--status", "--sql-root", TestRepository.sqlRoot], databaseURL: database.url)
            #expect(run.status == 0, "\(run.errors)")
            #expect(
                run.lines.contains {
                    $0.hasPrefix("applied  puzzle/0001_tables.sql  20") && $0.hasSuffix("(its directory was not given)")
                }, "\(run.output)")
            let puzzle = try FileManager.default.contentsOfDirectory(
                atPath: TestRepository.sqlRoot + "/examples/puzzle"
            )
            .filter { $0.hasSuffix(".sql") }
            #expect(
                run.lines.last?.hasSuffix(
                    "; \(puzzle.count) more applied from directories not given (pass their --dir to check them)")
                    == true, "\(run.output)")
        }
    }

    @Test func migrateStatusAsARoleThatMayNotReadTheLedgerSaysWhichRoleToUse() async throws {
        try await MigratedDatabase.with(prefix: "ferry_cli") { migrated in
            let (database, admin) = (migrated.database, migrated.admin)
            let role = "ferry_reader_\(UInt32.random(in: 0...UInt32.max))"
            try await admin.execute("create role \(role) login")
            let run: FerryRun
            do {
                run = try await runFerry(
                    ["migrate", "--status", "--sql-root", TestRepository.sqlRoot],
                    databaseURL: try database.url(user: role))
            } catch {
                try await admin.execute("drop role \(role)")
                throw error
            }
            #expect(run.status == 1)
            #expect(
                run.errors.contains("permission denied") && run.errors.contains("connected as \(role)"), "\(run.errors)"
            )
            #expect(
                run.errors.contains("or a superuser, in --database-url / FERRY_MIGRATE_DATABASE_URL"), "\(run.errors)")
            try await admin.execute("drop role \(role)")
        }
    }
}
