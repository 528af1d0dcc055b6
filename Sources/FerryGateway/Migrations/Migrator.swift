import FerryPostgres
import Foundation

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
    /// The label of the email directory's migrations, `<sqlRoot>/directory`, applied to
    /// the directory's own database by `ferry migrate --directory` (docs/SCALING.md).
    public static let directoryLabel = "directory"

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
        // The email directory's functions act under no Row Level Security: its owner needs
        // no BYPASSRLS.
        if !directories.allSatisfy({ $0.label == Self.directoryLabel }) { try await Self.checkRole(client) }
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
