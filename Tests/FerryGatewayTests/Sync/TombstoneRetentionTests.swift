import FerryCommandLine
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Tombstone retention (0008_tombstone_retention.sql): ferry.purge_tombstones, the purge
/// horizon and `409 cursor_expired` over HTTP, `ferry purge-tombstones`, the serve timer,
/// and times in UTC whatever the database's TimeZone.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct TombstoneRetentionTests {
    static let tables = """
        create table public.items (id text primary key, user_id uuid not null, title text);
        select ferry.register_table('items', 'lww');
        create table public.journal (n integer primary key, user_id uuid not null);
        select ferry.register_table('journal', 'insert_only');
        create table public.unsynced (id text primary key, _deleted boolean not null default false,
            updated_at timestamptz not null default now());
        """

    func withTables(arguments: [String] = [], _ body: (AccountsGateway) async throws -> Void) async throws {
        try await withAccountsGateway(arguments: arguments) { server in
            try await server.database.admin.execute(Self.tables)
            try await body(server)
        }
    }

    /// Makes rows look `days` old without touching their change stamps (the stamp trigger is
    /// skipped, as a replica would).
    func age(_ server: AccountsGateway, _ table: String, _ condition: String, days: Int) async throws {
        try await server.database.admin.execute(
            """
            begin;
            set local session_replication_role = replica;
            update public.\(table) set updated_at = now() - make_interval(days => \(days)) where \(condition);
            commit;
            """)
    }

    func count(_ server: AccountsGateway, _ sql: String) async throws -> Int {
        try #require(Int(try await server.database.value(sql) ?? ""))
    }

    // MARK: - Purge

    @Test func purgeDeletesOnlyOldTombstonesOfRegisteredTablesInBatches() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            try await server.push(
                alice, (1...6).map { (id: $0, op: "upsert", row: ["id": "a-\($0)"] as [String: Any]) })
            try await server.push(
                alice, (1...4).map { (id: 6 + $0, op: "delete", row: ["id": "a-\($0)"] as [String: Any]) })
            // a-1, a-2, a-3 are old tombstones; a-4 is a young one; a-5 is live and old.
            try await age(server, "items", "id in ('a-1', 'a-2', 'a-3', 'a-5')", days: 40)
            try await server.database.admin.execute(
                """
                insert into public.unsynced (id, _deleted, updated_at) values ('u-1', true, now() - interval '400 days');
                insert into public.journal values (1, '\(alice.userID)');
                """)
            let gateway = try await server.database.connectAsGateway()
            defer { Task { await gateway.close() } }
            let horizon0 = try await server.database.rows(
                "select purged_through::text, purge_xid from ferry.purge_horizon")
            #expect(horizon0 == [["0", nil]])

            let purgeable = try await gateway.query("select ferry.count_purgeable_tombstones(interval '30 days')")
            #expect(purgeable[0, 0] == "3")
            var batches: [String?] = []
            for _ in 0..<3 {
                batches.append(try await gateway.query("select ferry.purge_tombstones(interval '30 days', 2)")[0, 0])
            }
            #expect(batches == ["2", "1", "0"])
            #expect(
                try await server.database.rows("select id, _deleted::text from public.items order by id")
                    == [["a-4", "true"], ["a-5", "false"], ["a-6", "false"]])
            #expect(try await count(server, "select count(*) from public.unsynced") == 1)
            #expect(try await count(server, "select count(*) from public.journal") == 1)
            // The horizon is the highest purged stamp, and the last purging transaction.
            let maxStamp = try await server.database.value(
                "select max(_stamp)::text from public.items where id = 'a-4'")
            let horizon = try await server.database.rows(
                "select purged_through::text, purge_xid is not null, purged_at > now() - interval '1 minute' from ferry.purge_horizon"
            )
            #expect(horizon.count == 1 && horizon[0][1] == "t" && horizon[0][2] == "t")
            // All four deletes were one push: one stamp, the young tombstone's.
            #expect(horizon[0][0] == maxStamp)
        }
    }

    // MARK: - cursor_expired over HTTP

    @Test func aCursorFromBeforeThePurgeIsExpiredAndOneFromAfterWorks() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            try await server.push(alice, [(1, "upsert", ["id": "a-1"]), (2, "upsert", ["id": "a-2"])])
            let before = try await server.pull(alice)
            try await server.push(alice, [(3, "delete", ["id": "a-1"])])
            // Until the purge, the old cursor gets the delete.
            let unpurged = try await server.pull(alice, cursor: before.cursor)
            #expect(unpurged.status == 200 && unpurged.deletes("items").count == 1, "\(unpurged.response)")

            try await age(server, "items", "id = 'a-1'", days: 40)
            let gateway = try await server.database.connectAsGateway()
            #expect(try await gateway.query("select ferry.purge_tombstones(interval '30 days', 100)")[0, 0] == "1")
            await gateway.close()

            let expired = try await server.pull(alice, cursor: before.cursor)
            #expect(expired.status == 409, "\(expired.response)")
            #expect(expired.response.code == "cursor_expired")
            #expect(expired.response.string("error", "message")?.contains("pull without a cursor") == true)
            // (A cursor taken after the delete but before the purge is not asserted either way:
            // it passes unless a transaction elsewhere in the cluster, e.g. a parallel test, kept
            // its xmin at or below the tombstone's stamp; see the header of 0008.)

            // Starting over: a pull without a cursor never answers cursor_expired.
            let fresh = try await server.pull(alice)
            #expect(fresh.status == 200, "\(fresh.response)")
            #expect(fresh.upserts("items").map { $0["id"] as? String } == ["a-2"])
            try await server.push(alice, [(4, "upsert", ["id": "a-3"])])
            let next = try await server.pull(alice, cursor: fresh.cursor)
            #expect(next.status == 200, "\(next.response)")
            #expect(next.upserts("items").map { $0["id"] as? String } == ["a-3"])
        }
    }

    @Test func aFirstLoadPagingCursorIsExpiredWhenARowItSentWasPurged() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            try await server.push(
                alice, (1...4).map { (id: $0, op: "upsert", row: ["id": "a-\($0)"] as [String: Any]) })
            let page = try await server.pull(alice, limit: 2)
            #expect(page.hasMore == true && page.upserts("items").count == 2)
            try await server.push(alice, [(5, "delete", ["id": "a-1"])])
            try await age(server, "items", "id = 'a-1'", days: 40)
            let gateway = try await server.database.connectAsGateway()
            _ = try await gateway.query("select ferry.purge_tombstones(interval '30 days', 100)")
            await gateway.close()
            let next = try await server.pull(alice, cursor: page.cursor, limit: 2)
            #expect(next.status == 409 && next.response.code == "cursor_expired", "\(next.response)")
        }
    }

    // MARK: - The CLI

    @Test func theCommandPurgesInBatchesWithProgressAndDryRunChangesNothing() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                """
                insert into public.items (id, user_id, _deleted) select 'i-' || n, '\(alice.userID)', n <= 25
                    from generate_series(1, 30) n;
                """)
            try await age(server, "items", "id in (select 'i-' || n from generate_series(1, 28) n)", days: 40)
            let url = server.database.gatewayURL

            let dry = try await runFerry(["purge-tombstones", "--older-than", "30d", "--dry-run"], databaseURL: url)
            #expect(dry.status == 0, "stderr: \(dry.errors)")
            #expect(dry.lines == ["dry run: would delete 25 tombstones older than 30d; nothing changed"])
            #expect(try await count(server, "select count(*) from public.items") == 30)
            let younger = try await runFerry(
                ["purge-tombstones", "--older-than", "41d", "--dry-run"], databaseURL: url)
            #expect(younger.lines == ["dry run: would delete 0 tombstones older than 41d; nothing changed"])

            let run = try await runFerry(
                ["purge-tombstones", "--older-than", "30d", "--batch", "10"], databaseURL: url)
            #expect(run.status == 0, "stderr: \(run.errors)")
            #expect(
                run.lines == [
                    "deleted 10 tombstones (10 so far)", "deleted 10 tombstones (20 so far)",
                    "deleted 5 tombstones (25 so far)", "done: deleted 25 tombstones older than 30d",
                ])
            #expect(try await count(server, "select count(*) from public.items") == 5)
            let again = try await runFerry(["purge-tombstones", "--older-than", "720h"], databaseURL: url)
            #expect(again.lines == ["done: deleted 0 tombstones older than 720h"])
        }
    }

    @Test(arguments: [
        (["--older-than", "30"], "invalid --older-than: 30 is not a duration such as 30d, 12h, 15m or 45s"),
        (["--older-than", "0d"], "invalid --older-than: 0d is not a duration"),
        (["--older-than", "-1d"], "invalid --older-than: -1d is not a duration"),
        (["--older-than", "thirty days"], "invalid --older-than: thirty days is not a duration"),
        (["--older-than", "30d", "--batch", "0"], "invalid --batch: 0 is not a whole number in 1...1000000"),
        (["--batch", "10"], "missing setting: pass --older-than"),
    ])
    func invalidCommandSettingsAreOneLineAndExitStatus2(arguments: [String], message: String) async throws {
        let run = try await runFerry(
            ["purge-tombstones"] + arguments, databaseURL: "postgresql://nobody@127.0.0.1:1/none")
        #expect(run.status == 2)
        #expect(run.output.isEmpty)
        #expect(run.errors.split(separator: "\n").count == 1)
        #expect(run.errors.hasPrefix("ferry purge-tombstones: \(message)"), "\(run.errors)")
    }

    // MARK: - The serve timer

    @Test func theServeTimerPurgesOldTombstones() async throws {
        try await withTables(arguments: ["--purge-tombstones-every", "1s", "--tombstone-retention", "2s"]) { server in
            let alice = try await server.signUpAnonymous()
            try await server.push(alice, [(1, "upsert", ["id": "a-1"]), (2, "upsert", ["id": "a-2"])])
            try await server.push(alice, [(3, "delete", ["id": "a-1"])])
            var left = 2
            _ = try await eventuallyHolds(seconds: 15) {
                left = try await count(server, "select count(*) from public.items")
                return left == 1
            }
            #expect(left == 1, "the tombstone is still there after 15 s")
            #expect(try await server.database.value("select id from public.items") == "a-2")
            #expect(try await server.database.value("select purge_xid is not null from ferry.purge_horizon") == "t")
        }
    }

    @Test func purgeSettingsAreDurations() throws {
        func configuration(_ arguments: [String], environment: [String: String] = [:]) throws -> GatewayConfiguration {
            try GatewayConfiguration(
                SettingValues(
                    GatewayConfiguration.settings,
                    arguments: ["--database-url", "postgresql://x@localhost/x", "--jwt-secret", testSecret] + arguments,
                    environment: environment))
        }
        let defaults = try configuration([])
        #expect(defaults.purgeTombstonesEverySeconds == nil)
        #expect(defaults.tombstoneRetentionSeconds == 30 * 86_400)
        let set = try configuration(
            [], environment: ["FERRY_PURGE_TOMBSTONES_EVERY": "1h", "FERRY_TOMBSTONE_RETENTION": "12h"])
        #expect(set.purgeTombstonesEverySeconds == 3600 && set.tombstoneRetentionSeconds == 12 * 3600)
        #expect(throws: SettingsError.self) { try configuration(["--purge-tombstones-every", "often"]) }
        #expect(throws: SettingsError.self) { try configuration(["--tombstone-retention", "0s"]) }
        #expect(SettingValues.parseDuration("15m") == 900 && SettingValues.parseDuration("45s") == 45)
        #expect(SettingValues.parseDuration("1.5h") == nil && SettingValues.parseDuration("d") == nil)
    }

    // MARK: - UTC

    @Test func timesAreUTCWhateverTheDatabaseTimeZone() async throws {
        try await AccountsDatabase.with { database in
            try await database.admin.execute(
                """
                alter database \(database.database.name) set timezone = 'Asia/Tokyo';
                \(Self.tables)
                create table public.boards (user_id uuid not null, slot text not null, primary key (user_id, slot));
                select ferry.register_table('boards', 'device_lock');
                """)
            // A connection without Ferry's option sees Tokyo time: the setting is in force.
            let plain = try await database.connectAsGateway()
            #expect(try await plain.query("select now()::text")[0, 0]?.hasSuffix("+09") == true)
            await plain.close()
            try await withStartedGateway(databaseURL: database.gatewayURL) { gateway, port in
                let server = AccountsGateway(database: database, gateway: gateway, port: port)
                let alice = try await server.signUpAnonymous()
                try await server.push(alice, [(1, "upsert", ["id": "a-1"])])
                let page = try await server.pull(alice)
                let updatedAt = try #require(page.upserts("items").first?["updated_at"] as? String, "\(page.response)")
                // The two forms docs/PROTOCOL.md names: a row's times as PostgreSQL's JSON
                // writes them, with +00:00; a lock's heartbeat_at with six digits and Z.
                let rowTime = #/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?\+00:00/#
                #expect(try rowTime.wholeMatch(in: updatedAt) != nil, "\(updatedAt)")
                let claimed = try await server.call("POST", "/v1/locks/boards/current/claim", token: alice.accessToken)
                let heartbeatAt = try #require(claimed.string("heartbeat_at"), "\(claimed)")
                let lockTime = #/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z/#
                #expect(try lockTime.wholeMatch(in: heartbeatAt) != nil, "\(heartbeatAt)")
            }
        }
    }
}
