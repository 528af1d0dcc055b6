import FerryGateway

enum VersionCommand: Command {
    static let name = "version"
    static let summary = "print the version"
    static let usage = "ferry version"
    static let settings: [Setting] = []

    static func run(_ values: SettingValues) throws -> Int32 {
        printLine("ferry \(Ferry.version)")
        return ExitStatus.success
    }
}
