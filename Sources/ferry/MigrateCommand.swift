import FerryGateway

enum MigrateCommand: Command {
    static let name = "migrate"
    static let summary = "apply SQL migrations"
    static let usage = "ferry migrate [options]"
    static let settings: [Setting] = []

    static func run(_ values: SettingValues) throws -> Int32 {
        printError("ferry migrate: not implemented yet")
        return ExitStatus.failure
    }
}
