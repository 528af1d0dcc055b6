/// What a device was told about one of its mutations, kept for the convergence check.
public enum RowExpectation: Equatable, Sendable {
    /// The row must be in the database (an `applied` or `duplicate` insert or upsert).
    case present
    /// The row must not be (an acknowledged delete, the device's last word on the key).
    case absent
}

/// The acknowledged writes of one device whose keys only that device writes (its game
/// records, its tasks), in mutation order, and how often each was answered `applied`.
/// Keys that several devices of a user write (a profile, a set's member) are left out:
/// their final state depends on the other device's timing.
public struct AcknowledgedWrites: Sendable {
    /// The device's last acknowledged word on each key.
    public private(set) var expectations: [RowKey: RowExpectation] = [:]
    /// How many times each insert-only key was answered `applied` (more than once breaks exactly-once).
    public private(set) var appliedInserts: [RowKey: Int] = [:]

    /// No writes yet.
    public init() {}

    /// Records an answer `status` (`applied`, `duplicate`, `rejected`) for a write to `key`.
    public mutating func record(_ key: RowKey, expecting expectation: RowExpectation, status: String, insertOnly: Bool)
    {
        guard status == "applied" || status == "duplicate" else { return }
        expectations[key] = expectation
        if insertOnly && status == "applied" { appliedInserts[key, default: 0] += 1 }
    }
}

/// A user's rows as a fresh first load returned them, page after page: the rows and any
/// key answered twice (a row in the database twice, or a page that repeated one).
public struct FreshLoad: Sendable {
    /// The rows by key.
    public private(set) var rows: [RowKey: String] = [:]
    /// Keys that came more than once.
    public private(set) var repeated: [RowKey] = []
    /// Rows of another user in the load.
    public private(set) var foreignRows: [String] = []

    /// Nothing loaded yet.
    public init() {}

    /// Adds one page of the load, for `userID`.
    public mutating func add(_ answer: PullAnswer, userID: String) {
        let user = userID.lowercased()
        for upsert in answer.upserts {
            if rows.updateValue(upsert.row, forKey: upsert.key) != nil { repeated.append(upsert.key) }
            if let owner = upsert.owner, owner != user { foreignRows.append("\(upsert.key) owned by \(owner)") }
        }
        // A later page may delete a row an earlier one sent (it changed between the pages).
        for delete in answer.deletes {
            rows[delete.key] = nil
            if let owner = delete.owner, owner != user { foreignRows.append("delete \(delete.key) owned by \(owner)") }
        }
    }
}

/// The convergence check of one user: each device's copy against a fresh first load,
/// each acknowledged write against it, nothing foreign anywhere. Plain value, no I/O.
public struct ConvergenceCheck: Sendable {
    /// One difference, printed as it is.
    public typealias Difference = String

    /// Every difference found for `userID`: empty when the user converged.
    public static func differences(
        userID: String, fresh: FreshLoad, devices: [(name: String, replica: DeviceReplica, writes: AcknowledgedWrites)]
    ) -> [Difference] {
        var found: [Difference] = []
        let user = "user \(userID)"
        for key in fresh.repeated { found.append("\(user): \(key) is in the first load more than once") }
        for row in fresh.foreignRows { found.append("\(user): first load has another user's row \(row)") }
        for device in devices {
            let name = "\(user) device \(device.name)"
            for row in device.replica.foreignRows { found.append("\(name) received another user's row \(row)") }
            for (key, row) in fresh.rows.sorted(by: { $0.key < $1.key }) {
                switch device.replica.rows[key] {
                case nil: found.append("\(name) lacks \(key) = \(row)")
                case let held? where held != row: found.append("\(name) holds \(key) = \(held), the database \(row)")
                default: break
                }
            }
            for key in device.replica.rows.keys.sorted() where fresh.rows[key] == nil {
                found.append("\(name) holds \(key), which the database does not")
            }
            for (key, expectation) in device.writes.expectations.sorted(by: { $0.key < $1.key }) {
                switch (expectation, fresh.rows[key] != nil) {
                case (.present, false):
                    found.append("\(name) was answered applied/duplicate for \(key), not in the database")
                case (.absent, true):
                    found.append("\(name) was answered applied for deleting \(key), still in the database")
                default: break
                }
            }
            for (key, times) in device.writes.appliedInserts.sorted(by: { $0.key < $1.key }) where times > 1 {
                found.append("\(name) was answered applied \(times) times for inserting \(key)")
            }
        }
        return found
    }
}
