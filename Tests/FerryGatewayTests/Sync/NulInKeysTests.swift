import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// A `\u0000` in an id, a table name or a column name is refused on both push routes,
/// never dropped: dropping it would write another key (`"g\u0000t"` as `"gt"`). Over
/// real HTTP, as `ferry_gateway`.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct NulInKeysTests {
    @Test func aPushOfAnIdHoldingANulIsRejectedAndWritesNoOtherKey() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            let batch = #"""
                {"mutations": [
                  {"id": 1, "table": "tasks", "op": "upsert", "row": {"id": "g\u0000t", "title": "x"}},
                  {"id": 2, "table": "tasks", "op": "delete", "key": {"id": "g\u0000t"}},
                  {"id": 3, "table": "tasks", "op": "upsert", "row": {"id": "ok", "title": "y"}}
                ]}
                """#
            let response = try await server.call(
                "POST", "/v1/push", token: phone.accessToken, body: Array(batch.utf8))
            #expect(response.status == 200, "\(response)")
            let results = response.value("results") as? [[String: Any]] ?? []
            #expect(
                results.map { "\($0["status"] ?? "")/\($0["code"] ?? "")" }
                    == ["rejected/invalid_row", "rejected/invalid_row", "applied/"], "\(response)")
            #expect(try await server.database.rows("select id from tasks order by id") == [["ok"]])
        }
    }

    @Test func aWatermelonPushWithANulInAKeyIs400AndNothingIsApplied() async throws {
        try await withAccountsGateway(examples: ["tasks"]) { server in
            let phone = try await server.signUpAnonymous()
            let pull = try await server.watermelonPull(phone)
            let path = "\(WatermelonRoutes.path)?last_pulled_at=\(pull)"
            for (body, fragment) in [
                (#"{"tasks": {"created": [{"id": "g\u0000t"}], "updated": [], "deleted": []}}"#, #"id "g\u0000t""#),
                (#"{"tasks": {"created": [], "updated": [{"id": "g\u0000t"}], "deleted": []}}"#, #"id "g\u0000t""#),
                (#"{"tasks": {"created": [], "updated": [], "deleted": ["g\u0000t"]}}"#, #"id "g\u0000t""#),
                (
                    #"{"tasks": {"created": [{"id": "t1", "ti\u0000tle": "x"}], "updated": [], "deleted": []}}"#,
                    #"column "ti\u0000tle""#
                ),
                (#"{"tas\u0000ks": {"created": [{"id": "t1"}], "updated": [], "deleted": []}}"#, "the table name"),
            ] {
                let response = try await server.call("POST", path, token: phone.accessToken, body: Array(body.utf8))
                #expect(response.status == 400 && response.code == "invalid_request", "\(body): \(response)")
                #expect(response.string("error", "message")?.contains(fragment) == true, "\(response)")
            }
            #expect(try await server.database.value("select count(*) from tasks") == "0")
            // In a value it is still dropped, as WatermelonDB's Backend.md asks.
            let value =
                #"{"tasks": {"created": [{"id": "t1", "title": "nul\u0000here"}], "updated": [], "deleted": []}}"#
            let kept = try await server.call("POST", path, token: phone.accessToken, body: Array(value.utf8))
            #expect(kept.status == 200, "\(kept)")
            #expect(try await server.database.rows("select id, title from tasks") == [["t1", "nulhere"]])
        }
    }
}
