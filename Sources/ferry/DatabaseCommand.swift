import FerryCommandLine
import FerryGateway

/// `ferry db start|stop|status|url|reset`: the embedded development PostgreSQL.
enum DatabaseCommand: Command {
    static let name = "db"
    static let summary = "start, stop or locate the embedded development PostgreSQL"
    static let usage = """
        ferry db start|stop|status|url|reset [options]

          start   create the cluster under .ferry/ on first use, start it, create the database 'ferry'
          stop    stop it (fast shutdown)
          status  say whether it runs; exit 0 when running, 3 when stopped or not created
          url     print the superuser URL of the running cluster, e.g.
                  postgresql://postgres@127.0.0.1:15329/ferry; exit 3 when it is stopped or not created
          reset   stop it and delete its data (.ferry/dev-secret stays)
        """
    static let settings: [Setting] = developmentDatabaseSettings

    /// The settings `ferry db` and `ferry dev` share.
    static let developmentDatabaseSettings: [Setting] = [
        Setting(
            "pg-port", env: "FERRY_DEV_PG_PORT", default: String(DevDatabase.defaultPort),
            help: "port of the embedded PostgreSQL on 127.0.0.1"),
        Setting(
            "state-dir", env: "FERRY_DEV_STATE_DIR", default: ".ferry",
            help: "where the embedded PostgreSQL and the dev secret live"),
    ]

    /// The exit status of `ferry db status` when no server runs (as `pg_ctl status`).
    static let notRunning: Int32 = 3

    /// The development database the settings describe.
    static func database(_ values: SettingValues) throws(SettingsError) -> DevDatabase {
        DevDatabase(
            stateDirectory: values.string("state-dir")!, port: try values.integer("pg-port", in: 1...65535)!,
            report: printLine)
    }

    static func run(_ values: SettingValues) throws -> Int32 {
        guard values.positional.count == 1, let action = values.positional.first else {
            throw SettingsError("expected one of start, stop, status, url, reset (see ferry db --help)")
        }
        let database = try database(values)
        do {
            switch action {
            case "start":
                try database.start()
            case "stop":
                printLine(try database.stop() ? "stopped PostgreSQL" : "PostgreSQL was not running")
            case "status":
                switch try database.status() {
                case .absent:
                    printLine(
                        "no cluster yet in \(database.displayPath(database.clusterLink)) (ferry db start creates it)")
                    return notRunning
                case .stopped:
                    printLine("stopped (cluster in \(database.displayPath(database.clusterLink)))")
                    return notRunning
                case .running(let pid, let port):
                    printLine("running (pid \(pid)) at \(database.url(port: port)), log \(database.logFile.path)")
                }
            case "url":
                // Only a server running on this cluster: whatever answers on the port of a
                // stopped or missing one may be another project's database.
                switch try database.status() {
                case .absent:
                    printError(
                        "ferry db url: no development database here (\(database.displayPath(database.clusterLink)) "
                            + "does not exist): run it in the folder where ferry dev or ferry db start made one")
                    return notRunning
                case .stopped:
                    printError(
                        "ferry db url: the development database in \(database.displayPath(database.clusterLink)) "
                            + "is stopped (ferry db start starts it)")
                    return notRunning
                case .running(_, let port):
                    printLine(database.url(port: port))
                }
            case "reset":
                try database.reset()
                printLine("deleted the development cluster; 'ferry db start' creates a new one")
            default:
                throw SettingsError("unknown action '\(action)': expected start, stop, status, url or reset")
            }
        } catch let error as DevDatabaseError {
            printError("ferry db \(action): \(error)")
            return ExitStatus.failure
        }
        return ExitStatus.success
    }
}
