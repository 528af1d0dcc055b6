import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Issue 4 item 8: the first-sign-in choice and account deletion over HTTP with real rows
/// pushed into every puzzle table: `profiles`, `user_settings`, `daily_challenges` (lww),
/// `game_records` (insert_only), `achievements` (set), `active_game` (device_lock), and the
/// shared `daily_puzzles`, which belongs to nobody.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct AccountRowsTests {
    static let email = "player@example.com"
    static let password = "correct horse battery"

    /// The puzzle tables with an owner, as `(table, key column other than the owner)`.
    static let ownedTables = [
        ("achievements", "achievement_id"), ("active_game", "slot"), ("daily_challenges", "day::text"),
        ("game_records", "id"), ("profiles", "''"), ("user_settings", "''"),
    ]

    /// The email account (phone and tablet), an anonymous device with rows, a stranger
    /// with rows, and a published puzzle.
    struct Players {
        let phone: TestSession
        let tablet: TestSession
        let device: TestSession
        let stranger: TestSession
    }

    /// Live rows pushed by the anonymous device: 8, in every owned table, and one tombstone.
    static var deviceMutations: [[String: Any]] {
        [
            ["id": 1, "table": "profiles", "op": "upsert", "row": ["username": "device", "trophies": ["gold"]]],
            ["id": 2, "table": "user_settings", "op": "upsert", "row": ["settings": ["theme": "dark"]]],
            ["id": 3, "table": "game_records", "op": "insert", "row": record("g-d1", 100)],
            ["id": 4, "table": "game_records", "op": "insert", "row": record("g-d2", 200)],
            ["id": 5, "table": "achievements", "op": "insert", "row": ["achievement_id": "both"]],
            ["id": 6, "table": "achievements", "op": "insert", "row": ["achievement_id": "device_only"]],
            ["id": 7, "table": "achievements", "op": "insert", "row": ["achievement_id": "device_gone"]],
            ["id": 8, "table": "achievements", "op": "delete", "key": ["achievement_id": "device_gone"]],
            ["id": 9, "table": "active_game", "op": "upsert", "row": ["slot": "current", "hints": 1]],
            ["id": 10, "table": "daily_challenges", "op": "upsert", "row": ["day": "2026-01-01", "seconds": 90]],
        ]
    }

    /// Live rows pushed by the email account's phone: 6, some under the device rows' keys.
    /// (`game_records` is keyed by `id` alone, so each user's record ids start with `prefix`.)
    static func cloudMutations(_ prefix: String) -> [[String: Any]] {
        [
            ["id": 1, "table": "profiles", "op": "upsert", "row": ["username": "cloud"]],
            ["id": 2, "table": "game_records", "op": "insert", "row": record("g-\(prefix)1", 300)],
            ["id": 3, "table": "achievements", "op": "insert", "row": ["achievement_id": "both"]],
            ["id": 4, "table": "achievements", "op": "insert", "row": ["achievement_id": "cloud_only"]],
            ["id": 5, "table": "active_game", "op": "upsert", "row": ["slot": "current", "hints": 5]],
            ["id": 6, "table": "daily_challenges", "op": "upsert", "row": ["day": "2026-01-02", "seconds": 80]],
        ]
    }

    static func record(_ id: String, _ seconds: Int) -> [String: Any] {
        ["id": id, "puzzle_id": "p-1", "seconds": seconds, "finished_at": "2026-01-01T00:00:00Z"]
    }

    func withPlayers(_ body: (AccountsGateway, Players) async throws -> Void) async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let (phone, tablet) = try await server.twoDevices(email: Self.email, password: Self.password)
            let device = try await server.signUpAnonymous()
            let stranger = try await server.signUpAnonymous()
            for (session, mutations) in [
                (device, Self.deviceMutations), (phone, Self.cloudMutations("c")), (stranger, Self.cloudMutations("s")),
            ] {
                let pushed = try await server.pushBatch(session, mutations)
                try #require(
                    pushed.outcomes == Array(repeating: "applied", count: mutations.count), "\(pushed.response)")
            }
            try await server.database.admin.execute(
                "insert into public.daily_puzzles (day, grid) values ('2026-01-01', repeat('0', 81))")
            try await body(server, Players(phone: phone, tablet: tablet, device: device, stranger: stranger))
        }
    }

    /// Every row `owner` has in the owned puzzle tables, tombstones included, as
    /// `[table, key, row as JSON]` (owner column and sync columns left out of the JSON).
    func rows(_ database: AccountsDatabase, of owner: String) async throws -> [[String?]] {
        let sql =
            Self.ownedTables.map { table, key in
                """
                select '\(table)', \(key), (to_jsonb(t) - 'user_id' - '_stamp' - 'updated_at' - '_lock_heartbeat_at')::text
                from public.\(table) t where user_id = $1
                """
            }.joined(separator: " union all ") + " order by 1, 2"
        return try await database.rows(sql, [owner])
    }

    /// Every row of every user and the shared table, as the superuser sees them.
    func everything(_ database: AccountsDatabase) async throws -> [[String?]] {
        let owned = Self.ownedTables.map { table, _ in
            "select '\(table)', to_jsonb(t)::text from public.\(table) t"
        }
        return try await database.rows(
            (owned + ["select 'daily_puzzles', to_jsonb(t)::text from public.daily_puzzles t"])
                .joined(separator: " union all ") + " order by 1, 2")
    }

    func signIn(_ server: AccountsGateway, _ players: Players, resolve: String? = nil) async throws -> APIResponse {
        try await server.signIn(
            email: Self.email, password: Self.password, device: players.device.deviceID,
            bearer: players.device.accessToken, resolve: resolve)
    }

    @Test func firstSignInCountsLiveRowsOfEveryStrategy() async throws {
        try await withPlayers { server, players in
            let before = try await everything(server.database)
            let response = try await signIn(server, players)
            #expect(response.status == 409 && response.code == "resolution_required", "\(response)")
            #expect(response.value("error", "device_rows") as? Int == 8, "every live device row, no tombstone")
            #expect(response.value("error", "cloud_rows") as? Int == 6)
            #expect(try await everything(server.database) == before)
        }
    }

    @Test func keepDeviceTombstonesCloudRowsReownsDeviceRowsAndTheOtherDevicePullsBoth() async throws {
        try await withPlayers { server, players in
            let database = server.database
            let tabletLoad = try await server.pull(players.tablet)
            try #require(tabletLoad.status == 200 && tabletLoad.hasMore == false, "\(tabletLoad.response)")
            let deviceRows = try await rows(database, of: players.device.userID)
            let strangerRows = try await rows(database, of: players.stranger.userID)

            let response = try await signIn(server, players, resolve: "keep_device")
            #expect(response.status == 200, "\(response)")
            #expect(response.string("user", "id") == players.phone.userID)
            #expect(response.value("reset") as? Bool == false)

            // The device's rows now belong to the email account, exactly as they were; the
            // cloud rows under other keys are tombstones; the anonymous user owns nothing.
            let cloud = try await rows(database, of: players.phone.userID)
            #expect(
                cloud.filter { !($0[2] ?? "").contains(#""_deleted": true"#) }
                    == deviceRows.filter {
                        !($0[2] ?? "").contains(#""_deleted": true"#)
                    })
            let tombstoned = cloud.filter { ($0[2] ?? "").contains(#""_deleted": true"#) }.map { [$0[0], $0[1]] }
            #expect(
                tombstoned == [
                    ["achievements", "cloud_only"], ["achievements", "device_gone"],
                    ["daily_challenges", "2026-01-02"], ["game_records", "g-c1"],
                ], "\(cloud)")
            #expect(try await rows(database, of: players.device.userID).isEmpty)
            #expect(try await database.userExists(players.device.userID) == false)
            #expect(try await rows(database, of: players.stranger.userID) == strangerRows)

            // The tablet learns it all from one pull: the device's rows as upserts (replacing
            // the cloud rows under the same keys), the other cloud rows as deletes.
            let next = try await server.pull(players.tablet, cursor: tabletLoad.cursor)
            #expect(next.status == 200 && next.hasMore == false, "\(next.response)")
            func keys(_ rows: [[String: Any]], _ column: String) -> [String] {
                rows.map { "\($0[column] ?? "?")" }.sorted()
            }
            #expect(keys(next.upserts("profiles"), "username") == ["device"])
            #expect(keys(next.upserts("user_settings"), "user_id") == [players.phone.userID])
            #expect(keys(next.upserts("game_records"), "id") == ["g-d1", "g-d2"])
            #expect(keys(next.upserts("achievements"), "achievement_id") == ["both", "device_only"])
            #expect(keys(next.upserts("active_game"), "hints") == ["1"])
            #expect(keys(next.upserts("daily_challenges"), "day") == ["2026-01-01"])
            #expect(keys(next.deletes("game_records"), "id") == ["g-c1"])
            #expect(keys(next.deletes("achievements"), "achievement_id") == ["cloud_only", "device_gone"])
            #expect(keys(next.deletes("daily_challenges"), "day") == ["2026-01-02"])
            #expect(next.deletes("profiles").isEmpty && next.deletes("active_game").isEmpty)
            #expect(!next.tables.contains("daily_puzzles"), "the shared table did not change")
        }
    }

    @Test func keepCloudDeletesEveryDeviceRowAndLeavesTheCloudRowsAlone() async throws {
        try await withPlayers { server, players in
            let database = server.database
            let cloudRows = try await rows(database, of: players.phone.userID)
            let strangerRows = try await rows(database, of: players.stranger.userID)
            let tabletLoad = try await server.pull(players.tablet)
            try #require(tabletLoad.status == 200, "\(tabletLoad.response)")

            let response = try await signIn(server, players, resolve: "keep_cloud")
            #expect(response.status == 200, "\(response)")
            #expect(response.value("reset") as? Bool == true)
            #expect(try await rows(database, of: players.device.userID).isEmpty, "no row nor tombstone is left")
            #expect(try await database.userExists(players.device.userID) == false)
            #expect(try await rows(database, of: players.phone.userID) == cloudRows)
            #expect(try await rows(database, of: players.stranger.userID) == strangerRows)
            let next = try await server.pull(players.tablet, cursor: tabletLoad.cursor)
            #expect(next.status == 200 && next.tables.isEmpty, "the email account's devices see no change")
        }
    }

    @Test func deletingTheAccountRemovesItsRowsInEveryTableAndNothingElse() async throws {
        try await withPlayers { server, players in
            let database = server.database
            let strangerRows = try await rows(database, of: players.stranger.userID)
            let deviceRows = try await rows(database, of: players.device.userID)
            let puzzles = try await database.rows("select to_jsonb(t)::text from public.daily_puzzles t")
            #expect(try await rows(database, of: players.phone.userID).count == 6)

            let refused = try await server.call(
                "DELETE", "/v1/account", token: players.phone.accessToken, json: ["confirm": "delete"])
            #expect(refused.status == 400 && refused.code == "confirmation_required", "\(refused)")
            #expect(try await rows(database, of: players.phone.userID).count == 6)

            let deleted = try await server.call(
                "DELETE", "/v1/account", token: players.phone.accessToken, json: ["confirm": "DELETE"])
            #expect(deleted.status == 204, "\(deleted)")
            #expect(try await rows(database, of: players.phone.userID).isEmpty)
            #expect(try await database.userExists(players.phone.userID) == false)
            #expect(try await rows(database, of: players.stranger.userID) == strangerRows)
            #expect(try await rows(database, of: players.device.userID) == deviceRows)
            #expect(try await database.rows("select to_jsonb(t)::text from public.daily_puzzles t") == puzzles)
            let tabletPull = try await server.pull(players.tablet)
            #expect(
                tabletPull.status == 401 && tabletPull.response.code == "session_revoked",
                "the other device's session is gone: \(tabletPull.response)")
        }
    }
}
