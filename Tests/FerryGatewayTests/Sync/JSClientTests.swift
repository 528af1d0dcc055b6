import FerryTestSupport
import Foundation
import Testing

/// The JavaScript client (`clients/js`), compiled with Debian's `tsc` and run with Node's
/// own test runner (`node --test`) against an in-process gateway serving both example
/// apps: the flows (accounts, with a password reset by a code mailed through a real SMTP
/// server, drain, merge, rejections, 413, cursors, locks, streams, refresh), two devices
/// converging after random edits of every strategy, and SIGKILL during enqueue and drain
/// (`clients/js/test/`). The second test runs the stream renewal, WebSocket and SSE,
/// against short tokens that are warned about at once.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection, .serialized) struct JSClientTests {
    static let folder = TestRepository.root + "/clients/js"

    /// `tsc -p clients/js`: the dist/ the Node tests and the web example's browser test
    /// import. Once per test process (a static let is initialised once, the other callers
    /// wait), so no test reads dist/ while another rewrites it.
    static func compile() throws -> (status: Int32, output: String) { try compilation.get() }

    private static let compilation = Result { () throws -> (status: Int32, output: String) in
        let tsc = FileManager.default.isExecutableFile(atPath: "/usr/bin/tsc") ? "/usr/bin/tsc" : "tsc"
        return try ChildProcess.run("/usr/bin/env", [tsc, "-p", folder], timeout: 240)
    }

    /// ``compile()``, then `node --test` on `files`.
    /// `maildir`: where the gateway's SMTP relay keeps the mails (`FERRY_JS_MAILDIR`, for
    /// the tests that need a mailed code).
    static func run(_ files: [String], port: Int, maildir: String? = nil) throws -> (status: Int32, output: String) {
        let compiled = try compile()
        guard compiled.status == 0 else { return (compiled.status, "tsc failed:\n\(compiled.output)") }
        return try ChildProcess.run(
            "/usr/bin/env",
            ["FERRY_URL=http://127.0.0.1:\(port)"] + (maildir.map { ["FERRY_JS_MAILDIR=\($0)"] } ?? [])
                + [NodeScript.node, "--test", "--test-reporter=spec"] + files.map { folder + "/test/" + $0 },
            timeout: 540)
    }

    /// With a real SMTP relay (aiosmtpd), so the password reset runs with a mailed code.
    @Test(arguments: [["flows.test.mjs"], ["converge.test.mjs", "kill.test.mjs"]])
    func theNodeTestsPass(_ files: [String]) async throws {
        let smtp = try SMTPTestServer()
        try await withAccountsGateway(arguments: ["--smtp-url", smtp.url], examples: ["puzzle", "tasks"]) { server in
            let run = try await offload { try Self.run(files, port: server.port, maildir: smtp.maildir) }
            #expect(run.status == 0, "node --test failed:\n\(run.output)")
            #expect(run.output.contains("ℹ fail 0"), "\(run.output)")
        }
    }

    @Test func aStreamRenewedMidWayMissesNoChange() async throws {
        try await withAccountsGateway(
            arguments: ["--access-token-ttl", "60", "--stream-token-warning", "3600"], examples: ["puzzle", "tasks"]
        ) { server in
            let run = try await offload { try Self.run(["renewal.test.mjs"], port: server.port) }
            #expect(run.status == 0, "node --test failed:\n\(run.output)")
            #expect(run.output.contains("ℹ fail 0"), "\(run.output)")
        }
    }
}
