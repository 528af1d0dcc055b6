import FerryCommandLine
import FerryGateway

enum VersionCommand: Command {
    static let name = "version"
    static let summary = "print the version, the commit it was built from and the schema it needs"
    static let usage = "ferry version"
    static let settings: [Setting] = []

    static func run(_ values: SettingValues) throws -> Int32 {
        printLine("ferry \(Ferry.version) (\(Self.commit))")
        printLine("schema version \(Ferry.requiredSchemaVersion) or newer, protocol \(Ferry.protocolVersion)")
        return ExitStatus.success
    }

    /// `commit 1a2b3c4d5e6f`, or why it is not known.
    static var commit: String {
        Ferry.commit.map { "commit \($0)" } ?? "commit unknown: built without FERRY_COMMIT (make build sets it)"
    }
}
