import FerryGateway
import FerryPostgres
import Foundation

/// A fresh test database migrated with Ferry's own SQL (and example apps or other
/// migration folders after it), with a superuser connection for seeding and inspecting
/// rows and the URL a gateway logs in with as `ferry_gateway`.
public struct MigratedDatabase: Sendable {
    /// The database (dropped after the test).
    public let database: TestDatabase
    /// A superuser connection: sees every row, bypasses Row Level Security.
    public let admin: PostgresClient
    /// The database's URL with `ferry_gateway` as the user (the cluster trusts loopback).
    public let gatewayURL: String

    /// `sql/examples/<name>` of the repository, for ``with(prefix:examples:directories:_:)``.
    public static func example(_ name: String) -> String { TestRepository.sqlRoot + "/examples/" + name }

    /// Creates a database, migrates it with `sql/ferry`, then `sql/examples/<name>` for
    /// each of `examples`, then each of `directories`; runs `body`; drops the database.
    public static func with<T>(
        prefix: String = "ferry_test", examples: [String] = [], directories: [String] = [],
        _ body: (MigratedDatabase) async throws -> T
    ) async throws -> T {
        try await TestDatabase.with(prefix: prefix) { database in
            let admin = try await database.connect()
            do {
                try await Migrator(
                    sqlRoot: TestRepository.sqlRoot, extraDirectories: examples.map(example) + directories
                ).migrate(admin)
                let migrated = MigratedDatabase(
                    database: database, admin: admin, gatewayURL: try database.url(user: "ferry_gateway"))
                let value = try await body(migrated)
                await admin.close()
                return value
            } catch {
                await admin.close()
                throw error
            }
        }
    }
}
