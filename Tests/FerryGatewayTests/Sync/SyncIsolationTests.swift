import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Issue 4's isolation over the sync endpoints on the puzzle example: user B can neither
/// see nor change user A's rows through push, pull, locks, schema or SQL run as
/// `ferry_client` with B's identity.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct SyncIsolationTests {
    static let puzzleTables: Set<String> = [
        "achievements", "active_game", "daily_challenges", "daily_puzzles", "game_records", "profiles",
        "user_settings",
    ]

    /// A's rows in every owned table (and its device counter), as the superuser sees them.
    func rowsOfA(_ database: AccountsDatabase, _ a: String) async throws -> [[String?]] {
        try await database.rows(
            """
            select 'profiles', to_jsonb(t)::text from public.profiles t where user_id = $1
            union all select 'user_settings', to_jsonb(t)::text from public.user_settings t where user_id = $1
            union all select 'game_records', to_jsonb(t)::text from public.game_records t where user_id = $1
            union all select 'achievements', to_jsonb(t)::text from public.achievements t where user_id = $1
            union all select 'active_game', to_jsonb(t)::text from public.active_game t where user_id = $1
            union all select 'daily_challenges', to_jsonb(t)::text from public.daily_challenges t where user_id = $1
            union all select 'devices', to_jsonb(t)::text from ferry.devices t where user_id = $1
            order by 1, 2
            """, [a])
    }

    /// A with a row in every owned table and the `current` game locked; B with a profile.
    func withTwoUsers(_ body: (AccountsGateway, TestSession, TestSession) async throws -> Void) async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let a = try await server.signUpAnonymous()
            let b = try await server.signUpAnonymous()
            let pushed = try await server.pushBatch(
                a,
                [
                    ["id": 1, "table": "profiles", "op": "upsert", "row": ["username": "alice"]],
                    ["id": 2, "table": "user_settings", "op": "upsert", "row": ["settings": ["theme": "dark"]]],
                    [
                        "id": 3, "table": "game_records", "op": "insert",
                        "row": [
                            "id": "g-a1", "puzzle_id": "p", "seconds": 10, "finished_at": "2026-01-01T00:00:00Z",
                        ],
                    ],
                    ["id": 4, "table": "achievements", "op": "insert", "row": ["achievement_id": "first_win"]],
                    ["id": 5, "table": "daily_challenges", "op": "upsert", "row": ["day": "2026-01-01"]],
                    ["id": 6, "table": "active_game", "op": "upsert", "row": ["slot": "current", "hints": 1]],
                ])
            try #require(pushed.outcomes == Array(repeating: "applied", count: 6), "\(pushed.response)")
            let claimed = try await server.call(
                "POST", "/v1/locks/active_game/current/claim", token: a.accessToken, json: [:])
            try #require(claimed.status == 200, "\(claimed)")
            let bs = try await server.pushBatch(
                b, [["id": 1, "table": "profiles", "op": "upsert", "row": ["username": "bob"]]])
            try #require(bs.outcomes == ["applied"], "\(bs.response)")
            try await server.database.admin.execute(
                "insert into public.daily_puzzles (day, grid) values ('2026-01-01', repeat('1', 81))")
            try await body(server, a, b)
        }
    }

    @Test func bCannotChangeARowsThroughPushWithCraftedOwnersTablesOrColumns() async throws {
        try await withTwoUsers { server, a, b in
            let before = try await rowsOfA(server.database, a.userID)
            let answer = try await server.pushBatch(
                b,
                [
                    ["id": 2, "table": "profiles", "op": "upsert", "row": ["user_id": a.userID, "username": "bob"]],
                    ["id": 3, "table": "profiles", "op": "delete", "key": ["user_id": a.userID]],
                    [
                        "id": 4, "table": "user_settings", "op": "insert",
                        "row": ["user_id": a.userID, "settings": [:] as [String: Any]],
                    ],
                    [
                        "id": 5, "table": "game_records", "op": "upsert",
                        "row": [
                            "id": "g-a1", "puzzle_id": "p", "seconds": 1, "finished_at": "2026-01-01T00:00:00Z",
                        ],
                    ],
                    ["id": 6, "table": "daily_challenges", "op": "delete", "key": ["day": "2026-01-01"]],
                    [
                        "id": 7, "table": "achievements", "op": "delete",
                        "key": ["user_id": a.userID, "achievement_id": "first_win"],
                    ],
                    [
                        "id": 8, "table": "active_game", "op": "upsert",
                        "row": ["user_id": a.userID, "slot": "current", "hints": 9],
                    ],
                    [
                        "id": 9, "table": "daily_challenges", "op": "upsert",
                        "row": ["user_id": a.userID, "day": "2026-01-01", "seconds": 1],
                    ],
                    ["id": 10, "table": "public.profiles", "op": "upsert", "row": ["username": "x"]],
                    ["id": 11, "table": "ferry.devices", "op": "upsert", "row": ["last_mutation_id": 0]],
                    ["id": 12, "table": "profiles\"; delete from profiles; --", "op": "upsert", "row": [:]],
                    ["id": 13, "table": "profiles", "op": "upsert", "row": ["user_id\" = user_id or true --": "x"]],
                    ["id": 14, "table": "profiles", "op": "upsert", "row": ["_stamp": "1", "username": "x"]],
                    [
                        "id": 15, "table": "active_game", "op": "upsert",
                        "row": ["slot": "current", "_lock_device": "x"],
                    ],
                    ["id": 16, "table": "daily_puzzles", "op": "upsert", "row": ["day": "2026-01-01", "grid": "0"]],
                ])
            #expect(
                answer.outcomes == [
                    "rejected:forbidden", "rejected:forbidden", "rejected:forbidden",
                    // game_records is keyed (user_id, id): B's g-a1 is B's own row, beside A's.
                    "applied",
                    // B's delete of A's key reaches B's rows only: it finds nothing, which is applied.
                    "applied", "rejected:forbidden", "rejected:forbidden", "rejected:forbidden",
                    "rejected:unknown_table", "rejected:unknown_table", "rejected:unknown_table",
                    "rejected:unknown_column", "rejected:unknown_column", "rejected:unknown_column",
                    "rejected:read_only",
                ], "\(answer.response)")
            #expect(try await rowsOfA(server.database, a.userID) == before, "A's rows and device as they were")
            #expect(try await server.database.value("select count(*) from public.profiles") == "2")
        }
    }

    @Test func bPullsNothingOfAInItsFirstLoadNorAfterACursorAndCannotUseAsCursor() async throws {
        try await withTwoUsers { server, a, b in
            let first = try await server.pull(b)
            #expect(first.status == 200, "\(first.response)")
            #expect(first.tables == ["daily_puzzles", "profiles"], "\(first.response)")
            #expect(first.upserts("profiles").map { $0["username"] as? String } == ["bob"])
            #expect(!first.response.raw.text.contains(a.userID), "nothing of A in B's first load")
            #expect(!first.response.raw.text.contains(a.deviceID))

            // A changes and deletes rows; B's next pull sees none of it.
            let changed = try await server.pushBatch(
                a,
                [
                    ["id": 7, "table": "profiles", "op": "upsert", "row": ["username": "alice2"]],
                    ["id": 8, "table": "achievements", "op": "delete", "key": ["achievement_id": "first_win"]],
                    ["id": 9, "table": "daily_challenges", "op": "upsert", "row": ["day": "2026-01-02"]],
                ])
            try #require(changed.outcomes == ["applied", "applied", "applied"], "\(changed.response)")
            let next = try await server.pull(b, cursor: first.cursor)
            #expect(next.status == 200 && next.tables.isEmpty, "\(next.response)")
            #expect(next.lastMutationID == 1, "B's own device, not A's")

            // A's cursor is sealed for A: B presenting it is refused, not answered with A's rows.
            let aFirst = try await server.pull(a)
            try #require(aFirst.status == 200 && aFirst.upserts("profiles").count == 1, "\(aFirst.response)")
            let stolen = try await server.pull(b, cursor: aFirst.cursor)
            #expect(stolen.status == 400 && stolen.response.code == "invalid_cursor", "\(stolen.response)")
        }
    }

    @Test func bClaimingAsLockKeyTakesItsOwnRowAndLeavesAsLockHeld() async throws {
        try await withTwoUsers { server, a, b in
            let before = try await rowsOfA(server.database, a.userID)
            for action in ["heartbeat", "release"] {
                let response = try await server.call(
                    "POST", "/v1/locks/active_game/current/\(action)", token: b.accessToken, json: [:])
                #expect(response.status != 200 || action == "release", "\(action): \(response)")
            }
            #expect(try await rowsOfA(server.database, a.userID) == before, "B's heartbeat and release left A's lock")
            let claimed = try await server.call(
                "POST", "/v1/locks/active_game/current/claim", token: b.accessToken, json: ["force": true])
            #expect(claimed.status == 200 && claimed.string("holder") == b.deviceID, "\(claimed)")
            #expect(try await rowsOfA(server.database, a.userID) == before)
            let heartbeat = try await server.call(
                "POST", "/v1/locks/active_game/current/heartbeat", token: a.accessToken, json: [:])
            #expect(heartbeat.status == 200, "A still holds its own game: \(heartbeat)")
            #expect(
                try await server.database.rows(
                    "select user_id::text, _lock_device from public.active_game order by _lock_device = $1",
                    [
                        a.deviceID
                    ])
                    == [[b.userID, b.deviceID], [a.userID, a.deviceID]])
        }
    }

    @Test func schemaListsOnlyRegisteredTables() async throws {
        try await withTwoUsers { server, _, b in
            try await server.database.admin.execute(
                """
                create table public.unregistered (id text primary key, user_id uuid);
                grant select on public.unregistered to ferry_client;
                """)
            let schema = try await server.call("GET", "/v1/schema", token: b.accessToken)
            #expect(schema.status == 200, "\(schema)")
            let names = (schema.value("tables") as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
            #expect(Set(names) == Self.puzzleTables && names.count == Self.puzzleTables.count, "\(schema)")
        }
    }

    @Test func sqlAsTheClientRoleWithBsIdentityNeitherSeesNorChangesAsRows() async throws {
        try await withTwoUsers { server, a, b in
            let database = server.database
            let before = try await rowsOfA(database, a.userID)
            let client = try await database.connectAsClient(user: b.userID, device: b.deviceID)
            for table in [
                "profiles", "user_settings", "game_records", "achievements", "active_game", "daily_challenges",
            ] {
                let seen = try await client.query("select user_id::text from public.\(table)")
                #expect(seen.rows.allSatisfy { $0[0] == b.userID }, "\(table): \(seen.rows)")
                let updated = try await client.query(
                    "update public.\(table) set _deleted = true where user_id = $1", [a.userID])
                #expect(updated.affectedRows == 0, "\(table)")
                let deleted = try await client.query("delete from public.\(table) where user_id = $1", [a.userID])
                #expect(deleted.affectedRows == 0, "\(table)")
            }
            #expect(
                try await client.query("select count(*) from ferry.devices where user_id = $1", [a.userID])[0, 0] == "0"
            )
            for sql in [
                "insert into public.profiles (user_id, username) values ($1, 'bob')",
                "insert into public.game_records (id, user_id, puzzle_id, seconds, finished_at) values ('g-b', $1, 'p', 1, now())",
                "insert into public.achievements (user_id, achievement_id) values ($1, 'stolen')",
            ] {
                do {
                    try await client.query(sql, [a.userID])
                    Issue.record("allowed, but must be denied: \(sql)")
                } catch {
                    #expect((error as? PostgresError)?.sqlState == "42501", "\(sql): \(error)")
                }
            }
            do {
                try await client.query("update public.daily_puzzles set grid = repeat('2', 81)")
                Issue.record("a client changed a shared row")
            } catch {
                #expect((error as? PostgresError)?.sqlState == "42501", "\(error)")
            }
            await client.close()
            #expect(try await rowsOfA(database, a.userID) == before)
        }
    }
}
