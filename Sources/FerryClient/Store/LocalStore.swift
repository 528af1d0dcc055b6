import Foundation
import Synchronization

/// One account's local database: the synced tables mirrored from `GET /v1/schema`, the
/// outbox, the pull cursor and the server's version of rows with pending writes.
///
/// Every method is synchronous and thread-safe: the repository (``StoreState``) lives in
/// a `Mutex`, and each call is one short SQLite transaction. What a merge or a rejection
/// writes is decided by ``MergePlanner``; this type reads what the planner needs, and
/// makes its writes. Observers hear of each transaction's changed tables once, after it
/// committed.
package final class LocalStore: Sendable {
    /// The database file.
    let path: String
    /// The account whose rows these are: the owner filled into rows and keys.
    let userID: String
    private let state: Mutex<StoreState>
    private let changed: @Sendable (Set<String>) -> Void

    /// Opens (creating) the store at `path` for `userID`; `changed` hears of the synced
    /// tables each committed transaction changed, once per transaction.
    package init(path: String, userID: String, changed: @escaping @Sendable (Set<String>) -> Void) throws {
        self.path = path
        self.userID = userID
        self.changed = changed
        state = Mutex(try StoreState(connection: try SQLiteConnection(path: path)))
    }

    // MARK: - Schema

    /// The synced tables the store mirrors, by name.
    var tables: [String: TableSchema] { state.withLock { $0.tables } }

    /// Mirrors `schema`: creates missing tables, and drops and re-creates a table whose
    /// definition changed. Any change resets the cursor (the next pull is a first load,
    /// with pending writes replayed on top). Returns whether anything changed.
    @discardableResult
    package func apply(schema: [TableSchema]) throws -> Bool {
        try write { state in
            let wanted = Dictionary(
                schema.filter { !$0.name.hasPrefix("_ferry") && !$0.key.isEmpty }.map { ($0.name, $0) },
                uniquingKeysWith: { first, _ in first })
            guard wanted != state.tables else { return false }
            for (name, table) in state.tables where wanted[name] != table { try state.drop(name) }
            for (name, table) in wanted where state.tables[name] != table { try state.create(table) }
            let json = String(
                decoding: try JSONEncoder().encode(wanted.values.sorted { $0.name < $1.name }), as: UTF8.self)
            try state.setMeta("schema", json)
            try state.setMeta("cursor", nil)
            state.tables = wanted
            return true
        }
    }

    // MARK: - Meta

    /// The cursor of the last pull merged (nil before the first load).
    var cursor: String? { (try? state.withLock { try $0.meta("cursor") }) ?? nil }

    /// The next mutation id `enqueue` will use.
    var nextMutationID: Int64 { (try? state.withLock { try $0.nextMutationID() }) ?? 1 }

    /// The time of the last pull that reached the end (`has_more: false`), if any.
    var lastSyncedAt: Date? {
        guard let text = (try? state.withLock { try $0.meta("last_synced_at") }) ?? nil, let seconds = Double(text)
        else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    /// Sets the next mutation id to at least `id` (mutation ids only grow).
    func raiseNextMutationID(to id: Int64) throws {
        try write { state in
            if try state.nextMutationID() < id { try state.setMeta("next_mutation_id", String(id)) }
        }
    }

    // MARK: - Outbox

    /// Writes `row` locally and queues its mutation, in one transaction: after it
    /// returns, a crash at any instant loses neither. Returns the local row as it now
    /// stands (for a delete, the key). The transaction writes the row and one outbox row
    /// (and, before a row's first pending write, its shadow), nothing more.
    @discardableResult
    func enqueue(_ op: FerryOperation, into table: String, _ row: FerryRow) throws -> FerryRow {
        try write { state in
            guard let schema = state.tables[table] else { throw LocalStoreError.unknownTable(table) }
            guard schema.strategy.isWritable else { throw LocalStoreError.readOnlyTable(table) }
            var body = row
            // The owner is the caller; pushing it is optional, and `updated_at` is the server's.
            body.removeValue(forKey: "updated_at")
            let keyRow = try MergePlanner.keyRow(of: body, in: schema, owner: userID)
            let key = RowKey(table: table, key: JSONValue.object(keyRow).jsonText)
            if try state.pendingCount(key) == 0 { try state.captureShadow(schema, key: key, keyRow: keyRow) }
            try state.insertMutation(table: table, op: op, body: body, key: key)
            FaultPoint.reach(.enqueueBetweenMutationAndRow)
            return try state.applyLocally(op, body, in: schema, owner: userID, keyRow: keyRow) ?? keyRow
        }
    }

    /// How many mutations wait in the outbox.
    var pendingCount: Int { (try? state.withLock { try $0.outboxCount() }) ?? 0 }

    /// The oldest pending mutations, at most `limit` of them and about `maxBytes` of push
    /// JSON (at least one, whatever its size).
    func pendingBatch(limit: Int, maxBytes: Int) throws -> [PendingMutation] {
        try state.withLock { state in
            var batch: [PendingMutation] = []
            var bytes = 16
            for mutation in try state.mutations(limit: limit) {
                bytes += JSONValue.object(mutation.body).jsonText.utf8.count + mutation.table.utf8.count + 48
                if !batch.isEmpty && bytes > maxBytes { break }
                batch.append(mutation)
            }
            return batch
        }
    }

    /// Takes answered mutations out of the outbox and rebases their rows (Replicache's
    /// rebase): a row's server version (its shadow) moves past each `applied` write and
    /// stays for each `rejected` one, and a row with a rejection is put back to that
    /// version with its still-pending writes replayed on top
    /// (``MergePlanner/revert(_:shadow:remaining:in:owner:)``). A mutation already gone
    /// from the outbox (another process on the file, or a pull, settled it and rebased
    /// its row) is skipped. One transaction.
    func settle(applied: [PendingMutation], rejected: [PendingMutation]) throws {
        try write { state in
            try state.keepMutationFloor()
            let refused = Set(rejected.map(\.id))
            var removed: [RowKey: [PendingMutation]] = [:]
            for mutation in (applied + rejected).sorted(by: { $0.id < $1.id }) {
                if let key = try state.removeMutation(mutation.id) { removed[key, default: []].append(mutation) }
            }
            let remaining = Dictionary(grouping: try state.mutations(of: Set(removed.keys)), by: \.rowKey)
            for (key, mutations) in removed.sorted(by: { ($0.key.table, $0.key.key) < ($1.key.table, $1.key.key) }) {
                guard let schema = state.tables[key.table] else { continue }
                let left = remaining[key] ?? []
                let anyRefused = mutations.contains { refused.contains($0.id) }
                // Nothing refused and nothing left: the row already is its server version.
                if !anyRefused && left.isEmpty {
                    try state.dropShadow(key)
                    continue
                }
                let shadow = MergePlanner.replay(
                    mutations.filter { !refused.contains($0.id) }, onto: try state.shadow(key), in: schema,
                    owner: userID)
                if anyRefused {
                    try state.make(MergePlanner.revert(key, shadow: shadow, remaining: left, in: schema, owner: userID))
                }
                if left.isEmpty { try state.dropShadow(key) } else { try state.setShadow(key, row: shadow) }
            }
        }
    }

    // MARK: - Pull

    /// Merges one pull page, if the store's cursor is still `startedFrom` (else another
    /// process merged meanwhile, and the page is dropped: returns false). In one
    /// transaction: mutations up to `last_mutation_id` whose rows the page brings leave
    /// the outbox (the page's row is the server's truth for them, a lost push answer
    /// included), the page's rows are written with the pending mutations of the rows it
    /// touched replayed on top (``MergePlanner``), and the cursor moves. A mutation up to
    /// `last_mutation_id` whose row the page does not bring stays queued: whether the
    /// server applied or rejected it, only a push's answer (`duplicate` with its
    /// `original`) tells, and settling it puts its row back (``hasPending(through:)``).
    package func merge(_ page: PullPage, startedFrom: String?, syncedAt: Date) throws -> Bool {
        try write { state in
            guard try state.meta("cursor") == startedFrom else { return false }
            // Only rows with pending writes need their mutations read: none, mostly.
            var acknowledged: [PendingMutation] = []
            var outbox: [PendingMutation] = []
            let pending = try state.pendingKeys()
            if !pending.isEmpty {
                var keys: Set<RowKey> = []
                for (table, changes) in page.changes {
                    guard let schema = state.tables[table] else { continue }
                    for row in changes.upserts + changes.deletes {
                        let key = try MergePlanner.rowKey(of: row, in: schema, owner: nil)
                        if pending[key] != nil { keys.insert(key) }
                    }
                }
                outbox = try state.mutations(of: keys)
                acknowledged = outbox.filter { $0.id <= page.lastMutationID }
            }
            let plan = try MergePlanner.plan(page, tables: state.tables, owner: userID, outbox: outbox)
            try state.keepMutationFloor()
            for mutation in acknowledged { _ = try state.removeMutation(mutation.id) }
            for write in plan.rows { try state.make(write) }
            for write in plan.shadows { try state.make(write) }
            try state.setMeta("cursor", page.cursor)
            if !page.hasMore { try state.setMeta("last_synced_at", String(syncedAt.timeIntervalSince1970)) }
            if try state.nextMutationID() <= page.lastMutationID {
                try state.setMeta("next_mutation_id", String(page.lastMutationID + 1))
            }
            return true
        }
    }

    /// Whether the outbox holds a mutation with an id up to `id`: one the server has
    /// answered (a pull's `last_mutation_id` covers it) whose answer the device has not
    /// had yet; the next push learns it (`duplicate`).
    func hasPending(through id: Int64) -> Bool {
        (try? state.withLock { try !$0.mutations(through: id, limit: 1).isEmpty }) ?? false
    }

    /// Empties the synced tables and the cursor, keeping the outbox (`cursor_expired`:
    /// the next pull is a first load, pending writes replayed on top of it).
    func wipeSyncedTables() throws {
        try write { state in
            for name in state.tables.keys { try state.empty(name) }
            try state.dropShadows()
            try state.setMeta("cursor", nil)
            // The rows go; what the outbox still holds goes back on top at the next merge.
            let pending = Dictionary(grouping: try state.mutations(), by: \.rowKey)
            for (key, mutations) in pending.sorted(by: { ($0.key.table, $0.key.key) < ($1.key.table, $1.key.key) }) {
                guard let schema = state.tables[key.table] else { continue }
                try state.make(MergePlanner.revert(key, shadow: nil, remaining: mutations, in: schema, owner: userID))
            }
        }
    }

    /// How many rows the synced tables hold.
    package var rowCount: Int {
        (try? state.withLock { state in
            try state.tables.keys.reduce(0) { count, name in
                guard
                    case .integer(let rows)? = try state.connection.query(
                        "select count(*) from \(name.quotedIdentifier)"
                    ).first?.first
                else { return count }
                return count + Int(rows)
            }
        }) ?? 0
    }

    // MARK: - Reading

    /// The rows of `table`, optionally filtered by an SQL `condition` with `?1`… parameters, in key order.
    func rows(in table: String, where condition: String? = nil, _ parameters: [SQLValue] = []) throws -> [FerryRow] {
        try state.withLock { state in
            guard let schema = state.tables[table] else { throw LocalStoreError.unknownTable(table) }
            let order = schema.key.map(\.quotedIdentifier).joined(separator: ", ")
            let filter = condition.map { " where \($0)" } ?? ""
            return try state.connection.query(
                "select \(state.columnList(schema)) from \(table.quotedIdentifier)\(filter) order by \(order)",
                parameters
            ).map { state.row(schema, $0) }
        }
    }

    /// Runs a read-only `sql` and returns each row keyed by column name (values as SQLite holds them).
    func query(_ sql: String, _ parameters: [SQLValue]) throws -> [[String: SQLValue]] {
        try state.withLock { state in
            let names = try state.connection.columnNames(sql)
            return try state.connection.query(sql, parameters).map {
                Dictionary(zip(names, $0), uniquingKeysWith: { a, _ in a })
            }
        }
    }

    /// Runs `body` in one transaction on the repository; observers hear of the tables it
    /// changed once it committed. `body` is `@Sendable` so that it holds nothing the
    /// repository could be left in: the compiler then proves the repository stays in the
    /// `Mutex` (a closure that could capture state would merge the repository's region
    /// with the caller's).
    private func write<T: Sendable>(_ body: @Sendable (StoreState) throws -> T) throws -> T {
        let (value, visible) = try state.withLock { state in
            do {
                let (value, changed) = try state.connection.transaction {
                    try state.forgetPendingIfChangedElsewhere()
                    return try body(state)
                }
                return (value, changed.filter { state.tables[$0] != nil })
            } catch {
                state.forgetPending()
                throw error
            }
        }
        if !visible.isEmpty { self.changed(visible) }
        return value
    }
}
