import FerryTestSupport
import Foundation
import Testing

/// The `ferry` binary SwiftPM built next to the tests.
func ferryExecutable() throws -> URL {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    for configuration in ["debug", "release"] {
        let url = root.appendingPathComponent(".build/\(configuration)/ferry")
        if FileManager.default.isExecutableFile(atPath: url.path) { return url }
    }
    throw MissingBinary()
}

/// The tests need the `ferry` executable; `swift build` (and `make test`) builds it.
struct MissingBinary: Error, CustomStringConvertible {
    var description: String { "no ferry binary under .build/: run `swift build` before the tests" }
}

/// Each test gets at most five minutes: a test that hangs fails by name (it needs real sockets or PostgreSQL).
@Suite(.timeLimit(.minutes(5))) struct ServeProcessTests {
    @Test func missingSettingIsOneLineAndExitStatus2() throws {
        let errors = temporaryLog()
        defer { try? FileManager.default.removeItem(atPath: errors) }
        let child = try ChildProcess(
            try ferryExecutable().path, ["serve"], environment: ["PATH": "/usr/bin:/bin"], errors: errors)
        #expect(child.wait() == .exited(2))
        let text = try String(contentsOfFile: errors, encoding: .utf8)
        #expect(text.split(separator: "\n").count == 1)
        #expect(text.contains("FERRY_DATABASE_URL") && text.contains("--database-url"))
    }

    /// A fresh path for a child's log under the temporary directory.
    func temporaryLog() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("ferry-serve-\(UUID().uuidString).log").path
    }

    /// Starts `ferry serve` on `port`; its log goes to the file at `log`, or nowhere.
    func startServe(_ database: TestDatabase, port: Int, log: String? = nil) throws -> ChildProcess {
        try ChildProcess(
            try ferryExecutable().path, ["serve"],
            environment: [
                "FERRY_DATABASE_URL": database.url, "FERRY_JWT_SECRET": testSecret,
                "FERRY_LISTEN": "127.0.0.1:\(port)", "FERRY_THREADS": "2", "FERRY_SHUTDOWN_TIMEOUT": "5",
            ], output: log)
    }

    /// A signal that arrives while the server is still starting (before its watchers
    /// exist) waits for them, then stops the server gracefully: it must not take the
    /// signal's default action and die with connections open.
    @Test func sigtermWhileStartingStopsGracefully() async throws {
        try await TestDatabase.with { database in
            let log = temporaryLog()
            defer { try? FileManager.default.removeItem(atPath: log) }
            let server = try startServe(database, port: try freePort(), log: log)
            server.send(SIGTERM)
            for _ in 0..<200 where server.isRunning { try await Task.sleep(for: .milliseconds(50)) }
            #expect(server.ended == .exited(0), "still running 10 s after SIGTERM, or ended otherwise")
            let text = try String(contentsOfFile: log, encoding: .utf8)
            #expect(text.contains("serving") && text.contains("shutting down") && text.contains("stopped"), "\(text)")
        }
    }

    @Test func requestInFlightAtSIGTERMCompletesAndTheProcessExits0() async throws {
        try await TestDatabase.with { database in
            let port = try freePort()
            let server = try startServe(database, port: port)

            var client: HTTPTestClient?
            for _ in 0..<100 where client == nil {
                client = try? HTTPTestClient(port: port)
                if client == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            let inFlight = try #require(client, "ferry serve did not start listening within 5 s")
            inFlight.setTimeout(15)
            // Half a request, which the server has begun when the signal arrives: its
            // `100 Continue` proves the head was read (a sleep proves nothing on a loaded
            // machine, where the connection may still wait in the accept queue).
            try inFlight.send(
                "POST /v1/nothing HTTP/1.1\r\nHost: test\r\n" + "Expect: 100-continue\r\nContent-Length: 10\r\n\r\n")
            #expect(try inFlight.readResponse().status == 100)
            try inFlight.send("hello")
            server.send(SIGTERM)

            // No new connections once shutdown began (how soon it begins depends on the
            // machine's load: wait for it, 5 s at most)...
            var refused = false
            for _ in 0..<100 where !refused {
                refused = (try? HTTPTestClient(port: port)) == nil
                if !refused { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(refused)
            // ...but the request in flight is answered.
            try inFlight.send("world")
            let response = try inFlight.readResponse()
            #expect(response.status == 404)
            #expect(response.header("Connection")?.lowercased() == "close")
            #expect(inFlight.waitForClose())

            for _ in 0..<100 where server.isRunning { try await Task.sleep(for: .milliseconds(50)) }
            #expect(server.ended == .exited(0))
        }
    }
}
