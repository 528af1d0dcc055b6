import FerryTestSupport
import Foundation
import Testing

/// The ids of `table`'s live rows of the user, as the server holds them.
func serverIDs(_ gateway: DemoGateway, _ table: String, of user: String, column: String = "id") async throws -> [String]
{
    try await gateway.rows(
        "select \(column)::text from public.\(table) where user_id = $1 and not _deleted order by 1", [user]
    ).compactMap { $0[0] }
}

/// The ids in a `show` output.
func shownIDs(_ json: String, column: String = "id") throws -> [String] {
    let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]])
    return rows.compactMap { $0[column] as? String }.sorted()
}

/// Sync through ferry-demo processes against a real gateway: the outbox survives the
/// gateway's absence and `kill -9`, and the pull merges whatever the server has.
@Suite(.hangLimit, .tags(.database, .process), .tagSelection) struct DemoSyncTests {
    @Test func offlineEditsReachTheServerWhenItIsBack() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "t-1", "title": "online"}"#)
            await gateway.stop()
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "t-2", "title": "offline"}"#)
            let offline = try await gateway.demo(device, "sync")
            #expect(offline.status == 4, "\(offline.errors)")
            #expect(try await gateway.status(device)["pending_mutations"] as? Int == 2)
            #expect(try shownIDs(try await gateway.show(device, "tasks")) == ["t-1", "t-2"])

            try await gateway.start()
            let back = try await gateway.demo(device, "sync")
            #expect(back.status == 0, "\(back.errors)")
            #expect(try await serverIDs(gateway, "tasks", of: user) == ["t-1", "t-2"])
            #expect(try await gateway.status(device)["pending_mutations"] as? Int == 0)
        }
    }

    /// Each `sync` is killed (SIGKILL, by its fault point) at one of the two instants of a
    /// drain that matter: before its push is sent (the server has nothing), and after the
    /// server committed the push but before the client read the answer (the answer is
    /// lost: the device still holds every mutation). A last sync then empties the outbox,
    /// its push answered `duplicate` for what the server had. The server holds each
    /// enqueued row once, and the device's mutation ids were each used once.
    @Test func killingSyncMidDrainLosesAndDuplicatesNothing() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            var expected: [String] = []
            var applied: [String] = []
            for (round, fault) in ["push-before-send", "push-answered", "push-answered", "push-before-send"]
                .enumerated()
            {
                for index in 0..<8 {
                    let id = "g-\(round)-\(index)"
                    expected.append(id)
                    try await gateway.demoJSON(
                        device, "enqueue", "game_records", "insert",
                        #"{"id": "\#(id)", "puzzle_id": "p-1", "seconds": \#(round * 10 + index), "finished_at": "2026-05-01T09:30:00Z"}"#
                    )
                }
                let (ending, run) = try await gateway.demoEnding(device, ["sync"], fault: fault)
                #expect(ending == .signaled(SIGKILL), "\(fault): \(ending) \(run.errors)")
                // push-answered: the server committed everything pending; before-send: nothing more.
                if fault == "push-answered" { applied = expected }
                #expect(try await serverIDs(gateway, "game_records", of: user) == applied.sorted(), "\(fault)")
                #expect(try await gateway.status(device)["pending_mutations"] as? Int == expected.count, "\(fault)")
            }
            let last = try await gateway.demo(device, "sync")
            #expect(last.status == 0, "\(last.errors)")
            #expect(last.errors.contains("duplicate"), "the retried push met its first application: \(last.errors)")
            #expect(try await serverIDs(gateway, "game_records", of: user) == expected.sorted())
            let lastMutation = try await gateway.rows(
                "select last_mutation_id::text from ferry.devices where user_id = $1", [user])
            #expect(lastMutation == [["\(expected.count)"]])
            #expect(try await gateway.status(device)["pending_mutations"] as? Int == 0)
            #expect(try shownIDs(try await gateway.show(device, "game_records")) == expected.sorted())
        }
    }

    /// A push whose answer is lost is sent again and answered `duplicate`: applied once,
    /// and the device's row is the server's.
    @Test func aLostPushAnswerIsRetriedAsDuplicateAndAppliedOnce() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "t-1", "title": "once"}"#)
            let (ending, _) = try await gateway.demoEnding(device, ["sync"], fault: "push-answered")
            #expect(ending == .signaled(SIGKILL))
            let applied = try await gateway.rows(
                "select last_mutation_id::text from ferry.devices where user_id = $1", [user])
            #expect(applied == [["1"]], "the server committed the push before the kill")
            #expect(try await gateway.status(device)["pending_mutations"] as? Int == 1)
            let retry = try await gateway.demo(device, "sync")
            #expect(retry.status == 0, "\(retry.errors)")
            #expect(retry.errors.contains("1 mutations were applied before (duplicate)"), "\(retry.errors)")
            #expect(try await gateway.status(device)["pending_mutations"] as? Int == 0)
            #expect(try await serverIDs(gateway, "tasks", of: user) == ["t-1"])
            let after = try await gateway.rows(
                "select last_mutation_id::text from ferry.devices where user_id = $1", [user])
            #expect(after == [["1"]])
        }
    }

    /// `enqueue` killed between its outbox row and its local row (inside the one
    /// transaction) leaves neither; killed once the transaction committed, both. After a
    /// sync the server holds exactly the rows the device shows, each applied once (the
    /// device's last mutation id is their count).
    @Test func killingEnqueueAtAnyInstantLeavesRowAndMutationTogether() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            var kept: [String] = []
            for index in 0..<6 {
                let fault = index % 2 == 0 ? "enqueue-between-mutation-and-row" : "enqueue-committed"
                let (ending, run) = try await gateway.demoEnding(
                    device,
                    [
                        "enqueue", "game_records", "insert",
                        #"{"id": "k-\#(index)", "puzzle_id": "p-1", "seconds": \#(index), "finished_at": "2026-05-01T09:30:00Z"}"#,
                    ], fault: fault)
                #expect(ending == .signaled(SIGKILL), "\(fault): \(ending) \(run.errors)")
                if fault == "enqueue-committed" { kept.append("k-\(index)") }
                #expect(try shownIDs(try await gateway.show(device, "game_records")) == kept, "\(fault)")
                #expect(try await gateway.status(device)["pending_mutations"] as? Int == kept.count, "\(fault)")
            }
            let sync = try await gateway.demo(device, "sync")
            #expect(sync.status == 0, "\(sync.errors)")
            #expect(try await serverIDs(gateway, "game_records", of: user) == kept)
            let lastMutation = try await gateway.rows(
                "select coalesce((select last_mutation_id from ferry.devices where user_id = $1), 0)::text", [user])
            #expect(lastMutation == [["\(kept.count)"]])
            #expect(try shownIDs(try await gateway.show(device, "game_records")) == kept)
        }
    }

    /// `watch` holds the cue stream: it pulls once the stream opens, and again when the
    /// other device's push cues it, printing a line per pull.
    @Test func watchPullsWhenAnotherDevicePushes() async throws {
        try await DemoGateway.with { gateway in
            let phone = gateway.device("phone")
            let laptop = gateway.device("laptop")
            try await gateway.demoJSON(phone, "link", "ana@example.com", "correct horse")
            try await gateway.demoJSON(laptop, "signin", "ana@example.com", "correct horse")
            // It runs until the SIGTERM below; its own end must not come first (under load,
            // the first pull and the phone's two runs may take most of a minute).
            let (watch, output, errors) = try gateway.startDemo(laptop, ["watch", "--seconds", "300"])
            func lines() -> [String] {
                ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            }
            try await eventually("watch's first pull", seconds: 15) { !lines().isEmpty }
            try await gateway.demoJSON(phone, "enqueue", "tasks", "upsert", #"{"id": "from-phone"}"#)
            try await gateway.demoJSON(phone, "sync")
            try await eventually("watch pulling the phone's task", seconds: 15) {
                lines().contains { $0.contains(#""tables":["tasks"]"#) }
            }
            watch.send(SIGTERM)
            _ = watch.wait(seconds: 10)
            #expect(try shownIDs(try await gateway.show(laptop, "tasks")) == ["from-phone"])
            #expect(!lines().isEmpty, "\((try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")")
        }
    }

    @Test func aRejectedMutationExitsOneAndItsRowIsPutBack() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            try await gateway.demoJSON(device, "enqueue", "profiles", "upsert", #"{"username": "ana"}"#)
            try await gateway.demoJSON(device, "sync")
            // The check constraint wants 1 to 40 characters.
            try await gateway.demoJSON(device, "enqueue", "profiles", "upsert", #"{"username": ""}"#)
            let sync = try await gateway.demo(device, "sync")
            #expect(sync.status == 1)
            #expect(sync.errors.contains("constraint_violation"), "\(sync.errors)")
            let rows = try await gateway.show(device, "profiles")
            #expect(rows.contains(#""username":"ana""#), "\(rows)")
            #expect(try await gateway.status(device)["pending_mutations"] as? Int == 0)
        }
    }

    /// A cursor older than a purge of tombstones is answered `cursor_expired`: the device
    /// drops its rows, loads everything afresh, and keeps (and pushes) its pending write.
    @Test func cursorExpiredDropsTheRowsAndLoadsAfreshKeepingTheOutbox() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            for id in ["t-1", "t-2"] {
                try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "\#(id)"}"#)
            }
            try await gateway.demoJSON(device, "sync")
            // An operator tombstones t-1 and, later, purges it: the device's cursor missed it.
            _ = try await gateway.rows(
                "update public.tasks set _deleted = true where user_id = $1 and id = 't-1' returning id", [user])
            try await Task.sleep(for: .milliseconds(2100))
            let purge = try await runFerry(
                ["purge-tombstones", "--older-than", "1s"], databaseURL: try gateway.database.url(user: "ferry_gateway")
            )
            try #require(purge.status == 0, "\(purge.errors)")
            try await gateway.demoJSON(device, "enqueue", "tasks", "upsert", #"{"id": "t-3"}"#)

            let sync = try await gateway.demo(device, "sync")
            #expect(sync.status == 0, "\(sync.errors)")
            #expect(sync.errors.contains("cursor_expired"), "\(sync.errors)")
            #expect(try shownIDs(try await gateway.show(device, "tasks")) == ["t-2", "t-3"])
            #expect(try await serverIDs(gateway, "tasks", of: user) == ["t-2", "t-3"])
        }
    }

    /// Two devices of one user edit every writable strategy's tables at once, round after
    /// round (every round writes each of them), syncing concurrently (no sync may end
    /// other than done or retryable); the operator writes a `readonly` and a `shared` row meanwhile. After a
    /// last sync of each, both hold exactly the server's rows, table by table, row by row.
    @Test func twoDevicesOfOneUserConvergeAfterRandomConcurrentEdits() async throws {
        try await DemoGateway.with { gateway in
            let phone = gateway.device("phone")
            let laptop = gateway.device("laptop")
            let email = "ana-\(UUID().uuidString.prefix(8))@example.com"
            try await gateway.demoJSON(phone, "link", email, "correct horse")
            try await gateway.demoJSON(laptop, "signin", email, "correct horse")
            let user = try #require(try await gateway.status(phone)["user_id"] as? String)
            #expect(try await gateway.status(laptop)["user_id"] as? String == user)
            try await gateway.demoJSON(phone, "claim", "active_game", "current")

            var random = SeededRandom(seed: UInt64.random(in: 1...UInt64.max))
            let seed = random.seed
            for round in 0..<5 {
                for (name, device) in [("phone", phone), ("laptop", laptop)] {
                    let holdsLock = device == phone
                    // Each writable strategy's tables once, then random edits, in a random order.
                    var kinds = EditKind.covering(holdsLock: holdsLock)
                    kinds += (0..<3).map { _ in EditKind.random(&random, holdsLock: holdsLock) }
                    for (edit, kind) in random.shuffled(kinds).enumerated() {
                        let arguments = randomEdit(&random, kind, device: name, round: round, edit: edit)
                        let run = try await gateway.demo(device, ["enqueue"] + arguments)
                        #expect(run.status == 0, "seed \(seed): \(arguments): \(run.errors)")
                    }
                }
                if round == 2 {
                    _ = try await gateway.rows(
                        "insert into public.subscriptions (user_id, plan) values ($1, 'pro') returning plan", [user])
                    _ = try await gateway.rows(
                        "insert into public.daily_puzzles (day, grid) values ('2026-05-01', repeat('1', 81)) returning day"
                    )
                }
                let (first, _, firstErrors) = try gateway.startDemo(phone, ["sync"])
                let (second, _, secondErrors) = try gateway.startDemo(laptop, ["sync"])
                let (phoneEnd, laptopEnd) = try await offload { (first.wait(seconds: 60), second.wait(seconds: 60)) }
                // Done (0), or a retryable failure whose work stays queued for the last syncs
                // (4: a 503 when the whole suite exhausts PostgreSQL's connections); never a
                // rejection (1), a crash or a hang.
                for (device, end, errors) in [("phone", phoneEnd, firstErrors), ("laptop", laptopEnd, secondErrors)] {
                    #expect(
                        [.exited(0), .exited(4)].contains(end.ending) && !end.killed,
                        "seed \(seed): round \(round): \(device)'s sync: \(end.ending): \((try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")"
                    )
                }
            }
            for device in [phone, laptop, phone] {
                let run = try await gateway.demo(device, "sync")
                #expect(run.status == 0, "seed \(seed): \(run.errors)")
            }
            for table in [
                "tasks", "achievements", "game_records", "profiles", "user_settings", "active_game", "subscriptions",
                "daily_puzzles",
            ] {
                let server = try await serverRows(gateway, table, of: user)
                let mayBeEmpty = ["tasks", "achievements"].contains(table)
                #expect(server.count > 0 || mayBeEmpty, "seed \(seed): no \(table) rows")
                for (name, device) in [("phone", phone), ("laptop", laptop)] {
                    let local = try jsonRows(try await gateway.show(device, table))
                    #expect(local == server, "seed \(seed): \(name)'s \(table):\n\(local)\nthe server's:\n\(server)")
                }
            }
        }
    }
}

/// Every live row of `table` the user may read, as the server holds it (the client-visible
/// columns, internal ones removed), as JSON objects in key order.
func serverRows(_ gateway: DemoGateway, _ table: String, of user: String) async throws -> NSArray {
    let owned = table == "daily_puzzles" ? "" : "t.user_id = $1 and"
    let rows = try await gateway.rows(
        """
        select coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t) - ferry.internal_columns()::text[]), '[]')::text
        from public.\(table) t where \(owned) not t._deleted
        """, table == "daily_puzzles" ? [] : [user])
    return try jsonRows(try #require(rows.first?.first ?? nil))
}

/// Rows as JSON text, parsed and sorted by their JSON, so that two sides compare as
/// values (5 and 5.0 are one number; key order does not count).
func jsonRows(_ json: String) throws -> NSArray {
    let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [NSDictionary])
    func text(_ row: NSDictionary) -> String {
        String(
            decoding: (try? JSONSerialization.data(withJSONObject: row, options: [.sortedKeys])) ?? Data(),
            as: UTF8.self)
    }
    return rows.sorted { text($0) < text($1) } as NSArray
}

/// The kinds of write `randomEdit` makes: every strategy a client may write.
enum EditKind: CaseIterable {
    case taskUpsert, taskDelete, achievementInsert, achievementDelete, gameRecord, profile, settings, activeGame

    /// One of each strategy: lww (tasks, profiles, settings), insert_only, set, and
    /// device_lock for the device holding the lock.
    static func covering(holdsLock: Bool) -> [EditKind] {
        [.taskUpsert, .achievementInsert, .gameRecord, .profile, .settings] + (holdsLock ? [.activeGame] : [])
    }

    static func random(_ random: inout SeededRandom, holdsLock: Bool) -> EditKind {
        let kinds = holdsLock ? allCases : allCases.filter { $0 != .activeGame }
        return kinds[random.next(below: kinds.count)]
    }
}

/// One random write of `kind` to the puzzle's and the to-do list's tables, as `enqueue` arguments.
func randomEdit(_ random: inout SeededRandom, _ kind: EditKind, device: String, round: Int, edit: Int) -> [String] {
    let task = "t-\(random.next(below: 4))"
    switch kind {
    case .taskUpsert:
        return [
            "tasks", "upsert",
            #"{"id": "\#(task)", "title": "\#(device) \#(round).\#(edit)", "position": \#(random.next(below: 100))}"#,
        ]
    case .taskDelete: return ["tasks", "delete", #"{"id": "\#(task)"}"#]
    case .achievementInsert: return ["achievements", "insert", #"{"achievement_id": "a-\#(random.next(below: 3))"}"#]
    case .achievementDelete: return ["achievements", "delete", #"{"achievement_id": "a-\#(random.next(below: 3))"}"#]
    case .gameRecord:
        return [
            "game_records", "insert",
            #"{"id": "g-\#(device)-\#(round)-\#(edit)", "puzzle_id": "p", "seconds": \#(random.next(below: 600)), "finished_at": "2026-05-01T09:30:00Z"}"#,
        ]
    case .profile: return ["profiles", "upsert", #"{"username": "\#(device)-\#(round)"}"#]
    case .settings:
        return [
            "user_settings", "upsert", #"{"settings": {"sound": \#(random.next(below: 2) == 0), "by": "\#(device)"}}"#,
        ]
    case .activeGame: return ["active_game", "upsert", #"{"slot": "current", "hints": \#(random.next(below: 9))}"#]
    }
}

/// A reproducible random source (SplitMix64): a failing run names its seed.
struct SeededRandom {
    let seed: UInt64
    private var state: UInt64

    init(seed: UInt64) {
        self.seed = seed
        state = seed
    }

    mutating func next(below bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % UInt64(bound))
    }

    /// `items` in an order drawn from this source.
    mutating func shuffled<T>(_ items: [T]) -> [T] {
        var items = items
        for index in items.indices.reversed() where index > 0 { items.swapAt(index, next(below: index + 1)) }
        return items
    }
}
