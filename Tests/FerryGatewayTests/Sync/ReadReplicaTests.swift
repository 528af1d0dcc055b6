import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Pulls on a read replica (`--read-database-url`): a real streaming standby of a primary
/// the test starts (``ScratchCluster``, `pg_basebackup -R`), its replay paused and resumed.
/// A pull after a cue sees the cued change whatever the replica's lag, a cursor works on
/// either database, and with replay running the replica serves the pulls
/// (`ferry_pulls_total{served_by}`).
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct ReadReplicaTests {
    let history = HistoryTests()

    /// A gateway on `primary` reading from `standby`, once `standby` is a standby that
    /// has replayed the migration.
    func withReplicatedGateway(
        _ body: (AccountsGateway, _ primary: ScratchCluster, _ standby: ScratchCluster, _ replica: PostgresClient)
            async throws -> Void
    ) async throws {
        try await AccountsDatabase.with { database in
            let binaries = (try await database.database.serverProgram("initdb") as NSString).deletingLastPathComponent
            let primary = try await ScratchCluster.create(binaries: binaries)
            defer { primary.remove() }
            try await primary.start()
            try await history.migrate(primary)
            let standby = try await ScratchCluster.baseBackup(of: primary, standby: true)
            defer { standby.remove() }
            try await standby.start()
            try await history.waitForReplay(primary, standby)
            let replica = try await standby.connect(database: "ferry")
            do {
                try await history.withServingGateway(
                    primary.url(database: "ferry", user: "ferry_gateway"), database: database,
                    arguments: [
                        "--read-database-url", standby.url(database: "ferry", user: "ferry_gateway"),
                        "--replica-wait-ms", "200",
                    ]
                ) { gateway in
                    try await body(gateway, primary, standby, replica)
                }
            } catch {
                await replica.close()
                throw error
            }
            await replica.close()
        }
    }

    /// Pulls answered by each database so far.
    func served(_ gateway: AccountsGateway) async throws -> (replica: Int, primary: Int) {
        (
            try await gateway.metric("ferry_pulls_total", labels: #"served_by="replica""#),
            try await gateway.metric("ferry_pulls_total", labels: #"served_by="primary""#)
        )
    }

    /// Pauses the standby's replay and waits until it has stopped.
    func pauseReplay(_ replica: PostgresClient) async throws {
        _ = try await replica.query("select pg_wal_replay_pause()")
        let paused = try await eventuallyHolds(seconds: 30) {
            (try? await replica.query("select pg_get_wal_replay_pause_state()"))?[0, 0] == "paused"
        }
        try #require(paused, "the standby's replay did not pause")
    }

    /// The SQLSTATE `sql` fails with on `client`, nil when it succeeds.
    func failure(of sql: String, on client: PostgresClient) async -> String? {
        do {
            _ = try await client.execute(sql)
            return nil
        } catch {
            return error.sqlState ?? "no SQLSTATE: \(error)"
        }
    }

    @Test func aPullAfterACueSeesTheChangeWhateverTheReplicasLagAndNoCursorGoesBack() async throws {
        try await withReplicatedGateway { gateway, primary, standby, replica in
            // The SQL on the standby: no history without the primary's, none before the
            // standby has replayed past its position, and a cursor from before the
            // primary's start is the primary's to judge.
            let source = try await primary.connect(database: "ferry")
            let here = try #require(try await source.query("select ferry.history_here()::text")[0, 0])
            await source.close()
            try await history.waitForReplay(primary, standby)
            #expect(await failure(of: "select ferry.history_here()", on: replica) == "55000")
            let ahead = here.replacingOccurrences(
                of: #""lsn": "[0-9A-F/]+""#, with: #""lsn": "FFFFFFF/0""#, options: .regularExpression)
            #expect(ahead != here)
            #expect(await failure(of: "select ferry.replica_caught_up('\(ahead)')", on: replica) == "FRLAG")
            let noteHistory = "select ferry.replica_caught_up('\(here)');"
            #expect(
                await failure(
                    of: noteHistory + "select ferry.history_left('\(here)', ferry.history_here())", on: replica)
                    == nil)
            let earlier = here.replacingOccurrences(
                of: #""started": "[0-9.]+""#, with: #""started": "1.5""#, options: .regularExpression)
            #expect(earlier != here)
            #expect(
                await failure(
                    of: noteHistory + "select ferry.history_left('\(earlier)', ferry.history_here())", on: replica)
                    == "FRPRI")

            let alice = try await gateway.signUpAnonymous()
            try await gateway.push(alice, history.upsert(1...2, from: 1))
            let stream = try await gateway.openStream(alice, .webSocket)
            defer { stream.close() }
            _ = try await stream.nextMessageAsync(ofType: "hello")

            // Replay running: the replica serves, and sees what was pushed before the pull.
            let before = try await served(gateway)
            let first = try await gateway.pull(alice)
            #expect(history.ids(first) == ["i-1", "i-2"])
            let afterFirst = try await served(gateway)
            #expect(afterFirst.replica == before.replica + 1, "the replica should serve: \(before) → \(afterFirst)")
            let onReplica = try #require(first.cursor)

            // Replay paused: the push's cue comes, the replica never gets the row in time,
            // and the pull runs on the primary after its wait.
            try await pauseReplay(replica)
            try await gateway.push(alice, history.upsert(3...3, from: 3))
            _ = try await stream.nextMessageAsync(ofType: "cue")
            let started = ContinuousClock.now
            let cued = try await gateway.pull(alice, cursor: onReplica)
            let waited = ContinuousClock.now - started
            #expect(history.ids(cued) == ["i-3"], "the cued change, with a cursor the replica made")
            let afterCued = try await served(gateway)
            #expect(
                afterCued.primary == afterFirst.primary + 1, "the primary should serve: \(afterFirst) → \(afterCued)")
            #expect(waited >= .milliseconds(200), "it waits for the replica first: \(waited)")
            #expect(try await gateway.metric("ferry_replica_fallbacks_total", labels: #"reason="lag""#) >= 1)
            let onPrimary = try #require(cued.cursor)

            // Still paused: the primary's cursor is never answered from the lagging
            // replica's older snapshot (no row again, no expiry).
            let again = try await gateway.pull(alice, cursor: onPrimary)
            #expect(again.status == 200 && again.rowCount == 0, "\(again.response)")

            // Replay resumed: the replica serves the primary's cursor, and what follows.
            _ = try await replica.query("select pg_wal_replay_resume()")
            try await history.waitForReplay(primary, standby)
            let resumed = try await served(gateway)
            let caughtUp = try await gateway.pull(alice, cursor: onPrimary)
            #expect(caughtUp.status == 200 && caughtUp.rowCount == 0, "\(caughtUp.response)")
            let afterCaughtUp = try await served(gateway)
            #expect(afterCaughtUp.replica == resumed.replica + 1, "\(resumed) → \(afterCaughtUp)")
            try await gateway.push(alice, history.upsert(4...4, from: 4))
            _ = try await stream.nextMessageAsync(ofType: "cue")
            let next = try await gateway.pull(alice, cursor: try #require(caughtUp.cursor))
            #expect(history.ids(next) == ["i-4"])
            #expect(history.ids(try await gateway.pull(alice)) == ["i-1", "i-2", "i-3", "i-4"])
        }
    }

    @Test func everyCuedChangeReachesAPullWhileReplayStopsAndStarts() async throws {
        // Pushes and cue-driven pulls while the replica's replay pauses and resumes under
        // them: each pull after a cue has every row pushed before it, and each cursor
        // only ever adds rows.
        try await withReplicatedGateway { gateway, _, _, replica in
            let alice = try await gateway.signUpAnonymous()
            let stream = try await gateway.openStream(alice, .webSocket)
            defer { stream.close() }
            _ = try await stream.nextMessageAsync(ofType: "hello")
            var cursor: String?
            var seen: Set<String> = []
            for round in 1...12 {
                if round % 4 == 1 { _ = try await replica.query("select pg_wal_replay_pause()") }
                if round % 4 == 3 { _ = try await replica.query("select pg_wal_replay_resume()") }
                try await gateway.push(alice, history.upsert(round...round, from: round))
                _ = try await stream.nextMessageAsync(ofType: "cue")
                let page = try await gateway.pull(alice, cursor: cursor)
                try #require(page.status == 200, "round \(round): \(page.response)")
                let ids = history.ids(page)
                #expect(ids.allSatisfy { !seen.contains($0) }, "round \(round): \(ids) again")
                seen.formUnion(ids)
                #expect(seen.contains("i-\(round)"), "round \(round): the cued row is missing from \(ids)")
                cursor = page.cursor
            }
            #expect(seen.count == 12)
            let counts = try await served(gateway)
            #expect(counts.replica > 0 && counts.primary > 0, "both should have served: \(counts)")
        }
    }

    @Test func aCursorFromBeforeThePrimaryRestartedIsJudgedByThePrimary() async throws {
        // A standby cannot tell whether the primary's start lost what such a cursor saw
        // (history.sql): the pull runs on the primary, which keeps it after a clean
        // restart; the cursor it answers with is the replica's again.
        try await withReplicatedGateway { gateway, primary, standby, _ in
            let alice = try await gateway.signUpAnonymous()
            try await gateway.push(alice, history.upsert(1...1, from: 1))
            try await history.waitForReplay(primary, standby)
            let beforeRestart = try #require(try await gateway.pull(alice).cursor)
            try await primary.stop()
            try await primary.start()
            let pushed = try await eventuallyHolds(seconds: 60) {
                let answer = try? await gateway.pushBatch(
                    alice, [["id": 2, "table": "items", "op": "upsert", "row": ["id": "i-2"]]])
                return answer?.response.status == 200
            }
            try #require(pushed, "no push after the primary restarted")
            try await history.waitForReplay(primary, standby)

            let before = try await served(gateway)
            let fallbacks = "ferry_replica_fallbacks_total"
            let judged = try await gateway.metric(fallbacks, labels: #"reason="primary_only""#)
            let kept = try await gateway.pull(alice, cursor: beforeRestart)
            #expect(history.ids(kept) == ["i-2"])
            let after = try await served(gateway)
            #expect(after.primary == before.primary + 1, "\(before) → \(after)")
            #expect(try await gateway.metric(fallbacks, labels: #"reason="primary_only""#) == judged + 1)

            try await history.waitForReplay(primary, standby)
            let next = try await gateway.pull(alice, cursor: try #require(kept.cursor))
            #expect(next.status == 200 && next.rowCount == 0, "\(next.response)")
            let last = try await served(gateway)
            #expect(last.replica == after.replica + 1, "\(after) → \(last)")
        }
    }

    @Test func aReadDatabaseThatIsNotAStandbyOrIsDownLeavesPullsToThePrimary() async throws {
        try await withClosedPort { closed in
            try await AccountsDatabase.with { database in
                let readURLs = "\(database.gatewayURL),postgresql://ferry_gateway@127.0.0.1:\(closed)/ferry"
                try await withStartedGateway(
                    databaseURL: database.gatewayURL, arguments: ["--read-database-url", readURLs]
                ) { server, port in
                    let gateway = AccountsGateway(database: database, gateway: server, port: port)
                    try await database.admin.execute(HistoryTests.tables)
                    let alice = try await gateway.signUpAnonymous()
                    try await gateway.push(alice, history.upsert(1...1, from: 1))
                    // The read URLs in turn: the primary itself, then nothing, which reads
                    // then pass over for a second instead of each trying it again.
                    let started = ContinuousClock.now
                    for _ in 1...6 {
                        #expect(history.ids(try await gateway.pull(alice)) == ["i-1"])
                    }
                    let seconds = (ContinuousClock.now - started).components.seconds
                    let schema = try await gateway.call("GET", "/v1/schema", token: alice.accessToken)
                    #expect(schema.status == 200, "\(schema)")
                    let counts = try await served(gateway)
                    #expect(counts.replica == 0 && counts.primary == 6, "\(counts)")
                    let fallbacks = "ferry_replica_fallbacks_total"
                    #expect(try await gateway.metric(fallbacks, labels: #"reason="primary_only""#) >= 3)
                    let refused = try await gateway.metric(fallbacks, labels: #"reason="error""#)
                    #expect(refused >= 1 && refused <= 2 + Int(seconds), "\(refused) in \(seconds) s")
                }
            }
        }
    }
}
