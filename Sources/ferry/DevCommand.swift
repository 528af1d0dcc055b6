import FerryGateway

enum DevCommand: Command {
    static let name = "dev"
    static let summary = "run a local gateway with an embedded PostgreSQL under .ferry/"
    static let usage = "ferry dev [options]"
    static let settings: [Setting] = []

    static func run(_ values: SettingValues) throws -> Int32 {
        printError("ferry dev: not implemented yet")
        return ExitStatus.failure
    }
}
