import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation

/// An email directory database (sql/directory, `ferry migrate --directory`) and N shards,
/// each a migrated database of its own set to shard 1, 2, … (`ferry.set_shard`) with an
/// in-process gateway given `--directory-database-url`: what a sharded deployment is,
/// without haproxy in front (TwoClustersTests runs the whole shape behind haproxy). The
/// gateways log in to the directory as `ferry_gateway`, granted the directory's role
/// `ferry_directory`.
struct DirectoryShards: Sendable {
    /// The directory database (superuser connection in `admin`).
    let directory: MigratedDirectory
    /// Shard `i + 1`'s database and gateway.
    let shards: [AccountsGateway]

    subscript(index: Int) -> AccountsGateway { shards[index] }

    /// The directory's row of `email` (``MigratedDirectory/row(_:)``).
    func row(_ email: String) async throws -> (shard: Int, user: String, state: String)? {
        try await directory.row(email)
    }
}

/// A migrated email directory database.
struct MigratedDirectory: Sendable {
    let database: TestDatabase
    let admin: PostgresClient
    /// Its URL as the gateways use it (`ferry_gateway`).
    let gatewayURL: String

    /// The directory's migrations, as `ferry migrate --directory` applies them.
    static var migrator: Migrator {
        Migrator(directories: [
            MigrationDirectory(
                path: TestRepository.sqlRoot + "/" + Migrator.directoryLabel, label: Migrator.directoryLabel)
        ])
    }

    /// Its row of `email`: shard, user, state; nil when there is none.
    func row(_ email: String) async throws -> (shard: Int, user: String, state: String)? {
        let result = try await admin.query(
            "select shard, user_id::text, state from directory.emails where email = $1", [email])
        guard result.count == 1 else { return nil }
        return (Int(result[0, 0] ?? "") ?? -1, result[0, 1] ?? "", result[0, 2] ?? "")
    }

    static func with<T>(_ body: (MigratedDirectory) async throws -> T) async throws -> T {
        try await TestDatabase.with(prefix: "ferry_directory") { database in
            let admin = try await database.connect()
            do {
                // Roles belong to the cluster and tests migrate many directories at once: the
                // migration's check-then-create (one deployment has one directory) and the
                // grant would race, so both happen here first, catching the loser's error.
                try await admin.execute(
                    """
                    do $$ begin create role ferry_directory nologin;
                    exception when duplicate_object or unique_violation then null; end $$;
                    do $$ begin grant ferry_directory to ferry_gateway;
                    exception when duplicate_object or unique_violation then null; end $$;
                    """)
                try await migrator.migrate(admin)
                let value = try await body(
                    MigratedDirectory(
                        database: database, admin: admin, gatewayURL: try database.url(user: "ferry_gateway")))
                await admin.close()
                return value
            } catch {
                await admin.close()
                throw error
            }
        }
    }
}

/// `count` shards sharing one directory (``DirectoryShards``), each gateway started with
/// `--shard-urls` naming every shard's gateway and `arguments` too; runs `body`; stops
/// and drops everything.
func withDirectoryShards<T>(
    count: Int = 2, arguments: [String] = [], _ body: (DirectoryShards) async throws -> T
) async throws -> T {
    let ports = try (0..<count).map { _ in try freePort() }
    let urls = ports.enumerated().map { "\($0.offset + 1)=http://127.0.0.1:\($0.element)" }.joined(separator: ",")
    return try await MigratedDirectory.with { directory in
        try await withShardGateways(
            count: count, directoryURL: directory.gatewayURL, ports: ports,
            arguments: ["--shard-urls", urls] + arguments, made: []
        ) { shards in
            try await body(DirectoryShards(directory: directory, shards: shards))
        }
    }
}

private func withShardGateways<T>(
    count: Int, directoryURL: String, ports: [Int], arguments: [String], made: [AccountsGateway],
    _ body: ([AccountsGateway]) async throws -> T
) async throws -> T {
    guard made.count < count else { return try await body(made) }
    return try await AccountsDatabase.with { database in
        try await database.admin.execute("select ferry.set_shard(\(made.count + 1))")
        return try await TestGateway.with(
            databaseURL: database.gatewayURL, arguments: ["--directory-database-url", directoryURL] + arguments,
            port: ports[made.count]
        ) { gateway, port in
            try await withShardGateways(
                count: count, directoryURL: directoryURL, ports: ports, arguments: arguments,
                made: made + [AccountsGateway(database: database, gateway: gateway, port: port)], body)
        }
    }
}
