import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// `sql/examples/puzzle` and `sql/examples/tasks`: both migrate on a fresh database after
/// `sql/ferry`, register every table with its strategy, and take pushes as `ferry_client`.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct ExampleAppsTests {
    static let directories = ["puzzle", "tasks"].map { TestRepository.sqlRoot + "/examples/" + $0 }

    static let strategies: [[String?]] = [
        ["achievements", "set"], ["active_game", "device_lock"], ["daily_challenges", "lww"],
        ["daily_puzzles", "shared"], ["game_records", "insert_only"], ["profiles", "lww"],
        ["subscriptions", "readonly"], ["tasks", "lww"], ["user_settings", "lww"],
    ]

    /// A database migrated with sql/ferry (by AccountsDatabase), then both example apps.
    func withExamples(_ body: (AccountsDatabase) async throws -> Void) async throws {
        try await AccountsDatabase.with { database in
            try await Migrator(sqlRoot: TestRepository.sqlRoot, extraDirectories: Self.directories)
                .migrate(database.admin)
            try await body(database)
        }
    }

    @Test func bothExamplesMigrateAndRegisterEveryTableWithItsStrategy() async throws {
        try await withExamples { database in
            let registered = try await database.rows(
                "select table_name::text, strategy from ferry.synced_tables order by 1")
            #expect(registered == Self.strategies)
            let applied = try await database.rows(
                "select name from ferry.schema_migrations where name like '%/%' and name not like 'ferry/%' order by name"
            )
            #expect(
                applied.map { $0[0] ?? "" } == ["puzzle/0001_tables.sql", "tasks/0001_tables.sql"])
            #expect(
                try await database.value(
                    "select options ->> 'stale_seconds' from ferry.synced_tables where table_name = 'active_game'::regclass"
                )
                    == "30")
        }
    }

    @Test func pushesReachOneTableOfEachWritableStrategyAndNoReadOnlyOne() async throws {
        try await withExamples { database in
            let user = try await database.newUser()
            let client = try await database.connectAsClient(user: user)
            let answer = try await client.push([
                [
                    "id": 1, "table": "profiles", "op": "upsert",
                    "row": ["username": "ada", "trophies": ["gold", "silver"]],
                ],
                [
                    "id": 2, "table": "game_records", "op": "insert",
                    "row": ["id": "g-1", "puzzle_id": "p-7", "seconds": 312, "finished_at": "2026-01-02T03:04:05Z"],
                ],
                ["id": 3, "table": "achievements", "op": "insert", "row": ["achievement_id": "first_win"]],
                ["id": 4, "table": "active_game", "op": "upsert", "row": ["slot": "current", "hints": 2]],
                [
                    "id": 5, "table": "tasks", "op": "upsert",
                    "row": ["id": "t-1", "title": "milk", "metadata": ["due_at": "2026-01-03T09:00:00Z"]],
                ],
                ["id": 6, "table": "tasks", "op": "upsert", "row": ["id": "t-2", "parent_id": "t-1", "title": "oat"]],
                ["id": 7, "table": "tasks", "op": "delete", "key": ["id": "t-2"]],
                ["id": 8, "table": "subscriptions", "op": "upsert", "row": ["plan": "pro"]],
                ["id": 9, "table": "daily_puzzles", "op": "upsert", "row": ["day": "2026-01-01", "grid": "0"]],
                ["id": 10, "table": "tasks", "op": "upsert", "row": ["id": "root", "title": "not a task"]],
            ])
            await client.close()
            #expect(
                answer.outcomes == [
                    "applied", "applied", "applied", "applied", "applied", "applied", "applied",
                    "rejected:read_only", "rejected:read_only", "rejected:constraint_violation",
                ], "\(answer)")
            #expect(
                try await database.rows(
                    "select username, trophies::text from public.profiles where user_id = $1", [user])
                    == [["ada", "{gold,silver}"]])
            #expect(try await database.rows("select id, seconds::text from public.game_records") == [["g-1", "312"]])
            #expect(try await database.rows("select achievement_id from public.achievements") == [["first_win"]])
            #expect(try await database.rows("select slot, hints::text from public.active_game") == [["current", "2"]])
            #expect(
                try await database.rows("select id, parent_id, _deleted::text from public.tasks order by id")
                    == [["t-1", "root", "false"], ["t-2", "t-1", "true"]])
        }
    }
}
