import CSQLite
import Foundation

/// A value SQLite stores in a column or binds to a parameter.
public enum SQLValue: Sendable, Hashable {
    /// SQL NULL.
    case null
    /// A 64-bit integer.
    case integer(Int64)
    /// A double.
    case real(Double)
    /// UTF-8 text.
    case text(String)
    /// Bytes.
    case blob(Data)
}

/// Why SQLite refused: its result code and message.
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    /// SQLite's (extended) result code.
    public let code: Int32
    /// SQLite's message, with the statement when there was one.
    public let message: String

    /// Whether the database was busy (another process held a lock past the busy timeout).
    public var isBusy: Bool { code & 0xff == SQLITE_BUSY || code & 0xff == SQLITE_LOCKED }
    /// Whether a constraint (unique, not null, check) refused the write.
    public var isConstraint: Bool { code & 0xff == SQLITE_CONSTRAINT }

    /// A description for logs: the code and SQLite's message.
    public var description: String { "SQLite error \(code): \(message)" }
}

/// One SQLite connection: prepared statements, transactions, and the tables each
/// committed transaction changed.
///
/// Not thread-safe, and not `Sendable`: one owner at a time (``LocalStore`` keeps it in a
/// `Mutex`). Opened in WAL mode with `synchronous=NORMAL` (a committed transaction
/// survives the app's crash, `kill -9` included; only an OS crash or power loss may lose
/// the last ones) and a busy timeout, so several processes may share the file.
final class SQLiteConnection {
    private let handle: OpaquePointer
    private var statements: [String: OpaquePointer] = [:]
    private let changes = ChangedTables()
    private var depth = 0

    /// Opens (creating it when missing) the database file at `path`.
    init(path: String, busyTimeoutMilliseconds: Int32 = 10_000) throws(SQLiteError) {
        var opened: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let status = sqlite3_open_v2(path, &opened, flags, nil)
        guard status == SQLITE_OK, let opened else {
            let message = opened.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open \(path)"
            sqlite3_close_v2(opened)
            throw SQLiteError(code: status, message: message)
        }
        handle = opened
        sqlite3_extended_result_codes(handle, 1)
        sqlite3_busy_timeout(handle, busyTimeoutMilliseconds)
        let context = Unmanaged.passUnretained(changes).toOpaque()
        // The hook records table names only; observers run after COMMIT returned.
        sqlite3_update_hook(
            handle,
            { context, _, _, table, _ in
                guard let context, let table else { return }
                Unmanaged<ChangedTables>.fromOpaque(context).takeUnretainedValue().names.insert(String(cString: table))
            }, context)
        try execute("pragma journal_mode = wal")
        try execute("pragma synchronous = normal")
        try execute("pragma foreign_keys = on")
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_update_hook(handle, nil, nil)
        sqlite3_close_v2(handle)
    }

    /// Runs `sql` (one or more statements, no parameters), discarding rows.
    func execute(_ sql: String) throws(SQLiteError) {
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &message)
        guard status == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(message)
            throw SQLiteError(code: status, message: "\(text) (in: \(sql.prefix(200)))")
        }
    }

    /// Runs one statement with `parameters` bound to `?1`, `?2`… and returns its rows,
    /// each as its columns' values. The statement is prepared once and cached.
    @discardableResult
    func query(_ sql: String, _ parameters: [SQLValue] = []) throws(SQLiteError) -> [[SQLValue]] {
        var rows: [[SQLValue]] = []
        try each(sql, parameters) { statement in
            let count = sqlite3_column_count(statement)
            rows.append((0..<count).map { Self.column(statement, $0) })
        }
        return rows
    }

    /// The column names `sql` returns (it is prepared, not run).
    func columnNames(_ sql: String) throws(SQLiteError) -> [String] {
        let statement = try prepared(sql)
        return (0..<sqlite3_column_count(statement)).map { String(cString: sqlite3_column_name(statement, $0)) }
    }

    /// Runs one statement, calling `row` for each row with the statement positioned on it.
    func each(
        _ sql: String, _ parameters: [SQLValue], row: (OpaquePointer) throws(SQLiteError) -> Void
    ) throws(SQLiteError) {
        let statement = try prepared(sql)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (index, value) in parameters.enumerated() {
            let position = Int32(index + 1)
            let status: Int32
            switch value {
            case .null: status = sqlite3_bind_null(statement, position)
            case .integer(let integer): status = sqlite3_bind_int64(statement, position, integer)
            case .real(let real): status = sqlite3_bind_double(statement, position, real)
            case .text(let text): status = sqlite3_bind_text(statement, position, text, -1, csqlite_transient())
            case .blob(let data):
                status = data.withUnsafeBytes { bytes in
                    sqlite3_bind_blob64(
                        statement, position, bytes.baseAddress, UInt64(bytes.count), csqlite_transient())
                }
            }
            guard status == SQLITE_OK else { throw error(status, sql) }
        }
        while true {
            let status = sqlite3_step(statement)
            if status == SQLITE_DONE { return }
            guard status == SQLITE_ROW else { throw error(status, sql) }
            try row(statement)
        }
    }

    /// The value of column `index` of the row `statement` is on.
    static func column(_ statement: OpaquePointer, _ index: Int32) -> SQLValue {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, index))
        case SQLITE_TEXT:
            guard let text = sqlite3_column_text(statement, index) else { return .text("") }
            let count = Int(sqlite3_column_bytes(statement, index))
            return .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard let bytes = sqlite3_column_blob(statement, index), count > 0 else { return .blob(Data()) }
            return .blob(Data(bytes: bytes, count: count))
        default: return .null
        }
    }

    /// Runs `body` in one transaction (`BEGIN IMMEDIATE`, so a writer waits for another
    /// process's write up front instead of failing at its first write), committing when
    /// it returns and rolling back when it throws. Nested calls join the outer
    /// transaction. Returns the value of `body` and the tables it changed (empty when it
    /// was nested: the outer call reports them).
    func transaction<T>(_ body: () throws -> T) throws -> (value: T, changed: Set<String>) {
        if depth > 0 {
            depth += 1
            defer { depth -= 1 }
            return (try body(), [])
        }
        // BEGIN and COMMIT as cached statements: an enqueue is short enough that parsing
        // them each time shows.
        try query("begin immediate")
        changes.names.removeAll()
        depth = 1
        do {
            let value = try body()
            depth = 0
            try query("commit")
            let changed = changes.names.union(changes.marked)
            changes.names.removeAll()
            changes.marked.removeAll()
            return (value, changed)
        } catch {
            depth = 0
            try? execute("rollback")
            changes.names.removeAll()
            changes.marked.removeAll()
            throw error
        }
    }

    /// Counts `table` as changed by the current transaction: for changes the update hook
    /// does not see (a `DELETE` without `WHERE` is SQLite's truncate, which calls no hook).
    func markChanged(_ table: String) { changes.marked.insert(table) }

    /// The number of rows the last statement changed.
    var changedRowCount: Int { Int(sqlite3_changes(handle)) }

    private func prepared(_ sql: String) throws(SQLiteError) -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else { throw error(status, sql) }
        // Statements made from table names (schema changes) would grow the cache forever.
        if statements.count > 512 {
            for cached in statements.values { sqlite3_finalize(cached) }
            statements.removeAll()
        }
        statements[sql] = statement
        return statement
    }

    private func error(_ status: Int32, _ sql: String) -> SQLiteError {
        SQLiteError(code: status, message: "\(String(cString: sqlite3_errmsg(handle))) (in: \(sql.prefix(200)))")
    }
}

/// The table names the update hook saw during the current transaction. A class, so the
/// C callback reaches it through an unretained pointer that the connection keeps alive.
private final class ChangedTables {
    var names: Set<String> = []
    var marked: Set<String> = []
}

extension String {
    /// This string as an SQL identifier: double-quoted, inner quotes doubled.
    var quotedIdentifier: String {
        guard utf8.contains(UInt8(ascii: "\"")) else { return "\"" + self + "\"" }
        return "\"" + split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""
    }
}
