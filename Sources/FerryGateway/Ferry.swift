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
    /// The newest migration of `sql/ferry` this binary relies on, as the ledger names
    /// it: `ferry serve` refuses a database whose ledger lacks it, and `/readyz` is
    /// not ready. A new file in `sql/ferry` moves it (a test compares it with the
    /// directory).
    public static let requiredMigration = "ferry/0016_register_table_keys_within_owner.sql"
}
