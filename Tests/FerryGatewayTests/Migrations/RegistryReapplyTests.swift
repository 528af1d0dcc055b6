import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// `sql/ferry/functions/registry.sql` applied again, as `ferry migrate` does whenever the
/// file changes: the code `ferry.register_table` generates (triggers, pull readers, the
/// dispatcher and its candidates, the static upserts of one row and of many) is made again
/// for every table registered before, from the file's templates as they are now.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct RegistryReapplyTests {
    static let registry = "ferry/functions/registry.sql"
    static let puzzle = TestRepository.sqlRoot + "/examples/puzzle"

    /// Makes the ledger's checksum of registry.sql differ from the file's, so that the next
    /// run applies the file again, unchanged.
    func forgetTheRegistryFilesChecksum(_ database: AccountsDatabase) async throws {
        try await database.admin.query(
            "update ferry.schema_migrations set checksum = 'earlier' where name = $1", [Self.registry])
    }

    /// The text of every function register_table generated, by name (readers by table).
    func generatedCode(_ database: AccountsDatabase) async throws -> [[String?]] {
        try await database.rows(
            """
            select coalesce(s.table_name::text, p.proname::text), p.prosrc
            from pg_proc p left join ferry.synced_tables s on s.pull_reader = 'ferry.' || p.proname
            where p.pronamespace = 'ferry'::regnamespace
                and (p.proname like 'pull\\_rows\\_%' or p.proname in ('pull_rows', 'pull_candidates', 'pull_steady', 'upsert_row', 'upsert_rows'))
            order by 1
            """)
    }

    /// One pull of the puzzle's tables as a new user, after one push of a game.
    func pushAndPullAGame(_ database: AccountsDatabase) async throws -> String? {
        let client = try await database.connectAsClient(user: try await database.newUser())
        defer { Task { await client.close() } }
        let pushed = try await client.push([
            [
                "id": 1, "table": "game_records", "op": "insert",
                "row": ["id": "g-1", "puzzle_id": "p", "seconds": 60, "finished_at": "2026-01-01T00:00:00Z"],
            ],
            ["id": 2, "table": "daily_challenges", "op": "upsert", "row": ["day": "2026-01-01", "seconds": 60]],
        ])
        #expect(pushed.outcomes == ["applied", "applied"], "\(pushed)")
        return try await client.query(
            "select jsonb_path_query_array(ferry.pull(null, 100), '$.changes.*.upserts[*].seconds')::text")[0, 0]
    }

    @Test func theRegistryFileAppliedAgainUnchangedLeavesEveryRegisteredTableAsItWas() async throws {
        try await AccountsDatabase.with(examples: ["puzzle"]) { database in
            let before = try await generatedCode(database)
            #expect(
                before.count == 12, "7 readers, dispatcher, candidates, steady pull, upserts: \(before.map { $0[0] })")
            let triggers = """
                select count(*) from pg_trigger
                where tgname like 'ferry\\_%' and not tgisinternal and tgrelid in (select table_name from ferry.synced_tables)
                """
            let triggerCount = try await database.value(triggers)
            #expect(triggerCount == "42", "6 per registered table")

            try await forgetTheRegistryFilesChecksum(database)
            let migrator = Migrator(sqlRoot: TestRepository.sqlRoot, extraDirectories: [Self.puzzle])
            #expect(try await migrator.plan(database.admin).dryRunLines == ["would re-apply \(Self.registry)"])
            #expect(try await migrator.migrate(database.admin) == [Self.registry])

            #expect(try await generatedCode(database) == before)
            #expect(try await database.value(triggers) == triggerCount)
            #expect(try await pushAndPullAGame(database) == "[60, 60]")
        }
    }

    /// As a table registered when the templates made less (before cues, the TRUNCATE
    /// guard or pull readers existed): applying the file again gives it all of them.
    @Test func tablesRegisteredBeforeATemplateExistedGetItsCodeWhenTheFileIsAppliedAgain() async throws {
        try await AccountsDatabase.with(examples: ["puzzle"]) { database in
            let tables = try await database.rows("select table_name::text, pull_reader from ferry.synced_tables")
            for row in tables {
                let (table, reader) = (row[0]!, row[1]!)
                try await database.admin.execute(
                    """
                    drop trigger ferry_cue_insert on \(table); drop trigger ferry_cue_update on \(table);
                    drop trigger ferry_cue_delete on \(table); drop trigger ferry_refuse_truncate on \(table);
                    drop function \(reader);
                    """)
            }
            try await database.admin.query("update ferry.synced_tables set pull_reader = null")
            #expect(try await database.value("select count(*) from pg_trigger where tgname like 'ferry_cue%'") == "0")

            try await forgetTheRegistryFilesChecksum(database)
            let applied = try await Migrator(sqlRoot: TestRepository.sqlRoot, extraDirectories: [Self.puzzle])
                .migrate(database.admin)
            #expect(applied == [Self.registry])
            let withoutReader = "select count(*) from ferry.synced_tables where pull_reader is null"
            #expect(try await database.value(withoutReader) == "0")

            try await CueInbox.with(database.database.configuration) { inbox in
                let user = UUID().uuidString.lowercased()
                try await database.admin.query(
                    "insert into game_records (id, user_id, puzzle_id, seconds, finished_at) values ('g1', $1, 'p', 60, now())",
                    [user])
                #expect(try await inbox.drain(database.admin) == ["\(user) - game_records"])
                try await database.admin.query(
                    "insert into daily_puzzles (day, grid) values ('2026-01-01', repeat('0', 81))")
                #expect(try await inbox.drain(database.admin) == ["* - daily_puzzles"])
                let refused = await #expect(throws: PostgresError.self) {
                    try await database.admin.execute("truncate game_records")
                }
                #expect(refused?.sqlState == "0A000", "\(String(describing: refused))")
                #expect(try await database.value("select count(*) from game_records") == "1")
            }
            #expect(try await pushAndPullAGame(database) == "[60, 60]")
        }
    }

    @Test func aChangedTemplateReachesEveryRegisteredTable() async throws {
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-sql-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: copy) }
        try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: TestRepository.sqlRoot + "/ferry", toPath: copy.appendingPathComponent("ferry").path)
        let migrator = Migrator(sqlRoot: copy.path, extraDirectories: [Self.puzzle])
        try await AccountsDatabase.with { database in
            try await migrator.migrate(database.admin)
            let file = copy.appendingPathComponent("ferry/functions/registry.sql")
            let registry = try String(contentsOf: file, encoding: .utf8)
            let marks = [
                ("-- Built by ferry.install_pull_reader for", "-- Built (template 2) by ferry.install_pull_reader for"),
                ("-- Built by ferry.install_pull_rows from", "-- Built (template 2) by ferry.install_pull_rows from"),
                ("-- Built by ferry.install_upserts from", "-- Built (template 2) by ferry.install_upserts from"),
            ]
            var changed = registry
            for (old, new) in marks {
                #expect(changed.contains(old), "registry.sql's template says \(old)")
                changed = changed.replacingOccurrences(of: old, with: new)
            }
            try changed.write(to: file, atomically: true, encoding: .utf8)

            #expect(try await migrator.migrate(database.admin) == [Self.registry])
            let code = try await generatedCode(database)
            #expect(code.count == 12)
            for row in code { #expect(row[1]?.contains("(template 2)") == true, "\(row[0] ?? "")") }
            #expect(try await pushAndPullAGame(database) == "[60, 60]")
        }
    }
}
