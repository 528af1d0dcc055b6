import FerryPostgres
import FerryTestSupport
import Foundation
import Glibc
import Synchronization

/// A PostgreSQL cluster of a test's own, for what the shared test cluster cannot show: a
/// restore into a fresh cluster, a replica promoted, a point-in-time recovery. Made with
/// the test server's own `initdb` (its major version) in a temporary folder, trusting
/// loopback, on a port of `FERRY_TEST_SCRATCH_PORTS` (`first-last`, default
/// 25460-25475) that nothing listens on. As root, the server programs run as `postgres`,
/// as `ferry db start` runs them. ``remove()`` stops it and deletes its folder.
///
/// The programs run to their end off Swift's concurrency pool (``run(_:_:timeout:)``):
/// an initdb or a base backup takes seconds, and the pool has one thread per core,
/// shared by every test running at once.
struct ScratchCluster: Sendable {
    /// The data directory.
    let dataDirectory: String
    let port: Int
    /// `/usr/lib/postgresql/<major>/bin`.
    let binaries: String

    /// A new, stopped cluster with `settings` appended to its postgresql.conf.
    static func create(binaries: String, settings: String = "") async throws -> ScratchCluster {
        let cluster = ScratchCluster(
            dataDirectory: try makeFolder() + "/data", port: try await takePort(), binaries: binaries)
        try await cluster.runServerProgram(
            "initdb", ["-D", cluster.dataDirectory, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C"])
        try cluster.appendSettings(settings)
        return cluster
    }

    /// A copy of `primary` by `pg_basebackup` (streaming the WAL it needs), stopped; with
    /// `standby`, set up to follow `primary` (`-R`).
    static func baseBackup(of primary: ScratchCluster, standby: Bool) async throws -> ScratchCluster {
        let copy = ScratchCluster(
            dataDirectory: try makeFolder() + "/data", port: try await takePort(), binaries: primary.binaries)
        try await copy.runServerProgram(
            "pg_basebackup",
            ["-D", copy.dataDirectory, "-h", "127.0.0.1", "-p", String(primary.port), "-U", "postgres", "-X", "stream"]
                + (standby ? ["-R"] : []))
        return copy
    }

    /// `postgresql://<user>@127.0.0.1:<port>/<database>`.
    func url(database: String, user: String = "postgres") -> String {
        "postgresql://\(user)@127.0.0.1:\(port)/\(database)"
    }

    func connect(database: String) async throws -> PostgresClient {
        try await PostgresClient.connect(try PostgresConfiguration(url(database: database)))
    }

    func start() async throws {
        try await runServerProgram(
            "pg_ctl",
            [
                "start", "-D", dataDirectory, "-w", "-t", "120", "-l", dataDirectory + "/../server.log",
                "-o", "-p \(port) -c listen_addresses=127.0.0.1 -k /tmp",
            ])
    }

    /// `pg_ctl stop` in `mode` (`fast`, `immediate`: a crash).
    func stop(mode: String = "fast") async throws {
        try await runServerProgram("pg_ctl", ["stop", "-D", dataDirectory, "-w", "-t", "120", "-m", mode])
    }

    /// Promotes a standby and waits until it accepts writes.
    func promote() async throws {
        try await runServerProgram("pg_ctl", ["promote", "-D", dataDirectory, "-w", "-t", "120"])
    }

    /// Appends `settings` to postgresql.conf.
    func appendSettings(_ settings: String) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: dataDirectory + "/postgresql.conf"))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(("\n" + settings + "\n").utf8))
        try handle.close()
    }

    /// Writes `name` in the data directory (recovery.signal, say), as the server's user.
    func writeFile(_ name: String, _ text: String) throws {
        let path = dataDirectory + "/" + name
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        if getuid() == 0 { try Self.runBlocking("/bin/chown", ["postgres:postgres", path]) }
    }

    /// Stops it if it runs (a crash is enough) and deletes its folder.
    func remove() {
        // In a defer, so it blocks: an immediate stop is quick.
        let (program, arguments) = serverProgram("pg_ctl", ["stop", "-D", dataDirectory, "-w", "-m", "immediate"])
        try? Self.runBlocking(program, arguments)
        try? FileManager.default.removeItem(atPath: (dataDirectory as NSString).deletingLastPathComponent)
        _ = Self.taken.withLock { $0.remove(port) }
    }

    /// Runs a server program (initdb, pg_ctl, pg_basebackup) of `binaries`, as `postgres`
    /// when root.
    func runServerProgram(_ name: String, _ arguments: [String]) async throws {
        let (program, arguments) = serverProgram(name, arguments)
        try await Self.run(program, arguments)
    }

    private func serverProgram(_ name: String, _ arguments: [String]) -> (String, [String]) {
        let program = binaries + "/" + name
        return getuid() == 0
            ? ("/usr/sbin/runuser", ["-u", "postgres", "--", program] + arguments) : (program, arguments)
    }

    /// Runs a program to its end on a thread of its own; throws with its output unless it
    /// exits 0.
    static func run(_ executable: String, _ arguments: [String], timeout: Double = 180) async throws {
        try await offload { try runBlocking(executable, arguments, timeout: timeout) }
    }

    /// ``run(_:_:timeout:)`` on the calling thread, for what is quick (chown) or cannot wait
    /// (a defer).
    private static func runBlocking(_ executable: String, _ arguments: [String], timeout: Double = 180) throws {
        let (status, output) = try ChildProcess.run(executable, arguments, timeout: timeout)
        guard status == 0 else {
            throw ScratchClusterError(
                "\(executable) \(arguments.joined(separator: " ")) ended with \(status): \(output)")
        }
    }

    /// A temporary folder the server's user may write in.
    private static func makeFolder() throws -> String {
        let folder = "/tmp/ferry-scratch-\(UUID().uuidString.prefix(8).lowercased())"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        if getuid() == 0 { try runBlocking("/bin/chown", ["postgres:postgres", folder]) }
        return folder
    }

    /// Ports handed out in this run, so that parallel tests never take the same one.
    private static let taken = Mutex<Set<Int>>([])

    /// A port of the range no cluster of this process holds and nothing listens on; when
    /// every one is taken, waits (at most ten minutes) for a test to remove its cluster.
    /// A test holds at most two, so with fewer such tests than ports none waits for ever.
    private static func takePort() async throws -> Int {
        let range = ProcessInfo.processInfo.environment["FERRY_TEST_SCRATCH_PORTS"] ?? "25460-25475"
        let bounds = range.split(separator: "-").compactMap { Int($0) }
        guard bounds.count == 2, bounds[0] <= bounds[1] else {
            throw ScratchClusterError("FERRY_TEST_SCRATCH_PORTS must be first-last, not \(range)")
        }
        for _ in 0..<3000 {
            let port = taken.withLock { taken -> Int? in
                for port in bounds[0]...bounds[1] where !taken.contains(port) && isFree(port) {
                    taken.insert(port)
                    return port
                }
                return nil
            }
            if let port { return port }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw ScratchClusterError("no free port in FERRY_TEST_SCRATCH_PORTS (\(range)) for ten minutes")
    }

    /// Whether 127.0.0.1:`port` can be bound now.
    private static func isFree(_ port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return false }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}

struct ScratchClusterError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
