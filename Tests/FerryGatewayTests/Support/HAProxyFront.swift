import FerryLoop
import FerryTestSupport
import Foundation
import Synchronization
import Testing

/// Debian's haproxy (`make deps`) in front of two `ferry serve` processes on one
/// database, with deploy/haproxy.cfg as the operator copies it: only its addresses are
/// the test's (loopback ports, no TLS, no chroot, a smaller maxconn). haproxy connects to
/// the gateways from 127.0.0.9, their one trusted proxy, with `send-proxy-v2`; the test
/// talks to a gateway directly from 127.0.0.1, which they serve as itself.
final class HAProxyFront: Sendable {
    /// Where haproxy listens.
    let port: Int
    /// The gateways, each a child process.
    let gateways: [ServedGateway]
    let database: AccountsDatabase
    private let folder: URL

    /// The address haproxy connects to the gateways from.
    static let proxyAddress = "127.0.0.9"

    private init(port: Int, gateways: [ServedGateway], database: AccountsDatabase, folder: URL) {
        self.port = port
        self.gateways = gateways
        self.database = database
        self.folder = folder
    }

    /// Migrates a database with the tasks example, starts two gateways (`environment`
    /// added to theirs) and haproxy in front (with `settings` in place of the file's
    /// lines of those names, `"timeout client": "2s"`), runs `body`, stops them all.
    static func with(
        environment: [String: String] = [:], settings: [String: String] = [:],
        _ body: (HAProxyFront) async throws -> Void
    ) async throws {
        try await AccountsDatabase.with(examples: ["tasks"]) { database in
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
                "ferry-haproxy-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            var gateways: [ServedGateway] = []
            defer { for gateway in gateways { gateway.stop() } }
            for index in 1...2 {
                let gateway = ServedGateway(
                    name: "gw\(index)", port: try freePort(), databaseURL: database.gatewayURL, folder: folder,
                    environment: environment.merging(["FERRY_TRUSTED_PROXIES": proxyAddress]) { given, _ in given })
                gateways.append(gateway)
                try await gateway.start()
            }
            let port = try freePort()
            try await serve(try config(port: port, gateways: gateways, settings: settings), port: port, in: folder) {
                try await body(HAProxyFront(port: port, gateways: gateways, database: database, folder: folder))
            }
        }
    }

    /// Checks `configuration` (`haproxy -c`), runs haproxy on it (logging to
    /// `folder`/haproxy.log) until `body` returns, once it answers `/readyz` on `port`.
    static func serve(
        _ configuration: String, port: Int, in folder: URL, _ body: () async throws -> Void
    ) async throws {
        let path = folder.appendingPathComponent("haproxy.cfg").path
        try configuration.write(toFile: path, atomically: true, encoding: .utf8)
        let check = try ChildProcess.run("/usr/sbin/haproxy", ["-c", "-q", "-f", path], timeout: 30)
        try #require(check.status == 0, "haproxy -c: \(check.output)")
        let log = folder.appendingPathComponent("haproxy.log").path
        let haproxy = try ChildProcess("/usr/sbin/haproxy", ["-db", "-f", path], output: log, errors: log)
        defer {
            haproxy.send(SIGTERM)
            _ = haproxy.wait(seconds: 5)
        }
        try await eventually("haproxy answering /readyz on \(port) (is haproxy installed? make deps)") {
            haproxy.isRunning && (try? get("/readyz", port: port))?.status == 200
        }
        try await body()
    }

    /// deploy/haproxy.cfg with the test's addresses: the lines that name the operator's
    /// machine (bind, server, the TLS redirect, chroot, syslog, the admin socket, the
    /// user) are replaced or dropped; every timeout, retry and check is the file's own.
    static func config(port: Int, gateways: [ServedGateway], settings: [String: String] = [:]) throws -> String {
        let shipped = try String(contentsOfFile: TestRepository.root + "/deploy/haproxy.cfg", encoding: .utf8)
        var lines: [String] = []
        for line in shipped.split(separator: "\n", omittingEmptySubsequences: false) {
            let words = line.split(separator: " ")
            if let name = settings.keys.first(where: { line.drop(while: { $0 == " " }).hasPrefix($0 + " ") }) {
                lines.append("    \(name) \(settings[name]!)")
                continue
            }
            switch words.first {
            case "log" where words.count > 2, "user", "group", "chroot", "stats", "http-request":
                continue
            case "maxconn":
                lines.append("    maxconn 4000")
            case "bind":
                if !line.contains(" ssl ") { continue }
                lines.append("    bind 127.0.0.1:\(port)")
            case "server":
                continue
            case "default-server":
                lines.append(line + " source \(proxyAddress)")
                for gateway in gateways { lines.append("    server \(gateway.name) 127.0.0.1:\(gateway.port)") }
            default:
                lines.append(String(line))
            }
        }
        return lines.joined(separator: "\n")
    }

    /// Shard N's gateway (`databaseURLs[N]`, named `shard<N>-gw1` as
    /// deploy/haproxy-shards.cfg names it, every shard but 0 with a JWT secret of its own,
    /// and `environment(N, ports)` added, `ports` being every shard's gateway port) for
    /// each shard, and haproxy with deploy/haproxy-shards.cfg (``shardsConfig(port:gateways:)``)
    /// in front; runs `body` with haproxy's port and the gateways, then stops them all.
    static func withShards(
        databaseURLs: [String],
        environment: (_ shard: Int, _ ports: [Int]) -> [String: String] = { _, _ in [:] },
        _ body: (Int, [ServedGateway]) async throws -> Void
    ) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-haproxy-shards-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let ports = try databaseURLs.map { _ in try freePort() }
        var gateways: [ServedGateway] = []
        defer { for gateway in gateways { gateway.stop() } }
        for (shard, databaseURL) in databaseURLs.enumerated() {
            var settings = ["FERRY_TRUSTED_PROXIES": proxyAddress]
            if shard > 0 { settings["FERRY_JWT_SECRET"] = String(repeating: "shard \(shard) secret ", count: 4) }
            settings.merge(environment(shard, ports)) { _, given in given }
            let gateway = ServedGateway(
                name: "shard\(shard)-gw1", port: ports[shard], databaseURL: databaseURL, folder: folder,
                environment: settings)
            gateways.append(gateway)
            try await gateway.start()
        }
        let port = try freePort()
        try await serve(try shardsConfig(port: port, gateways: gateways), port: port, in: folder) {
            try await body(port, gateways)
        }
    }

    /// deploy/haproxy.cfg's global and defaults sections as ``config(port:gateways:settings:)``
    /// has them, then deploy/haproxy-shards.cfg with the test's addresses: its bind on
    /// loopback, no TLS redirect, each server line on the test's gateway of that name.
    static func shardsConfig(port: Int, gateways: [ServedGateway]) throws -> String {
        let base = try config(port: port, gateways: [])
        let head = try #require(base.range(of: "\nfrontend ferry")).lowerBound
        let shipped = try String(contentsOfFile: TestRepository.root + "/deploy/haproxy-shards.cfg", encoding: .utf8)
        var lines = [String(base[..<head])]
        for line in shipped.split(separator: "\n", omittingEmptySubsequences: false) {
            let words = line.split(separator: " ")
            switch words.first {
            case "bind":
                if line.contains(" ssl ") { lines.append("    bind 127.0.0.1:\(port)") }
            case "http-request" where line.contains("redirect"):
                continue
            case "server":
                let gateway = try #require(gateways.first { $0.name == words[1] }, "no gateway \(words[1])")
                lines.append("    server \(gateway.name) 127.0.0.1:\(gateway.port)")
            case "default-server":
                lines.append(line + " source \(proxyAddress)")
            default:
                lines.append(String(line))
            }
        }
        return lines.joined(separator: "\n")
    }

    /// What haproxy wrote.
    var haproxyLog: String {
        (try? String(contentsOfFile: folder.appendingPathComponent("haproxy.log").path, encoding: .utf8)) ?? ""
    }

    // MARK: - Requests through haproxy

    /// One request through haproxy from `source` (a loopback address: the client haproxy
    /// names), sent again while haproxy itself answers `503` (its page, not a gateway's
    /// JSON: it had no gateway to send it to, as between a gateway's crash and its check
    /// failing), as a client retries a `503`; 20 s at most.
    func call(
        _ method: String, _ path: String, token: String? = nil, json: [String: Any]? = nil, source: String = "127.0.0.1"
    ) async throws -> APIResponse {
        try await Self.call(method, path, port: port, token: token, json: json, source: source)
    }

    /// ``call(_:_:token:json:source:)`` to the haproxy at `port`.
    static func call(
        _ method: String, _ path: String, port: Int, token: String? = nil, json: [String: Any]? = nil,
        source: String = "127.0.0.1"
    ) async throws -> APIResponse {
        try await eventually("\(method) \(path) answered by a gateway", seconds: 20) {
            () async throws -> APIResponse? in
            let response = try await FerryTestSupport.call(
                method, path, port: port, token: token, json: json, source: source)
            return response.status == 503 && response.object == nil ? nil : response
        }
    }

    /// An anonymous sign-up from `source`, required to answer 201.
    func signUp(from source: String) async throws -> TestSession {
        try await Self.signUp(port: port, from: source)
    }

    /// ``signUp(from:)`` through the haproxy at `port`.
    static func signUp(port: Int, from source: String = "127.0.0.1") async throws -> TestSession {
        let device = UUID().uuidString.lowercased()
        let response = try await call(
            "POST", "/v1/auth/anonymous", port: port, json: ["device_id": device], source: source)
        try #require(response.status == 201, "sign-up: \(response)")
        return TestSession(
            userID: try #require(response.string("user", "id")),
            accessToken: try #require(response.string("session", "access_token")),
            refreshToken: try #require(response.string("session", "refresh_token")), deviceID: device)
    }

    /// A stream through haproxy.
    func openStream(_ session: TestSession, _ transport: StreamTestClient.Transport) async throws -> StreamTestClient {
        let port = port
        return try await offload {
            try StreamTestClient(port: port, transport: transport, token: session.accessToken)
        }
    }

    /// `GET /v1/pull` as `session` through haproxy.
    func pull(_ session: TestSession, cursor: String?) async throws -> PullPage {
        PullPage(
            response: try await call(
                "GET", "/v1/pull" + (cursor.map { "?cursor=\($0)" } ?? ""), token: session.accessToken))
    }

    /// The ids of `session`'s tasks in the database.
    func tasks(of session: TestSession) async throws -> Set<String> {
        Set(
            try await database.rows("select id from public.tasks where user_id = $1", [session.userID])
                .compactMap { $0[0] })
    }
}

/// One `ferry serve` child process of an ``HAProxyFront``.
final class ServedGateway: Sendable {
    let name: String
    let port: Int
    private let databaseURL: String
    private let log: String
    private let environment: [String: String]
    private let process = Mutex<ChildProcess?>(nil)

    init(name: String, port: Int, databaseURL: String, folder: URL, environment: [String: String]) {
        self.name = name
        self.port = port
        self.databaseURL = databaseURL
        self.log = folder.appendingPathComponent("\(name).log").path
        self.environment = environment
    }

    /// Starts `ferry serve` and waits until it answers `/readyz` (30 s at most).
    func start() async throws {
        var environment = [
            "PATH": "/usr/bin:/bin", "FERRY_DATABASE_URL": databaseURL, "FERRY_JWT_SECRET": testSecret,
            "FERRY_LISTEN": "127.0.0.1:\(port)", "FERRY_THREADS": "1", "FERRY_SHUTDOWN_TIMEOUT": "2",
            "FERRY_LOG_LEVEL": "info",
        ]
        environment.merge(self.environment) { _, given in given }
        let child = try ChildProcess(
            try TestRepository.ferryExecutable().path, ["serve"], environment: environment, output: log, errors: log)
        process.withLock { $0 = child }
        let port = port
        try await eventually("\(name) answering /readyz on \(port)", seconds: 30) {
            !child.isRunning || (try? get("/readyz", port: port))?.status == 200
        }
        guard child.isRunning else { throw ChildProcessError(description: "\(name) ended: \(serveLog)") }
    }

    /// `kill -9`: the process ends with its connections, as a crashed machine's would.
    func kill() async throws {
        guard let child = process.withLock({ $0 }) else { return }
        child.send(SIGKILL)
        _ = try await offload { child.wait() }
    }

    /// SIGTERM, then SIGKILL after 10 s.
    func stop() {
        guard let child = process.withLock({ $0 }) else { return }
        child.send(SIGTERM)
        _ = child.wait(seconds: 10)
    }

    /// Streams open on this gateway, from its `/metrics`, asked directly.
    func streamsOpen() async throws -> Int {
        try await metric("ferry_streams_open", port: port)
    }

    /// What it logged.
    var serveLog: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
}
