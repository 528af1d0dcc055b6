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
            gateway.stop()
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

    /// Every `sync` is killed at a random instant of its drain (some before it sends,
    /// some while a push is in flight, some after the server applied it but before the
    /// answer was read); a last sync then empties the outbox. The server holds each
    /// enqueued row once, and the device's mutation ids were each used once.
    @Test func killingSyncMidDrainLosesAndDuplicatesNothing() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            var expected: [String] = []
            for round in 0..<6 {
                for index in 0..<8 {
                    let id = "g-\(round)-\(index)"
                    expected.append(id)
                    try await gateway.demoJSON(
                        device, "enqueue", "game_records", "insert",
                        #"{"id": "\#(id)", "puzzle_id": "p-1", "seconds": \#(round * 10 + index), "finished_at": "2026-05-01T09:30:00Z"}"#
                    )
                }
                let (sync, _, _) = try gateway.startDemo(device, ["sync"])
                try await Task.sleep(for: .milliseconds(Int.random(in: 0...250)))
                sync.send(SIGKILL)
                _ = sync.wait()
            }
            let last = try await gateway.demo(device, "sync")
            #expect(last.status == 0, "\(last.errors)")
            #expect(try await serverIDs(gateway, "game_records", of: user) == expected.sorted())
            let lastMutation = try await gateway.rows(
                "select last_mutation_id::text from ferry.devices where user_id = $1", [user])
            #expect(lastMutation == [["\(expected.count)"]])
            #expect(try await gateway.status(device)["pending_mutations"] as? Int == 0)
            #expect(try shownIDs(try await gateway.show(device, "game_records")) == expected.sorted())
        }
    }

    /// `enqueue` killed at any instant writes its row and its mutation together or not at
    /// all: after a sync the server holds exactly the rows the device shows, each applied
    /// once (the device's last mutation id is their count).
    @Test func killingEnqueueAtAnyInstantLeavesRowAndMutationTogether() async throws {
        try await DemoGateway.with { gateway in
            let device = gateway.device("phone")
            let user = try #require(try await gateway.status(device)["user_id"] as? String)
            for index in 0..<12 {
                let (enqueue, _, _) = try gateway.startDemo(
                    device,
                    [
                        "enqueue", "game_records", "insert",
                        #"{"id": "k-\#(index)", "puzzle_id": "p-1", "seconds": \#(index), "finished_at": "2026-05-01T09:30:00Z"}"#,
                    ])
                try await Task.sleep(for: .milliseconds(Int.random(in: 0...120)))
                enqueue.send(SIGKILL)
                _ = enqueue.wait()
            }
            let shown = try shownIDs(try await gateway.show(device, "game_records"))
            let sync = try await gateway.demo(device, "sync")
            #expect(sync.status == 0, "\(sync.errors)")
            #expect(try await serverIDs(gateway, "game_records", of: user) == shown)
            let lastMutation = try await gateway.rows(
                "select coalesce((select last_mutation_id from ferry.devices where user_id = $1), 0)::text", [user])
            #expect(lastMutation == [["\(shown.count)"]], "shown: \(shown)")
            #expect(try shownIDs(try await gateway.show(device, "game_records")) == shown)
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
            let (watch, output, errors) = try gateway.startDemo(laptop, ["watch", "--seconds", "20"])
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
    /// round, syncing concurrently; the operator writes a `readonly` and a `shared` row
    /// meanwhile. After a last sync of each, both hold the same rows as the server.
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
                    for edit in 0..<4 {
                        let arguments = randomEdit(
                            &random, device: name, round: round, edit: edit, holdsLock: device == phone)
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
                let (first, _, _) = try gateway.startDemo(phone, ["sync"])
                let (second, _, _) = try gateway.startDemo(laptop, ["sync"])
                _ = try await offload { (first.wait(seconds: 60), second.wait(seconds: 60)) }
            }
            for device in [phone, laptop, phone] {
                let run = try await gateway.demo(device, "sync")
                #expect(run.status == 0, "seed \(seed): \(run.errors)")
            }
            for table in [
                "tasks", "achievements", "game_records", "profiles", "user_settings", "active_game", "subscriptions",
                "daily_puzzles",
            ] {
                let onPhone = try await gateway.show(phone, table)
                let onLaptop = try await gateway.show(laptop, table)
                #expect(onPhone == onLaptop, "seed \(seed): \(table)")
            }
            let tasks = try shownIDs(try await gateway.show(phone, "tasks"))
            #expect(tasks == (try await serverIDs(gateway, "tasks", of: user)), "seed \(seed)")
            #expect(try await gateway.show(laptop, "subscriptions").contains(#""plan":"pro""#))
            #expect(try await gateway.show(laptop, "daily_puzzles").contains("2026-05-01"))
        }
    }
}

/// One random write of the puzzle's and the to-do list's tables (every strategy a
/// client may write), as `enqueue` arguments.
func randomEdit(_ random: inout SeededRandom, device: String, round: Int, edit: Int, holdsLock: Bool) -> [String] {
    let task = "t-\(random.next(below: 4))"
    switch random.next(below: holdsLock ? 8 : 7) {
    case 0, 1:
        return [
            "tasks", "upsert",
            #"{"id": "\#(task)", "title": "\#(device) \#(round).\#(edit)", "position": \#(random.next(below: 100))}"#,
        ]
    case 2: return ["tasks", "delete", #"{"id": "\#(task)"}"#]
    case 3: return ["achievements", "insert", #"{"achievement_id": "a-\#(random.next(below: 3))"}"#]
    case 4: return ["achievements", "delete", #"{"achievement_id": "a-\#(random.next(below: 3))"}"#]
    case 5:
        return [
            "game_records", "insert",
            #"{"id": "g-\#(device)-\#(round)-\#(edit)", "puzzle_id": "p", "seconds": \#(random.next(below: 600)), "finished_at": "2026-05-01T09:30:00Z"}"#,
        ]
    case 6:
        return random.next(below: 2) == 0
            ? ["profiles", "upsert", #"{"username": "\#(device)-\#(round)"}"#]
            : [
                "user_settings", "upsert",
                #"{"settings": {"sound": \#(random.next(below: 2) == 0), "by": "\#(device)"}}"#,
            ]
    default: return ["active_game", "upsert", #"{"slot": "current", "hints": \#(random.next(below: 9))}"#]
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
}
