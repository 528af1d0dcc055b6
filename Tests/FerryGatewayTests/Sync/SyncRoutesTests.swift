import FerryGateway
import FerryTestSupport
import Foundation
import Testing

/// `POST /v1/push` and `GET /v1/schema` over HTTP, against ferry.push and
/// ferry.table_schema in a migrated database, as `ferry_gateway`.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct SyncRoutesTests {
    static let tables = """
        create table public.items (id text primary key, user_id uuid not null, title text, done boolean);
        select ferry.register_table('items', 'lww');
        """

    func withItems(arguments: [String] = [], _ body: (AccountsGateway) async throws -> Void) async throws {
        try await withAccountsGateway(arguments: arguments) { server in
            try await server.database.admin.execute(Self.tables)
            try await body(server)
        }
    }

    @Test func pushAppliesOnceAndAReplayedPushIsAllDuplicate() async throws {
        try await withItems { server in
            let device = try await server.signUpAnonymous()
            let batch: [String: Any] = [
                "mutations": [
                    ["id": 1, "table": "items", "op": "upsert", "row": ["id": "i-1", "title": "milk"]],
                    ["id": 2, "table": "items", "op": "upsert", "row": ["id": "i-1", "done": true]],
                    ["id": 3, "table": "nope", "op": "upsert", "row": ["id": "x"]],
                ]
            ]
            let first = try await server.call("POST", "/v1/push", token: device.accessToken, json: batch)
            #expect(first.status == 200, "\(first)")
            #expect(first.value("last_mutation_id") as? Int == 3)
            let statuses = (first.value("results") as? [[String: Any]])?.map { $0["status"] as? String }
            #expect(statuses == ["applied", "applied", "rejected"])
            let codes = (first.value("results") as? [[String: Any]])?.map { $0["code"] as? String }
            #expect(codes == [nil, nil, "unknown_table"])

            let replay = try await server.call("POST", "/v1/push", token: device.accessToken, json: batch)
            let replayed = (replay.value("results") as? [[String: Any]])?.map { $0["status"] as? String }
            #expect(replayed == ["duplicate", "duplicate", "duplicate"])
            let rows = try await server.database.rows("select id, user_id::text, title, done from public.items")
            #expect(rows == [["i-1", device.userID, "milk", "t"]])
        }
    }

    @Test func malformedOversizedAndUnauthenticatedPushesChangeNothing() async throws {
        try await withItems(arguments: ["--max-push-mutations", "2"]) { server in
            let device = try await server.signUpAnonymous()
            let garbage = try await offload {
                let client = try HTTPTestClient(port: server.port, timeout: 15)
                defer { client.close() }
                return try client.request(
                    "POST", "/v1/push", headers: [("Authorization", "Bearer \(device.accessToken)")],
                    body: Array(#"{"mutations": [ "#.utf8))
            }
            #expect(garbage.status == 400 && garbage.text.contains(#""code":"invalid_json""#))

            let notAnArray = try await server.call(
                "POST", "/v1/push", token: device.accessToken, json: ["mutations": 5])
            #expect(notAnArray.status == 400 && notAnArray.code == "invalid_request", "\(notAnArray)")

            let three = (1...3).map { ["id": $0, "table": "items", "op": "upsert", "row": ["id": "i-\($0)"]] }
            let tooMany = try await server.call(
                "POST", "/v1/push", token: device.accessToken, json: ["mutations": three])
            #expect(tooMany.status == 413 && tooMany.code == "payload_too_large", "\(tooMany)")

            let anonymous = try await server.call("POST", "/v1/push", json: ["mutations": [three[0]]])
            #expect(anonymous.status == 401 && anonymous.code == "unauthorized")

            #expect(try await server.database.value("select count(*) from public.items") == "0")
            #expect(
                try await server.database.value("select count(*) from ferry.devices where last_mutation_id > 0") == "0")
        }
    }

    @Test func schemaListsRegisteredTablesWithClientColumnsOnly() async throws {
        try await withItems { server in
            let device = try await server.signUpAnonymous()
            let schema = try await server.call("GET", "/v1/schema", token: device.accessToken)
            #expect(schema.status == 200, "\(schema)")
            let tables = schema.value("tables") as? [[String: Any]]
            let items = tables?.first { $0["name"] as? String == "items" }
            #expect(items?["strategy"] as? String == "lww")
            #expect(items?["key"] as? [String] == ["id"])
            #expect(items?["owner"] as? String == "user_id")
            let columns = (items?["columns"] as? [[String: Any]])?.compactMap { $0["name"] as? String } ?? []
            #expect(Set(columns) == ["id", "user_id", "title", "done", "updated_at"])
            #expect(try await server.call("GET", "/v1/schema").status == 401)
        }
    }
}
