import FerryPostgres
import Foundation

/// A fresh PostgreSQL database for one test, dropped afterwards, so tests run in parallel.
///
/// The server comes from `FERRY_TEST_DATABASE_URL`, a superuser URL to a maintenance
/// database (`postgresql://postgres@127.0.0.1:55433/postgres`). When it is missing or
/// unreachable, ``create(prefix:)`` throws a ``TestDatabaseError`` that says so: the
/// test fails; it is never skipped.
public struct TestDatabase: Sendable {
    /// The environment variable naming the test server.
    public static let environmentVariable = "FERRY_TEST_DATABASE_URL"

    /// The database's name (`ferry_test_<random>`).
    public let name: String
    /// A configuration connecting to this database as the superuser of the URL.
    public let configuration: PostgresConfiguration
    /// A connection string (URL when the environment gave a URL) for this database, e.g. to hand to the CLI.
    public let url: String
    /// The configuration of the maintenance database the test database was created from.
    public let maintenance: PostgresConfiguration

    /// The maintenance configuration from `FERRY_TEST_DATABASE_URL`; throws when it is unset or invalid.
    public static func maintenanceConfiguration() throws(TestDatabaseError) -> PostgresConfiguration {
        guard let url = ProcessInfo.processInfo.environment[environmentVariable], !url.isEmpty else {
            throw TestDatabaseError(
                "\(environmentVariable) is not set: these tests need a PostgreSQL server. Set it to a superuser URL, "
                    + "e.g. postgresql://postgres@127.0.0.1:55433/postgres")
        }
        do {
            return try PostgresConfiguration(url, applicationName: "ferry-tests", connectTimeoutMilliseconds: 30_000)
        } catch {
            throw TestDatabaseError("\(environmentVariable) is not a valid connection string: \(error)")
        }
    }

    /// Creates a uniquely named empty database.
    public static func create(prefix: String = "ferry_test") async throws(TestDatabaseError) -> TestDatabase {
        let maintenance = try maintenanceConfiguration()
        let name = "\(prefix)_\(UInt64.random(in: 0...UInt64.max) & 0xFFFF_FFFF_FFFF)".lowercased()
        do {
            let admin = try await PostgresClient.connect(maintenance)
            do {
                try await admin.execute("CREATE DATABASE \(name)")
            } catch {
                await admin.close()
                throw error
            }
            await admin.close()
        } catch {
            throw TestDatabaseError(
                "cannot create a test database on the server of \(environmentVariable) "
                    + "(\(maintenance.parameters["host"] ?? "?"):\(maintenance.parameters["port"] ?? "?")): \(error)")
        }
        return TestDatabase(
            name: name, configuration: maintenance.database(name),
            url: replacingDatabase(in: maintenance.connectionString, with: name), maintenance: maintenance)
    }

    /// Creates a database, runs `body` with it, and drops it whether `body` throws or not.
    ///
    /// At most ``TestDatabaseSlots/width`` tests hold one at a time; the others wait for a
    /// slot (a `with` inside another's `body` takes none).
    public static func with<T>(
        prefix: String = "ferry_test", _ body: (TestDatabase) async throws -> T
    ) async throws -> T {
        try await TestDatabaseSlots.shared.holding { try await withoutSlot(prefix: prefix, body) }
    }

    private static func withoutSlot<T>(
        prefix: String, _ body: (TestDatabase) async throws -> T
    ) async throws -> T {
        let database = try await create(prefix: prefix)
        do {
            let value = try await body(database)
            try await database.drop()
            return value
        } catch {
            try? await database.drop()
            throw error
        }
    }

    /// ``url`` with its user replaced by `user` and no password (the test cluster trusts
    /// loopback), e.g. to connect as `ferry_gateway`; throws when the environment gave
    /// no URL.
    public func url(user: String) throws(TestDatabaseError) -> String { try Self.url(url, user: user) }

    /// `url` with its user replaced by `user` and no password.
    public static func url(_ url: String, user: String) throws(TestDatabaseError) -> String {
        guard var components = URLComponents(string: url), components.scheme?.hasPrefix("postgres") == true else {
            throw TestDatabaseError("\(Self.environmentVariable) must be a postgresql:// URL for these tests")
        }
        components.user = user
        components.password = nil
        guard let replaced = components.string else { throw TestDatabaseError("cannot rewrite \(url)") }
        return replaced
    }

    /// Connects a ``PostgresClient`` to this database.
    public func connect() async throws -> PostgresClient {
        try await PostgresClient.connect(configuration)
    }

    /// The client program `name` (`pg_dump`, …) of the server's own major version, from
    /// Debian's `/usr/lib/postgresql/<major>/bin` (which the `postgresql` package installs
    /// with the server): another major version's output differs. Throws, saying what to
    /// install, when it is not there.
    public func serverProgram(_ name: String) async throws -> String {
        let client = try await connect()
        let version = try await client.query("show server_version_num")[0, 0].flatMap { Int($0) }
        await client.close()
        let major = (version ?? 0) / 10_000
        let path = "/usr/lib/postgresql/\(major)/bin/\(name)"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw TestDatabaseError(
                "\(path) is missing: the test server is PostgreSQL \(major), whose \(name) these tests run; "
                    + "install postgresql-client-\(major)")
        }
        return path
    }

    /// Drops the database, disconnecting whoever is still connected (`WITH (FORCE)`).
    public func drop() async throws {
        let admin = try await PostgresClient.connect(maintenance)
        do {
            try await admin.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
        } catch {
            await admin.close()
            throw error
        }
        await admin.close()
    }

    private static func replacingDatabase(in connectionString: String, with name: String) -> String {
        if connectionString.hasPrefix("postgresql://") || connectionString.hasPrefix("postgres://"),
            var components = URLComponents(string: connectionString)
        {
            components.path = "/" + name
            if let url = components.string { return url }
        }
        return connectionString + " dbname=\(name)"
    }
}

/// Why a test could not get its database; the description says what to fix.
public struct TestDatabaseError: Error, CustomStringConvertible {
    /// What went wrong and what to do.
    public let description: String
    init(_ description: String) { self.description = description }
}

/// The bound on tests holding a database at once. Swift Testing starts every test at the
/// same moment; unbounded, the gateways' pools (up to eight connections each) and the
/// tests' own clients fill the server's connection slots on a loaded machine, and
/// requests fail with `503` for no fault of the code under test.
public actor TestDatabaseSlots {
    /// How many tests may hold a database at once.
    public static let width = 16
    /// The one bound of the test process.
    public static let shared = TestDatabaseSlots()

    @TaskLocal private static var isHolding = false

    private var free = TestDatabaseSlots.width
    private var waiting: [CheckedContinuation<Void, Never>] = []

    /// Runs `body` holding a slot, waiting for one first unless this task already holds one.
    public nonisolated func holding<T>(_ body: () async throws -> T) async throws -> T {
        if Self.isHolding { return try await body() }
        await acquire()
        do {
            let value = try await Self.$isHolding.withValue(true) { try await body() }
            await release()
            return value
        } catch {
            await release()
            throw error
        }
    }

    private func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    private func release() {
        if waiting.isEmpty {
            free += 1
        } else {
            waiting.removeFirst().resume()
        }
    }
}
