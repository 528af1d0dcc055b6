/// A write a merge makes to one local row.
enum RowWrite: Sendable, Equatable {
    /// The row, whole (a column it lacks becomes NULL): the server's version, or that
    /// version with the row's pending writes on top.
    case put(table: String, row: FerryRow)
    /// No row under this key: the server deleted it, or a pending delete stands.
    case remove(table: String, key: FerryRow)
}

/// What becomes of a row's shadow: the server's version of a row with pending writes,
/// which a rejected write reverts to.
enum ShadowWrite: Sendable, Equatable {
    /// The server's version is now `row` (nil: the server has no such row).
    case set(RowKey, row: FerryRow?)
    /// The row has no pending writes any more: its shadow goes.
    case drop(RowKey)
}

/// The writes one pull page makes to the local store, in order.
struct MergePlan: Sendable, Equatable {
    var rows: [RowWrite] = []
    var shadows: [ShadowWrite] = []
}

/// The client's conflict rule, as pure functions of values: what a pull page does to the
/// local rows, given the writes still pending, and what a row is once its pending writes
/// are replayed on the server's version.
///
/// The rule is the same for every strategy, because the server has applied the
/// strategy's own rule (last write, immutability, membership, the lock) before a row
/// reaches a pull: a pulled row is the server's truth, and a write the server has not
/// answered yet stays visible on top of it until it has (an answer, or a page whose
/// `last_mutation_id` covers it). A rejected write is undone by ``revert(_:shadow:remaining:in:owner:)``.
enum MergePlanner {
    /// The writes that merge `page`, given `outbox`: the pending mutations of the rows
    /// the page touches and of the mutations it acknowledges (more may be given; those
    /// with ids up to the page's `last_mutation_id` count as acknowledged, whatever order
    /// they come in). Rows of tables not in `tables` are skipped.
    static func plan(
        _ page: PullPage, tables: [String: TableSchema], owner: String, outbox: [PendingMutation]
    ) throws -> MergePlan {
        var pending: [RowKey: [PendingMutation]] = [:]
        var acknowledged: Set<RowKey> = []
        for mutation in outbox {
            if mutation.id <= page.lastMutationID {
                acknowledged.insert(mutation.rowKey)
            } else {
                pending[mutation.rowKey, default: []].append(mutation)
            }
        }
        var plan = MergePlan()
        for (table, changes) in page.changes.sorted(by: { $0.key < $1.key }) {
            guard let schema = tables[table] else { continue }
            for row in changes.upserts {
                let key = try rowKey(of: row, in: schema, owner: nil)
                if let writes = pending[key] {
                    plan.shadows.append(.set(key, row: row))
                    plan.rows.append(write(replay(writes, onto: row, in: schema, owner: owner), key: key, in: schema))
                } else {
                    plan.rows.append(.put(table: table, row: row))
                }
            }
            for deleted in changes.deletes {
                let key = try rowKey(of: deleted, in: schema, owner: nil)
                if let writes = pending[key] {
                    plan.shadows.append(.set(key, row: nil))
                    plan.rows.append(write(replay(writes, onto: nil, in: schema, owner: owner), key: key, in: schema))
                } else {
                    plan.rows.append(.remove(table: table, key: try keyRow(of: deleted, in: schema, owner: nil)))
                }
            }
        }
        for key in acknowledged.sorted(by: { ($0.table, $0.key) < ($1.table, $1.key) }) where pending[key] == nil {
            plan.shadows.append(.drop(key))
        }
        return plan
    }

    /// The write that puts a row whose write was rejected back: the server's version
    /// (`shadow`, nil when the server has none) with the row's `remaining` pending writes on top.
    static func revert(
        _ key: RowKey, shadow: FerryRow?, remaining: [PendingMutation], in table: TableSchema, owner: String
    ) -> RowWrite {
        write(replay(remaining, onto: shadow, in: table, owner: owner), key: key, in: table)
    }

    /// `row` with `mutations` applied in id order: a delete removes the row, an insert or
    /// upsert writes the columns it names over it (creating it, with the server's
    /// constant defaults and the owner, when there is none). Columns the table does not
    /// have are left to the server. nil: no row.
    static func replay(
        _ mutations: [PendingMutation], onto row: FerryRow?, in table: TableSchema, owner: String
    ) -> FerryRow? {
        var row = row
        for mutation in mutations.sorted(by: { $0.id < $1.id }) {
            switch mutation.op {
            case .delete: row = nil
            case .insert, .upsert: row = written(mutation.body, over: row, in: table, owner: owner)
            }
        }
        return row
    }

    /// `body`'s columns written over `row`, or over a new row when there is none.
    static func written(_ body: FerryRow, over row: FerryRow?, in table: TableSchema, owner: String) -> FerryRow {
        var result = row ?? newRow(in: table, owner: owner)
        for column in table.columns {
            if let value = body[column.name] { result[column.name] = value }
        }
        if let ownerColumn = table.owner, (result[ownerColumn] ?? .null) == .null {
            result[ownerColumn] = .string(owner)
        }
        return result
    }

    /// A row no write has named a column of yet: the server's constant defaults and the owner.
    static func newRow(in table: TableSchema, owner: String) -> FerryRow {
        var row: FerryRow = [:]
        for column in table.columns { if let value = column.defaultValue { row[column.name] = value } }
        if let ownerColumn = table.owner { row[ownerColumn] = .string(owner) }
        return row
    }

    private static func write(_ row: FerryRow?, key: RowKey, in table: TableSchema) -> RowWrite {
        if let row { return .put(table: table.name, row: row) }
        return .remove(table: table.name, key: key.columns)
    }

    // MARK: - Keys

    /// The row `row` is in `table`: its key columns as JSON text, the owner filled in
    /// with `owner` when the row leaves it out.
    static func rowKey(of row: FerryRow, in table: TableSchema, owner: String?) throws -> RowKey {
        RowKey(table: table.name, key: JSONValue.object(try keyRow(of: row, in: table, owner: owner)).jsonText)
    }

    /// The key columns of `row` in `table`, the owner filled in with `owner` when the row
    /// leaves it out; throws ``LocalStoreError/missingKey(table:column:)`` when one is missing.
    static func keyRow(of row: FerryRow, in table: TableSchema, owner: String?) throws -> FerryRow {
        var key: FerryRow = [:]
        for column in table.key {
            if let value = row[column], value != .null {
                key[column] = value
            } else if column == table.owner, let owner {
                key[column] = .string(owner)
            } else {
                throw LocalStoreError.missingKey(table: table.name, column: column)
            }
        }
        return key
    }
}
