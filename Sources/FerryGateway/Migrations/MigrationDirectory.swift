import FerryAuth
import Foundation

/// One SQL migration file, read from disk.
public struct Migration: Sendable, Equatable {
    /// How a file is applied.
    public enum Kind: Sendable, Equatable {
        /// A numbered file (`0001_name.sql`): applied once, never edited afterwards.
        case numbered
        /// A file of the directory's `functions/`: applied after the numbered files, and
        /// again whenever its checksum changes.
        case repeatable
    }

    /// The name recorded in `ferry.schema_migrations`: the directory's label and the
    /// file's path in it, e.g. `ferry/0001_roles.sql` or `ferry/functions/push.sql`.
    public let name: String
    /// Where the file was read from.
    public let path: String
    /// The file's text, run as it is with the simple-query protocol.
    public let sql: String
    /// Lowercase hex SHA-256 of the file's bytes: an applied numbered file whose
    /// checksum changes is refused; a repeatable one is applied again.
    public let checksum: String
    /// Numbered or repeatable.
    public let kind: Kind

    /// A migration from its parts; ``MigrationDirectory/migrations()`` reads them from disk.
    public init(name: String, path: String, sql: String, kind: Kind = .numbered) {
        self.init(name: name, path: path, sql: sql, checksum: SHA256Digest.hex(Data(sql.utf8)), kind: kind)
    }

    init(name: String, path: String, sql: String, checksum: String, kind: Kind) {
        self.name = name
        self.path = path
        self.sql = sql
        self.checksum = checksum
        self.kind = kind
    }
}

/// A directory of numbered migrations (`0001_name.sql`, …) with, optionally, the
/// repeatable files of its `functions/` folder, and the label that qualifies their
/// names in the ledger.
public struct MigrationDirectory: Sendable, Equatable {
    /// The folder of repeatable files: functions, triggers and views, defined once each.
    public static let functionsFolder = "functions"
    /// A file that is never applied: the generated dump of the schema the directory
    /// makes (`sql/ferry/schema.sql`).
    public static let schemaFile = "schema.sql"

    /// The directory, as given (relative paths resolve against the current directory).
    public let path: String
    /// The first part of each migration's name: the directory's own name
    /// (`sql/examples/puzzle` → `puzzle`).
    public let label: String

    /// A directory labelled by its last path component unless `label` is given.
    public init(path: String, label: String? = nil) {
        self.path = path
        self.label = label ?? URL(fileURLWithPath: path).standardizedFileURL.lastPathComponent
    }

    /// Reads every `*.sql` file of the directory but ``schemaFile``, in file-name order,
    /// then every `*.sql` file of its ``functionsFolder`` (when there is one), in
    /// file-name order.
    public func migrations() throws(MigrationError) -> [Migration] {
        let functions = (path as NSString).appendingPathComponent(Self.functionsFolder)
        var migrations: [Migration] = []
        for name in try files(in: path, missing: .refused) where name != Self.schemaFile {
            migrations.append(
                try read((path as NSString).appendingPathComponent(name), name: "\(label)/\(name)", kind: .numbered))
        }
        for name in try files(in: functions, missing: .none) {
            migrations.append(
                try read(
                    (functions as NSString).appendingPathComponent(name),
                    name: "\(label)/\(Self.functionsFolder)/\(name)", kind: .repeatable))
        }
        return migrations
    }

    private enum Missing { case refused, none }

    /// The names of the `*.sql` entries of `directory`, sorted.
    private func files(in directory: String, missing: Missing) throws(MigrationError) -> [String] {
        var isDirectory: ObjCBool = false
        if missing == .none,
            !FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory) || !isDirectory.boolValue
        {
            return []
        }
        do {
            return try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".sql") }
                .sorted()
        } catch {
            throw MigrationError(
                "cannot read the migration directory \(directory): it does not exist or is not readable")
        }
    }

    private func read(_ file: String, name: String, kind: Migration.Kind) throws(MigrationError) -> Migration {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw MigrationError("cannot read \(file)")
        }
        guard let sql = String(data: data, encoding: .utf8) else {
            throw MigrationError("\(file) is not UTF-8")
        }
        // The checksum is of the bytes on disk, not of their decoding.
        return Migration(name: name, path: file, sql: sql, checksum: SHA256Digest.hex(data), kind: kind)
    }
}
