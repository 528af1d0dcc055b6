import FerryLoop
import FerryPostgres
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// A real `ferry serve` (a child process, so a test can stop it and start it again on the
/// same port) on a fresh database migrated with Ferry's SQL and both example apps
/// (puzzle and tasks), and `ferry-demo` run against it as processes, each state folder
/// a device.
final class DemoGateway: Sendable {
    let database: TestDatabase
    let port: Int
    let folder: URL
    private let extra: [String: String]
    private let server = Mutex<ChildProcess?>(nil)

    var url: String { "http://127.0.0.1:\(port)" }

    private init(database: TestDatabase, port: Int, folder: URL, extra: [String: String]) {
        self.database = database
        self.port = port
        self.folder = folder
        self.extra = extra
    }

    /// Migrates a fresh database, starts the gateway (with `environment` added to the
    /// test defaults), runs `body`, stops everything and removes the state folders.
    static func with(
        environment: [String: String] = [:], _ body: (DemoGateway) async throws -> Void
    ) async throws {
        try await MigratedDatabase.with(prefix: "ferry_client", examples: ["puzzle", "tasks"]) { migrated in
            let database = migrated.database
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
                "ferry-demo-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let gateway = DemoGateway(database: database, port: try freePort(), folder: folder, extra: environment)
            do {
                try await gateway.start()
                try await body(gateway)
            } catch {
                await gateway.stop()
                try? FileManager.default.removeItem(at: folder)
                throw error
            }
            await gateway.stop()
            try? FileManager.default.removeItem(at: folder)
        }
    }

    /// Starts `ferry serve` and waits (30 s at most) until it answers `/readyz`.
    func start() async throws {
        let log = folder.appendingPathComponent("serve.log").path
        var environment = [
            "PATH": "/usr/bin:/bin", "FERRY_DATABASE_URL": try database.url(user: "ferry_gateway"),
            "FERRY_JWT_SECRET": testSecret, "FERRY_LISTEN": "127.0.0.1:\(port)", "FERRY_THREADS": "2",
            "FERRY_SHUTDOWN_TIMEOUT": "2", "FERRY_ANONYMOUS_SIGNUPS_PER_HOUR": "100000",
            "FERRY_FAILED_SIGNINS_PER_HOUR": "100000", "FERRY_PUSH_BYTES_PER_SECOND": "100000000",
            "FERRY_REQUESTS_PER_DEVICE": "16", "FERRY_REQUESTS_PER_USER": "32", "FERRY_LOG_LEVEL": "warning",
            // Tokens of a minute make every ferry-demo command refresh first.
            "FERRY_REFRESHES_PER_SESSION": "100000",
        ]
        environment.merge(extra) { _, given in given }
        let child = try ChildProcess(
            try TestRepository.ferryExecutable().path, ["serve"], environment: environment, output: log, errors: log)
        server.withLock { $0 = child }
        let port = self.port
        try await eventually("ferry serve answering /readyz on \(port)", seconds: 30) {
            !child.isRunning || (try? get("/readyz", port: port))?.status == 200
        }
        guard child.isRunning else {
            throw ChildProcessError(
                description: "ferry serve ended: " + ((try? String(contentsOfFile: log, encoding: .utf8)) ?? ""))
        }
        // The port was free while the gateway was down: what answered must be this child
        // alone, or the devices would be talking to another test's gateway.
        let address = try SocketAddress(host: "127.0.0.1", port: port)
        guard TCPListener.otherListeners(on: address, excluding: child.socketInodes) == 0 else {
            child.send(SIGKILL)
            _ = await Self.wait(for: child, seconds: 10)
            throw ChildProcessError(description: "another process took port \(port) while the gateway was down")
        }
    }

    /// Waits (off the concurrency pool's threads) up to `seconds` for `child` to end,
    /// then kills it.
    private static func wait(for child: ChildProcess, seconds: Double) async -> ChildProcess.Ending? {
        try? await offload { child.wait(seconds: seconds).0 }
    }

    /// What `ferry serve` wrote to its log, every start of it.
    var serveLog: String {
        (try? String(contentsOfFile: folder.appendingPathComponent("serve.log").path, encoding: .utf8)) ?? ""
    }

    /// Stops the gateway (SIGTERM, then SIGKILL after 10 s): the devices are offline.
    /// The wait blocks a thread of its own, not one of the concurrency pool's, which the
    /// clients of every test in the process share.
    func stop() async {
        guard
            let child = server.withLock({ server in
                defer { server = nil }
                return server
            })
        else { return }
        child.send(SIGTERM)
        _ = await Self.wait(for: child, seconds: 10)
    }

    /// A state folder: one device.
    func device(_ name: String) -> String { folder.appendingPathComponent(name).path }

    /// Starts `ferry-demo --server … --state <device> arguments…` without waiting; with
    /// `fault`, it kills itself at that fault point (`FERRY_DEMO_FAULT`).
    func startDemo(_ device: String, _ arguments: [String], fault: String? = nil) throws -> (
        ChildProcess, output: String, errors: String
    ) {
        let run = folder.appendingPathComponent("run-\(UUID().uuidString)")
        var environment = ["PATH": "/usr/bin:/bin"]
        if let fault { environment["FERRY_DEMO_FAULT"] = fault }
        let child = try ChildProcess(
            try TestRepository.executable("ferry-demo").path, ["--server", url, "--state", device] + arguments,
            environment: environment, output: run.path + ".out", errors: run.path + ".err")
        return (child, run.path + ".out", run.path + ".err")
    }

    /// Runs `ferry-demo` on `device` to its end (60 s at most).
    @discardableResult
    func demo(_ device: String, _ arguments: String...) async throws -> FerryRun {
        try await demo(device, arguments)
    }

    @discardableResult
    func demo(_ device: String, _ arguments: [String]) async throws -> FerryRun {
        try await demoEnding(device, arguments).run
    }

    /// Runs `ferry-demo` on `device` to its end (60 s at most), killing itself at `fault`
    /// when given; how it ended (an exit, or the fault point's `SIGKILL`) and what it said.
    func demoEnding(_ device: String, _ arguments: [String], fault: String? = nil) async throws -> (
        ending: ChildProcess.Ending, run: FerryRun
    ) {
        let (child, output, errors) = try startDemo(device, arguments, fault: fault)
        let (ending, killed) = try await offload { child.wait(seconds: 60) }
        let run = FerryRun(
            status: ending.exitStatus ?? -1, output: (try? String(contentsOfFile: output, encoding: .utf8)) ?? "",
            errors: (try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")
        try #require(!killed, "ferry-demo \(arguments) did not end within 60 s: \(run.errors)")
        return (ending, run)
    }

    /// Runs `ferry-demo` and requires exit 0; returns its output parsed as JSON (nil when empty).
    @discardableResult
    func demoJSON(_ device: String, _ arguments: String...) async throws -> Any? {
        let run = try await demo(device, arguments)
        try #require(run.status == 0, "ferry-demo \(arguments): exit \(run.status): \(run.errors)")
        let text = run.output.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { return nil }
        return try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
    }

    /// `show TABLE` on `device`: its local rows, as the JSON text ferry-demo printed.
    func show(_ device: String, _ table: String) async throws -> String {
        let run = try await demo(device, ["show", table])
        try #require(run.status == 0, "show \(table): \(run.errors)")
        return run.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `status` on `device`.
    func status(_ device: String) async throws -> [String: Any] {
        try #require(try await demoJSON(device, "status") as? [String: Any])
    }

    /// Every row of `sql`, read as the superuser (Row Level Security does not apply).
    func rows(_ sql: String, _ parameters: [String?] = []) async throws -> [[String?]] {
        let client = try await database.connect()
        do {
            let rows = try await client.query(sql, parameters).rows.map(\.values)
            await client.close()
            return rows
        } catch {
            await client.close()
            throw error
        }
    }
}
