import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// The `ferry` binary's own commands and answers: help, version, and how `ferry migrate`
/// reports what it cannot do.
/// Each test gets at most five minutes: a test that hangs fails by name (it needs real sockets or PostgreSQL).
@Suite(.timeLimit(.minutes(5))) struct CommandLineTests {
    /// The repository's root, where `make test` keeps the development database (`.ferry/`).
    static let root = URL(fileURLWithPath: MigratorTests.sqlRoot).deletingLastPathComponent().path

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
        #expect(run.lines.dropFirst().first == "schema \(Ferry.requiredMigration), protocol \(Ferry.protocolVersion)")
    }
}
