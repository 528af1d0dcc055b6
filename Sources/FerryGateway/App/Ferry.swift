import CFerryBuild

/// Facts about this build of Ferry.
public enum Ferry {
    /// The release version, also reported by `/metrics` and `ferry version`.
    public static let version = "0.1.0"
    /// The commit the binary was built from (`make build` tells the build; `-modified`
    /// when the tree had uncommitted changes), or nil when the build was not told.
    public static let commit: String? = {
        let text = String(cString: ferry_build_commit())
        return text.isEmpty ? nil : text
    }()
    /// The wire protocol version of docs/PROTOCOL.md.
    public static let protocolVersion = 1
    /// The version of Ferry's SQL this binary relies on: `ferry serve` refuses a database
    /// whose `ferry.schema_version()` (`sql/ferry/functions/version.sql`) is lower, and
    /// `/readyz` is not ready. Raise both together whenever the binary starts relying on
    /// changed SQL (a test compares them).
    public static let requiredSchemaVersion = 3
}
