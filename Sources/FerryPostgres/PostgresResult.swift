/// The rows and command tag of one statement, in text format. A value: Sendable, copied freely.
///
/// Every cell of a result lives in one byte buffer (one allocation per result, not per
/// value); ``subscript(_:_:)-(Int,Int)`` decodes a `String` on access and ``bytes(_:_:)``
/// hands the raw bytes, so a JSON body built by PostgreSQL is forwarded without a
/// `String` round trip.
public struct PostgresResult: Sendable, Equatable {
    /// One cell's place in ``storage``; a negative length is SQL NULL.
    struct Cell: Sendable, Equatable {
        var start: Int32
        var length: Int32
    }

    /// The column names, in order.
    public let columns: [String]
    /// The command tag (`SELECT 3`, `INSERT 0 1`, `CREATE TABLE`, …).
    public let commandTag: String
    /// The number of rows.
    public let count: Int
    let storage: [UInt8]
    let cells: [Cell]

    /// Builds a result from text values (tests, and callers that assemble results).
    public init(columns: [String], rows: [[String?]], commandTag: String) {
        var storage: [UInt8] = []
        var cells: [Cell] = []
        for row in rows {
            precondition(row.count == columns.count, "every row needs one value per column")
            for value in row {
                if let value {
                    cells.append(Cell(start: Int32(storage.count), length: Int32(value.utf8.count)))
                    storage.append(contentsOf: value.utf8)
                } else {
                    cells.append(Cell(start: 0, length: -1))
                }
            }
        }
        self.init(columns: columns, count: rows.count, storage: storage, cells: cells, commandTag: commandTag)
    }

    init(columns: [String], count: Int, storage: [UInt8], cells: [Cell], commandTag: String) {
        self.columns = columns
        self.count = count
        self.storage = storage
        self.cells = cells
        self.commandTag = commandTag
    }

    /// The rows affected or returned, from the command tag (`UPDATE 4` → 4); nil for
    /// commands that report none (`CREATE TABLE`).
    public var affectedRows: Int? {
        guard let last = commandTag.split(separator: " ").last, let number = Int(last) else { return nil }
        return number
    }

    /// The rows, each a view into this result.
    public var rows: [PostgresRow] { (0..<count).map { PostgresRow(result: self, index: $0) } }

    /// The row at `index`.
    public subscript(row index: Int) -> PostgresRow { PostgresRow(result: self, index: index) }

    /// The position of the column named `name`, or nil.
    public func columnIndex(_ name: String) -> Int? { columns.firstIndex(of: name) }

    /// The value at `row`, `column` as text; nil for SQL NULL. Traps on an index out of range.
    public subscript(_ row: Int, _ column: Int) -> String? {
        let cell = self.cell(row, column)
        guard cell.length >= 0 else { return nil }
        return String(decoding: storage[Int(cell.start)..<Int(cell.start + cell.length)], as: UTF8.self)
    }

    /// The value at `row` in the column named `column`; nil for SQL NULL or an unknown column.
    public subscript(_ row: Int, _ column: String) -> String? {
        guard let index = columnIndex(column) else { return nil }
        return self[row, index]
    }

    /// The raw bytes of the value at `row`, `column` (the server's text encoding, UTF-8);
    /// nil for SQL NULL. Costs one copy of the value, no decoding.
    public func bytes(_ row: Int, _ column: Int) -> [UInt8]? {
        let cell = self.cell(row, column)
        guard cell.length >= 0 else { return nil }
        return Array(storage[Int(cell.start)..<Int(cell.start + cell.length)])
    }

    /// Calls `body` with the bytes of the value at `row`, `column` without copying them
    /// (nil for SQL NULL). The buffer is valid only during the call.
    public func withBytes<R>(_ row: Int, _ column: Int, _ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        let cell = self.cell(row, column)
        guard cell.length >= 0 else { return try body(nil) }
        return try storage.withUnsafeBytes { all in
            try body(UnsafeRawBufferPointer(rebasing: all[Int(cell.start)..<Int(cell.start + cell.length)]))
        }
    }

    /// Whether the value at `row`, `column` is SQL NULL.
    public func isNull(_ row: Int, _ column: Int) -> Bool { cell(row, column).length < 0 }

    private func cell(_ row: Int, _ column: Int) -> Cell {
        precondition(row >= 0 && row < count, "row \(row) out of range (\(count) rows)")
        precondition(column >= 0 && column < columns.count, "column \(column) out of range (\(columns.count) columns)")
        return cells[row * columns.count + column]
    }
}

/// One row of a ``PostgresResult``.
public struct PostgresRow: Sendable {
    /// The result the row belongs to.
    public let result: PostgresResult
    /// The row's position in the result.
    public let index: Int

    /// The value in column `column` as text; nil for SQL NULL.
    public subscript(_ column: Int) -> String? { result[index, column] }
    /// The value in the column named `column`; nil for SQL NULL or an unknown column.
    public subscript(_ column: String) -> String? { result[index, column] }
    /// The values as text, in column order.
    public var values: [String?] { (0..<result.columns.count).map { result[index, $0] } }
}
