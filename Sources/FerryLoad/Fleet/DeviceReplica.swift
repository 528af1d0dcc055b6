import Foundation

/// A synced table as `GET /v1/schema` describes it: enough to key its rows and check their owner.
public struct SyncedTable: Equatable, Sendable {
    /// The table's name.
    public var name: String
    /// Its strategy (`lww`, `insert_only`, `set`, `device_lock`, `shared`, `readonly`).
    public var strategy: String
    /// Its primary key's columns.
    public var key: [String]
    /// Its owner column, nil for `shared`.
    public var owner: String?

    /// Creates a table description.
    public init(name: String, strategy: String, key: [String], owner: String?) {
        self.name = name
        self.strategy = strategy
        self.key = key
        self.owner = owner
    }

    /// Reads a `200` answer of `GET /v1/schema`.
    public static func parseSchema(_ body: some Collection<UInt8>) throws -> [String: SyncedTable] {
        guard let object = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let tables = object["tables"] as? [[String: Any]]
        else { throw FleetProtocolError("schema answer without tables") }
        var result: [String: SyncedTable] = [:]
        for table in tables {
            guard let name = table["name"] as? String, let key = table["key"] as? [String] else {
                throw FleetProtocolError("schema table without name or key")
            }
            result[name] = SyncedTable(
                name: name, strategy: table["strategy"] as? String ?? "", key: key, owner: table["owner"] as? String)
        }
        return result
    }
}

/// An answer the fleet could not read.
public struct FleetProtocolError: Error, CustomStringConvertible {
    public let description: String
    /// The reason, one line.
    public init(_ description: String) { self.description = description }
}

/// A row's identity: its table and its key columns' values, as canonical JSON.
public struct RowKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The table.
    public var table: String
    /// The key columns' values in key order, as a JSON array.
    public var key: String

    /// Creates a key.
    public init(table: String, key: String) {
        self.table = table
        self.key = key
    }

    public var description: String { "\(table)\(key)" }
    public static func < (left: RowKey, right: RowKey) -> Bool { (left.table, left.key) < (right.table, right.key) }
}

/// One pull answer, read: the rows upserted and deleted, the cursor after it.
public struct PullAnswer: Sendable {
    /// `(key, canonical row JSON, owner value)` for every upsert, in answer order.
    public var upserts: [(key: RowKey, row: String, owner: String?)] = []
    /// `(key, owner value)` for every delete.
    public var deletes: [(key: RowKey, owner: String?)] = []
    /// The cursor to pull from next.
    public var cursor: String
    /// Whether to pull again at once.
    public var hasMore: Bool
    /// The highest mutation of the calling device the answer contains.
    public var lastMutationID: Int64

    /// Reads a `200` answer of `GET /v1/pull`, keying rows by `tables`' keys.
    public init(_ body: some Collection<UInt8>, tables: [String: SyncedTable]) throws {
        guard let object = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let changes = object["changes"] as? [String: Any], let cursor = object["cursor"] as? String
        else { throw FleetProtocolError("pull answer without changes or cursor") }
        self.cursor = cursor
        hasMore = object["has_more"] as? Bool ?? false
        lastMutationID = (object["last_mutation_id"] as? NSNumber)?.int64Value ?? 0
        for (name, value) in changes {
            guard let table = tables[name], let change = value as? [String: Any] else {
                throw FleetProtocolError("pull answer names table \(name), not in the schema")
            }
            for row in change["upserts"] as? [[String: Any]] ?? [] {
                upserts.append(
                    (try Self.key(of: row, in: table), try Self.canonical(row), Self.owner(of: row, in: table)))
            }
            for key in change["deletes"] as? [[String: Any]] ?? [] {
                deletes.append((try Self.key(of: key, in: table), Self.owner(of: key, in: table)))
            }
        }
    }

    /// The key of `row` in `table`.
    public static func key(of row: [String: Any], in table: SyncedTable) throws -> RowKey {
        var values: [Any] = []
        for column in table.key {
            guard let value = row[column] else {
                throw FleetProtocolError("\(table.name) row without key column \(column)")
            }
            values.append(value)
        }
        let data = try JSONSerialization.data(withJSONObject: values, options: [.sortedKeys, .fragmentsAllowed])
        return RowKey(table: table.name, key: String(decoding: data, as: UTF8.self))
    }

    /// `row` as JSON with sorted keys: two equal rows give equal text.
    public static func canonical(_ row: [String: Any]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: row, options: [.sortedKeys]), as: UTF8.self)
    }

    private static func owner(of row: [String: Any], in table: SyncedTable) -> String? {
        guard let column = table.owner else { return nil }
        return (row[column] as? String)?.lowercased() ?? "\(row[column] ?? "missing")"
    }
}

/// A device's local copy, built only from its own pulls: rows by key, the cursor, and
/// every row that was not its user's (which must never happen). Plain value, no I/O.
public struct DeviceReplica: Sendable {
    /// The user whose rows the device may read.
    public private(set) var userID: String
    /// The rows held, as canonical JSON.
    public private(set) var rows: [RowKey: String] = [:]
    /// The cursor of the last pull, nil before the first load.
    public private(set) var cursor: String?
    /// Rows (or deletes) of another user that reached this device, described.
    public private(set) var foreignRows: [String] = []
    /// Pull answers merged.
    public private(set) var merges = 0

    /// An empty copy for `userID`.
    public init(userID: String) { self.userID = userID.lowercased() }

    /// Merges one pull answer: upserts replace, deletes remove, the cursor moves on.
    public mutating func merge(_ answer: PullAnswer) {
        for upsert in answer.upserts {
            if let owner = upsert.owner, owner != userID { foreignRows.append("\(upsert.key) owned by \(owner)") }
            rows[upsert.key] = upsert.row
        }
        for delete in answer.deletes {
            if let owner = delete.owner, owner != userID {
                foreignRows.append("delete \(delete.key) owned by \(owner)")
            }
            rows[delete.key] = nil
        }
        cursor = answer.cursor
        merges += 1
    }

    /// Starts over (a `409 cursor_expired`, a `reset: true` sign-in, or a new user on the device).
    public mutating func reset(userID: String? = nil) {
        if let userID { self.userID = userID.lowercased() }
        rows = [:]
        cursor = nil
    }
}
