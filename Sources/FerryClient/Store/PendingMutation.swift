import Foundation

/// A write the app made that the server has not acknowledged yet: one outbox row.
struct PendingMutation: Sendable, Hashable {
    /// The device's mutation number (push's `id`).
    var id: Int64
    var table: String
    var op: FerryOperation
    /// `row` for insert and upsert, `key` for delete, as push sends it.
    var body: FerryRow
    /// The full local key (owner included), as JSON text: which local row it changes.
    var key: String

    /// The local row it changes.
    var rowKey: RowKey { RowKey(table: table, key: key) }

    /// The mutation as push's JSON.
    var pushJSON: JSONValue {
        var object: FerryRow = ["id": .integer(id), "table": .string(table), "op": .string(op.rawValue)]
        object[op == .delete ? "key" : "row"] = .object(body)
        return .object(object)
    }
}

/// A row of a table, by its key's JSON text (key columns sorted, owner included).
struct RowKey: Hashable, Sendable {
    var table: String
    var key: String

    /// The key's columns.
    var columns: FerryRow { (try? JSONValue(json: Data(key.utf8)))?.objectValue ?? [:] }
}
