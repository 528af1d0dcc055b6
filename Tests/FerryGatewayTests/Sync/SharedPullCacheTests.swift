import FerryTestSupport
import Foundation
import Testing

/// The shared part of pulls answered from the gateway's memory (docs/ARCHITECTURE.md,
/// "Shared-change storms"), against a real gateway and PostgreSQL with the puzzle
/// example (`daily_puzzles` is `shared`): what memory answers is what PostgreSQL would,
/// the device's own changes always come from PostgreSQL, and the cursors stay exact.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct SharedPullCacheTests {
    static let servedFromMemory = #"served_by="shared_cache""#
    static let servedByDatabase = #"served_by="primary""#
    /// A gateway whose pulls wait up to 30 s for memory to be current, not the default
    /// second: these tests assert which source answered, and a loaded machine once took
    /// longer than a second over a barrier and a refresh.
    static let patient = ["--shared-pull-wait-ms", "30000"]

    @Test func aSharedChangeIsPulledFromMemoryAndTheNextPullIsExact() async throws {
        try await withAccountsGateway(arguments: Self.patient, examples: ["puzzle"]) { server in
            let ana = try await server.signUpAnonymous()
            let load = try await warmCursor(server, ana)
            let before = try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory)

            try await publishPuzzle(server, day: "2026-12-01")
            let storm = try await server.pull(ana, cursor: load)
            #expect(storm.tables == ["daily_puzzles"], "\(storm.response)")
            #expect(storm.upserts("daily_puzzles").map { $0["day"] as? String } == ["2026-12-01"])
            #expect(storm.hasMore == false && storm.lastMutationID == 0, "\(storm.response)")
            #expect(try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory) == before + 1)

            // Nothing new in shared tables: PostgreSQL answers (an own change no cue
            // announced, as a lock's heartbeat, may be what the device pulls for).
            let quiet = try await server.pull(ana, cursor: storm.cursor)
            #expect(quiet.status == 200 && quiet.tables.isEmpty, "\(quiet.response)")
            #expect(try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory) == before + 1)

            // The device's own change comes from PostgreSQL, with the shared row not again.
            try await pushGameRecord(server, ana, id: "g-1", mutation: 1)
            let own = try await server.pull(ana, cursor: quiet.cursor)
            #expect(own.tables == ["game_records"], "\(own.response)")
            #expect(own.lastMutationID == 1)
            #expect(try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory) == before + 1)

            // A tombstone of a shared row, from memory, then nothing from PostgreSQL.
            try await server.database.admin.execute("delete from public.daily_puzzles where day = '2026-12-01'")
            let deleted = try await server.pull(ana, cursor: own.cursor)
            #expect(
                deleted.deletes("daily_puzzles").map { $0["day"] as? String } == ["2026-12-01"], "\(deleted.response)")
            #expect(deleted.lastMutationID == 1, "the cursor's last mutation id travels through memory")
            try await pushGameRecord(server, ana, id: "g-2", mutation: 2)
            let after = try await server.pull(ana, cursor: deleted.cursor)
            #expect(after.tables == ["game_records"], "\(after.response)")
            #expect(after.upserts("game_records").map { $0["id"] as? String } == ["g-2"])
        }
    }

    @Test func memoryAnswersWhatPostgreSQLWould() async throws {
        // The same pulls against a gateway with the cache off, on the same database state.
        try await withAccountsGateway(arguments: Self.patient, examples: ["puzzle"]) { server in
            let ana = try await server.signUpAnonymous()
            let load = try await warmCursor(server, ana)
            let before = try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory)
            try await publishPuzzle(server, day: "2026-12-02")
            try await publishPuzzle(server, day: "2026-12-03")
            try await server.database.admin.execute(
                "update public.daily_puzzles set difficulty = 'hard' where day = '2026-12-02'")
            let fromMemory = try await server.pull(ana, cursor: load)
            #expect(try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory) == before + 1)
            try await withStartedGateway(
                databaseURL: server.database.gatewayURL, arguments: ["--shared-pull-cache", "off"]
            ) { _, port in
                let other = AccountsGateway(database: server.database, gateway: server.gateway, port: port)
                let fromDatabase = try await other.pull(ana, cursor: load)
                #expect(try await other.metric("ferry_pulls_total", labels: Self.servedByDatabase) == 1)
                #expect(fromMemory.tables == fromDatabase.tables, "\(fromMemory.response) \(fromDatabase.response)")
                let memoryRows = fromMemory.upserts("daily_puzzles").map { $0 as NSDictionary }
                let databaseRows = fromDatabase.upserts("daily_puzzles").map { $0 as NSDictionary }
                #expect(memoryRows == databaseRows)
                #expect(memoryRows.count == 2)
                #expect(fromMemory.lastMutationID == fromDatabase.lastMutationID)
            }
        }
    }

    @Test func anOwnChangeCommittedBeforeThePullIsNeverAnsweredFromMemory() async throws {
        // The write's cue may still be on its way to the gateway when the pull arrives: the
        // barrier makes the gateway hear it first, so the pull goes to PostgreSQL and has it.
        try await withAccountsGateway(arguments: Self.patient, examples: ["puzzle"]) { server in
            let ana = try await server.signUpAnonymous()
            var cursor = try #require(try await server.pull(ana).cursor)
            for round in 1...20 {
                try await publishPuzzle(server, day: "2026-11-\(String(format: "%02d", round))")
                try await server.database.admin.execute(
                    """
                    insert into public.profiles (user_id, username) values ('\(ana.userID)', 'round \(round)')
                    on conflict (user_id) do update set username = excluded.username
                    """)
                let page = try await server.pull(ana, cursor: cursor)
                #expect(
                    page.upserts("profiles").map { $0["username"] as? String } == ["round \(round)"],
                    "round \(round): \(page.response)")
                cursor = try #require(page.cursor)
            }
        }
    }

    @Test func aSharedChangeCommittedBeforeThePullIsInItsAnswer() async throws {
        try await withAccountsGateway(arguments: Self.patient, examples: ["puzzle"]) { server in
            let ana = try await server.signUpAnonymous()
            var cursor = try await warmCursor(server, ana)
            let before = try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory)
            for round in 1...20 {
                let day = "2026-10-\(String(format: "%02d", round))"
                try await publishPuzzle(server, day: day)
                let page = try await server.pull(ana, cursor: cursor)
                #expect(page.upserts("daily_puzzles").map { $0["day"] as? String } == [day], "\(page.response)")
                cursor = try #require(page.cursor)
            }
            #expect(try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory) == before + 20)
        }
    }

    @Test func anOwnChangeNoCueAnnouncedComesWithThePullAfterASharedOne() async throws {
        // A write under ferry.skip_cues (as a lock's heartbeat) cues nobody: memory, which
        // answers only shared news, leaves it to the next pull, which PostgreSQL answers.
        try await withAccountsGateway(arguments: Self.patient, examples: ["puzzle"]) { server in
            let ana = try await server.signUpAnonymous()
            let load = try await warmCursor(server, ana)
            try await server.database.admin.execute(
                """
                begin;
                select set_config('ferry.skip_cues', 'on', true);
                insert into public.profiles (user_id, username) values ('\(ana.userID)', 'quiet');
                commit;
                """)
            try await publishPuzzle(server, day: "2026-08-01")
            let shared = try await server.pull(ana, cursor: load)
            #expect(shared.tables == ["daily_puzzles"], "from memory: \(shared.response)")
            #expect(shared.upserts("daily_puzzles").map { $0["day"] as? String } == ["2026-08-01"])
            let next = try await server.pull(ana, cursor: shared.cursor)
            #expect(next.upserts("profiles").map { $0["username"] as? String } == ["quiet"], "\(next.response)")
            #expect(next.upserts("daily_puzzles").isEmpty, "\(next.response)")
        }
    }

    @Test func aPullPastItsLimitAndAPagingCursorGoToPostgreSQL() async throws {
        try await withAccountsGateway(arguments: Self.patient, examples: ["puzzle"]) { server in
            let ana = try await server.signUpAnonymous()
            let load = try await server.pull(ana)
            try await publishPuzzle(server, day: "2026-09-01")
            try await publishPuzzle(server, day: "2026-09-02")
            let paged = try await server.pull(ana, cursor: load.cursor, limit: 1)
            #expect(paged.hasMore == true && paged.rowCount == 1, "\(paged.response)")
            #expect(try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory) == 0)
            let rest = try await server.pull(ana, cursor: paged.cursor, limit: 1)
            #expect(rest.upserts("daily_puzzles").map { $0["day"] as? String } == ["2026-09-02"], "\(rest.response)")
            #expect(try await server.metric("ferry_pulls_total", labels: Self.servedFromMemory) == 0)
        }
    }

    // MARK: - Steps

    /// A cursor made after the gateway's cache first read the database: a first load, then
    /// a pull after a shared change (from memory or not, as the cache's first read and the
    /// load happened to interleave), whose answer must have the change either way.
    private func warmCursor(_ server: AccountsGateway, _ session: TestSession) async throws -> String {
        let load = try await server.pull(session)
        try #require(load.status == 200, "\(load.response)")
        try await publishPuzzle(server, day: "2020-01-01")
        let warm = try await server.pull(session, cursor: load.cursor)
        try #require(warm.upserts("daily_puzzles").map { $0["day"] as? String } == ["2020-01-01"], "\(warm.response)")
        return try #require(warm.cursor)
    }

    /// An operator's new puzzle, once the gateway heard its cue: a device pulls after the
    /// cue its stream got, which the gateway heard first.
    private func publishPuzzle(_ server: AccountsGateway, day: String) async throws {
        let heard = try await server.metric("ferry_cues_received_total")
        try await server.database.admin.execute(
            "insert into public.daily_puzzles (day, grid) values ('\(day)', '\(String(repeating: "7", count: 81))')")
        // Patient: under the whole suite on a busy machine a cue has taken over 30 s.
        let isHeard = try await eventuallyHolds(seconds: 120) {
            try await server.metric("ferry_cues_received_total") > heard
        }
        try #require(isHeard, "the gateway did not hear the cue of the new puzzle")
    }

    private func pushGameRecord(_ server: AccountsGateway, _ session: TestSession, id: String, mutation: Int)
        async throws
    {
        let answer = try await server.pushBatch(
            session,
            [
                [
                    "id": mutation, "table": "game_records", "op": "insert",
                    "row": ["id": id, "puzzle_id": "p", "seconds": 60, "finished_at": "2026-12-01T10:00:00Z"],
                ]
            ])
        #expect(answer.outcomes == ["applied"], "\(answer.response)")
    }
}
