import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md's Accounts section walked end to end by an independent client
/// (`Tests/clients/account_lifecycle.py`, Python and httpx, written from the page alone)
/// against an in-process gateway on a migrated database.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct AccountLifecycleTests {
    static let script = PythonScript.path("account_lifecycle.py")

    @Test func independentClientWalksTheWholeAccountLifecycle() async throws {
        try await withAccountsGateway { harness in
            let run = try await runScript(arguments: [Self.script, "http://127.0.0.1:\(harness.port)"])
            #expect(run.status == 0, "account_lifecycle.py failed:\n\(run.output)")
            #expect(run.output.contains("every step answered as PROTOCOL.md says"), "\(run.output)")
            // The walk ends with the account deleted: nothing of it is left.
            #expect(try await harness.database.value("select count(*) from ferry.users") == "0")
            #expect(try await harness.database.value("select count(*) from ferry.sessions") == "0")
        }
    }

    /// Runs Python with `arguments` off the cooperative threads; killed after `timeout` seconds.
    func runScript(arguments: [String], timeout: Double = 90) async throws -> (status: Int32, output: String) {
        try await offload { try PythonScript.run(arguments: arguments, timeout: timeout) }
    }
}
