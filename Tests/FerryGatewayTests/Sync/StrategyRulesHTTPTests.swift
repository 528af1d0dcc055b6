import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Each strategy's conflict rule over HTTP between two devices of one user on the puzzle
/// example (SyncSQLTests checks the rules one push at a time in SQL): the devices' writes
/// meet on the server, and what each device then pulls is the rule's outcome.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct StrategyRulesHTTPTests {
    func withDevices(_ body: (AccountsGateway, TestSession, TestSession) async throws -> Void) async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let (phone, tablet) = try await server.twoDevices(email: "rules@example.com")
            try await body(server, phone, tablet)
        }
    }

    @Test func lwwTheLastPushWinsPerColumnWithTheServersClock() async throws {
        try await withDevices { server, phone, tablet in
            // The phone claims a time far in the future: ignored, the server's clock stamps.
            let first = try await server.pushBatch(
                phone,
                [
                    [
                        "id": 1, "table": "profiles", "op": "upsert",
                        "row": ["username": "phone", "trophies": ["gold"], "updated_at": "2099-01-01T00:00:00Z"],
                    ]
                ])
            #expect(first.outcomes == ["applied"], "\(first.response)")
            let phoneLoad = try await server.pull(phone)
            let firstStamp = try #require(phoneLoad.upserts("profiles").first?["updated_at"] as? String)
            #expect(!firstStamp.hasPrefix("2099"), "\(firstStamp)")

            let second = try await server.pushBatch(
                tablet, [["id": 1, "table": "profiles", "op": "upsert", "row": ["username": "tablet"]]])
            #expect(second.outcomes == ["applied"], "\(second.response)")

            let next = try await server.pull(phone, cursor: phoneLoad.cursor)
            let row = try #require(next.upserts("profiles").first, "\(next.response)")
            #expect(row["username"] as? String == "tablet", "the later write wins")
            #expect(row["trophies"] as? [String] == ["gold"], "a column the later write left out keeps its value")
            let secondStamp = try #require(row["updated_at"] as? String)
            #expect(
                try await server.database.value("select $1::timestamptz > $2::timestamptz", [secondStamp, firstStamp])
                    == "t", "\(firstStamp) then \(secondStamp)")
        }
    }

    @Test func insertOnlyRecordsNeverChangeAndSetMembersMergeAcrossDevices() async throws {
        try await withDevices { server, phone, tablet in
            let record: [String: Any] = [
                "id": "g-1", "puzzle_id": "p", "seconds": 100, "finished_at": "2026-01-01T00:00:00Z",
            ]
            var changed = record
            changed["seconds"] = 99
            let phonePush = try await server.pushBatch(
                phone,
                [
                    ["id": 1, "table": "game_records", "op": "insert", "row": record],
                    ["id": 2, "table": "achievements", "op": "insert", "row": ["achievement_id": "first_win"]],
                ])
            #expect(phonePush.outcomes == ["applied", "applied"], "\(phonePush.response)")
            let tabletLoad = try await server.pull(tablet)

            let tabletPush = try await server.pushBatch(
                tablet,
                [
                    ["id": 1, "table": "game_records", "op": "insert", "row": record],
                    ["id": 2, "table": "game_records", "op": "insert", "row": changed],
                    ["id": 3, "table": "game_records", "op": "delete", "key": ["id": "g-1"]],
                    ["id": 4, "table": "achievements", "op": "insert", "row": ["achievement_id": "first_win"]],
                    ["id": 5, "table": "achievements", "op": "insert", "row": ["achievement_id": "ten_wins"]],
                    ["id": 6, "table": "achievements", "op": "delete", "key": ["achievement_id": "first_win"]],
                    [
                        "id": 7, "table": "daily_puzzles", "op": "upsert",
                        "row": ["day": "2026-01-01", "grid": String(repeating: "1", count: 81)],
                    ],
                ])
            #expect(
                tabletPush.outcomes == [
                    "duplicate", "rejected:immutable", "rejected:immutable", "duplicate", "applied", "applied",
                    "rejected:read_only",
                ], "\(tabletPush.response)")

            let next = try await server.pull(tablet, cursor: tabletLoad.cursor)
            #expect(next.tables == ["achievements"], "the record did not change: \(next.response)")
            #expect(next.upserts("achievements").map { $0["achievement_id"] as? String } == ["ten_wins"])
            #expect(next.deletes("achievements").map { $0["achievement_id"] as? String } == ["first_win"])
            #expect(
                try await server.database.rows("select id, seconds::text, _deleted::text from public.game_records")
                    == [["g-1", "100", "false"]])
            #expect(try await server.database.value("select count(*) from public.daily_puzzles") == "0")
        }
    }
}
