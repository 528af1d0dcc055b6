import Foundation

/// The local database's rows and tables, as a repository: the synced tables, the
/// outbox, the meta values and the shadows, read and written by SQL and nothing else.
/// What to write is decided elsewhere (``MergePlanner``, ``LocalStore``); every method
/// runs inside the transaction ``LocalStore`` opened.
///
/// Not `Sendable`, and needs not be: the one instance of each store is made in
/// ``LocalStore``'s `init` and sent into its `Mutex`, and the compiler's region checking
/// keeps it there (`withLock` hands it out `inout sending`, and ``LocalStore``'s
/// transactions are `@Sendable` closures, which cannot keep it). So no two threads touch
/// it, or its SQLite connection, at once. One hole the checker has (swiftlang/swift#81274):
/// a `withLock` closure that returns the value itself, or its connection, is not
/// diagnosed; every closure here returns only what it read.
final class StoreState {
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
        enum Kind { case put, write, select, delete }
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

    /// Opens the store's own tables on `connection` (creating them) and reads its copy of the schema.
    init(connection: SQLiteConnection) throws {
        self.connection = connection
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
        tables = [:]
        if let json = try meta("schema"),
            let decoded = try? JSONDecoder().decode([TableSchema].self, from: Data(json.utf8))
        {
            for table in decoded { tables[table.name] = table }
        }
    }

    // MARK: - Meta

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

    // MARK: - Synced tables

    /// Creates `table` as the schema describes it (its columns and primary key).
    func create(_ table: TableSchema) throws {
        let columns = table.columns.map { "\($0.name.quotedIdentifier) \($0.kind.declaration)" }
        let key = table.key.map(\.quotedIdentifier).joined(separator: ", ")
        try connection.execute(
            "create table if not exists \(table.name.quotedIdentifier) (\(columns.joined(separator: ", ")), "
                + "primary key (\(key)))")
        connection.markChanged(table.name)
    }

    /// Drops the table named `name`, if there is one.
    func drop(_ name: String) throws {
        try connection.execute("drop table if exists \(name.quotedIdentifier)")
        connection.markChanged(name)
    }

    /// Deletes every row of the table named `name`.
    func empty(_ name: String) throws {
        try connection.execute("delete from \(name.quotedIdentifier)")
        connection.markChanged(name)
    }

    func columnList(_ table: TableSchema) -> String {
        table.columns.map(\.name.quotedIdentifier).joined(separator: ", ")
    }

    /// A stored row read back as JSON, by the table's columns.
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

    /// The row of `table` under `keyRow`, if there is one.
    func row(in table: TableSchema, keyRow: FerryRow) throws -> FerryRow? {
        let sql = statement(StatementShape(kind: .select, table: table.name)) {
            "select \(columnList(table)) from \(table.name.quotedIdentifier) where \(keyCondition(table))"
        }
        return try connection.query(sql, keyValues(table, keyRow)).first.map { row(table, $0) }
    }

    /// Deletes the row of `table` under `keyRow` (none there: nothing happens).
    func delete(in table: TableSchema, keyRow: FerryRow) throws {
        let sql = statement(StatementShape(kind: .delete, table: table.name)) {
            "delete from \(table.name.quotedIdentifier) where \(keyCondition(table))"
        }
        try connection.query(sql, keyValues(table, keyRow))
    }

    /// Writes a whole row (columns it lacks become NULL), replacing the one under its key.
    func put(_ row: FerryRow, in table: TableSchema) throws {
        let sql = statement(StatementShape(kind: .put, table: table.name)) {
            let placeholders = (1...table.columns.count).map { "?\($0)" }.joined(separator: ", ")
            return
                "insert or replace into \(table.name.quotedIdentifier) (\(columnList(table))) values (\(placeholders))"
        }
        try connection.query(sql, table.columns.map { $0.kind.sqlValue(row[$0.name] ?? .null) })
    }

    /// Makes one of ``MergePlanner``'s writes.
    func make(_ write: RowWrite) throws {
        switch write {
        case .put(let table, let row):
            guard let schema = tables[table] else { return }
            try put(row, in: schema)
        case .remove(let table, let key):
            guard let schema = tables[table] else { return }
            try delete(in: schema, keyRow: key)
        }
    }

    /// An enqueue's local write, in one statement: an upsert (or insert) writes the
    /// columns `body` names over the row, or creates it with the server's constant
    /// defaults for the others; a delete removes it. The same rule as
    /// ``MergePlanner/replay(_:onto:in:owner:)``, made by SQLite so that an enqueue
    /// reads nothing first. Columns the local table does not have are left to the server.
    /// Returns the row as it now stands (nil after a delete).
    func applyLocally(
        _ op: FerryOperation, _ body: FerryRow, in table: TableSchema, owner: String, keyRow: FerryRow
    ) throws -> FerryRow? {
        if op == .delete {
            try delete(in: table, keyRow: keyRow)
            return nil
        }
        var row = body
        if let ownerColumn = table.owner, (row[ownerColumn] ?? .null) == .null { row[ownerColumn] = .string(owner) }
        let included = table.columns.map { row[$0.name] != nil }
        let sql = statement(StatementShape(kind: .write, table: table.name, columns: included)) {
            // A new row takes the defaults of the columns not given; an update leaves them.
            let inserted = zip(table.columns, included).filter { $1 || $0.defaultValue != nil }.map(\.0)
            let names = inserted.map(\.name.quotedIdentifier).joined(separator: ", ")
            let placeholders = (0..<inserted.count).map { "?\($0 + 1)" }.joined(separator: ", ")
            let updates = zip(table.columns, included).filter { $1 && !table.key.contains($0.name) }
                .map { "\($0.0.name.quotedIdentifier) = excluded.\($0.0.name.quotedIdentifier)" }
            let conflict = table.key.map(\.quotedIdentifier).joined(separator: ", ")
            let action = updates.isEmpty ? "do nothing" : "do update set " + updates.joined(separator: ", ")
            return "insert into \(table.name.quotedIdentifier) (\(names)) values (\(placeholders)) "
                + "on conflict (\(conflict)) \(action) returning \(columnList(table))"
        }
        var values: [SQLValue] = []
        values.reserveCapacity(table.columns.count)
        for (column, set) in zip(table.columns, included) where set || column.defaultValue != nil {
            values.append(column.kind.sqlValue(set ? row[column.name] ?? .null : column.defaultValue ?? .null))
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

    // MARK: - Outbox

    /// Adds a mutation; its id is the counter's floor or one past the outbox's last,
    /// whichever is higher: the counter row is written only when the outbox loses rows
    /// (``keepMutationFloor()``), so an enqueue writes no page of it.
    func insertMutation(table: String, op: FerryOperation, body: FerryRow, key: RowKey) throws {
        try connection.query(
            """
            insert into _ferry_outbox (id, table_name, op, body, row_key) values (
                max(coalesce((select max(id) from _ferry_outbox), 0) + 1,
                    coalesce((select cast(value as integer) from _ferry_meta where key = 'next_mutation_id'), 1)),
                ?1, ?2, ?3, ?4)
            """,
            [.text(table), .text(op.rawValue), .text(JSONValue.object(body).jsonText), .text(key.key)])
        notePending(key, 1)
    }

    /// How many mutations wait.
    func outboxCount() throws -> Int {
        guard case .integer(let count)? = try connection.query("select count(*) from _ferry_outbox").first?.first
        else { return 0 }
        return Int(count)
    }

    /// The outbox's mutations, oldest first: all of them, those up to `throughID`, or the
    /// first `limit`.
    func mutations(through throughID: Int64? = nil, limit: Int? = nil) throws -> [PendingMutation] {
        var sql = "select id, table_name, op, body, row_key from _ferry_outbox"
        var parameters: [SQLValue] = []
        if let throughID {
            sql += " where id <= ?1"
            parameters.append(.integer(throughID))
        }
        sql += " order by id"
        if let limit {
            sql += " limit ?\(parameters.count + 1)"
            parameters.append(.integer(Int64(limit)))
        }
        return try connection.query(sql, parameters).compactMap { row in
            guard case .integer(let id) = row[0], case .text(let table) = row[1], case .text(let op) = row[2],
                case .text(let body) = row[3], case .text(let key) = row[4]
            else { return nil }
            return PendingMutation(
                id: id, table: table, op: FerryOperation(rawValue: op) ?? .upsert,
                body: (try? JSONValue(json: Data(body.utf8)))?.objectValue ?? [:], key: key)
        }
    }

    /// The pending mutations of `keys`, oldest first, from one pass over the outbox.
    func mutations(of keys: Set<RowKey>) throws -> [PendingMutation] {
        keys.isEmpty ? [] : try mutations().filter { keys.contains($0.rowKey) }
    }

    /// Removes the mutation `id`; returns its row, nil when it was not there.
    func removeMutation(_ id: Int64) throws -> RowKey? {
        guard
            let row = try connection.query(
                "delete from _ferry_outbox where id = ?1 returning table_name, row_key", [.integer(id)]
            ).first, case .text(let table) = row[0], case .text(let key) = row[1]
        else { return nil }
        let rowKey = RowKey(table: table, key: key)
        notePending(rowKey, -1)
        return rowKey
    }

    // MARK: - Pending counts

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

    // MARK: - Shadows

    /// Before a row's first pending write (the caller checks), keeps the server's version
    /// of it as its shadow (what a rejected write reverts to). No shadow means the server
    /// has no such row (the common case, a new row): one read, which finds nothing.
    func captureShadow(_ table: TableSchema, key: RowKey, keyRow: FerryRow) throws {
        guard let current = try row(in: table, keyRow: keyRow) else { return }
        try setShadow(key, row: current)
    }

    /// The server's version of a row with pending writes (nil: the server has none).
    func shadow(_ key: RowKey) throws -> FerryRow? {
        let shadow = try connection.query(
            "select row from _ferry_shadow where table_name = ?1 and row_key = ?2", [.text(key.table), .text(key.key)]
        ).first?.first
        guard case .text(let json) = shadow else { return nil }
        return (try? JSONValue(json: Data(json.utf8)))?.objectValue
    }

    /// Makes one of ``MergePlanner``'s shadow writes.
    func make(_ write: ShadowWrite) throws {
        switch write {
        case .set(let key, let row): try setShadow(key, row: row)
        case .drop(let key): try dropShadow(key)
        }
    }

    func setShadow(_ key: RowKey, row: FerryRow?) throws {
        try connection.query(
            "insert or replace into _ferry_shadow (table_name, row_key, row) values (?1, ?2, ?3)",
            [.text(key.table), .text(key.key), row.map { .text(JSONValue.object($0).jsonText) } ?? .null])
    }

    func dropShadow(_ key: RowKey) throws {
        try connection.query(
            "delete from _ferry_shadow where table_name = ?1 and row_key = ?2", [.text(key.table), .text(key.key)])
    }

    /// Deletes every shadow.
    func dropShadows() throws { try connection.execute("delete from _ferry_shadow") }
}
