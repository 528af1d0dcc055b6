import FerryPostgres
import FerryTestSupport
import Foundation
import Glibc
import Testing

@testable import FerryGateway

/// A cursor never outlives its database's history (sql/ferry/functions/history.sql): after
/// a logical restore into a fresh cluster, a replica promoted without the last commits, and
/// a point-in-time recovery, every device pulling with a cursor gets every row it lacks or
/// `409 cursor_expired`, never a silent miss; cursors made before the histories diverged
/// are kept. Each test runs clusters of its own (``ScratchCluster``).
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct HistoryTests {
    static let tables = """
        create table public.items (id text primary key, user_id uuid not null, title text);
        select ferry.register_table('items', 'lww');
        """

    /// A migrated database `ferry` with `items`, in `cluster`.
    func migrate(_ cluster: ScratchCluster) async throws {
        let postgres = try await cluster.connect(database: "postgres")
        _ = try await postgres.query("create database ferry")
        await postgres.close()
        let admin = try await cluster.connect(database: "ferry")
        do {
            try await Migrator(sqlRoot: TestRepository.sqlRoot, extraDirectories: []).migrate(admin)
            try await admin.execute(Self.tables)
        } catch {
            await admin.close()
            throw error
        }
        await admin.close()
    }

    /// A gateway on `url` that has made `ferry serve`'s start-up check (which notes the
    /// history) before `body` runs (with `arguments` added), once the server there accepts writes; the check's
    /// answer is required to be `ready`. `database` is only there for the account steps'
    /// type: the gateway serves `url`.
    func withServingGateway<T>(
        _ url: String, database: AccountsDatabase, arguments: [String] = [],
        _ body: (AccountsGateway) async throws -> T
    ) async throws -> T {
        let admin = try await PostgresClient.connect(
            try PostgresConfiguration(try TestDatabase.url(url, user: "postgres")))
        let writable = try await eventuallyHolds(seconds: 120) {
            (try? await admin.query("select pg_is_in_recovery()"))?[0, 0] == "f"
        }
        await admin.close()
        try #require(writable, "the server at \(url) stayed in recovery")
        return try await withStartedGateway(databaseURL: url, arguments: arguments) { gateway, port in
            let check = try await offload { gateway.waitForDatabase(seconds: 0, interruption: StartupInterruption()) }
            try #require(check == .ready, "start-up check: \(check.advice)")
            return try await body(AccountsGateway(database: database, gateway: gateway, port: port))
        }
    }

    func upsert(_ ids: ClosedRange<Int>, from first: Int) -> [(id: Int, op: String, row: [String: Any])] {
        ids.enumerated().map { offset, n in (id: first + offset, op: "upsert", row: ["id": "i-\(n)"] as [String: Any]) }
    }

    func ids(_ page: PullPage) -> [String] {
        page.upserts("items").compactMap { $0["id"] as? String }.sorted()
    }

    /// Waits until `standby` has replayed all the WAL `primary` has written.
    func waitForReplay(_ primary: ScratchCluster, _ standby: ScratchCluster) async throws {
        let source = try await primary.connect(database: "ferry")
        let position = try #require(try await source.query("select pg_current_wal_insert_lsn()::text")[0, 0])
        await source.close()
        let replica = try await standby.connect(database: "ferry")
        let caughtUp = try await eventuallyHolds(seconds: 60) {
            let answer = try? await replica.query(
                "select pg_last_wal_replay_lsn() >= $1::pg_lsn", [position])
            return answer?[0, 0] == "t"
        }
        await replica.close()
        try #require(caughtUp, "the standby did not replay up to \(position)")
    }

    // MARK: - A logical restore

    @Test func aDumpRestoredIntoAFreshClusterIsRefusedUntilFinishedThenExpiresEveryCursor() async throws {
        try await withAccountsGateway { source in
            try await source.database.admin.execute(Self.tables)
            // Transaction ids past any a fresh cluster reaches by the end of the restore
            // (each subtransaction that writes takes one).
            try await source.database.admin.execute(
                """
                create temporary table burn (n integer);
                do $$ begin
                    for i in 1..30000 loop begin insert into burn values (i); exception when others then null; end; end loop;
                end $$;
                """)
            let alice = try await source.signUpAnonymous()
            try await source.push(alice, upsert(1...3, from: 1))
            let cursor = try #require(try await source.pull(alice).cursor)
            try await source.push(alice, upsert(4...4, from: 4))

            let binaries = (try await source.database.database.serverProgram("initdb") as NSString)
                .deletingLastPathComponent
            let target = try await ScratchCluster.create(binaries: binaries)
            defer { target.remove() }
            try await target.start()
            // The restore: roles first (they belong to the cluster), then the database.
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-dump-\(UUID())")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let sourceURL = try TestDatabase.url(source.database.gatewayURL, user: "postgres")
            try await ScratchCluster.run(
                binaries + "/pg_dumpall",
                ["--roles-only", "-d", sourceURL, "-f", folder.path + "/roles.sql"])
            try await ScratchCluster.run(
                binaries + "/pg_dump", ["-Fc", "-d", sourceURL, "-f", folder.path + "/ferry.dump"])
            try await ScratchCluster.run(
                binaries + "/psql", ["-q", "-d", target.url(database: "postgres"), "-f", folder.path + "/roles.sql"])
            try await ScratchCluster.run(
                binaries + "/pg_restore",
                ["--create", "--exit-on-error", "-d", target.url(database: "postgres"), folder.path + "/ferry.dump"])
            let restoredName = try #require(URLComponents(string: sourceURL)?.path.dropFirst()).description
            let restored = target.url(database: restoredName, user: "ferry_gateway")
            let inspect = try await target.connect(database: restoredName)
            let above = try await inspect.query(
                "select count(*) from public.items where _stamp >= pg_snapshot_xmin(pg_current_snapshot())")
            await inspect.close()
            try #require(above[0, 0] == "4", "the restored rows' stamps should be above this cluster's counter")

            // ferry serve refuses it, saying what to run.
            let refused = try await runFerry(
                ["serve"], databaseURL: restored,
                environment: [
                    "FERRY_JWT_SECRET": testSecret, "FERRY_LISTEN": "127.0.0.1:\(try freePort())",
                    "FERRY_DATABASE_WAIT": "1s",
                ])
            let log = refused.output + refused.errors
            #expect(refused.status == 1, "\(log)")
            #expect(log.contains("could not start") && log.contains("ferry restore-finish"), "\(log)")

            let finished = try await runFerry(
                ["restore-finish"], databaseURL: target.url(database: restoredName))
            #expect(finished.status == 0, "\(finished.errors)")
            #expect(finished.output.contains("4 rows restamped"), "\(finished.output)")

            try await withServingGateway(restored, database: source.database) { gateway in
                // The old cursor names the source's history: expired, never an empty answer.
                let old = try await gateway.pull(alice, cursor: cursor)
                #expect(old.status == 409 && old.response.code == "cursor_expired", "\(old.response)")
                // A fresh pull sees every restored row at once, though their stamps were
                // above this cluster's transaction counter.
                let fresh = try await gateway.pull(alice)
                #expect(ids(fresh) == ["i-1", "i-2", "i-3", "i-4"])
                // And its cursor brings what is written after the restore.
                try await gateway.push(alice, upsert(5...5, from: 5))
                let next = try await gateway.pull(alice, cursor: fresh.cursor)
                #expect(ids(next) == ["i-5"])
            }
        }
    }

    // MARK: - A replica promoted

    @Test func aPromotedReplicaKeepsCursorsItHasTheHistoryOfAndExpiresTheOthers() async throws {
        try await AccountsDatabase.with { database in
            let binaries = (try await database.database.serverProgram("initdb") as NSString).deletingLastPathComponent
            let primary = try await ScratchCluster.create(binaries: binaries)
            defer { primary.remove() }
            try await primary.start()
            try await migrate(primary)
            let standby = try await ScratchCluster.baseBackup(of: primary, standby: true)
            defer { standby.remove() }
            try await standby.start()
            // A hot standby answers the schema check but refuses every write: not ready.
            try await withStartedGateway(databaseURL: standby.url(database: "ferry", user: "ferry_gateway")) {
                gateway, port in
                _ = try await eventually("the standby's schema check", seconds: 60) {
                    let check = try await offload {
                        gateway.waitForDatabase(seconds: 0, interruption: StartupInterruption())
                    }
                    return check == .standby ? check : nil
                }
                let readyz = try get("/readyz", port: port)
                #expect(readyz.status == 503, "\(readyz.text)")
                #expect(readyz.text.contains("database is a standby (in recovery), not a primary"), "\(readyz.text)")
            }

            let (alice, kept, lost) = try await withServingGateway(
                primary.url(database: "ferry", user: "ferry_gateway"), database: database
            ) {
                gateway in
                let alice = try await gateway.signUpAnonymous()
                try await gateway.push(alice, upsert(1...3, from: 1))
                let first = try #require(try await gateway.pull(alice).cursor)
                try await gateway.push(alice, upsert(4...4, from: 4))
                let kept = try #require(try await gateway.pull(alice, cursor: first).cursor)
                try await waitForReplay(primary, standby)
                // The standby goes away; what the primary acknowledges now, it never gets.
                try await standby.stop()
                try await gateway.push(alice, upsert(5...5, from: 5))
                let lost = try await gateway.pull(alice, cursor: kept)
                #expect(ids(lost) == ["i-5"])
                return (alice, kept, try #require(lost.cursor))
            }
            try await primary.stop(mode: "immediate")
            try await standby.start()
            try await standby.promote()

            try await withServingGateway(standby.url(database: "ferry", user: "ferry_gateway"), database: database) {
                gateway in
                // Made past the point where the histories diverged (it saw i-5): expired.
                let late = try await gateway.pull(alice, cursor: lost)
                #expect(late.status == 409 && late.response.code == "cursor_expired", "\(late.response)")
                // Made before: kept, and it brings what the new primary writes, though its
                // transaction ids are the lost ones handed out again.
                let early = try await gateway.pull(alice, cursor: kept)
                #expect(early.status == 200 && ids(early).isEmpty, "\(early.response)")
                try await gateway.push(alice, upsert(6...6, from: 5))
                let after = try await gateway.pull(alice, cursor: kept)
                #expect(ids(after) == ["i-6"])
                #expect(ids(try await gateway.pull(alice)) == ["i-1", "i-2", "i-3", "i-4", "i-6"])
            }
        }
    }

    // MARK: - A crash that lost commits

    @Test func aCrashThatLostAcknowledgedCommitsExpiresTheCursorsThatSawThem() async throws {
        try await AccountsDatabase.with { database in
            let binaries = (try await database.database.serverProgram("initdb") as NSString).deletingLastPathComponent
            // The gateway's commits are not flushed for 10 s: a crash loses them.
            let cluster = try await ScratchCluster.create(binaries: binaries, settings: "wal_writer_delay = 10s")
            defer { cluster.remove() }
            try await cluster.start()
            try await migrate(cluster)
            let admin = try await cluster.connect(database: "ferry")
            _ = try await admin.query("alter role ferry_gateway set synchronous_commit = off")
            let url = cluster.url(database: "ferry", user: "ferry_gateway")
            let (alice, kept, lost) = try await withServingGateway(url, database: database) { gateway in
                let alice = try await gateway.signUpAnonymous()
                try await gateway.push(alice, upsert(1...2, from: 1))
                let kept = try #require(try await gateway.pull(alice).cursor)
                // A synchronous commit flushes all WAL before it: the sign-up and rows 1-2 stay.
                _ = try await admin.query("create table flushed ()")
                try await gateway.push(alice, upsert(3...3, from: 3))
                let lost = try #require(try await gateway.pull(alice, cursor: kept).cursor)
                return (alice, kept, lost)
            }
            await admin.close()
            try await cluster.stop(mode: "immediate")
            try await cluster.start()
            // WAL past where the lost cursor was made: only the start it predates expires it.
            let padding = try await cluster.connect(database: "ferry")
            _ = try await padding.query("create table padding as select generate_series(1, 20000) n")
            await padding.close()

            try await withServingGateway(url, database: database) { gateway in
                // Row 3 was acknowledged and lost; the cursor that saw it expires.
                #expect(ids(try await gateway.pull(alice)) == ["i-1", "i-2"], "the crash should lose row 3")
                try await gateway.push(alice, upsert(4...4, from: 3))
                let late = try await gateway.pull(alice, cursor: lost)
                #expect(late.status == 409 && late.response.code == "cursor_expired", "\(late.response)")
                // The one from before brings row 4, though its transaction id may be row 3's.
                #expect(ids(try await gateway.pull(alice, cursor: kept)) == ["i-4"])
            }
        }
    }

    // MARK: - A point-in-time recovery

    @Test func aPointInTimeRecoveryExpiresOnlyCursorsMadeAfterItsTarget() async throws {
        try await AccountsDatabase.with { database in
            let binaries = (try await database.database.serverProgram("initdb") as NSString).deletingLastPathComponent
            let archive = "/tmp/ferry-archive-\(UUID().uuidString.prefix(8).lowercased())"
            try FileManager.default.createDirectory(atPath: archive, withIntermediateDirectories: false)
            defer { try? FileManager.default.removeItem(atPath: archive) }
            if getuid() == 0 { try await ScratchCluster.run("/bin/chown", ["postgres:postgres", archive]) }
            let primary = try await ScratchCluster.create(
                binaries: binaries, settings: "archive_mode = on\narchive_command = 'cp %p \(archive)/%f'")
            defer { primary.remove() }
            try await primary.start()
            try await migrate(primary)
            let backup = try await ScratchCluster.baseBackup(of: primary, standby: false)
            defer { backup.remove() }

            let (alice, kept, lost) = try await withServingGateway(
                primary.url(database: "ferry", user: "ferry_gateway"), database: database
            ) {
                gateway in
                let alice = try await gateway.signUpAnonymous()
                try await gateway.push(alice, upsert(1...3, from: 1))
                let kept = try #require(try await gateway.pull(alice).cursor)
                let admin = try await primary.connect(database: "ferry")
                _ = try await admin.query("select pg_create_restore_point('before_the_mistake')")
                try await gateway.push(alice, upsert(4...4, from: 4))
                let lost = try #require(try await gateway.pull(alice, cursor: kept).cursor)
                _ = try await admin.query("select pg_switch_wal()")
                await admin.close()
                return (alice, kept, lost)
            }
            try await primary.stop()
            try backup.appendSettings(
                """
                port = \(backup.port)
                archive_mode = off
                restore_command = 'cp \(archive)/%f %p'
                recovery_target_name = 'before_the_mistake'
                recovery_target_action = 'promote'
                """)
            try backup.writeFile("recovery.signal", "")
            try await backup.start()

            try await withServingGateway(backup.url(database: "ferry", user: "ferry_gateway"), database: database) {
                gateway in
                let late = try await gateway.pull(alice, cursor: lost)
                #expect(late.status == 409 && late.response.code == "cursor_expired", "\(late.response)")
                let early = try await gateway.pull(alice, cursor: kept)
                #expect(early.status == 200 && ids(early).isEmpty, "\(early.response)")
                try await gateway.push(alice, upsert(5...5, from: 4))
                #expect(ids(try await gateway.pull(alice, cursor: kept)) == ["i-5"])
            }
        }
    }
}
