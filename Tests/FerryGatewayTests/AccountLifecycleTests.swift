import FerryTestSupport
import Foundation
import Testing

/// PROTOCOL.md's Accounts section walked end to end by an independent client
/// (`Tests/clients/account_lifecycle.py`, Python and httpx, written from the page alone)
/// against an in-process gateway on a migrated database.
/// Each test gets at most five minutes: a test that hangs fails by name (it needs real sockets or PostgreSQL).
@Suite(.timeLimit(.minutes(5))) struct AccountLifecycleTests {
    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("clients/account_lifecycle.py").path

    /// Debian's interpreter, where `python3-httpx` (`make deps`) installs httpx; a
    /// `python3` earlier on PATH (pyenv, a venv) may not have it.
    static var python: String {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "python3"
    }

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

    /// Runs Python with `arguments`; output goes to a file (a pipe a grandchild holds
    /// open could keep the read from ending). Killed after `timeout` seconds.
    func runScript(arguments: [String], timeout: Double = 90) async throws -> (status: Int32, output: String) {
        let outputFile = FileManager.default.temporaryDirectory
            .appendingPathComponent("ferry-lifecycle-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: outputFile.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: outputFile) }
        let python = Self.python
        let status = try await offload { () -> Int32 in
            let output = try FileHandle(forWritingTo: outputFile)
            defer { try? output.close() }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: python.hasPrefix("/") ? python : "/usr/bin/env")
            process.arguments = (python.hasPrefix("/") ? [] : [python]) + ["-u"] + arguments
            process.standardOutput = output
            process.standardError = output
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let deadline = Date().addingTimeInterval(timeout)
            while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
            if process.isRunning {
                process.terminate()
                process.waitUntilExit()
                return -1
            }
            return process.terminationStatus
        }
        let output = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
        return (status, status == -1 ? output + "\n(killed after \(Int(timeout)) s)" : output)
    }
}
