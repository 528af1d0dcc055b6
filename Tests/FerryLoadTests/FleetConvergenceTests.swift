import FerryLoad
import Foundation
import Testing

/// The fleet's socket-free parts: the mix file, the replica's merges, the outbox and the convergence check.
@Suite struct FleetConvergenceTests {
    static let user = "0b6f6d0e-0000-4000-8000-000000000001"
    static let other = "0b6f6d0e-0000-4000-8000-000000000002"
    static let tables: [String: SyncedTable] = [
        "game_records": SyncedTable(
            name: "game_records", strategy: "insert_only", key: ["user_id", "id"], owner: "user_id"),
        "profiles": SyncedTable(name: "profiles", strategy: "lww", key: ["user_id"], owner: "user_id"),
    ]

    static func pull(_ upserts: [[String: Any]], deletes: [[String: Any]] = [], cursor: String = "c1") throws
        -> PullAnswer
    {
        var games: [String: Any] = ["upserts": upserts]
        if !deletes.isEmpty { games["deletes"] = deletes }
        let body: [String: Any] = [
            "changes": ["game_records": games], "cursor": cursor, "has_more": false, "last_mutation_id": 3,
        ]
        return try PullAnswer(Array(try JSONSerialization.data(withJSONObject: body)), tables: tables)
    }

    static func game(_ id: String, user: String = user) -> [String: Any] {
        ["id": id, "user_id": user, "seconds": 10, "updated_at": "2026-12-02T12:00:00Z"]
    }

    /// A device whose pulls gave it g-1 and g-2, and whose pushes were answered for both.
    static func device(rows: [String]) throws -> (DeviceReplica, AcknowledgedWrites) {
        var replica = DeviceReplica(userID: user)
        replica.merge(try pull(rows.map { game($0) }))
        var writes = AcknowledgedWrites()
        for id in ["g-1", "g-2"] {
            let key = try PullAnswer.key(of: game(id), in: tables["game_records"]!)
            writes.record(key, expecting: .present, status: "applied", insertOnly: true)
        }
        return (replica, writes)
    }

    static func fresh(_ pages: [[String]]) throws -> FreshLoad {
        var load = FreshLoad()
        for page in pages { load.add(try pull(page.map { game($0) }), userID: user) }
        return load
    }

    /// What a device and the convergence check retry: a refusal a loaded gateway gives
    /// (its pool's wait queue full: `503`), a `429`, a lost connection; not a final answer.
    /// The check once took a `503` on its fresh first load for a difference.
    @Test func aRefusalOrALostAnswerIsRetriedAndAFinalAnswerIsNot() {
        for status in [500, 502, 503, 504, 429] {
            #expect(HTTPClientOutcome.answered(status: status, body: []).isRetryable, "\(status)")
        }
        for status in [200, 201, 204, 400, 401, 403, 404, 409, 413] {
            #expect(!HTTPClientOutcome.answered(status: status, body: []).isRetryable, "\(status)")
        }
        #expect(HTTPClientOutcome.failed("closed").isRetryable)
        #expect(
            (1...8).map { HTTPClientOutcome.retryDelay(retries: $0) } == [
                200, 400, 800, 1_600, 3_200, 5_000, 5_000, 5_000,
            ])
        #expect(HTTPClientOutcome.retryDelay(retries: 1, jitterMilliseconds: 30) == 230)
    }

    @Test func convergedDeviceHasNoDifferences() throws {
        let (replica, writes) = try Self.device(rows: ["g-1", "g-2"])
        let found = ConvergenceCheck.differences(
            userID: Self.user, fresh: try Self.fresh([["g-1", "g-2"]]), devices: [("d1", replica, writes)])
        #expect(found == [])
    }

    @Test func droppedRowFailsTheCheck() throws {
        // The database lost g-2: the device holds it, and its applied insert is missing.
        let (replica, writes) = try Self.device(rows: ["g-1", "g-2"])
        let found = ConvergenceCheck.differences(
            userID: Self.user, fresh: try Self.fresh([["g-1"]]), devices: [("d1", replica, writes)])
        #expect(found.count == 2)
        #expect(found.contains { $0.contains("which the database does not") })
        #expect(found.contains { $0.contains("not in the database") })
    }

    @Test func rowMissingOnTheDeviceFailsTheCheck() throws {
        let (replica, writes) = try Self.device(rows: ["g-1"])
        let found = ConvergenceCheck.differences(
            userID: Self.user, fresh: try Self.fresh([["g-1", "g-2"]]), devices: [("d1", replica, writes)])
        #expect(found.count == 1)
        #expect(found[0].contains("lacks"))
    }

    @Test func duplicatedRowFailsTheCheck() throws {
        // g-2 twice in the first load (in the database twice): the same rows, yet a failure.
        let (replica, writes) = try Self.device(rows: ["g-1", "g-2"])
        let found = ConvergenceCheck.differences(
            userID: Self.user, fresh: try Self.fresh([["g-1", "g-2"], ["g-2"]]), devices: [("d1", replica, writes)])
        #expect(found.count == 1)
        #expect(found[0].contains("more than once"))
    }

    @Test func insertAppliedTwiceFailsTheCheck() throws {
        var (replica, writes) = try Self.device(rows: ["g-1", "g-2"])
        let key = try PullAnswer.key(of: Self.game("g-1"), in: Self.tables["game_records"]!)
        writes.record(key, expecting: .present, status: "applied", insertOnly: true)
        replica.merge(try Self.pull([]))
        let found = ConvergenceCheck.differences(
            userID: Self.user, fresh: try Self.fresh([["g-1", "g-2"]]), devices: [("d1", replica, writes)])
        #expect(
            found == [
                "user \(Self.user) device d1 was answered applied 2 times for inserting game_records[\"\(Self.user)\",\"g-1\"]"
            ])
    }

    @Test func anotherUsersRowFailsTheCheck() throws {
        var (replica, writes) = try Self.device(rows: ["g-1", "g-2"])
        replica.merge(try Self.pull([Self.game("g-9", user: Self.other)]))
        let found = ConvergenceCheck.differences(
            userID: Self.user, fresh: try Self.fresh([["g-1", "g-2"]]), devices: [("d1", replica, writes)])
        #expect(found.contains { $0.contains("received another user's row") })
    }

    @Test func deleteRemovesTheRowAndAcknowledgedDeleteIsChecked() throws {
        var replica = DeviceReplica(userID: Self.user)
        replica.merge(try Self.pull([Self.game("g-1"), Self.game("g-2")]))
        replica.merge(try Self.pull([], deletes: [["id": "g-2", "user_id": Self.user]], cursor: "c2"))
        #expect(replica.rows.count == 1)
        #expect(replica.cursor == "c2")
        var writes = AcknowledgedWrites()
        let key = try PullAnswer.key(of: Self.game("g-1"), in: Self.tables["game_records"]!)
        writes.record(key, expecting: .absent, status: "applied", insertOnly: false)
        let found = ConvergenceCheck.differences(
            userID: Self.user, fresh: try Self.fresh([["g-1"]]), devices: [("d1", replica, writes)])
        #expect(found.count == 1)
        #expect(found[0].contains("still in the database"))
    }

    @Test func rejectedWritesExpectNothing() throws {
        var writes = AcknowledgedWrites()
        writes.record(RowKey(table: "t", key: "[1]"), expecting: .present, status: "rejected", insertOnly: true)
        #expect(writes.expectations.isEmpty)
    }

    @Test func outboxNumbersMutationsAndKeysThemByOwner() throws {
        var outbox = DeviceOutbox(tag: "d7", userID: Self.user.uppercased())
        var random = SystemRandomNumberGenerator()
        let batch = try outbox.makePush(
            count: 3, operations: [.init(.gameRecordInsert, 1), .init(.activeGameUpdate, 1)], tables: Self.tables,
            holdsLock: false, using: &random)
        #expect(batch.map(\.id) == [1, 2, 3])
        #expect(batch.allSatisfy { $0.key.table == "game_records" && $0.insertOnly && $0.expectation == .present })
        #expect(batch[0].key.key == "[\"\(Self.user)\",\"g-d7-1\"]")
        let body = DeviceOutbox.body(batch)
        let object = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
        #expect((object?["mutations"] as? [Any])?.count == 3)
        outbox.record(batch, results: [(1, "applied"), (2, "duplicate"), (3, "rejected")])
        #expect(outbox.writes.expectations.count == 2)
    }

    @Test func mixFileTakesDefaultsForMissingFields() throws {
        let mix = try FleetMix(json: Data(#"{"app": "tasks", "devices": 50}"#.utf8))
        #expect(mix.devices == 50)
        #expect(mix.operations == FleetMix.tasks.operations)
        #expect(throws: FleetMixError.self) { try FleetMix(json: Data(#"{"devicez": 5}"#.utf8)) }
        #expect(throws: FleetMixError.self) {
            try FleetMix(
                json: Data(#"{"app": "tasks", "operations": [{"value": "profile_upsert", "weight": 1}]}"#.utf8))
        }
    }

    @Test func defaultMixesRoundTripThroughJSON() throws {
        for mix in [FleetMix.puzzle, FleetMix.tasks] {
            #expect(try FleetMix(json: JSONEncoder().encode(mix)) == mix)
        }
    }
}
