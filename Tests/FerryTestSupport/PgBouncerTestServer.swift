import Foundation
import Glibc

/// Debian's pgbouncer (`make deps`) on a free loopback port in front of the test cluster,
/// every database and the given users passed through with `auth_type = trust` (the test
/// cluster trusts loopback connections too). Tests point a gateway's `--database-url` at
/// ``url(_:)`` of the URL they would give it directly.
public final class PgBouncerTestServer: Sendable {
    /// The port it listens on, on 127.0.0.1.
    public let port: Int
    private let folder: String
    private let process: ChildProcess

    /// Starts pgbouncer in `poolMode` (`transaction`, `session`) in front of the server
    /// `serverURL` names, with at most `poolSize` server connections per database and
    /// user, and waits until it accepts connections. As root it runs as `postgres`:
    /// pgbouncer refuses to run as root.
    public init(
        inFrontOf serverURL: String, users: [String], poolMode: String = "transaction", poolSize: Int = 4
    ) throws {
        guard let target = URLComponents(string: serverURL), let host = target.host, let serverPort = target.port else {
            throw ChildProcessError(description: "no host and port in \(serverURL)")
        }
        port = try freePort()
        folder = "/tmp/ferry-pgbouncer-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // pgbouncer, run as postgres, writes its log and pid file here.
        chmod(folder, 0o777)
        try users.map { "\"\($0)\" \"\"" }.joined(separator: "\n").appending("\n")
            .write(toFile: folder + "/users.txt", atomically: true, encoding: .utf8)
        try """
        [databases]
        * = host=\(host) port=\(serverPort)

        [pgbouncer]
        listen_addr = 127.0.0.1
        listen_port = \(port)
        unix_socket_dir =
        auth_type = trust
        auth_file = \(folder)/users.txt
        pool_mode = \(poolMode)
        default_pool_size = \(poolSize)
        max_client_conn = 1000
        logfile = \(folder)/pgbouncer.log
        pidfile = \(folder)/pgbouncer.pid

        """.write(toFile: folder + "/pgbouncer.ini", atomically: true, encoding: .utf8)
        let asPostgres = geteuid() == 0 ? ["-u", "postgres"] : []
        process = try ChildProcess(
            "/usr/sbin/pgbouncer", asPostgres + [folder + "/pgbouncer.ini"],
            output: folder + "/stdout.log", errors: folder + "/stdout.log")
        let process = self.process
        let port = self.port
        try eventuallyBlocking("pgbouncer listening on \(port) (is pgbouncer installed? make deps)") {
            !process.isRunning || acceptsConnections(onLoopbackPort: port)
        }
        guard process.isRunning else {
            throw ChildProcessError(description: "pgbouncer ended at start: \(log)")
        }
    }

    deinit {
        process.send(SIGTERM)
        _ = process.wait(seconds: 5)
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// `url` (a `postgresql://` URL to the cluster behind) with its host and port pgbouncer's.
    public func url(_ url: String) throws -> String {
        guard var components = URLComponents(string: url) else {
            throw ChildProcessError(description: "not a URL: \(url)")
        }
        components.host = "127.0.0.1"
        components.port = port
        guard let replaced = components.string else { throw ChildProcessError(description: "cannot rewrite \(url)") }
        return replaced
    }

    /// What pgbouncer logged so far.
    public var log: String {
        ["/stdout.log", "/pgbouncer.log"].compactMap { try? String(contentsOfFile: folder + $0, encoding: .utf8) }
            .joined(separator: "\n")
    }
}
