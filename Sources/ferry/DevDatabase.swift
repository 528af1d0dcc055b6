import Foundation

/// The embedded development PostgreSQL that `ferry db` and `ferry dev` run from a
/// project's `.ferry/` directory.
///
/// Layout, created on first start:
///
///     .ferry/cluster/            the cluster root: a directory, or a symlink to
///                                /var/tmp/ferry-<hash>/ when the postgres user
///                                cannot reach the project (see below)
///       data/                    PGDATA (initdb: trust auth, UTF8, C locale)
///       postgres.log             the server log
///       run/                     the unix socket directory
///
/// It lives in the `ferry` executable rather than FerryGateway because only the
/// CLI starts development clusters; the gateway library never spawns initdb.
///
/// `initdb`, `pg_ctl` and `postgres` refuse to run as root, so as root they run as
/// the `postgres` user (`runuser -u postgres --`). That user may be unable to
/// traverse the project folder (a CI clone under /root, mode 700); then the cluster
/// root lives in `/var/tmp/ferry-<hash of the .ferry path>/` and `.ferry/cluster`
/// points at it. A socket path must stay under 100 bytes, so a deep project gets
/// its socket directory in `/tmp/ferry-<hash>/` instead.
struct DevDatabase {
    /// The port when `FERRY_DEV_PG_PORT` is not set: uncommon, so it does not clash
    /// with a system PostgreSQL on 5432, no well-known service's (/etc/services), and
    /// below Linux's ephemeral range (32768–60999, `net.ipv4.ip_local_port_range`), where
    /// any outgoing connection may hold a port for a while, free as it looked.
    static let defaultPort = 15329
    /// The default before ``defaultPort``, inside the ephemeral range: a cluster started
    /// on it keeps running there, and `start` says how to move it.
    static let formerDefaultPort = 54329
    /// The superuser initdb creates; also the user name in ``url``.
    static let superuser = "postgres"
    /// The database `ferry dev` and the tests' maintenance connection use.
    static let databaseName = "ferry"

    /// The `.ferry` directory, absolute.
    let stateDirectory: URL
    /// The port to start on (a running cluster keeps the port it was started with).
    let port: Int
    /// Where progress lines go.
    let report: (String) -> Void

    /// A development database rooted at `stateDirectory` (relative paths resolve
    /// against the current directory).
    init(stateDirectory: String, port: Int, report: @escaping (String) -> Void) {
        let base = URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
        self.stateDirectory =
            URL(fileURLWithPath: stateDirectory, isDirectory: true, relativeTo: base)
            .standardizedFileURL
        self.port = port
        self.report = report
    }

    // MARK: - Where things are

    /// `.ferry/cluster`: a directory or a symlink to the external cluster root.
    var clusterLink: URL { stateDirectory.appendingPathComponent("cluster") }
    /// The cluster root with symlinks resolved.
    var clusterRoot: URL { clusterLink.resolvingSymlinksInPath() }
    /// PGDATA.
    var dataDirectory: URL { clusterRoot.appendingPathComponent("data") }
    /// The server log.
    var logFile: URL { clusterRoot.appendingPathComponent("postgres.log") }
    /// Where the cluster root goes when the postgres user cannot reach `.ferry`.
    var externalClusterRoot: URL { URL(fileURLWithPath: "/var/tmp/ferry-\(pathHash)") }

    /// The unix socket directory: under the cluster root unless the socket path
    /// would be too long for `sun_path`.
    var socketDirectory: URL {
        let local = clusterRoot.appendingPathComponent("run")
        if (local.path + "/.s.PGSQL.\(port)").utf8.count < 100 { return local }
        return URL(fileURLWithPath: "/tmp/ferry-\(pathHash)")
    }

    /// A short stable name for this `.ferry` directory (FNV-1a of its path), so two
    /// checkouts never share an external directory.
    var pathHash: String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in stateDirectory.path.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return String(hash, radix: 16)
    }

    /// The superuser URL of the `ferry` database over loopback TCP.
    func url(port: Int) -> String {
        "postgresql://\(Self.superuser)@127.0.0.1:\(port)/\(Self.databaseName)"
    }

    /// The server programs for this cluster: those of the major version in its
    /// `PG_VERSION` when installed (a cluster only runs under its own major version),
    /// else the newest.
    func binaries() throws -> PostgresBinaries {
        let version = try? String(contentsOf: dataDirectory.appendingPathComponent("PG_VERSION"), encoding: .utf8)
        return try PostgresBinaries.find(preferring: version?.trimmed)
    }

    /// Whether we are root, so the server must run as the postgres user.
    var runsAsPostgresUser: Bool { getuid() == 0 }

    // MARK: - State

    /// What ``status()`` found.
    enum State: Equatable {
        /// No cluster under `.ferry/` yet.
        case absent
        /// A cluster exists and no server runs on it.
        case stopped
        /// A server runs on the cluster.
        case running(pid: Int, port: Int)
    }

    /// Whether the cluster exists and runs, from `pg_ctl status` and `postmaster.pid`.
    func status() throws -> State {
        guard FileManager.default.fileExists(atPath: dataDirectory.appendingPathComponent("PG_VERSION").path) else {
            return .absent
        }
        let binaries = try binaries()
        let result = try run(binaries.pgCtl, ["status", "-D", dataDirectory.path], asServerUser: true)
        guard result.status == 0 else { return .stopped }
        // postmaster.pid: line 1 the pid, line 4 the port (PostgreSQL's documented layout).
        let lines = (try? String(contentsOf: dataDirectory.appendingPathComponent("postmaster.pid"), encoding: .utf8))?
            .split(separator: "\n", omittingEmptySubsequences: false)
        guard let lines, lines.count > 3, let pid = Int(lines[0]), let runningPort = Int(lines[3]) else {
            return .running(pid: 0, port: port)
        }
        return .running(pid: pid, port: runningPort)
    }

    // MARK: - Start and stop

    /// Creates the cluster if needed, starts it unless it runs, creates the `ferry`
    /// database if missing. Returns whether this call started the server.
    @discardableResult
    func start() throws -> Bool {
        let binaries = try binaries()
        var state = try status()
        if state == .absent {
            try create(binaries)
            state = .stopped
        }
        var started = false
        var runningPort = port
        switch state {
        case .running(let pid, let actualPort):
            runningPort = actualPort
            var line = "PostgreSQL already running (pid \(pid)) at \(url(port: actualPort))"
            if actualPort == Self.formerDefaultPort && port == Self.defaultPort {
                line +=
                    " (the former default port: the default is now \(port), below the ports Linux lends to "
                    + "outgoing connections; run 'ferry db stop' first to move it)"
            } else if actualPort != port {
                line += " (port \(port) asked for: run 'ferry db stop' first to move it)"
            }
            report(line)
        case .stopped, .absent:
            try launch(binaries)
            started = true
            report("started PostgreSQL \(binaries.version) at \(url(port: port)) (log: \(displayPath(logFile)))")
        }
        try createDatabaseIfMissing(binaries, port: runningPort)
        return started
    }

    /// Stops the server if it runs (fast shutdown: sessions are cut, nothing is lost).
    /// Returns whether it was running.
    @discardableResult
    func stop() throws -> Bool {
        guard case .running = try status() else { return false }
        let binaries = try binaries()
        let result = try run(
            binaries.pgCtl, ["stop", "-D", dataDirectory.path, "-m", "fast", "-w", "-t", "60"], asServerUser: true)
        guard result.status == 0 else {
            throw DevDatabaseError("pg_ctl stop failed: \(result.output.trimmed)")
        }
        return true
    }

    /// Stops the server and deletes the cluster (its data, log and socket directory).
    /// `.ferry/dev-secret` stays.
    func reset() throws {
        try stop()
        let fileManager = FileManager.default
        let root = clusterRoot
        for directory in [socketDirectory, root] where fileManager.fileExists(atPath: directory.path) {
            try fileManager.removeItem(at: directory)
        }
        if (try? fileManager.destinationOfSymbolicLink(atPath: clusterLink.path)) != nil {
            try fileManager.removeItem(at: clusterLink)
        }
    }

    // MARK: - Creating the cluster

    private func create(_ binaries: PostgresBinaries) throws {
        let fileManager = FileManager.default
        try fileManager.createDirectory(at: stateDirectory, withIntermediateDirectories: true)
        // A dangling symlink (the external directory was wiped) is dropped and made again.
        if (try? fileManager.destinationOfSymbolicLink(atPath: clusterLink.path)) != nil,
            !fileManager.fileExists(atPath: clusterLink.path)
        {
            try fileManager.removeItem(at: clusterLink)
        }
        if !fileManager.fileExists(atPath: clusterLink.path) {
            if runsAsPostgresUser && !serverUserCanReach(stateDirectory) {
                try makeServerDirectory(externalClusterRoot)
                try fileManager.createSymbolicLink(at: clusterLink, withDestinationURL: externalClusterRoot)
                report(
                    "note: the postgres user cannot reach \(stateDirectory.path), so the cluster lives in "
                        + "\(externalClusterRoot.path) (linked from \(displayPath(clusterLink)))")
            } else {
                try makeServerDirectory(clusterLink)
            }
        }
        report("creating a PostgreSQL \(binaries.version) cluster in \(displayPath(clusterLink)) (initdb)")
        let result = try run(
            binaries.initdb,
            [
                "-D", dataDirectory.path, "-U", Self.superuser, "--auth-local=trust", "--auth-host=trust",
                "--encoding=UTF8", "--locale=C", "--no-instructions",
            ],
            asServerUser: true)
        guard result.status == 0 else {
            throw DevDatabaseError("initdb failed: \(result.output.trimmed)")
        }
        // A throwaway cluster: durability traded for speed (tests create many databases),
        // but never a commit a crash of PostgreSQL alone could lose (synchronous_commit
        // on: with fsync off it costs a write(2), and a lost commit's xid is handed out
        // again, which a cursor cannot tell apart).
        let settings = """

            # Added by `ferry db start`: a development cluster. Reset it with `ferry db reset`.
            listen_addresses = '127.0.0.1'
            max_connections = 500
            fsync = off
            synchronous_commit = on
            full_page_writes = off

            """
        let configuration = dataDirectory.appendingPathComponent("postgresql.conf")
        let handle = try FileHandle(forWritingTo: configuration)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(settings.utf8))
        try handle.close()
    }

    /// Starts the server and waits until it accepts connections.
    private func launch(_ binaries: PostgresBinaries) throws {
        let socket = socketDirectory
        try makeServerDirectory(socket)
        let logStart = (try? FileManager.default.attributesOfItem(atPath: logFile.path)[.size] as? Int) ?? 0
        // pg_ctl hands these to a shell: quote the path. max_connections and
        // synchronous_commit again, for a cluster made before postgresql.conf asked for
        // them (parallel tests open many connections; a crash must lose no commit).
        let options =
            "-p \(port) -k \"\(socket.path)\" -c listen_addresses=127.0.0.1 -c max_connections=500"
            + " -c synchronous_commit=on"
        let result = try run(
            binaries.pgCtl,
            ["start", "-D", dataDirectory.path, "-l", logFile.path, "-w", "-t", "120", "-o", options],
            asServerUser: true)
        guard result.status == 0 else {
            let log = newLogText(from: logStart)
            if log.contains("Address already in use") {
                throw DevDatabaseError(
                    "port \(port) is taken (another checkout's dev database?): "
                        + "set FERRY_DEV_PG_PORT to a free port, e.g. FERRY_DEV_PG_PORT=\(port + 1)")
            }
            let lastLines = log.split(separator: "\n").suffix(5).joined(separator: " | ")
            throw DevDatabaseError(
                "PostgreSQL did not start (log \(logFile.path)): \(lastLines.isEmpty ? result.output.trimmed : lastLines)"
            )
        }
    }

    private func createDatabaseIfMissing(_ binaries: PostgresBinaries, port: Int) throws {
        let connection = ["-h", "127.0.0.1", "-p", String(port), "-U", Self.superuser]
        let exists = try run(
            binaries.psql,
            connection + ["-d", "postgres", "-X", "-tAc", "select 1 from pg_database where datname = 'ferry'"],
            asServerUser: false)
        guard exists.status == 0 else {
            throw DevDatabaseError("could not query the dev database: \(exists.output.trimmed)")
        }
        guard exists.output.trimmed != "1" else { return }
        let created = try run(binaries.createdb, connection + [Self.databaseName], asServerUser: false)
        // Another `ferry db start` may have created it a moment ago.
        guard created.status == 0 || created.output.contains("already exists") else {
            throw DevDatabaseError("createdb \(Self.databaseName) failed: \(created.output.trimmed)")
        }
    }

    // MARK: - Processes and permissions

    /// Runs a program and returns its exit status with stdout and stderr combined.
    /// Server programs run as the postgres user when we are root; the working
    /// directory is `/` because `postgres` fails when it cannot read its cwd.
    private func run(_ executable: String, _ arguments: [String], asServerUser: Bool) throws -> ProcessOutput {
        if asServerUser && runsAsPostgresUser {
            return try ProcessOutput.run("/usr/sbin/runuser", ["-u", "postgres", "--", executable] + arguments)
        }
        return try ProcessOutput.run(executable, arguments)
    }

    private func serverUserCanReach(_ directory: URL) -> Bool {
        (try? ProcessOutput.run("/usr/sbin/runuser", ["-u", "postgres", "--", "test", "-x", directory.path]))?
            .status == 0
    }

    /// Creates a directory the server may write to: owned by postgres when we are root.
    private func makeServerDirectory(_ directory: URL) throws {
        let fileManager = FileManager.default
        try fileManager.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if runsAsPostgresUser {
            try fileManager.setAttributes(
                [.ownerAccountName: "postgres", .groupOwnerAccountName: "postgres"], ofItemAtPath: directory.path)
        }
    }

    private func newLogText(from offset: Int) -> String {
        guard let handle = try? FileHandle(forReadingFrom: logFile) else { return "" }
        defer { try? handle.close() }
        try? handle.seek(toOffset: UInt64(offset))
        return String(decoding: (try? handle.readToEnd()) ?? Data(), as: UTF8.self)
    }

    /// A path relative to the current directory when it is inside it.
    func displayPath(_ url: URL) -> String {
        let current = FileManager.default.currentDirectoryPath + "/"
        return url.path.hasPrefix(current) ? String(url.path.dropFirst(current.count)) : url.path
    }
}

/// The PostgreSQL server programs, from the newest `/usr/lib/postgresql/<version>/bin`
/// (Debian's layout), or `FERRY_PG_BIN` when set.
struct PostgresBinaries {
    /// The directory holding them.
    let directory: String
    /// The major version, from the directory name ("15"), or "" when unknown.
    let version: String

    var initdb: String { directory + "/initdb" }
    var pgCtl: String { directory + "/pg_ctl" }
    var psql: String { directory + "/psql" }
    var createdb: String { directory + "/createdb" }

    /// Finds the binaries of major version `preferredVersion` when installed, else the
    /// newest, or explains which Debian package to install.
    static func find(preferring preferredVersion: String? = nil) throws -> PostgresBinaries {
        let fileManager = FileManager.default
        if let directory = ProcessInfo.processInfo.environment["FERRY_PG_BIN"], !directory.isEmpty {
            guard fileManager.isExecutableFile(atPath: directory + "/initdb") else {
                throw DevDatabaseError("FERRY_PG_BIN=\(directory) has no initdb")
            }
            return PostgresBinaries(directory: directory, version: "")
        }
        let versions = ((try? fileManager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .compactMap { Int($0) }
            .sorted { first, second in
                // The preferred version first, then newest first.
                (String(first) == preferredVersion ? 1 : 0, first) > (
                    String(second) == preferredVersion ? 1 : 0, second
                )
            }
        for version in versions {
            let directory = "/usr/lib/postgresql/\(version)/bin"
            if fileManager.isExecutableFile(atPath: directory + "/initdb")
                && fileManager.isExecutableFile(atPath: directory + "/pg_ctl")
            {
                return PostgresBinaries(directory: directory, version: String(version))
            }
        }
        throw DevDatabaseError(
            "PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin: install the Debian package "
                + "'postgresql' (apt-get install -y postgresql, or run 'make deps'), or set FERRY_PG_BIN")
    }
}

/// A failure of the development database, printed as one line.
struct DevDatabaseError: Error, CustomStringConvertible {
    /// The line to print.
    let description: String

    init(_ description: String) { self.description = description }
}

/// The exit status and combined output of a finished program.
struct ProcessOutput {
    /// The exit status (or 128 + signal).
    let status: Int32
    /// Standard output and standard error, interleaved.
    let output: String

    /// Runs `executable` to completion, in `/`, with stdin from /dev/null and no
    /// descriptor but 0, 1 and 2 inherited.
    ///
    /// Not Foundation's `Process`: on Linux it notices a child's exit when a socket
    /// the child inherits is closed, and `pg_ctl start` hands that socket on to the
    /// postmaster it leaves running, so the wait never ends. `posix_spawn` with every
    /// other descriptor marked close-on-exec, and `waitpid`, has no such tie. Output
    /// goes to a temporary file rather than a pipe for the same reason. The program
    /// starts through `/bin/sh` to `cd /` first: `postgres` fails when it cannot read
    /// its working directory (a project under /root, run as the postgres user).
    static func run(_ executable: String, _ arguments: [String]) throws -> ProcessOutput {
        let outputFile = FileManager.default.temporaryDirectory
            .appendingPathComponent("ferry-\(getpid())-\(UUID().uuidString).out")
        let outputDescriptor = open(outputFile.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard outputDescriptor >= 0 else {
            throw DevDatabaseError("cannot create \(outputFile.path): \(String(cString: strerror(errno)))")
        }
        defer {
            close(outputDescriptor)
            unlink(outputFile.path)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, outputDescriptor, 1)
        posix_spawn_file_actions_adddup2(&actions, outputDescriptor, 2)
        markDescriptorsCloseOnExec()
        let shell = ["/bin/sh", "-c", "cd / && exec \"$0\" \"$@\"", executable]
        let argv = (shell + arguments).map { strdup($0) } + [nil]
        defer { for argument in argv { free(argument) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/sh", &actions, nil, argv, environ)
        guard spawned == 0 else {
            throw DevDatabaseError("cannot run \(executable): \(String(cString: strerror(spawned)))")
        }
        var waitStatus: Int32 = 0
        while waitpid(pid, &waitStatus, 0) < 0 && errno == EINTR {}
        // The wait status layout of <sys/wait.h>: low 7 bits the signal, next 8 the exit code.
        let signal = waitStatus & 0x7f
        let status = signal == 0 ? (waitStatus >> 8) & 0xff : 128 + signal
        let output = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
        return ProcessOutput(status: status, output: output)
    }

    /// Sets `FD_CLOEXEC` on every open descriptor above 2, so a spawned daemon
    /// inherits none of ours (glibc's `closefrom` spawn action is not visible to Swift).
    private static func markDescriptorsCloseOnExec() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return }
        for descriptor in names.compactMap({ Int32($0) }) where descriptor > 2 {
            let flags = fcntl(descriptor, F_GETFD)
            if flags >= 0 && flags & FD_CLOEXEC == 0 { _ = fcntl(descriptor, F_SETFD, flags | FD_CLOEXEC) }
        }
    }
}

extension String {
    /// Without leading and trailing white space and newlines.
    var trimmed: String { trimmingCharacters(in: .whitespacesAndNewlines) }
}
