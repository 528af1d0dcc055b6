import FerryTestSupport
import Foundation
import Testing

/// `/v1/watermelon/sync` driven by an independent client (`Tests/clients/watermelon_sync.mjs`,
/// Node with its built-in fetch, written from WatermelonDB's docs and sync code): two
/// devices of one user through offline edits, a conflict, deletes, a second device's first
/// sync, a rejected record and a migration sync, against an in-process gateway serving
/// the to-do example. At the end both devices' records equal the database's.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct WatermelonClientTests {
    static let script = NodeScript.path("watermelon_sync.mjs")

    @Test func twoDevicesSyncAsWatermelonDBWouldAndEndWithTheDatabasesRecords() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let run = try await offload {
                try NodeScript.run(arguments: [Self.script, "http://127.0.0.1:\(server.port)"], timeout: 120)
            }
            #expect(run.status == 0, "watermelon_sync.mjs failed:\n\(run.output)")
            #expect(run.output.contains("two devices synced through every step as WatermelonDB would"), "\(run.output)")
            let line = try #require(
                run.output.split(separator: "\n").first { $0.hasPrefix("FINAL ") }, "no FINAL line:\n\(run.output)")
            let final = try #require(
                try JSONSerialization.jsonObject(with: Data(line.dropFirst("FINAL ".count).utf8)) as? [String: Any])
            let database = try await server.database.rows(
                """
                select id, title, position::text, coalesce(parent_id, 'null'), metadata::text,
                    pg_catalog.floor(extract(epoch from updated_at) * 1000)::bigint::text
                from tasks where not _deleted order by id
                """
            ).map { $0.map { $0 ?? "?" } }
            #expect(database.count == 2, "\(database)")
            for device in ["phone", "laptop"] {
                let records = try #require(final[device] as? [[String: Any]], "\(device) in \(line)")
                let local = records.map { record in
                    ["id", "title", "position", "parent_id", "metadata", "updated_at"].map { key -> String in
                        let value = record[key]
                        if value is NSNull { return "null" }
                        return "\(value ?? "?")"
                    }
                }.sorted { $0[0] < $1[0] }
                #expect(local == database, "\(device)")
            }
        }
    }
}
