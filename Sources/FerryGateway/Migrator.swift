import FerryPostgres
import Foundation

/// One SQL migration file, read from disk.
public struct Migration: Sendable, Equatable {
    /// The name recorded in `ferry.schema_migrations`: the directory's label and the
    /// file name, e.g. `ferry/0001_roles_and_schema.sql`.
    public let name: String
    /// Where the file was read from.
    public let path: String
    /// The file's text, run as it is with the simple-query protocol.
    public let sql: String
    /// Lowercase hex SHA-256 of the file's bytes: an applied file whose checksum
    /// changes is refused.
    public let checksum: String

    /// A migration from its parts; ``MigrationDirectory/migrations()`` reads them from disk.
    public init(name: String, path: String, sql: String) {
        self.init(name: name, path: path, sql: sql, checksum: SHA256Digest.hex(Data(sql.utf8)))
    }

    init(name: String, path: String, sql: String, checksum: String) {
        self.name = name
        self.path = path
        self.sql = sql
        self.checksum = checksum
    }
}

/// A directory of numbered migrations (`0001_name.sql`, …) and the label that
/// qualifies their names in the ledger.
public struct MigrationDirectory: Sendable, Equatable {
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

    /// Reads every `*.sql` file in the directory, in file-name order.
    public func migrations() throws(MigrationError) -> [Migration] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: path)
        } catch {
            throw MigrationError("cannot read the migration directory \(path): it does not exist or is not readable")
        }
        var migrations: [Migration] = []
        for name in names.filter({ $0.hasSuffix(".sql") }).sorted() {
            let file = (path as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: file) else {
                throw MigrationError("cannot read \(file)")
            }
            guard let sql = String(data: data, encoding: .utf8) else {
                throw MigrationError("\(file) is not UTF-8")
            }
            // The checksum is of the bytes on disk, not of their decoding.
            migrations.append(
                Migration(name: "\(label)/\(name)", path: file, sql: sql, checksum: SHA256Digest.hex(data)))
        }
        return migrations
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
        /// Applied at the given time, but the file has changed since: refused.
        case changed(at: String)
        /// Recorded as applied at the given time, but no file has that name any more.
        case missingFile(at: String)
        /// Recorded as applied at the given time from a directory not given this time:
        /// not compared with any file.
        case appliedElsewhere(at: String)
    }

    /// One line of the plan.
    public struct Entry: Sendable, Equatable {
        /// The qualified name, e.g. `ferry/0001_roles_and_schema.sql`.
        public let name: String
        /// Where it stands.
        public let state: State
        /// The file, when there is one.
        public let migration: Migration?
    }

    /// Every migration on disk in the order it applies, then applied ones whose file is gone.
    public let entries: [Entry]
    /// Applied files the ledger records with one of their ``Migrator/earlierChecksums``:
    /// applied, and due to have the ledger say their current checksum.
    public let recordedEarlier: [Migration]

    /// The files still to apply, in order.
    public var pending: [Migration] { entries.compactMap { $0.state == .pending ? $0.migration : nil } }
    /// The applied files that changed on disk.
    public var changed: [Entry] { entries.filter { if case .changed = $0.state { true } else { false } } }
    /// How many files are applied and unchanged.
    public var appliedCount: Int { entries.filter { if case .applied = $0.state { true } else { false } }.count }
    /// How many ledger rows belong to directories not given this time.
    public var appliedElsewhereCount: Int {
        entries.filter { if case .appliedElsewhere = $0.state { true } else { false } }.count
    }

    /// Compares the files with the ledger. Ledger rows outside `labels` belong to
    /// directories not given this time: listed last, as ``State/appliedElsewhere(at:)``.
    /// A file recorded with one of its `earlierChecksums` (name → checksums) is applied.
    public init(
        migrations: [Migration], applied: [AppliedMigration], labels: Set<String>,
        earlierChecksums: [String: Set<String>] = [:]
    ) {
        let appliedByName = Dictionary(applied.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var recordedEarlier: [Migration] = []
        var entries: [Entry] = migrations.map { migration in
            guard let record = appliedByName[migration.name] else {
                return Entry(name: migration.name, state: .pending, migration: migration)
            }
            if record.checksum != migration.checksum,
                earlierChecksums[migration.name]?.contains(record.checksum) == true
            {
                recordedEarlier.append(migration)
                return Entry(name: migration.name, state: .applied(at: record.appliedAt), migration: migration)
            }
            let state: State =
                record.checksum == migration.checksum ? .applied(at: record.appliedAt) : .changed(at: record.appliedAt)
            return Entry(name: migration.name, state: state, migration: migration)
        }
        self.recordedEarlier = recordedEarlier
        let onDisk = Set(migrations.map(\.name))
        var elsewhere: [Entry] = []
        for record in applied where !onDisk.contains(record.name) {
            if let label = record.name.split(separator: "/").first, labels.contains(String(label)) {
                entries.append(Entry(name: record.name, state: .missingFile(at: record.appliedAt), migration: nil))
            } else {
                elsewhere.append(
                    Entry(name: record.name, state: .appliedElsewhere(at: record.appliedAt), migration: nil))
            }
        }
        self.entries = entries + elsewhere
    }
}

extension MigrationPlan {
    /// What `ferry migrate --status` prints: one line per migration, then the counts.
    public var statusLines: [String] {
        entries.map { entry in
            switch entry.state {
            case .applied(let time): "applied  \(entry.name)  \(time)"
            case .pending: "pending  \(entry.name)"
            case .changed(let time): "changed  \(entry.name)  applied \(time), the file differs since"
            case .missingFile(let time): "missing  \(entry.name)  applied \(time), no such file now"
            case .appliedElsewhere(let time): "applied  \(entry.name)  \(time)  (its directory was not given)"
            }
        } + [summaryLine]
    }

    private var summaryLine: String {
        let counts = "\(appliedCount) applied, \(pending.count) pending, \(changed.count) changed"
        let elsewhere = appliedElsewhereCount
        guard elsewhere > 0 else { return counts }
        return counts + "; \(elsewhere) more applied from directories not given (pass their --dir to check them)"
    }

    /// What `ferry migrate --dry-run` prints: the files a run would apply, in order.
    public var dryRunLines: [String] {
        pending.isEmpty ? ["nothing to apply (\(appliedCount) applied)"] : pending.map { "would apply \($0.name)" }
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

/// Applies SQL migrations in order, each file once, each in its own transaction,
/// recording name, checksum and time in `ferry.schema_migrations`.
///
/// Runs on one connection as an owner or superuser role (never the gateway role).
/// A session advisory lock keeps two migrators on one database from interleaving:
/// the second waits, then finds the files applied. Advisory locks are per database,
/// so migrators of different databases in one cluster do not wait for each other.
public struct Migrator: Sendable {
    /// The `pg_advisory_lock` key: the bytes of "ferry".
    public static let advisoryLockKey: Int64 = 0x66_6572_7279

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
    /// `sql/ferry/0001`, after the ledger): `ferry serve` and `/readyz` check in it that
    /// the schema is at their version (``SchemaCheck``). Requests, which run as
    /// `ferry_client`, still cannot.
    static let ledgerGrantSQL = """
        do $$
        begin
            if exists (select from pg_catalog.pg_roles where rolname = 'ferry_gateway') then
                grant select on ferry.schema_migrations to ferry_gateway;
            end if;
        end
        $$;
        """

    /// Files of `sql/ferry` whose comments were reworded after they shipped, the SQL
    /// itself unchanged (issue 10 took out references to a design document outside the
    /// repository): the checksums they had before, which a database migrated earlier
    /// still records. They count as applied, and `ferry migrate` records the current
    /// checksum in their place. Nothing else about an applied file may change.
    public static let earlierChecksums: [String: Set<String>] = [
        "ferry/0005_sync_tables_and_push.sql": ["279f70b57d6a1fb1853a1074bec6e06572bd7fc99a12e720cb3bf4163860082c"],
        "ferry/0006_pull.sql": ["f41b07e37e20cfc5ad520c34ab11cd11fa27c5c76268d705cc40f7d7ec32a6ec"],
        "ferry/0008_tombstone_retention.sql": ["0e235929c5b138cfc96a93f4335f3bd14251e613080c96f416f5f176992f99a5"],
        "ferry/0010_cues.sql": ["699508bf5b6588c45c8f8ebc0c118d24aaba286c73affaae83d108eb0f6cefdf"],
        "ferry/0012_pull_readers.sql": ["ba0cd003a028e9c3f2623ae4c6fa9bbc7d78a74d79c484a025a6b2b2a3e37372"],
    ]

    /// The directories to apply, in order.
    public let directories: [MigrationDirectory]

    /// A migrator for `directories`, applied in the order given.
    public init(directories: [MigrationDirectory]) {
        self.directories = directories
    }

    /// Ferry's own migrations (`<sqlRoot>/ferry`) followed by `extraDirectories` in order.
    public init(sqlRoot: String, extraDirectories: [String]) {
        let ferry = MigrationDirectory(path: (sqlRoot as NSString).appendingPathComponent("ferry"), label: "ferry")
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
        return MigrationPlan(
            migrations: migrations, applied: applied, labels: Set(directories.map(\.label)),
            earlierChecksums: Self.earlierChecksums)
    }

    /// Applies every pending file. Refuses to start when an applied file changed;
    /// stops at the first file that fails (that file rolled back, earlier ones kept).
    /// Reports one line per file through `progress`; `skipped` lines only when `verbose`.
    /// Returns the names applied.
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
    /// (`sql/ferry/0016_register_table_keys_within_owner.sql`): a per-user table whose
    /// primary key every user shares. None when the function is missing (a SQL root
    /// older than 0016).
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
            labels: Set(directories.map(\.label)), earlierChecksums: Self.earlierChecksums)
        if let changed = plan.changed.first {
            let others = plan.changed.count > 1 ? " (and \(plan.changed.count - 1) more)" : ""
            throw MigrationError(
                "\(changed.name) was changed after it was applied\(others): applied migrations are never edited; "
                    + "restore the file and add a new migration instead",
                migrationName: changed.name)
        }
        for migration in plan.recordedEarlier {
            _ = try await client.query(
                "update ferry.schema_migrations set checksum = $2 where name = $1",
                [migration.name, migration.checksum])
        }
        var applied: [String] = []
        for entry in plan.entries {
            guard entry.state == .pending, let migration = entry.migration else {
                if verbose, case .applied = entry.state { progress("skipped \(entry.name) (already applied)") }
                continue
            }
            let clock = ContinuousClock()
            let started = clock.now
            try await applyOne(migration, client)
            let elapsed = clock.now - started
            let milliseconds =
                elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
            progress("applied \(migration.name) (\(milliseconds) ms)")
            applied.append(migration.name)
        }
        try await client.execute(Self.ledgerGrantSQL)
        return applied
    }

    /// Runs one file and records it, in one transaction.
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
