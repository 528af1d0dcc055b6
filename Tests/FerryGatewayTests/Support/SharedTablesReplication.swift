import FerryGateway
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

/// An origin cluster and subscriber clusters (shards) of the puzzle example, each
/// migrated, the origin publishing its shared table `daily_puzzles` and every subscriber
/// receiving it (`ferry.receive_shared`, then a subscription), as docs/SCALING.md
/// ("Shared tables across shards") sets them up. Scratch clusters, since a
/// subscription needs `wal_level = logical` at the origin.
struct SharedTablesReplication: Sendable {
    let origin: ScratchCluster
    let subscribers: [ScratchCluster]

    /// The shared tables the origin publishes.
    static let tables = ["public.daily_puzzles"]

    /// Makes the clusters, runs `body`, removes them.
    static func with(
        subscribers count: Int, _ body: (SharedTablesReplication) async throws -> Void
    ) async throws {
        try await AccountsDatabase.with { database in
            let binaries = (try await database.database.serverProgram("initdb") as NSString).deletingLastPathComponent
            var clusters: [ScratchCluster] = []
            defer { for cluster in clusters { cluster.remove() } }
            for index in 0...count {
                let cluster = try await ScratchCluster.create(
                    binaries: binaries, settings: index == 0 ? "wal_level = logical" : "")
                clusters.append(cluster)
                try await cluster.start()
                try await migrate(cluster)
            }
            let replication = SharedTablesReplication(origin: clusters[0], subscribers: Array(clusters.dropFirst()))
            try await replication.origin.sql(
                "create publication ferry_shared for table \(tables.joined(separator: ", "))"
                    + " with (publish = 'insert, update, delete')")
            for (index, subscriber) in replication.subscribers.enumerated() {
                try await replication.subscribe(subscriber, name: "ferry_shared_\(index + 1)")
            }
            try await body(replication)
        }
    }

    /// A database `ferry` migrated with Ferry's SQL and the puzzle example.
    private static func migrate(_ cluster: ScratchCluster) async throws {
        let postgres = try await cluster.connect(database: "postgres")
        _ = try await postgres.query("create database ferry")
        await postgres.close()
        let admin = try await cluster.connect(database: "ferry")
        do {
            try await Migrator(
                sqlRoot: TestRepository.sqlRoot, extraDirectories: [TestRepository.sqlRoot + "/examples/puzzle"]
            ).migrate(admin)
        } catch {
            await admin.close()
            throw error
        }
        await admin.close()
    }

    /// Readies `subscriber`'s shared tables and subscribes it to the origin's publication,
    /// waiting until the initial copy is done.
    private func subscribe(_ subscriber: ScratchCluster, name: String) async throws {
        for table in Self.tables { try await subscriber.sql("select ferry.receive_shared('\(table)')") }
        try await subscriber.sql(
            "create subscription \(name) connection 'host=127.0.0.1 port=\(origin.port) dbname=ferry user=postgres'"
                + " publication ferry_shared")
        let copied = try await eventuallyHolds(seconds: 60) {
            try await subscriber.value("select count(*) from pg_subscription_rel where srsubstate <> 'r'") == "0"
        }
        try #require(copied, "the subscription \(name) did not finish its initial copy")
    }

    /// Waits (30 s at most) until every subscriber answers `sql` with `expected`.
    func eventuallyEverywhere(_ sql: String, is expected: String?) async throws {
        for (index, subscriber) in subscribers.enumerated() {
            var last: String?
            let arrived = try await eventuallyHolds(seconds: 30) {
                last = try await subscriber.value(sql)
                return last == expected
            }
            #expect(arrived, "subscriber \(index + 1): \(sql) is \(last ?? "null"), not \(expected ?? "null")")
        }
    }
}

extension ScratchCluster {
    /// Runs `sql` in database `ferry` as `postgres`.
    func sql(_ sql: String) async throws {
        let client = try await connect(database: "ferry")
        do {
            try await client.execute(sql)
        } catch {
            await client.close()
            throw error
        }
        await client.close()
    }

    /// The first column of the first row `sql` (with `parameters`) answers in database
    /// `ferry`, nil for none or null.
    func value(_ sql: String, _ parameters: [String?] = []) async throws -> String? {
        let client = try await connect(database: "ferry")
        do {
            let result = try await client.query(sql, parameters)
            await client.close()
            return result.count > 0 ? result[0, 0] : nil
        } catch {
            await client.close()
            throw error
        }
    }
}
