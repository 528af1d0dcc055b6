import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// PROTOCOL.md "Push" exactly-once over HTTP on the puzzle example: a batch whose
/// transaction dies inside PostgreSQL applies nothing and, retried, applies once; two
/// devices of one user keep their own `last_mutation_id` while their pushes interleave.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct ExactlyOnceTests {
    @Test func pushKilledMidTransactionAppliesNothingAndItsRetryAppliesOnce() async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let database = server.database
            let device = try await server.signUpAnonymous()
            let first = try await server.pushBatch(
                device, [["id": 1, "table": "profiles", "op": "upsert", "row": ["username": "ana"]]])
            try #require(first.outcomes == ["applied"], "\(first.response)")

            let batch = Self.crashBatch
            let before = try await Self.state(database)

            // Another connection holds the profile row: the push writes the game record and
            // the achievement, then waits on the profile inside its transaction.
            let locker = try await database.database.connect()
            try await locker.execute("begin")
            _ = try await locker.query("select 1 from public.profiles where user_id = $1 for update", [device.userID])

            async let stalled = server.pushBatch(device, Self.crashBatch)
            let pushing = try await database.gatewayBackendWaitingOnALock(running: "ferry.push")
            let pid = try #require(pushing, "the push never waited on the locked profile")
            #expect(try await database.value("select pg_terminate_backend($1::int)", [pid]) == "t")

            let killed = try await stalled
            _ = try await locker.execute("rollback")
            await locker.close()
            #expect(killed.response.status == 503, "\(killed.response)")
            #expect(killed.response.code == "unavailable")
            #expect(killed.response.retryable == true)
            #expect(killed.response.header("Retry-After") == "1")
            #expect(try await Self.state(database) == before, "nothing of the killed batch was applied")

            let retried = try await server.pushBatch(device, batch)
            #expect(retried.response.status == 200, "\(retried.response)")
            #expect(retried.outcomes == ["applied", "applied", "applied"], "\(retried.response)")
            #expect(retried.lastMutationID == 4)
            let replayed = try await server.pushBatch(device, batch)
            #expect(replayed.outcomes == ["duplicate", "duplicate", "duplicate"], "\(replayed.response)")
            #expect(
                try await Self.state(database) == [
                    ["device", device.deviceID, "4"], ["game", "g-1", "300"], ["member", "first_win", "false"],
                    ["profile", "bo", "false"],
                ])
        }
    }

    /// A batch retried after its answer was lost: each duplicate carries what the
    /// mutation first did (`original`), a rejection with its code, per device.
    @Test func aRetriedBatchsDuplicatesCarryTheirOriginalOutcomes() async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let (phone, tablet) = try await server.twoDevices(email: "outcomes@example.com")
            let record = { (id: Int, seconds: Int) -> [String: Any] in
                [
                    "id": id, "table": "game_records", "op": "insert",
                    "row": [
                        "id": "g-1", "puzzle_id": "p-1", "seconds": seconds, "finished_at": "2026-05-01T09:30:00Z",
                    ],
                ]
            }
            let batch = [record(1, 300), record(2, 301), ["id": 3, "table": "nowhere", "op": "upsert", "row": [:]]]
            let first = try await server.pushBatch(phone, batch)
            #expect(first.outcomes == ["applied", "rejected:immutable", "rejected:unknown_table"], "\(first.response)")
            let retried = try await server.pushBatch(phone, batch)
            let results = retried.response.value("results") as? [[String: Any]] ?? []
            #expect(results.map { $0["status"] as? String } == ["duplicate", "duplicate", "duplicate"])
            #expect(results.map { $0["original"] as? String } == ["applied", "rejected", "rejected"])
            #expect(results.map { $0["code"] as? String } == [nil, "immutable", "unknown_table"])
            #expect((results[1]["message"] as? String)?.isEmpty == false, "\(retried.response)")
            // Another device's mutation 2 is its own: applied there, whatever the phone's was.
            let other = try await server.pushBatch(tablet, [record(2, 300)])
            #expect(other.outcomes == ["duplicate"], "the same row again: \(other.response)")
            let otherAgain = try await server.pushBatch(tablet, [record(2, 300)])
            #expect(
                (otherAgain.response.value("results") as? [[String: Any]])?.first?["original"] as? String == "applied")
        }
    }

    @Test func twoDevicesOfOneUserInterleavePushesWithTheirOwnMutationIDs() async throws {
        try await withAccountsGateway(examples: ["puzzle"]) { server in
            let (phone, tablet) = try await server.twoDevices(email: "twice@example.com")
            func record(_ id: Int, _ device: TestSession) -> [String: Any] {
                [
                    "id": id, "table": "game_records", "op": "insert",
                    "row": [
                        "id": "\(device.deviceID)-\(id)", "puzzle_id": "p", "seconds": id,
                        "finished_at": "2026-01-01T00:00:00Z",
                    ],
                ]
            }
            // Both devices start at 1: the ids are per device, not per user.
            let phoneFirst = try await server.pushBatch(phone, [record(1, phone), record(2, phone)])
            let tabletFirst = try await server.pushBatch(tablet, [record(1, tablet)])
            #expect(phoneFirst.outcomes == ["applied", "applied"], "\(phoneFirst.response)")
            #expect(tabletFirst.outcomes == ["applied"], "\(tabletFirst.response)")
            #expect(phoneFirst.lastMutationID == 2 && tabletFirst.lastMutationID == 1)

            // Ten rounds of both devices pushing at once, each sending its next batch and
            // replaying its previous one; every round's new mutations apply once.
            var phoneNext = 3
            var tabletNext = 2
            for round in 0..<10 {
                let phoneBatch = (phoneNext - 2..<phoneNext + 2).map { record($0, phone) }
                let tabletBatch = (tabletNext - 1..<tabletNext + 1 + round % 2).map { record($0, tablet) }
                async let phoneAnswer = server.pushBatch(phone, phoneBatch)
                async let tabletAnswer = server.pushBatch(tablet, tabletBatch)
                let (p, t) = try await (phoneAnswer, tabletAnswer)
                #expect(
                    p.outcomes == ["duplicate", "duplicate", "applied", "applied"], "round \(round): \(p.response)")
                #expect(
                    t.outcomes == ["duplicate"] + Array(repeating: "applied", count: 1 + round % 2),
                    "round \(round): \(t.response)")
                phoneNext += 2
                tabletNext += 1 + round % 2
                #expect(p.lastMutationID == phoneNext - 1 && t.lastMutationID == tabletNext - 1)
            }

            let devices = try await server.database.rows(
                "select device_id, last_mutation_id::text from ferry.devices where user_id = $1 order by 2::int",
                [phone.userID])
            #expect(
                Set(devices.map { $0.compactMap { $0 } })
                    == [[phone.deviceID, String(phoneNext - 1)], [tablet.deviceID, String(tabletNext - 1)]])
            for device in [(phone, phoneNext - 1), (tablet, tabletNext - 1)] {
                let ids = try await server.database.rows(
                    "select seconds::text as n from public.game_records where id like $1 || '-%' order by seconds",
                    [device.0.deviceID])
                #expect(ids == (1...device.1).map { [String($0)] }, "each of \(device.0.deviceID)'s records once")
            }
            // Pull tells each device its own last mutation.
            #expect(try await server.pull(phone).lastMutationID == phoneNext - 1)
            #expect(try await server.pull(tablet).lastMutationID == tabletNext - 1)
        }
    }

    /// A game record and an achievement, then the profile the test holds locked.
    static var crashBatch: [[String: Any]] {
        [
            [
                "id": 2, "table": "game_records", "op": "insert",
                "row": ["id": "g-1", "puzzle_id": "p-1", "seconds": 300, "finished_at": "2026-01-01T00:00:00Z"],
            ],
            ["id": 3, "table": "achievements", "op": "insert", "row": ["achievement_id": "first_win"]],
            ["id": 4, "table": "profiles", "op": "upsert", "row": ["username": "bo"]],
        ]
    }

    /// The rows and device counter the killed push would touch, as the superuser sees them.
    static func state(_ database: AccountsDatabase) async throws -> [[String?]] {
        try await database.rows(
            """
            select 'device', device_id, last_mutation_id::text from ferry.devices
            union all select 'game', id, seconds::text from public.game_records
            union all select 'member', achievement_id, _deleted::text from public.achievements
            union all select 'profile', username, _deleted::text from public.profiles
            order by 1, 2
            """)
    }
}
