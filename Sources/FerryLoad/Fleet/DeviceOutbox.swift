import Foundation

/// One mutation a device pushes, with what the convergence check learns from its answer.
public struct OutboxMutation: Sendable {
    /// The device's mutation number.
    public var id: Int64
    /// The mutation as the push body carries it, JSON.
    public var json: String
    /// The row it writes.
    public var key: RowKey
    /// What an `applied` or `duplicate` answer means, when only this device writes the key.
    public var expectation: RowExpectation?
    /// Whether the table is insert-only (a second `applied` breaks exactly-once).
    public var insertOnly: Bool
}

/// A device's outbox: makes the next push from the mix, numbers its mutations, and
/// records their answers. Plain value, no I/O; the fleet's device holds one.
public struct DeviceOutbox: Sendable {
    /// The device's tag in the ids it makes (`g-<tag>-<n>`, `t-<tag>-<n>`), unique in the fleet.
    public let tag: String
    /// The user the device writes as.
    public private(set) var userID: String
    /// The next mutation number; starts above any the server holds for the device.
    public private(set) var nextID: Int64 = 1
    /// What the answers said, for the check.
    public private(set) var writes = AcknowledgedWrites()
    /// The device's own tasks now alive (tasks app).
    public private(set) var liveTasks: [String] = []
    private var made = 0

    /// An outbox for the device `tag` of `userID`.
    public init(tag: String, userID: String) {
        self.tag = tag
        self.userID = userID.lowercased()
    }

    /// A new user on the device (a sign-in into another account): ids go on rising, the check restarts.
    public mutating func switchUser(to userID: String) {
        self.userID = userID.lowercased()
        writes = AcknowledgedWrites()
        liveTasks = []
    }

    /// The next push: `count` mutations of kinds drawn from `operations`; `holdsLock`
    /// says whether `active_game` may be written (otherwise a game record is written).
    public mutating func makePush<R: RandomNumberGenerator>(
        count: Int, operations: [Weighted<FleetOperation>], tables: [String: SyncedTable], holdsLock: Bool,
        using random: inout R
    ) throws -> [OutboxMutation] {
        var batch: [OutboxMutation] = []
        for _ in 0..<count {
            var operation: FleetOperation = operations.pick(using: &random)
            if operation == .activeGameUpdate && !holdsLock { operation = .gameRecordInsert }
            if operation == .taskDelete && liveTasks.isEmpty { operation = .taskUpsert }
            batch.append(try make(operation, tables: tables, using: &random))
        }
        return batch
    }

    /// The push body of `batch`.
    public static func body(_ batch: [OutboxMutation]) -> String {
        "{\"mutations\":[" + batch.map(\.json).joined(separator: ",") + "]}"
    }

    /// Records a push's answer: `(id, status)` for each result.
    public mutating func record(_ batch: [OutboxMutation], results: [(id: Int64, status: String)]) {
        let byID = Dictionary(results.map { ($0.id, $0.status) }, uniquingKeysWith: { first, _ in first })
        for mutation in batch {
            guard let status = byID[mutation.id], let expectation = mutation.expectation else { continue }
            writes.record(mutation.key, expecting: expectation, status: status, insertOnly: mutation.insertOnly)
        }
    }

    private mutating func make<R: RandomNumberGenerator>(
        _ operation: FleetOperation, tables: [String: SyncedTable], using random: inout R
    ) throws -> OutboxMutation {
        made += 1
        let id = nextID
        nextID += 1
        let n = made
        var table: String
        var op = "upsert"
        var row: [String: Any]
        var expectation: RowExpectation?
        switch operation {
        case .profileUpsert:
            table = "profiles"
            row = ["username": "u-\(tag)-\(n)"]
        case .settingsUpsert:
            table = "user_settings"
            row = ["settings": ["sound": Bool.random(using: &random), "theme": "t\(n % 5)"]]
        case .gameRecordInsert:
            table = "game_records"
            op = "insert"
            row = [
                "id": "g-\(tag)-\(n)", "puzzle_id": "p-\(Int.random(in: 0..<500, using: &random))",
                "seconds": Int.random(in: 30..<3600, using: &random), "finished_at": "2026-12-02T12:00:00Z",
            ]
            expectation = .present
        case .achievementAdd, .achievementRemove:
            table = "achievements"
            let member = "a-\(Int.random(in: 0..<20, using: &random))"
            op = operation == .achievementAdd ? "insert" : "delete"
            row = ["achievement_id": member]
        case .activeGameUpdate:
            table = "active_game"
            row = [
                "slot": "current", "puzzle_id": "p-\(n % 500)", "hints": n % 10, "elapsed_seconds": n,
            ]
        case .taskUpsert:
            table = "tasks"
            let taskID: String
            if !liveTasks.isEmpty && Bool.random(using: &random) {
                taskID = liveTasks.randomElement(using: &random)!
            } else {
                taskID = "t-\(tag)-\(n)"
                liveTasks.append(taskID)
            }
            row = ["id": taskID, "title": "task \(n)", "position": Double(n)]
            expectation = .present
        case .taskDelete:
            table = "tasks"
            op = "delete"
            let index = Int.random(in: 0..<liveTasks.count, using: &random)
            row = ["id": liveTasks.remove(at: index)]
            expectation = .absent
        }
        guard let shape = tables[table] else { throw FleetProtocolError("the gateway's schema has no \(table)") }
        var keyed = row
        if let owner = shape.owner { keyed[owner] = userID }
        let key = try PullAnswer.key(of: keyed, in: shape)
        let field = op == "delete" ? "key" : "row"
        let payload = String(
            decoding: try JSONSerialization.data(withJSONObject: row, options: [.sortedKeys]), as: UTF8.self)
        let json = "{\"id\":\(id),\"table\":\"\(table)\",\"op\":\"\(op)\",\"\(field)\":\(payload)}"
        return OutboxMutation(
            id: id, json: json, key: key, expectation: expectation, insertOnly: shape.strategy == "insert_only")
    }
}
