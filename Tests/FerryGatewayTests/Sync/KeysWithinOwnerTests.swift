import FerryPostgres
import FerryTestSupport
import Foundation
import Synchronization
import Testing

@testable import FerryGateway

/// docs/TABLES.md, "Keys": a table clients write whose primary key
/// leaves its owner out is one key space for all users, so `ferry migrate` (and
/// `ferry.register_table`) warn about it unless its options say the key is global; the
/// example apps key their per-user tables within their owner, and push, pull and the
/// first-sign-in merge work with those keys.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct KeysWithinOwnerTests {
    @Test func migrateWarnsAboutEachTableWhoseKeyLeavesItsOwnerOut() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try """
        create table public.everyones (id text primary key, user_id uuid not null);
        select ferry.register_table('everyones', 'insert_only');
        create table public.on_purpose (id bigint primary key, user_id uuid not null);
        select ferry.register_table('on_purpose', 'lww', options => '{"global_key": true}');
        create table public.mine (user_id uuid not null, id text not null, primary key (user_id, id));
        select ferry.register_table('mine', 'lww');
        create table public.invoices (id text primary key, user_id uuid not null);
        select ferry.register_table('invoices', 'readonly');
        create table public.news (id text primary key);
        select ferry.register_table('news', 'shared');
        """.write(to: directory.appendingPathComponent("0001_tables.sql"), atomically: true, encoding: .utf8)
        try await TestDatabase.with(prefix: "ferry_keys") { database in
            let admin = try await database.connect()
            let lines = Mutex<[String]>([])
            try await Migrator(sqlRoot: TestRepository.sqlRoot, extraDirectories: [directory.path])
                .migrate(admin) { line in lines.withLock { $0.append(line) } }
            let warnings = lines.withLock { $0 }.filter { $0.hasPrefix("warning:") }
            #expect(warnings.count == 1, "\(warnings)")
            #expect(
                warnings.first?.hasPrefix("warning: everyones is keyed by (id) without its owner column user_id")
                    == true)
            #expect(
                try await admin.query("select table_name::text from ferry.tables_keyed_across_users()").rows.map(
                    \.values)
                    == [["everyones"]])

            // Said so, the key is global; anything else in global_key is refused.
            try await admin.execute(
                #"select ferry.register_table('everyones', 'insert_only', options => '{"global_key": true}')"#)
            #expect(try await admin.query("select count(*) from ferry.tables_keyed_across_users()")[0, 0] == "0")
            let refused = await #expect(throws: PostgresError.self) {
                try await admin.execute(
                    #"select ferry.register_table('mine', 'lww', options => '{"global_key": "yes"}')"#)
            }
            #expect(refused?.sqlState == "22023", "\(String(describing: refused))")
            await admin.close()
        }
    }

    @Test func theExampleAppsKeyEveryPerUserTableWithinItsOwner() async throws {
        try await AccountsDatabase.with(examples: ["puzzle", "tasks"]) { database in
            let shared = try await database.rows("select table_name::text from ferry.tables_keyed_across_users()")
            #expect(shared.isEmpty)
            let keys = try await database.rows(
                """
                select c.relname::text, string_agg(a.attname, ', ' order by k.n)
                from pg_index i join pg_class c on c.oid = i.indrelid
                cross join unnest(i.indkey::smallint[]) with ordinality k(attnum, n)
                join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
                where i.indisprimary and c.relname in ('game_records', 'tasks') group by 1 order by 1
                """)
            #expect(keys == [["game_records", "user_id, id"], ["tasks", "user_id, id"]])
        }
    }

    @Test func twoUsersPushTheSameIDsAndEachPullsAndDeletesOnlyTheirOwn() async throws {
        try await withAccountsGateway(examples: ["puzzle", "tasks"]) { server in
            let ana = try await server.signUpAnonymous()
            let bo = try await server.signUpAnonymous()
            for (user, seconds) in [(ana, 100), (bo, 200)] {
                let pushed = try await server.pushBatch(
                    user,
                    [
                        [
                            "id": 1, "table": "game_records", "op": "insert",
                            "row": [
                                "id": "g-1748432312", "puzzle_id": "p", "seconds": seconds,
                                "finished_at": "2026-01-01T00:00:00Z",
                            ],
                        ],
                        ["id": 2, "table": "tasks", "op": "upsert", "row": ["id": "t-1", "title": "mine"]],
                    ])
                #expect(pushed.outcomes == ["applied", "applied"], "\(pushed.response)")
            }
            let deleted = try await server.pushBatch(
                ana, [["id": 3, "table": "tasks", "op": "delete", "key": ["id": "t-1"]]])
            #expect(deleted.outcomes == ["applied"], "\(deleted.response)")

            let anaPull = try await server.pull(ana)
            #expect(anaPull.upserts("game_records").map { $0["seconds"] as? Int } == [100])
            #expect(anaPull.upserts("tasks").isEmpty)
            let cursor = try #require(anaPull.response.string("cursor"))
            _ = try await server.pushBatch(ana, [["id": 4, "table": "tasks", "op": "upsert", "row": ["id": "t-1"]]])
            _ = try await server.pushBatch(ana, [["id": 5, "table": "tasks", "op": "delete", "key": ["id": "t-1"]]])
            let changes = try await server.pull(ana, cursor: cursor)
            #expect(
                changes.deletes("tasks").map { $0 as NSDictionary } == [
                    ["user_id": ana.userID, "id": "t-1"] as NSDictionary
                ],
                "a delete carries the whole key, owner included: \(changes.response)")

            let boPull = try await server.pull(bo)
            #expect(boPull.upserts("game_records").map { $0["seconds"] as? Int } == [200])
            #expect(boPull.upserts("tasks").map { $0["title"] as? String } == ["mine"])
        }
    }

    @Test func keepDeviceWithTheSameIDInBothAccountsKeepsTheDevicesRow() async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let password = "the cloud password"
            let cloud = try await server.emailAccount("keys@example.com", password: password)
            let device = try await server.signUpAnonymous()
            for (user, seconds) in [(cloud, 100), (device, 200)] {
                let pushed = try await server.pushBatch(
                    user,
                    [
                        [
                            "id": 1, "table": "game_records", "op": "insert",
                            "row": [
                                "id": "g-1", "puzzle_id": "p", "seconds": seconds,
                                "finished_at": "2026-01-01T00:00:00Z",
                            ],
                        ]
                    ])
                #expect(pushed.outcomes == ["applied"], "\(pushed.response)")
            }
            let signedIn = try await server.signIn(
                email: "keys@example.com", password: password, device: device.deviceID, bearer: device.accessToken,
                resolve: "keep_device")
            #expect(signedIn.status == 200, "\(signedIn)")
            #expect(
                try await server.database.rows(
                    "select user_id::text, id, seconds::text, _deleted::text from public.game_records")
                    == [[cloud.userID, "g-1", "200", "false"]])
        }
    }
}
