import Foundation

/// Where `ferry migrate` finds Ferry's own migrations when `--sql-root` is not given.
enum InstalledSQL {
    /// `<prefix>/share/ferry/sql` when this binary is `<prefix>/bin/ferry` and that
    /// directory holds `ferry/` (the Debian package installs `/usr/bin/ferry` and
    /// `/usr/share/ferry/sql`; a package extracted anywhere finds its own), else `sql`,
    /// relative to the current directory: a checkout's, where `.build/debug/ferry` runs.
    static let defaultRoot: String = {
        guard let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else {
            return "sql"
        }
        let prefix = URL(fileURLWithPath: executable).deletingLastPathComponent().deletingLastPathComponent()
        let root = prefix.appendingPathComponent("share/ferry/sql").path
        var isDirectory: ObjCBool = false
        let found = FileManager.default.fileExists(atPath: root + "/ferry", isDirectory: &isDirectory)
        return found && isDirectory.boolValue ? root : "sql"
    }()
}
