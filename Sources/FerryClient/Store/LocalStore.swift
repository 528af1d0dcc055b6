import Foundation
import Synchronization

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

    /// The mutation as push's JSON.
    var pushJSON: JSONValue {
        var object: FerryRow = ["id": .integer(id), "table": .string(table), "op": .string(op.rawValue)]
        object[op == .delete ? "key" : "row"] = .object(body)
        return .object(object)
    }
}

/// The kinds of write a mutation makes (push's `op`).
public enum FerryOperation: String, Sendable, Hashable, Codable {
    /// A new row; the same row again is a no-op, a different one under its key is rejected.
    case insert
    /// Insert, or update only the columns given (a merge write).
    case upsert
    /// Delete by key (a tombstone on the server).
    case delete
}

/// One page of `GET /v1/pull`.
package struct PullPage: Sendable {
    package struct TableChanges: Sendable {
        package var upserts: [FerryRow] = []
        package var deletes: [FerryRow] = []
    }
    package var changes: [String: TableChanges]
    package var cursor: String
    package var hasMore: Bool
    package var lastMutationID: Int64

    /// Reads a pull answer; nil when it has not the protocol's shape.
    package init?(json: JSONValue) {
        guard let cursor = json["cursor"]?.stringValue, case .bool(let hasMore)? = json["has_more"] else { return nil }
        self.cursor = cursor
        self.hasMore = hasMore
        lastMutationID = json["last_mutation_id"]?.integerValue ?? 0
        var changes: [String: TableChanges] = [:]
        for (table, value) in json["changes"]?.objectValue ?? [:] {
            changes[table] = TableChanges(
                upserts: value["upserts"]?.arrayValue?.compactMap(\.objectValue) ?? [],
                deletes: value["deletes"]?.arrayValue?.compactMap(\.objectValue) ?? [])
        }
        self.changes = changes
    }
}

/// Why the local store refused a call.
public enum LocalStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No synced table has this name (the schema has not listed it).
    case unknownTable(String)
    /// The table's strategy takes no writes from clients (`readonly`, `shared`).
    case readOnlyTable(String)
    /// A key column is missing from the row or key.
    case missingKey(table: String, column: String)
    /// A write the local store cannot make (a column it does not have, a local constraint).
    case invalidRow(String)

    public var description: String {
        switch self {
        case .unknownTable(let table): "no synced table named \(table)"
        case .readOnlyTable(let table): "\(table) is read-only for clients"
        case .missingKey(let table, let column): "the key of \(table) needs \(column)"
        case .invalidRow(let message): message
        }
    }
}

/// One account's local database: the synced tables mirrored from `GET /v1/schema`, the
/// outbox, the pull cursor and the server's version of rows with pending writes.
///
/// Every method is synchronous and thread-safe: the connection lives in a `Mutex`, and
/// each call is one short SQLite transaction. Observers hear of each transaction's
/// changed tables once, after it committed.
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
        let connection = try SQLiteConnection(path: path)
        try connection.execute(
            """
            create table if not exists _ferry_meta (key text primary key, value text);
            create table if not exists _ferry_outbox (
                id integer primary key, table_name text not null, op text not null, body text not null,
                row_key text not null);
            drop index if exists _ferry_outbox_key;
            create table if not exists _ferry_shadow (
                table_name text not null, row_key text not null, row text, primary key (table_name, row_key));
            insert or ignore into _ferry_meta (key, value) values ('next_mutation_id', '1');
            """)
        var tables: [String: TableSchema] = [:]
        if let text = try connection.query("select value from _ferry_meta where key = 'schema'").first?.first,
            case .text(let json) = text, let data = json.data(using: .utf8),
            let decoded = try? JSONDecoder().decode([TableSchema].self, from: data)
        {
            for table in decoded { tables[table.name] = table }
        }
        state = Mutex(StoreState(connection: connection, tables: tables))
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
            for (name, table) in state.tables where wanted[name] != table {
                try state.connection.execute("drop table if exists \(name.quotedIdentifier)")
                state.connection.markChanged(name)
            }
            for (name, table) in wanted where state.tables[name] != table {
                let columns = table.columns.map { "\($0.name.quotedIdentifier) \($0.kind.declaration)" }
                let key = table.key.map(\.quotedIdentifier).joined(separator: ", ")
                try state.connection.execute(
                    "create table if not exists \(name.quotedIdentifier) (\(columns.joined(separator: ", ")), "
                        + "primary key (\(key)))")
                state.connection.markChanged(name)
            }
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
    /// stands (for a delete, the key).
    @discardableResult
    func enqueue(_ op: FerryOperation, into table: String, _ row: FerryRow) throws -> FerryRow {
        try write { state in
            guard let schema = state.tables[table] else { throw LocalStoreError.unknownTable(table) }
            guard schema.strategy.isWritable else { throw LocalStoreError.readOnlyTable(table) }
            var body = row
            // The owner is the caller; pushing it is optional, and `updated_at` is the server's.
            body.removeValue(forKey: "updated_at")
            let keyRow = try state.keyRow(of: body, in: schema, owner: userID)
            let key = JSONValue.object(keyRow).jsonText
            let rowKey = RowKey(table: table, key: key)
            if try state.pendingCount(rowKey) == 0 { try state.captureShadow(schema, key: key, keyRow: keyRow) }
            // The id is the counter's floor or one past the outbox's last, whichever is
            // higher: the counter row is written only when the outbox loses rows
            // (keepMutationFloor), so an enqueue writes no page of it.
            try state.connection.query(
                """
                insert into _ferry_outbox (id, table_name, op, body, row_key) values (
                    max(coalesce((select max(id) from _ferry_outbox), 0) + 1,
                        coalesce((select cast(value as integer) from _ferry_meta where key = 'next_mutation_id'), 1)),
                    ?1, ?2, ?3, ?4)
                """,
                [.text(table), .text(op.rawValue), .text(JSONValue.object(body).jsonText), .text(key)])
            state.notePending(rowKey, 1)
            return try state.applyLocally(op, body, in: schema, owner: userID, keyRow: keyRow) ?? keyRow
        }
    }

    /// How many mutations wait in the outbox.
    var pendingCount: Int {
        (try? state.withLock { state in
            guard
                case .integer(let count)? = try state.connection.query("select count(*) from _ferry_outbox").first?
                    .first
            else { return 0 }
            return Int(count)
        }) ?? 0
    }

    /// The oldest pending mutations, at most `limit` of them and about `maxBytes` of push
    /// JSON (at least one, whatever its size).
    func pendingBatch(limit: Int, maxBytes: Int) throws -> [PendingMutation] {
        try state.withLock { state in
            var batch: [PendingMutation] = []
            var bytes = 16
            for row in try state.connection.query(
                "select id, table_name, op, body, row_key from _ferry_outbox order by id limit ?1",
                [.integer(Int64(limit))])
            {
                guard case .integer(let id) = row[0], case .text(let table) = row[1], case .text(let op) = row[2],
                    case .text(let body) = row[3], case .text(let key) = row[4]
                else { continue }
                let mutation = PendingMutation(
                    id: id, table: table, op: FerryOperation(rawValue: op) ?? .upsert,
                    body: (try? JSONValue(json: Data(body.utf8)))?.objectValue ?? [:], key: key)
                bytes += body.utf8.count + table.utf8.count + 48
                if !batch.isEmpty && bytes > maxBytes { break }
                batch.append(mutation)
            }
            return batch
        }
    }

    /// Removes acknowledged mutations (`applied`, `duplicate`) and, for each `rejected`
    /// one, puts its row back as the server has it with the key's other pending writes
    /// replayed on top. One transaction.
    func settle(acknowledged: [Int64], rejected: [Int64]) throws {
        try write { state in
            var keys: Set<RowKey> = []
            try state.keepMutationFloor()
            for id in acknowledged + rejected {
                guard let key = try state.outboxKey(id) else { continue }
                keys.insert(key)
                try state.connection.query("delete from _ferry_outbox where id = ?1", [.integer(id)])
                state.notePending(key, -1)
            }
            let remaining = rejected.isEmpty ? [:] : try state.pendingMutations(of: keys)
            for key in keys {
                guard let schema = state.tables[key.table] else { continue }
                if !rejected.isEmpty {
                    try state.restoreShadow(schema, key: key.key, owner: userID)
                    state.replay(remaining[key] ?? [], in: schema, owner: userID)
                }
                try state.dropShadowIfSettled(key)
            }
        }
    }

    // MARK: - Pull

    /// Merges one pull page, if the store's cursor is still `startedFrom` (else another
    /// process merged meanwhile, and the page is dropped: returns false). In one
    /// transaction: mutations up to `last_mutation_id` leave the outbox (acknowledged, a
    /// lost push answer included), the page's rows are written, pending mutations of the
    /// rows it touched are replayed on top, and the cursor moves.
    package func merge(_ page: PullPage, startedFrom: String?, syncedAt: Date) throws -> Bool {
        try write { state in
            guard try state.meta("cursor") == startedFrom else { return false }
            var acknowledged: Set<RowKey> = []
            for row in try state.connection.query(
                "select table_name, row_key from _ferry_outbox where id <= ?1", [.integer(page.lastMutationID)])
            {
                if case .text(let table) = row[0], case .text(let key) = row[1] {
                    let key = RowKey(table: table, key: key)
                    acknowledged.insert(key)
                    state.notePending(key, -1)
                }
            }
            try state.keepMutationFloor()
            try state.connection.query("delete from _ferry_outbox where id <= ?1", [.integer(page.lastMutationID)])
            // Only rows with pending writes need their shadow kept and their writes replayed.
            let pending = Set(try state.pendingKeys().keys)
            var touched: Set<RowKey> = []
            for (table, changes) in page.changes {
                guard let schema = state.tables[table] else { continue }
                for row in changes.upserts {
                    try state.upsertWhole(row, in: schema)
                    guard !pending.isEmpty else { continue }
                    let key = RowKey(table: table, key: try state.key(of: row, in: schema, owner: nil))
                    if pending.contains(key) {
                        try state.updateShadow(table: table, key: key.key, row: row)
                        touched.insert(key)
                    }
                }
                for deleted in changes.deletes {
                    let key = RowKey(table: table, key: try state.key(of: deleted, in: schema, owner: nil))
                    try state.delete(in: schema, key: key.key)
                    if pending.contains(key) {
                        try state.updateShadow(table: table, key: key.key, row: nil)
                        touched.insert(key)
                    }
                }
            }
            let replays = touched.isEmpty ? [:] : try state.pendingMutations(of: touched)
            for key in touched {
                guard let schema = state.tables[key.table] else { continue }
                state.replay(replays[key] ?? [], in: schema, owner: userID)
            }
            for key in acknowledged { try state.dropShadowIfSettled(key) }
            try state.setMeta("cursor", page.cursor)
            if !page.hasMore { try state.setMeta("last_synced_at", String(syncedAt.timeIntervalSince1970)) }
            if try state.nextMutationID() <= page.lastMutationID {
                try state.setMeta("next_mutation_id", String(page.lastMutationID + 1))
            }
            return true
        }
    }

    /// Empties the synced tables and the cursor, keeping the outbox (`cursor_expired`:
    /// the next pull is a first load, pending writes replayed on top of it).
    func wipeSyncedTables() throws {
        try write { state in
            for name in state.tables.keys {
                try state.connection.execute("delete from \(name.quotedIdentifier)")
                state.connection.markChanged(name)
            }
            try state.connection.execute("delete from _ferry_shadow")
            try state.setMeta("cursor", nil)
            // The rows go; what the outbox still holds goes back on top at the next merge.
            for mutation in try state.allPending() {
                guard let schema = state.tables[mutation.table] else { continue }
                try state.applyLocally(mutation.op, mutation.body, in: schema, owner: userID)
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

    private func write<T: Sendable>(_ body: (StoreState) throws -> T) throws -> T {
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

/// A row of a table, by its key's JSON text.
struct RowKey: Hashable, Sendable {
    var table: String
    var key: String
}

/// The connection and what the store knows of the schema.
///
/// `@unchecked Sendable` because it is confined by hand, not by the compiler: the one
/// instance of each store is made in `LocalStore.init`, moved into its `Mutex`, and
/// reached only inside `withLock`, whose closures (and the non-escaping bodies `write`
/// hands it to) never keep it. So no two threads touch it, or its SQLite connection, at once.
final class StoreState: @unchecked Sendable {
    let connection: SQLiteConnection
    var tables: [String: TableSchema] { didSet { statementSQL.removeAll() } }
    /// How many outbox mutations each row has, counted in memory so the outbox needs no
    /// index by row (one more page every enqueue's transaction would write). nil: not
    /// known; read from the outbox at the next use. Valid while no other connection (another
    /// process on the file) committed since `pendingVersion` (SQLite's data_version).
    private var pending: [RowKey: Int]?
    private var pendingVersion: Int64 = 0
    /// The SQL of local writes and reads, made once per table and the columns they name.
    private var statementSQL: [StatementShape: String] = [:]

    private struct StatementShape: Hashable {
        enum Kind { case upsertWhole, write, select, delete }
        var kind: Kind
        var table: String
        /// For `write`: which of the table's columns it sets.
        var columns: [Bool] = []
    }

    private func statement(_ shape: StatementShape, _ make: () -> String) -> String {
        if let cached = statementSQL[shape] { return cached }
        let sql = make()
        // Shapes come from the app's rows: a bound on how many are kept.
        if statementSQL.count > 256 { statementSQL.removeAll() }
        statementSQL[shape] = sql
        return sql
    }

    init(connection: SQLiteConnection, tables: [String: TableSchema]) {
        self.connection = connection
        self.tables = tables
    }

    func meta(_ key: String) throws -> String? {
        guard
            case .text(let value)? = try connection.query("select value from _ferry_meta where key = ?1", [.text(key)])
                .first?.first
        else { return nil }
        return value
    }

    func setMeta(_ key: String, _ value: String?) throws {
        if let value {
            try connection.query(
                "insert into _ferry_meta (key, value) values (?1, ?2) on conflict (key) do update set value = excluded.value",
                [.text(key), .text(value)])
        } else {
            try connection.query("delete from _ferry_meta where key = ?1", [.text(key)])
        }
    }

    /// The id the next enqueue takes: the counter's floor, or one past the outbox's last
    /// mutation when that is higher.
    func nextMutationID() throws -> Int64 {
        let next = try connection.query(
            """
            select max(coalesce((select max(id) from _ferry_outbox), 0) + 1,
                coalesce((select cast(value as integer) from _ferry_meta where key = 'next_mutation_id'), 1))
            """)
        guard case .integer(let id)? = next.first?.first else { return 1 }
        return id
    }

    /// Raises the counter's floor past the outbox's last mutation: called before any
    /// mutation leaves the outbox, so an id is never taken twice, across restarts too.
    func keepMutationFloor() throws {
        try connection.query(
            """
            update _ferry_meta set value = cast(max(cast(value as integer),
                coalesce((select max(id) from _ferry_outbox), 0) + 1) as text)
            where key = 'next_mutation_id'
            """)
    }

    /// The key of `row` in `table` as JSON text of the key columns, the owner filled in
    /// with `owner` when the row leaves it out.
    func key(of row: FerryRow, in table: TableSchema, owner: String?) throws -> String {
        JSONValue.object(try keyRow(of: row, in: table, owner: owner)).jsonText
    }

    /// The key columns of `row` in `table`, the owner filled in with `owner` when the row
    /// leaves it out.
    func keyRow(of row: FerryRow, in table: TableSchema, owner: String?) throws -> FerryRow {
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

    func keyColumns(of key: String) -> FerryRow { (try? JSONValue(json: Data(key.utf8)))?.objectValue ?? [:] }

    func columnList(_ table: TableSchema) -> String {
        table.columns.map(\.name.quotedIdentifier).joined(separator: ", ")
    }

    func row(_ table: TableSchema, _ values: [SQLValue]) -> FerryRow {
        var row: FerryRow = [:]
        row.reserveCapacity(table.columns.count)
        for (column, value) in zip(table.columns, values) { row[column.name] = column.kind.jsonValue(value) }
        return row
    }

    /// `key = ?1 and …`: the condition on a table's key columns, bound to ``keyValues(_:_:)``.
    private func keyCondition(_ table: TableSchema) -> String {
        table.key.enumerated().map { "\($1.quotedIdentifier) = ?\($0 + 1)" }.joined(separator: " and ")
    }

    private func keyValues(_ table: TableSchema, _ key: FerryRow) -> [SQLValue] {
        table.key.map { column in (table.column(column)?.kind ?? .text).sqlValue(key[column] ?? .null) }
    }

    func row(in table: TableSchema, key: String) throws -> FerryRow? {
        try row(in: table, keyRow: keyColumns(of: key))
    }

    func row(in table: TableSchema, keyRow: FerryRow) throws -> FerryRow? {
        let sql = statement(StatementShape(kind: .select, table: table.name)) {
            "select \(columnList(table)) from \(table.name.quotedIdentifier) where \(keyCondition(table))"
        }
        return try connection.query(sql, keyValues(table, keyRow)).first.map { row(table, $0) }
    }

    func delete(in table: TableSchema, key: String) throws {
        try delete(in: table, keyRow: keyColumns(of: key))
    }

    func delete(in table: TableSchema, keyRow: FerryRow) throws {
        let sql = statement(StatementShape(kind: .delete, table: table.name)) {
            "delete from \(table.name.quotedIdentifier) where \(keyCondition(table))"
        }
        try connection.query(sql, keyValues(table, keyRow))
    }

    /// Before a row's first pending write (the caller checks), keeps the server's version of it as its shadow
    /// (what a rejected write reverts to). No shadow means the server has no such row (the
    /// common case, a new row): one read, which finds nothing.
    func captureShadow(_ table: TableSchema, key: String, keyRow: FerryRow) throws {
        guard let current = try row(in: table, keyRow: keyRow) else { return }
        try connection.query(
            "insert or replace into _ferry_shadow (table_name, row_key, row) values (?1, ?2, ?3)",
            [.text(table.name), .text(key), .text(JSONValue.object(current).jsonText)])
    }

    /// Writes a whole row as pull sent it (columns it lacks become NULL).
    func upsertWhole(_ row: FerryRow, in table: TableSchema) throws {
        let sql = statement(StatementShape(kind: .upsertWhole, table: table.name)) {
            let placeholders = (1...table.columns.count).map { "?\($0)" }.joined(separator: ", ")
            return
                "insert or replace into \(table.name.quotedIdentifier) (\(columnList(table))) values (\(placeholders))"
        }
        try connection.query(sql, table.columns.map { $0.kind.sqlValue(row[$0.name] ?? .null) })
    }

    /// The local effect of a mutation: an upsert (or insert) writes the columns it names
    /// over the row (creating it), a delete removes it. Columns the local table does not
    /// have are left to the server, which decides about them.
    /// Returns the row as it now stands (nil after a delete).
    /// `keyRow`: the key of `body`, when the caller has it already.
    @discardableResult
    func applyLocally(
        _ op: FerryOperation, _ body: FerryRow, in table: TableSchema, owner: String, keyRow: FerryRow? = nil
    ) throws -> FerryRow? {
        let keyRow = try keyRow ?? self.keyRow(of: body, in: table, owner: owner)
        if op == .delete {
            try delete(in: table, keyRow: keyRow)
            return nil
        }
        var row = body
        if let ownerColumn = table.owner, row[ownerColumn] == nil || row[ownerColumn] == .null {
            row[ownerColumn] = .string(owner)
        }
        let included = table.columns.map { row[$0.name] != nil }
        let sql = statement(StatementShape(kind: .write, table: table.name, columns: included)) {
            let columns = zip(table.columns, included).filter(\.1).map(\.0)
            let names = columns.map(\.name.quotedIdentifier).joined(separator: ", ")
            let placeholders = (0..<columns.count).map { "?\($0 + 1)" }.joined(separator: ", ")
            let updates = columns.filter { !table.key.contains($0.name) }
                .map { "\($0.name.quotedIdentifier) = excluded.\($0.name.quotedIdentifier)" }
            let conflict = table.key.map(\.quotedIdentifier).joined(separator: ", ")
            let action = updates.isEmpty ? "do nothing" : "do update set " + updates.joined(separator: ", ")
            return "insert into \(table.name.quotedIdentifier) (\(names)) values (\(placeholders)) "
                + "on conflict (\(conflict)) \(action) returning \(columnList(table))"
        }
        var values: [SQLValue] = []
        values.reserveCapacity(table.columns.count)
        for (column, set) in zip(table.columns, included) where set {
            values.append(column.kind.sqlValue(row[column.name] ?? .null))
        }
        do {
            let written = try connection.query(sql, values)
            if let values = written.first { return self.row(table, values) }
            return try self.row(in: table, keyRow: keyRow)
        } catch {
            if let failure = error as? SQLiteError, failure.isConstraint {
                throw LocalStoreError.invalidRow(failure.message)
            }
            throw error
        }
    }

    /// The rows with pending writes, and how many each has.
    func pendingKeys() throws -> [RowKey: Int] {
        if let pending { return pending }
        var counts: [RowKey: Int] = [:]
        for row in try connection.query("select table_name, row_key from _ferry_outbox") {
            if case .text(let table) = row[0], case .text(let key) = row[1] {
                counts[RowKey(table: table, key: key), default: 0] += 1
            }
        }
        pending = counts
        pendingVersion = try dataVersion()
        return counts
    }

    func pendingCount(_ key: RowKey) throws -> Int { try pendingKeys()[key] ?? 0 }

    /// Counts `change` more (or fewer) mutations of `key` in the outbox, in step with the
    /// statement that just added (or removed) them.
    func notePending(_ key: RowKey, _ change: Int) {
        guard pending != nil else { return }
        let count = (pending?[key] ?? 0) + change
        pending?[key] = count > 0 ? count : nil
    }

    /// At the start of a transaction: the counts go when another connection wrote the file since.
    func forgetPendingIfChangedElsewhere() throws {
        if pending != nil, try dataVersion() != pendingVersion { pending = nil }
    }

    /// After a rollback, the counts may describe writes that did not happen.
    func forgetPending() { pending = nil }

    /// Changes when another connection commits to the file (never for this one's own commits).
    private func dataVersion() throws -> Int64 {
        guard case .integer(let version)? = try connection.query("pragma data_version").first?.first else { return 0 }
        return version
    }

    func outboxKey(_ id: Int64) throws -> RowKey? {
        guard
            let row = try connection.query(
                "select table_name, row_key from _ferry_outbox where id = ?1", [.integer(id)]
            )
            .first, case .text(let table) = row[0], case .text(let key) = row[1]
        else { return nil }
        return RowKey(table: table, key: key)
    }

    /// The pending mutations of `keys`, oldest first, from one pass over the outbox.
    func pendingMutations(of keys: Set<RowKey>) throws -> [RowKey: [PendingMutation]] {
        var found: [RowKey: [PendingMutation]] = [:]
        for mutation in try allPending() {
            let key = RowKey(table: mutation.table, key: mutation.key)
            if keys.contains(key) { found[key, default: []].append(mutation) }
        }
        return found
    }

    func allPending() throws -> [PendingMutation] {
        let rows = try connection.query("select id, table_name, op, body, row_key from _ferry_outbox order by id")
        return rows.compactMap { row in
            guard case .integer(let id) = row[0], case .text(let table) = row[1], case .text(let op) = row[2],
                case .text(let body) = row[3], case .text(let key) = row[4]
            else { return nil }
            return PendingMutation(
                id: id, table: table, op: FerryOperation(rawValue: op) ?? .upsert,
                body: (try? JSONValue(json: Data(body.utf8)))?.objectValue ?? [:], key: key)
        }
    }

    /// Re-applies the pending mutations of one row, oldest first. One that the local
    /// table refuses (a local constraint) is skipped and stays pending: the server decides.
    func replay(_ mutations: [PendingMutation], in table: TableSchema, owner: String) {
        for mutation in mutations {
            _ = try? applyLocally(mutation.op, mutation.body, in: table, owner: owner)
        }
    }

    /// A pulled version of a row with pending writes becomes its server version.
    func updateShadow(table: String, key: String, row: FerryRow?) throws {
        try connection.query(
            "insert or replace into _ferry_shadow (table_name, row_key, row) values (?1, ?2, ?3)",
            [.text(table), .text(key), row.map { .text(JSONValue.object($0).jsonText) } ?? .null])
    }

    /// Puts the server's version of a row back (or removes the row when the server has none).
    func restoreShadow(_ table: TableSchema, key: String, owner: String) throws {
        let shadow = try connection.query(
            "select row from _ferry_shadow where table_name = ?1 and row_key = ?2", [.text(table.name), .text(key)]
        ).first?.first
        try delete(in: table, key: key)
        if case .text(let json) = shadow, let row = (try? JSONValue(json: Data(json.utf8)))?.objectValue {
            try upsertWhole(row, in: table)
        }
    }

    func dropShadowIfSettled(_ key: RowKey) throws {
        if try pendingCount(key) == 0 {
            try connection.query(
                "delete from _ferry_shadow where table_name = ?1 and row_key = ?2", [.text(key.table), .text(key.key)])
        }
    }
}
