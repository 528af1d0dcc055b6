import FerryAuth
import FerryPostgres
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

/// Where each migration stands against one database: the answer to `ferry migrate --status`.
public struct MigrationPlan: Sendable, Equatable {
    /// One migration's state.
    public enum State: Sendable, Equatable {
        /// Applied at the given UTC time, with the same checksum as the file.
        case applied(at: String)
        /// Not applied yet.
        case pending
        /// A numbered file applied at the given time, but changed since: refused.
        case changed(at: String)
        /// A repeatable file applied at the given time, changed since: applied again.
        case reapply(at: String)
        /// Recorded as applied at the given time, but no file has that name any more.
        case missingFile(at: String)
        /// Recorded as applied at the given time from a directory not given this time:
        /// not compared with any file.
        case appliedElsewhere(at: String)
    }

    /// One line of the plan.
    public struct Entry: Sendable, Equatable {
        /// The qualified name, e.g. `ferry/0001_roles.sql`.
        public let name: String
        /// Where it stands.
        public let state: State
        /// The file, when there is one.
        public let migration: Migration?
    }

    /// Every migration on disk in the order it applies, then applied ones whose file is gone.
    public let entries: [Entry]
    /// Ledger rows of numbered files under Ferry's own label (``Migrator/ferryLabel``)
    /// that its directory does not have: the database was migrated by an earlier version
    /// of Ferry, whose history this one does not continue. A run refuses it.
    public let earlierHistory: [String]

    /// The files a run applies, in order: the pending ones, and the repeatable ones that changed.
    public var pending: [Migration] {
        entries.compactMap { entry in
            switch entry.state {
            case .pending, .reapply: entry.migration
            default: nil
            }
        }
    }
    /// The applied numbered files that changed on disk.
    public var changed: [Entry] { entries.filter { if case .changed = $0.state { true } else { false } } }
    /// How many files are applied and unchanged.
    public var appliedCount: Int { entries.filter { if case .applied = $0.state { true } else { false } }.count }
    /// How many files were never applied.
    public var pendingCount: Int { entries.filter { $0.state == .pending }.count }
    /// How many repeatable files changed since they were applied.
    public var reapplyCount: Int { entries.filter { if case .reapply = $0.state { true } else { false } }.count }
    /// How many ledger rows belong to directories not given this time.
    public var appliedElsewhereCount: Int {
        entries.filter { if case .appliedElsewhere = $0.state { true } else { false } }.count
    }

    /// Compares the files with the ledger. Ledger rows outside `labels` belong to
    /// directories not given this time: listed last, as ``State/appliedElsewhere(at:)``.
    public init(migrations: [Migration], applied: [AppliedMigration], labels: Set<String>) {
        let appliedByName = Dictionary(applied.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var entries: [Entry] = migrations.map { migration in
            guard let record = appliedByName[migration.name] else {
                return Entry(name: migration.name, state: .pending, migration: migration)
            }
            let state: State =
                record.checksum == migration.checksum
                ? .applied(at: record.appliedAt)
                : migration.kind == .repeatable ? .reapply(at: record.appliedAt) : .changed(at: record.appliedAt)
            return Entry(name: migration.name, state: state, migration: migration)
        }
        let onDisk = Set(migrations.map(\.name))
        var elsewhere: [Entry] = []
        var earlierHistory: [String] = []
        let ferry = Migrator.ferryLabel + "/"
        let ferryFunctions = ferry + MigrationDirectory.functionsFolder + "/"
        for record in applied where !onDisk.contains(record.name) {
            if let label = record.name.split(separator: "/").first, labels.contains(String(label)) {
                entries.append(Entry(name: record.name, state: .missingFile(at: record.appliedAt), migration: nil))
                if labels.contains(Migrator.ferryLabel), record.name.hasPrefix(ferry),
                    !record.name.hasPrefix(ferryFunctions)
                {
                    earlierHistory.append(record.name)
                }
            } else {
                elsewhere.append(
                    Entry(name: record.name, state: .appliedElsewhere(at: record.appliedAt), migration: nil))
            }
        }
        self.entries = entries + elsewhere
        self.earlierHistory = earlierHistory
    }

    /// Why a run applies nothing, when it refuses: a database migrated by an earlier
    /// version of Ferry, or a numbered file changed after it was applied. Nil when a run
    /// may go ahead.
    public var refusal: MigrationError? {
        if let first = earlierHistory.first {
            let others = earlierHistory.count > 1 ? " and \(earlierHistory.count - 1) more" : ""
            return MigrationError(
                "this database was migrated by an earlier version of Ferry: its ledger records \(first)\(others), "
                    + "which this version's sql/ferry does not have (its history was rewritten into a new baseline "
                    + "before Ferry's first release), so its schema cannot be brought up to date. For the development "
                    + "database: `ferry db reset` (deletes it with its data), then `ferry migrate` or "
                    + "`ferry dev` (docs/OPERATIONS.md, \"A database made by an earlier version\")",
                migrationName: first)
        }
        if let changed = changed.first {
            let others = self.changed.count > 1 ? " (and \(self.changed.count - 1) more)" : ""
            return MigrationError(
                "\(changed.name) was changed after it was applied\(others): applied migrations are never edited; "
                    + "restore the file and add a new migration instead",
                migrationName: changed.name)
        }
        return nil
    }
}

extension MigrationPlan {
    /// What `ferry migrate --status` prints: one line per migration, then the counts,
    /// then why a run would refuse a database made by an earlier version.
    public var statusLines: [String] {
        entries.map { entry in
            switch entry.state {
            case .applied(let time): "applied  \(entry.name)  \(time)"
            case .pending: "pending  \(entry.name)"
            case .changed(let time): "changed  \(entry.name)  applied \(time), the file differs since"
            case .reapply(let time): "changed  \(entry.name)  applied \(time), will re-apply"
            case .missingFile(let time): "missing  \(entry.name)  applied \(time), no such file now"
            case .appliedElsewhere(let time): "applied  \(entry.name)  \(time)  (its directory was not given)"
            }
        } + [summaryLine] + (earlierHistory.isEmpty ? [] : [refusal?.description ?? ""])
    }

    private var summaryLine: String {
        var counts = "\(appliedCount) applied, \(pendingCount) pending, \(changed.count) changed"
        if reapplyCount > 0 { counts += ", \(reapplyCount) to re-apply" }
        let elsewhere = appliedElsewhereCount
        guard elsewhere > 0 else { return counts }
        return counts + "; \(elsewhere) more applied from directories not given (pass their --dir to check them)"
    }

    /// What `ferry migrate --dry-run` prints: the files a run would apply, in order.
    public var dryRunLines: [String] {
        let lines = entries.compactMap { entry in
            switch entry.state {
            case .pending: "would apply \(entry.name)"
            case .reapply: "would re-apply \(entry.name)"
            default: nil
            }
        }
        return lines.isEmpty ? ["nothing to apply (\(appliedCount) applied)"] : lines
    }
}

/// A row of `ferry.schema_migrations`.
public struct AppliedMigration: Sendable, Equatable {
    /// The qualified file name.
    public let name: String
    /// The SHA-256 of the file when it was applied.
    public let checksum: String
    /// When it was applied, UTC, `2026-11-29T15:30:00Z`.
    public let appliedAt: String

    /// A ledger row.
    public init(name: String, checksum: String, appliedAt: String) {
        self.name = name
        self.checksum = checksum
        self.appliedAt = appliedAt
    }
}

/// Why migrations could not run; one line, naming the file.
public struct MigrationError: Error, CustomStringConvertible, Equatable {
    /// The line to print.
    public let description: String
    /// The migration at fault, when one is.
    public let migrationName: String?

    /// An error with the given text.
    public init(_ description: String, migrationName: String? = nil) {
        self.description = description
        self.migrationName = migrationName
    }
}

/// Applies SQL migrations in order, recording name, checksum and time in
/// `ferry.schema_migrations`: each directory's numbered files once, each in its own
/// transaction, then its repeatable files (``MigrationDirectory/functionsFolder``) that
/// are new or changed, together in one transaction.
///
/// Runs on one connection as an owner or superuser role (never the gateway role).
/// A session advisory lock keeps two migrators on one database from interleaving:
/// the second waits, then finds the files applied. Advisory locks are per database,
/// so migrators of different databases in one cluster do not wait for each other.
public struct Migrator: Sendable {
    /// The `pg_advisory_lock` key: the bytes of "ferry".
    public static let advisoryLockKey: Int64 = 0x66_6572_7279
    /// The label of Ferry's own directory, `<sqlRoot>/ferry`.
    public static let ferryLabel = "ferry"

    /// The ledger, created before anything reads it. Its one definition: the
    /// migrations in `sql/ferry` rely on it and never create it.
    static let bootstrapSQL = """
        create schema if not exists ferry;
        create table if not exists ferry.schema_migrations (
            name text primary key,
            checksum text not null,
            applied_at timestamptz not null default now()
        );
        comment on table ferry.schema_migrations is
            'SQL files applied by ferry migrate: directory label/file name, SHA-256 of the file, when';
        """

    /// Lets the gateway's role read the ledger, after every run (the role is created by
    /// `sql/ferry/0001_roles.sql`, after the ledger), so that `ferry migrate --status`
    /// works as `ferry_gateway`. Requests, which run as `ferry_client`, still cannot.
    static let ledgerGrantSQL = """
        do $$
        begin
            if exists (select from pg_catalog.pg_roles where rolname = 'ferry_gateway') then
                grant select on ferry.schema_migrations to ferry_gateway;
            end if;
        end
        $$;
        """

    /// The directories to apply, in order.
    public let directories: [MigrationDirectory]

    /// A migrator for `directories`, applied in the order given.
    public init(directories: [MigrationDirectory]) {
        self.directories = directories
    }

    /// Ferry's own migrations (`<sqlRoot>/ferry`) followed by `extraDirectories` in order.
    public init(sqlRoot: String, extraDirectories: [String]) {
        let ferry = MigrationDirectory(
            path: (sqlRoot as NSString).appendingPathComponent(Self.ferryLabel), label: Self.ferryLabel)
        self.init(directories: [ferry] + extraDirectories.map { MigrationDirectory(path: $0) })
    }

    /// Reads every directory's files, in application order.
    public func migrations() throws(MigrationError) -> [Migration] {
        var seen: [String: String] = [:]
        for directory in directories {
            if let other = seen[directory.label] {
                throw MigrationError(
                    "\(other) and \(directory.path) share the label '\(directory.label)': rename one directory")
            }
            seen[directory.label] = directory.path
        }
        var migrations: [Migration] = []
        for directory in directories { migrations += try directory.migrations() }
        return migrations
    }

    /// Compares the files with the database without changing anything (no lock, no
    /// ledger created): for `--status` and `--dry-run`.
    public func plan(_ client: PostgresClient) async throws -> MigrationPlan {
        let migrations = try migrations()
        let exists = try await client.query("select to_regclass('ferry.schema_migrations') is not null")
        let applied = exists[0, 0] == "t" ? try await appliedMigrations(client) : []
        return MigrationPlan(migrations: migrations, applied: applied, labels: Set(directories.map(\.label)))
    }

    /// Applies every pending file, and every repeatable file that changed. Refuses to
    /// start when an applied numbered file changed, or when the ledger holds an earlier
    /// version's history of `sql/ferry` (``MigrationPlan/refusal``); stops at the first
    /// file that fails (that file rolled back, with the other repeatable files of its
    /// directory when it is one; earlier ones kept). Reports one line per file through
    /// `progress`; `skipped` lines only when `verbose`. Returns the names applied.
    @discardableResult
    public func migrate(
        _ client: PostgresClient, verbose: Bool = false, progress: @Sendable (String) -> Void = { _ in }
    ) async throws -> [String] {
        let migrations = try migrations()
        try await Self.checkRole(client)
        let key = String(Self.advisoryLockKey)
        _ = try await client.query("select pg_advisory_lock($1::bigint)", [key])
        do {
            let applied = try await apply(migrations, client, verbose: verbose, progress: progress)
            for warning in await Self.sharedKeyWarnings(client) { progress(warning) }
            _ = try await client.query("select pg_advisory_unlock($1::bigint)", [key])
            return applied
        } catch {
            // The lock goes with the session if the connection broke; otherwise release it.
            _ = try? await client.query("select pg_advisory_unlock($1::bigint)", [key])
            throw error
        }
    }

    /// A `warning:` line for each table `ferry.tables_keyed_across_users()` lists
    /// (`sql/ferry/functions/registry.sql`): a per-user table whose primary key every user
    /// shares. None when the function is missing (a SQL root without it).
    static func sharedKeyWarnings(_ client: PostgresClient) async -> [String] {
        guard
            let tables = try? await client.query(
                "select table_name::text, key_columns, owner_column from ferry.tables_keyed_across_users()")
        else { return [] }
        return tables.rows.map { row in
            let (table, key, owner) = (row[0] ?? "", row[1] ?? "", row[2] ?? "")
            return "warning: \(table) is keyed by (\(key)) without its owner column \(owner), so all users share "
                + "its keys and one user's key refuses another's: key it by (\(owner), \(key)), or register it "
                + #"with options => '{"global_key": true}' (docs/TABLES.md, "Keys")"#
        }
    }

    /// Refuses a migrating role that Row Level Security would bind.
    ///
    /// Ferry's SECURITY DEFINER functions run as the role that created them and act on
    /// every user's rows (account deletion, the first-sign-in merge, cleanup, purge) in
    /// tables under FORCE ROW LEVEL SECURITY, which binds even their owner: unless that
    /// role is a superuser or has BYPASSRLS, they would silently find no rows.
    static func checkRole(_ client: PostgresClient) async throws {
        let result = try await client.query(
            "select rolname, rolsuper or rolbypassrls from pg_catalog.pg_roles where rolname = current_user")
        guard result.count == 1, result[0, 1] == "t" else {
            throw MigrationError(
                "the migrating role \(result.count == 1 ? result[0, 0] ?? "" : "") is neither a superuser nor BYPASSRLS: "
                    + "Ferry's functions act across users on tables under FORCE ROW LEVEL SECURITY and would "
                    + "find no rows; run migrations as a superuser or a role with BYPASSRLS (docs/OPERATIONS.md)")
        }
    }

    private func apply(
        _ migrations: [Migration], _ client: PostgresClient, verbose: Bool, progress: (String) -> Void
    ) async throws -> [String] {
        try await client.execute(Self.bootstrapSQL)
        let plan = MigrationPlan(
            migrations: migrations, applied: try await appliedMigrations(client),
            labels: Set(directories.map(\.label)))
        if let refusal = plan.refusal { throw refusal }
        var applied: [String] = []
        // The repeatable files of one directory, applied together after its numbered ones.
        var repeatable: [MigrationPlan.Entry] = []
        func applyRepeatable() async throws {
            guard !repeatable.isEmpty else { return }
            try await applyTogether(repeatable, client, progress: progress)
            applied += repeatable.map(\.name)
            repeatable = []
        }
        for entry in plan.entries {
            guard let migration = entry.migration else { continue }
            if let first = repeatable.first, Self.label(of: first.name) != Self.label(of: entry.name) {
                try await applyRepeatable()
            }
            switch entry.state {
            case .pending, .reapply:
                if migration.kind == .repeatable {
                    repeatable.append(entry)
                    continue
                }
                let started = ContinuousClock.now
                try await applyOne(migration, client)
                progress("applied \(migration.name) (\(Self.milliseconds(since: started)) ms)")
                applied.append(migration.name)
            case .applied:
                if verbose { progress("skipped \(entry.name) (already applied)") }
            default:
                continue
            }
        }
        try await applyRepeatable()
        try await client.execute(Self.ledgerGrantSQL)
        return applied
    }

    /// The label a qualified name starts with: `ferry` of `ferry/functions/push.sql`.
    private static func label(of name: String) -> Substring { name.prefix { $0 != "/" } }

    private static func milliseconds(since started: ContinuousClock.Instant) -> Int64 {
        let elapsed = ContinuousClock.now - started
        return elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
    }

    /// Runs one numbered file and records it, in one transaction.
    private func applyOne(_ migration: Migration, _ client: PostgresClient) async throws {
        do {
            try await client.execute("begin")
            try await client.execute(migration.sql)
            _ = try await client.query(
                "insert into ferry.schema_migrations (name, checksum) values ($1, $2)",
                [migration.name, migration.checksum])
            try await client.execute("commit")
        } catch {
            _ = try? await client.execute("rollback")
            throw MigrationError(
                "\(migration.name) failed and was rolled back, nothing after it was applied: "
                    + Self.describe(error),
                migrationName: migration.name)
        }
    }

    /// Runs a directory's new and changed repeatable files in file-name order and records
    /// each one's checksum, all in one transaction: they go in together or not at all.
    private func applyTogether(
        _ entries: [MigrationPlan.Entry], _ client: PostgresClient, progress: (String) -> Void
    ) async throws {
        var lines: [String] = []
        var current = entries[0].name
        do {
            try await client.execute("begin")
            for entry in entries {
                guard let migration = entry.migration else { continue }
                current = migration.name
                let started = ContinuousClock.now
                try await client.execute(migration.sql)
                _ = try await client.query(
                    """
                    insert into ferry.schema_migrations (name, checksum) values ($1, $2)
                    on conflict (name) do update set checksum = excluded.checksum, applied_at = excluded.applied_at
                    """,
                    [migration.name, migration.checksum])
                let verb = entry.state == .pending ? "applied" : "re-applied"
                lines.append("\(verb) \(migration.name) (\(Self.milliseconds(since: started)) ms)")
            }
            try await client.execute("commit")
        } catch {
            _ = try? await client.execute("rollback")
            let others = entries.count > 1 ? ", with the other repeatable files of this run" : ""
            throw MigrationError(
                "\(current) failed and was rolled back\(others), nothing after it was applied: "
                    + Self.describe(error),
                migrationName: current)
        }
        for line in lines { progress(line) }
    }

    private func appliedMigrations(_ client: PostgresClient) async throws -> [AppliedMigration] {
        let result = try await client.query(
            """
            select name, checksum, to_char(applied_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            from ferry.schema_migrations order by name
            """)
        return (0..<result.count).map { row in
            AppliedMigration(
                name: result[row, 0] ?? "", checksum: result[row, 1] ?? "", appliedAt: result[row, 2] ?? "")
        }
    }

    /// The server's message with its SQLSTATE, detail and hint.
    static func describe(_ error: PostgresError) -> String {
        var text = error.message
        if let sqlState = error.sqlState { text += " (SQLSTATE \(sqlState))" }
        if let detail = error.detail { text += "; detail: \(detail)" }
        if let hint = error.hint { text += "; hint: \(hint)" }
        return text
    }
}
