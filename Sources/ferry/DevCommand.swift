import FerryCommandLine
import FerryGateway
import FerryLoop
import Foundation

/// `ferry dev`: the embedded PostgreSQL, migrations, a dev secret, and the gateway on
/// 127.0.0.1, for working on a laptop.
enum DevCommand: Command {
    static let name = "dev"
    static let summary = "run a local gateway with an embedded PostgreSQL under .ferry/"
    static let usage = """
        ferry dev [--example puzzle|tasks|none] [--dir <directory>]… [options]

        Starts the embedded PostgreSQL (creating it under .ferry/ on first use), applies
        sql/ferry, the example app's migrations (none with --example none), then each --dir
        in the order given (your app's own, as ferry migrate --dir applies them), keeps a
        JWT secret in .ferry/dev-secret, and serves until Ctrl-C. The gateway connects as
        ferry_gateway, as in production.
        Ctrl-C stops the server, then PostgreSQL, unless PostgreSQL was already running
        when ferry dev started (then it is left running, like you left it).
        Other FERRY_* variables of 'ferry serve' (FERRY_THREADS, FERRY_LOG_FORMAT, …) apply.
        """
    static let settings: [Setting] =
        DatabaseCommand.developmentDatabaseSettings + [
            Setting("listen", env: "FERRY_LISTEN", default: "127.0.0.1:8080", help: "address to serve HTTP on"),
            Setting(
                "example", default: "puzzle", help: "example app whose migrations to apply (puzzle, tasks or none)"),
            Setting(
                "dir", env: "FERRY_MIGRATE_DIRS",
                help: "a directory of your own migrations, applied after the example's; labelled by its name",
                isRepeatable: true),
            Setting(
                "sql-root", env: "FERRY_SQL_ROOT", default: "sql",
                help: "directory holding ferry/ and examples/, relative to the current directory"),
        ]

    /// The example apps `--example` accepts (directories under sql/examples).
    static let examples = ["puzzle", "tasks"]
    /// The `--example` that applies no example app.
    static let noExample = "none"

    static func run(_ values: SettingValues) throws -> Int32 {
        let example = try values.choice("example", examples + [noExample])!
        let listen = values.string("listen")!
        let sqlRoot = values.string("sql-root")!
        let directories =
            (example == noExample ? [] : [(sqlRoot as NSString).appendingPathComponent("examples/\(example)")])
            + values.strings("dir")
        try MigrateCommand.checkDirectories(sqlRoot: sqlRoot, directories, values)
        let database = try DatabaseCommand.database(values)
        let startedDatabase: Bool
        do {
            startedDatabase = try database.start()
        } catch let error as DevDatabaseError {
            printError("ferry dev: \(error)")
            return ExitStatus.failure
        }
        let status: Int32
        do {
            status = try serve(
                database, migrator: Migrator(sqlRoot: sqlRoot, extraDirectories: directories), listen: listen)
        } catch {
            stop(database, startedHere: startedDatabase)
            throw error
        }
        stop(database, startedHere: startedDatabase)
        return status
    }

    /// Stops PostgreSQL if this run started it: a database someone else started is theirs.
    private static func stop(_ database: DevDatabase, startedHere: Bool) {
        guard startedHere else {
            printLine("left PostgreSQL running (it was running before ferry dev started)")
            return
        }
        do {
            try database.stop()
            printLine("stopped PostgreSQL")
        } catch {
            printError("ferry dev: \(error)")
        }
    }

    /// Migrates with `migrator`, then serves until the gateway returns; the database is up.
    private static func serve(_ database: DevDatabase, migrator: Migrator, listen: String) throws -> Int32 {
        guard case .running(_, let port) = try database.status() else {
            printError("ferry dev: PostgreSQL stopped unexpectedly (log: \(database.logFile.path))")
            return ExitStatus.failure
        }
        let ownerURL = database.url(port: port)
        let migrated = try runBlocking {
            do {
                try await MigrateCommand.withClient(ownerURL) { client in
                    try await MigrateCommand.migrate(migrator, client, verbose: false)
                }
                return true
            } catch let error as MigrationError {
                printError("ferry dev: \(error)")
                return false
            }
        }
        guard migrated else { return ExitStatus.failure }

        let secret = try developmentSecret(in: database.stateDirectory)
        // The request path logs in as ferry_gateway, so RLS bites in dev as in production;
        // loopback is trusted by the dev cluster, so it needs no password.
        let gatewayURL = "postgresql://ferry_gateway@127.0.0.1:\(port)/\(DevDatabase.databaseName)"
        // Other FERRY_* variables apply (threads, log format, limits); the URLs are the
        // dev cluster's, whatever the environment says.
        let gatewayValues = try SettingValues(
            GatewayConfiguration.settings,
            arguments: ["--database-url", gatewayURL, "--jwt-secret", secret, "--listen", listen],
            environment: ProcessInfo.processInfo.environment.filter { $0.key != "FERRY_LISTEN_DATABASE_URL" },
            defaults: GatewayConfiguration.developmentDefaults)
        let configuration = try GatewayConfiguration(gatewayValues)

        let base =
            "http://\(configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host):\(configuration.port)"
        printLine(
            """

            Ferry dev: \(base)  (database \(ownerURL), migrations \(migrator.directories.map(\.label).joined(separator: ", ")))
            Try:
              curl -i \(base)/healthz
              curl -i \(base)/readyz
              curl -s \(base)/metrics
              curl -s -X POST \(base)/v1/auth/anonymous -d '{"device_id":"\(UUID().uuidString.lowercased())"}'
            Limits per hour here: \(configuration.anonymousSignUpsPerHour) anonymous sign-ups per address, \
            \(configuration.failedSignInsPerHour) failed sign-ins per email and per address, \
            \(configuration.signInsPerAccountPerHour) sign-ins per account; \
            \(configuration.passwordHashesPerAddress) password checks in flight per address \
            (ferry serve: 30, 20, 30 and 1 by default; docs/OPERATIONS.md, "Rate limits").
            Ctrl-C stops it.

            """)
        return Gateway.serve(configuration)
    }

    /// The HS256 secret in `.ferry/dev-secret`: 32 random bytes, base64, made on first
    /// use and kept, so tokens issued by earlier runs stay valid.
    static func developmentSecret(in stateDirectory: URL) throws -> String {
        let file = stateDirectory.appendingPathComponent("dev-secret")
        if let text = try? String(contentsOf: file, encoding: .utf8), text.trimmed.utf8.count >= 32 {
            return text.trimmed
        }
        guard let random = FileHandle(forReadingAtPath: "/dev/urandom") else {
            throw DevDatabaseError("cannot open /dev/urandom for the dev secret")
        }
        defer { try? random.close() }
        let bytes = try random.read(upToCount: 32) ?? Data()
        guard bytes.count == 32 else { throw DevDatabaseError("short read from /dev/urandom") }
        let secret = bytes.base64EncodedString()
        try FileManager.default.createDirectory(at: stateDirectory, withIntermediateDirectories: true)
        guard
            FileManager.default.createFile(
                atPath: file.path, contents: Data((secret + "\n").utf8), attributes: [.posixPermissions: 0o600])
        else {
            throw DevDatabaseError("cannot write \(file.path)")
        }
        printLine("made a new dev JWT secret in \(file.path)")
        return secret
    }
}
