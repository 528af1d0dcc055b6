import FerryCommandLine
import FerryGateway
import FerryLoop
import FerryPostgres
import Foundation

/// `ferry migrate`: applies `sql/ferry` and then each `--dir`, or reports where they stand.
enum MigrateCommand: Command {
    static let name = "migrate"
    static let summary = "apply SQL migrations"
    static let usage = """
        ferry migrate [--dir <directory>]… [--status | --dry-run] [options]
        ferry migrate --directory [--status | --dry-run] [options]

        Applies <sql-root>/ferry, then each --dir in the order given (without --dir, those
        of FERRY_MIGRATE_DIRS, separated by ':'). In each directory: its numbered *.sql
        files in file-name order, each once, in its own transaction; then the files of its
        functions/ folder that are new or changed since they were applied, in file-name
        order, in one transaction. The ledger ferry.schema_migrations records name (e.g.
        puzzle/0001_tables.sql, ferry/functions/push.sql), SHA-256 and time. Refuses to run
        when an applied numbered file has changed, or on a database made by an earlier
        version of Ferry. Two migrators on one database take turns (advisory lock). Run it
        as the database owner or a superuser, not as ferry_gateway.
        --status lists every file and every row of the ledger, those of directories not
        given too. docs/TABLES.md says how to write your own.
        --directory applies <sql-root>/directory instead, the email directory of a sharded
        deployment (docs/SCALING.md), to its own database: --directory-database-url
        (FERRY_DIRECTORY_MIGRATE_DATABASE_URL), else --database-url as above.
        Exit status: 0 done, 1 a file failed or changed, a refused database, or a database
        error; 2 bad settings (no URL, a --dir or <sql-root>/ferry that is not a directory).
        """
    static let settings: [Setting] = [
        Setting(
            "database-url", env: "FERRY_MIGRATE_DATABASE_URL",
            help: "PostgreSQL URL of an owner or superuser role (falls back to FERRY_DATABASE_URL)",
            isOptional: true, isSecret: true),
        Setting(
            "sql-root", env: "FERRY_SQL_ROOT", default: InstalledSQL.defaultRoot,
            help:
                "directory holding ferry/ (Ferry's own migrations); by default share/ferry/sql beside the binary's bin/ "
                + "(the package's /usr/share/ferry/sql), else sql in the current directory"),
        Setting(
            "dir", env: "FERRY_MIGRATE_DIRS",
            help: "another directory of migrations, applied after Ferry's; labelled by its name", isRepeatable: true),
        Setting(
            "directory",
            help: "apply <sql-root>/directory (the email directory of shards) to the directory's database",
            isSwitch: true),
        Setting(
            "directory-database-url", env: "FERRY_DIRECTORY_MIGRATE_DATABASE_URL",
            help: "with --directory: PostgreSQL URL of the directory database's owner (else --database-url)",
            isOptional: true, isSecret: true),
        Setting("status", help: "list applied, pending and changed files; change nothing", isSwitch: true),
        Setting("dry-run", help: "list the files that would be applied; change nothing", isSwitch: true),
        Setting("verbose", help: "also print a line for each file already applied", isSwitch: true),
    ]

    static func run(_ values: SettingValues) throws -> Int32 {
        let environment = ProcessInfo.processInfo.environment
        let sqlRoot = values.string("sql-root")!
        let url: String
        let migrator: Migrator
        if values.isOn("directory") {
            url = try directoryURL(values, environment: environment)
            migrator = try directoryMigrator(sqlRoot: sqlRoot, values)
        } else {
            url = try databaseURL(values, environment: environment)
            try checkDirectories(sqlRoot: sqlRoot, values.strings("dir"), values)
            migrator = Migrator(sqlRoot: sqlRoot, extraDirectories: values.strings("dir"))
        }
        let (status, dryRun, verbose) = (values.isOn("status"), values.isOn("dry-run"), values.isOn("verbose"))
        return try runBlocking {
            do {
                return try await withClient(url) { client in
                    if status { return try await printStatus(migrator, client) }
                    if dryRun { return try await printDryRun(migrator, client) }
                    try await migrate(migrator, client, verbose: verbose)
                    return ExitStatus.success
                }
            } catch let error as MigrationError {
                printError("ferry migrate: \(error)")
                return ExitStatus.failure
            } catch let error as PostgresError where error.sqlState == SQLState.insufficientPrivilege {
                printError("ferry migrate: \(permissionAdvice(error, url: url))")
                return ExitStatus.failure
            }
        }
    }

    /// A permission error, with the role that may do it.
    static func permissionAdvice(_ error: PostgresError, url: String) -> String {
        let role = (try? PostgresConfiguration(url))?.parameters["user"] ?? "the role of --database-url"
        return "\(error.message) (SQLSTATE 42501), connected as \(role): ferry migrate reads and writes Ferry's "
            + "ledger and schema, so run it as the role that owns them (the one that first migrated this "
            + "database, with BYPASSRLS) or a superuser, in --database-url / FERRY_MIGRATE_DATABASE_URL; "
            + "ferry_gateway may only read the ledger (docs/OPERATIONS.md, \"Who runs it\")"
    }

    /// The email directory's migrations, `<sqlRoot>/directory`, alone: never with `--dir`.
    static func directoryMigrator(sqlRoot: String, _ values: SettingValues) throws(SettingsError) -> Migrator {
        guard values.strings("dir").isEmpty else {
            throw SettingsError("--directory migrates the email directory alone: --dir goes with Ferry's own")
        }
        let path = (sqlRoot as NSString).appendingPathComponent(Migrator.directoryLabel)
        guard isDirectory(path) else {
            throw SettingsError(
                "invalid \(values.name("sql-root")): \(path) is not a directory (the email directory's migrations)")
        }
        return Migrator(directories: [MigrationDirectory(path: path, label: Migrator.directoryLabel)])
    }

    /// With `--directory`: `--directory-database-url`, else the URL `--database-url` names.
    static func directoryURL(_ values: SettingValues, environment: [String: String]) throws(SettingsError) -> String {
        guard let url = values.string("directory-database-url") else {
            return try databaseURL(values, environment: environment)
        }
        do {
            _ = try PostgresConfiguration(url)
        } catch {
            throw SettingsError("invalid \(values.name("directory-database-url")): \(error.message)")
        }
        return url
    }

    /// Refuses, as a bad setting, a directory that does not exist: `<sqlRoot>/ferry` (the
    /// usual cause: running a built binary from elsewhere than a checkout without `--sql-root`) or a `--dir`.
    static func checkDirectories(sqlRoot: String, _ directories: [String], _ values: SettingValues)
        throws(SettingsError)
    {
        let ferry = (sqlRoot as NSString).appendingPathComponent("ferry")
        guard isDirectory(ferry) else {
            throw SettingsError(
                "invalid \(values.name("sql-root")): \(ferry) is not a directory (Ferry's own migrations); pass the "
                    + "directory holding ferry/, e.g. --sql-root /usr/share/ferry/sql")
        }
        for directory in directories where !isDirectory(directory) {
            throw SettingsError("invalid --dir: \(directory) is not a directory")
        }
    }

    private static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }

    /// `--database-url`, else `FERRY_MIGRATE_DATABASE_URL`, else `FERRY_DATABASE_URL`.
    /// When none is set and `ferry dev`'s database runs here, the error says how to use it.
    static func databaseURL(_ values: SettingValues, environment: [String: String]) throws(SettingsError) -> String {
        guard
            let url = values.string("database-url")
                ?? environment["FERRY_DATABASE_URL"].flatMap({ $0.isEmpty ? nil : $0 })
        else {
            var message =
                "missing setting: set FERRY_MIGRATE_DATABASE_URL (or FERRY_DATABASE_URL) or pass --database-url "
                + "(PostgreSQL URL of an owner or superuser role)"
            if let development = runningDevelopmentDatabase(environment) {
                message +=
                    "; the development database (ferry dev, ferry db) runs here: "
                    + "ferry migrate --database-url \(development) …, or --database-url \"$(ferry db url)\""
            }
            throw SettingsError(message)
        }
        do {
            _ = try PostgresConfiguration(url)
        } catch {
            throw SettingsError("invalid \(values.name("database-url")): \(error.message)")
        }
        return url
    }

    /// The superuser URL of the development database when it runs under this directory's
    /// state directory (`FERRY_DEV_STATE_DIR`, `.ferry`), else nil.
    static func runningDevelopmentDatabase(_ environment: [String: String]) -> String? {
        guard
            let values = try? SettingValues(
                DatabaseCommand.developmentDatabaseSettings, arguments: [], environment: environment),
            let database = try? DatabaseCommand.database(values),
            case .running(_, let port) = try? database.status()
        else { return nil }
        return database.url(port: port)
    }

    /// Connects, runs `body`, and closes the connection however `body` ends.
    static func withClient<Value>(_ url: String, _ body: (PostgresClient) async throws -> Value) async throws -> Value {
        try await withDatabase(url, applicationName: "ferry-migrate", body)
    }

    /// Applies what is pending, one line per file, and a summary when nothing was to do.
    static func migrate(_ migrator: Migrator, _ client: PostgresClient, verbose: Bool) async throws {
        let applied = try await migrator.migrate(client, verbose: verbose, progress: printLine)
        if applied.isEmpty { printLine("migrations up to date") }
    }

    private static func printStatus(_ migrator: Migrator, _ client: PostgresClient) async throws -> Int32 {
        let plan = try await migrator.plan(client)
        for line in plan.statusLines { printLine(line) }
        return plan.refusal == nil ? ExitStatus.success : ExitStatus.failure
    }

    private static func printDryRun(_ migrator: Migrator, _ client: PostgresClient) async throws -> Int32 {
        let plan = try await migrator.plan(client)
        if let refusal = plan.refusal {
            throw MigrationError(
                "a real run would refuse: \(refusal.description)", migrationName: refusal.migrationName)
        }
        for line in plan.dryRunLines { printLine(line) }
        return ExitStatus.success
    }
}
