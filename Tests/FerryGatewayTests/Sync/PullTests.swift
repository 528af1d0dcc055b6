import FerryAuth
import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// `GET /v1/pull` over HTTP against ferry.pull in a migrated database, as `ferry_gateway`:
/// first load, changes since a cursor, out-of-order commits, paging, cursor checks.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct PullTests {
    static let tables = """
        create table public.items (id text primary key, user_id uuid not null, title text);
        select ferry.register_table('items', 'lww');
        create table public.puzzles (day integer primary key, grid text);
        select ferry.register_table('puzzles', 'shared');
        """

    func withTables(_ body: (AccountsGateway) async throws -> Void) async throws {
        try await withAccountsGateway { server in
            try await server.database.admin.execute(Self.tables)
            try await body(server)
        }
    }

    // MARK: - Behaviours

    @Test func firstLoadReturnsOwnAndSharedRowsAndTheDevicesLastMutation() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            let bob = try await server.signUpAnonymous()
            try await server.push(
                alice, [(1, "upsert", ["id": "a-1", "title": "milk"]), (2, "upsert", ["id": "a-2"])])
            try await server.push(bob, [(1, "upsert", ["id": "b-1", "title": "secret"])])
            try await server.database.admin.execute("insert into public.puzzles values (1, 'g1'), (2, 'g2')")

            let page = try await server.pull(alice)
            #expect(page.status == 200, "\(page.response)")
            #expect(page.upserts("items").map { $0["id"] as? String } == ["a-1", "a-2"])
            #expect(page.upserts("puzzles").map { $0["day"] as? Int } == [1, 2])
            #expect(page.lastMutationID == 2)
            #expect(page.hasMore == false)
            let row = page.upserts("items").first ?? [:]
            #expect(Set(row.keys) == ["id", "user_id", "title", "updated_at"])
            #expect(row["user_id"] as? String == alice.userID)

            let bobs = try await server.pull(bob)
            #expect(bobs.upserts("items").map { $0["id"] as? String } == ["b-1"])
            #expect(bobs.lastMutationID == 1)
        }
    }

    @Test func pullWithACursorReturnsExactlyTheChangesSinceAndThenNothing() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            try await server.push(
                alice, [(1, "upsert", ["id": "a-1", "title": "milk"]), (2, "upsert", ["id": "a-2"])])
            let first = try await server.pull(alice)
            try await server.push(
                alice,
                [
                    (3, "upsert", ["id": "a-1", "title": "oat milk"]), (4, "delete", ["id": "a-2"]),
                    (5, "upsert", ["id": "a-3", "title": "eggs"]),
                ])

            let changes = try await server.pull(alice, cursor: first.cursor)
            #expect(changes.status == 200, "\(changes.response)")
            #expect(changes.upserts("items").map { $0["id"] as? String } == ["a-1", "a-3"])
            #expect(changes.upserts("items").first?["title"] as? String == "oat milk")
            #expect(changes.deletes("items").map { $0 as NSDictionary } == [["id": "a-2"] as NSDictionary])
            #expect(changes.tables == ["items"])
            #expect(changes.lastMutationID == 5)

            let nothing = try await server.pull(alice, cursor: changes.cursor)
            #expect(nothing.status == 200)
            #expect(nothing.tables.isEmpty && nothing.hasMore == false, "\(nothing.response)")
        }
    }

    @Test func pullAfterOutOfOrderCommitReturnsEarlierRow() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            let first = try await server.pull(alice)
            let early = try await server.database.database.connect()
            // A starts and writes first, and stays open; B writes and commits.
            _ = try await early.execute(
                "begin; insert into public.items (id, user_id) values ('a-early', '\(alice.userID)')")
            try await server.database.admin.execute(
                "insert into public.items (id, user_id) values ('b-late', '\(alice.userID)')")
            let afterB = try await server.pull(alice, cursor: first.cursor)
            #expect(afterB.upserts("items").map { $0["id"] as? String } == ["b-late"])

            _ = try await early.execute("commit")
            let afterA = try await server.pull(alice, cursor: afterB.cursor)
            #expect(afterA.upserts("items").map { $0["id"] as? String } == ["a-early"], "\(afterA.response)")
            let last = try await server.pull(alice, cursor: afterA.cursor)
            #expect(last.status == 200 && last.tables.isEmpty, "\(last.response)")
            await early.close()
        }
    }

    @Test func pagingAcrossALargeTransactionNeverLosesOrRepeatsARow() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            try await server.database.admin.execute(
                """
                insert into public.items (id, user_id)
                    select 'i-' || pg_catalog.lpad(n::text, 2, '0'), '\(alice.userID)' from generate_series(1, 25) n;
                insert into public.puzzles select n, 'g' from generate_series(1, 3) n;
                """)
            // In progress when the first page takes its snapshot, committed after it.
            let open = try await server.database.database.connect()
            _ = try await open.execute("begin; update public.items set title = 'late' where id = 'i-25'")
            var seen: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let page = try await server.pull(alice, cursor: cursor, limit: 10)
                #expect(page.status == 200, "\(page.response)")
                #expect(page.rowCount <= 10)
                seen += page.upserts("items").compactMap { $0["id"] as? String }
                seen += page.upserts("puzzles").compactMap { ($0["day"] as? Int).map { "p-\($0)" } }
                cursor = page.cursor
                pages += 1
                if pages == 1 {
                    // Between pages: one row already sent and one not yet sent change, one is new.
                    _ = try await open.execute("commit")
                    try await server.database.admin.execute(
                        """
                        update public.items set title = 'late' where id = 'i-01';
                        insert into public.items (id, user_id) values ('i-26', '\(alice.userID)');
                        """)
                }
                if page.hasMore != true { break }
            } while pages < 10
            #expect(pages == 3)
            #expect(Set(seen).count == seen.count, "repeated: \(seen)")
            let all = Set((1...25).map { String(format: "i-%02d", $0) } + ["p-1", "p-2", "p-3"])
            // i-25 changed after the pages' snapshot: it left the range and comes next.
            #expect(Set(seen) == all.subtracting(["i-25"]), "\(seen)")

            let next = try await server.pull(alice, cursor: cursor, limit: 10)
            #expect(Set(next.upserts("items").compactMap { $0["id"] as? String }) == ["i-01", "i-25", "i-26"])
            #expect(
                next.upserts("items").allSatisfy { $0["title"] as? String == "late" || $0["id"] as? String == "i-26" })
            #expect(next.hasMore == false)
            await open.close()
        }
    }

    @Test func badCursorsLimitsAndTokensAreRefused() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            let bob = try await server.signUpAnonymous()
            try await server.push(alice, [(1, "upsert", ["id": "a-1"])])
            let first = try await server.pull(alice)
            let cursor = try #require(first.cursor)

            let garbage = try await server.pull(alice, cursor: "not-a-cursor")
            #expect(garbage.status == 400 && garbage.response.code == "invalid_cursor", "\(garbage.response)")
            // Another snapshot in the payload, the old signature.
            let parts = cursor.split(separator: ".")
            let forged = Base64URL.encode(Array(#"{"since": "1:1:"}"#.utf8)) + "." + parts[1]
            let tampered = try await server.pull(alice, cursor: forged)
            #expect(tampered.status == 400 && tampered.response.code == "invalid_cursor")
            let stolen = try await server.pull(bob, cursor: cursor)
            #expect(stolen.status == 400 && stolen.response.code == "invalid_cursor")

            for limit in ["0", "5001", "ten", "-1"] {
                let response = try await server.call("GET", "/v1/pull?limit=\(limit)", token: alice.accessToken)
                #expect(response.status == 400 && response.code == "invalid_request", "limit \(limit)")
            }
            let unauthenticated = try await server.call("GET", "/v1/pull")
            #expect(unauthenticated.status == 401 && unauthenticated.code == "unauthorized")
        }
    }

    @Test func aUserNeverPullsAnotherUsersRows() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            let bob = try await server.signUpAnonymous()
            let bobsFirst = try await server.pull(bob)
            try await server.push(alice, [(1, "upsert", ["id": "a-1"]), (2, "delete", ["id": "a-1"])])
            try await server.database.admin.execute(
                "insert into public.items (id, user_id) values ('a-2', '\(alice.userID)')")
            let bobsNext = try await server.pull(bob, cursor: bobsFirst.cursor)
            #expect(bobsNext.tables.isEmpty && bobsNext.lastMutationID == 0, "\(bobsNext.response)")
        }
    }

    /// Three writers commit 300 small transactions on 40 keys (upserts and tombstones)
    /// while a puller loops with a small limit, and 20 times over the test commits out of
    /// order on purpose: a transaction writes keys of its own and stays open while a
    /// later one writes and commits, and only after a whole pull has run in that window
    /// does the earlier one commit. Once all stop, a last pass brings the puller's merged
    /// state to the table's.
    @Test func concurrentWritersAndALoopingPullerEndInTheSameState() async throws {
        try await withTables { server in
            let alice = try await server.signUpAnonymous()
            let owner = alice.userID
            let done = DoneFlag()
            let progress = PullProgress()
            let database = server.database.database
            func upsert(_ id: String, _ title: String) -> String {
                """
                insert into public.items (id, user_id, title) values ('\(id)', '\(owner)', '\(title)')
                    on conflict (id) do update set title = excluded.title, _deleted = false;
                """
            }
            async let writers: Void = withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<3 {
                    group.addTask {
                        let connection = try await database.connect()
                        var random = SystemRandomNumberGenerator()
                        for transaction in 0..<100 {
                            // Rows in key order, so two writers never deadlock.
                            let keys = Set(
                                (0..<Int.random(in: 1...3, using: &random)).map { _ in
                                    Int.random(in: 0..<40, using: &random)
                                }
                            ).sorted()
                            var sql = "begin;"
                            for key in keys {
                                let id = "r-\(key)"
                                sql +=
                                    Int.random(in: 0..<4, using: &random) == 0
                                    ? "update public.items set _deleted = true where id = '\(id)';"
                                    : upsert(id, "w\(writer)-\(transaction)")
                            }
                            _ = try await connection.execute(sql + "commit;")
                        }
                        await connection.close()
                    }
                }
                // The forced out-of-order commits, on keys no writer touches (so no lock
                // waits on a transaction the test holds open).
                group.addTask {
                    let early = try await database.connect()
                    let late = try await database.connect()
                    for round in 0..<20 {
                        _ = try await early.execute("begin;" + upsert("early-\(round % 5)", "e\(round)"))
                        _ = try await late.execute("begin;" + upsert("late-\(round % 5)", "l\(round)") + "commit;")
                        try await progress.waitForAPullStartedNow()
                        _ = try await early.execute("commit")
                    }
                    await early.close()
                    await late.close()
                }
                try await group.waitForAll()
                await done.set()
            }

            var state: [String: String?] = [:]
            var cursor: String?
            var pulls = 0
            // Generous: on a loaded 2-core machine the writers alone can take tens of seconds.
            let deadline = Date().addingTimeInterval(90)
            var finalPass = false
            while Date() < deadline {
                let writersDone = await done.value
                await progress.pullStarted()
                let page = try await server.pull(alice, cursor: cursor, limit: 7)
                await progress.pullCompleted()
                try #require(page.status == 200, "\(page.response)")
                pulls += 1
                for row in page.upserts("items") {
                    state[row["id"] as? String ?? "?"] = .some(row["title"] as? String)
                }
                for key in page.deletes("items") { state[key["id"] as? String ?? "?"] = nil }
                cursor = page.cursor
                if page.hasMore == true { continue }
                // A pass that began after the writers stopped and reached has_more: false.
                if finalPass { break }
                if writersDone { finalPass = true }
            }
            try await writers
            #expect(finalPass, "the puller did not finish within 90 s")
            #expect(await progress.windowsObserved == 20, "pulls inside an out-of-order window")
            let live = try await server.database.rows(
                "select id, title from public.items where not _deleted order by id")
            let expected = Dictionary(uniqueKeysWithValues: live.map { ($0[0] ?? "", $0[1]) })
            #expect(state == expected, "after \(pulls) pulls")
            #expect(expected["early-4"] == "e19" && expected["late-4"] == "l19", "\(expected)")
        }
    }
}

/// The looping puller's pulls, counted, so that a writer can wait for a whole pull run
/// while it holds a transaction open.
actor PullProgress {
    private var started = 0
    private var completed = 0
    private(set) var windowsObserved = 0

    func pullStarted() { started += 1 }
    func pullCompleted() { completed += 1 }

    /// Returns once a pull that started after this call has completed (30 s at most).
    nonisolated func waitForAPullStartedNow() async throws {
        let mark = await started
        try await eventually("a pull in the window", seconds: 30) { await self.completed > mark }
        await windowObserved()
    }

    private func windowObserved() { windowsObserved += 1 }
}

/// Set once the writers have committed everything.
actor DoneFlag {
    private(set) var value = false
    func set() { value = true }
}
