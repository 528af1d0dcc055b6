import FerryGateway

enum DatabaseCommand: Command {
    static let name = "db"
    static let summary = "start, stop or locate the embedded development PostgreSQL"
    static let usage = "ferry db [options]"
    static let settings: [Setting] = []

    static func run(_ values: SettingValues) throws -> Int32 {
        printError("ferry db: not implemented yet")
        return ExitStatus.failure
    }
}
