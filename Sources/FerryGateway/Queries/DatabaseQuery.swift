import FerryPostgres
import Foundation

/// One call of a `ferry.*` function the gateway makes: its statement (prepared name and
/// SQL, written here and nowhere else), its parameters, and its answer, read from the
/// result by column name. Routes build a query and read its ``Answer``; they never see
/// SQL or a column position.
///
/// A result whose columns are not exactly ``columns`` (renamed, missing, added,
/// reordered) fails with ``QueryShapeError`` instead of being read: a `500` and an error
/// in the log, never a value from the wrong column. `QueryShapeTests` checks every
/// query's SQL against its ``columns`` on a migrated database, so a mismatch is a test
/// failure before it is a request's.
protocol DatabaseQuery {
    /// What the gateway reads from the result.
    associatedtype Answer

    /// The name the statement is prepared under, once per connection (one name, one SQL),
    /// or nil for an unnamed statement.
    static var preparedName: String? { get }
    /// The one statement.
    static var sql: String { get }
    /// The result's column names, in the select list's order.
    static var columns: [String] { get }
    /// The parameters in text format (`$1`, `$2`, …); nil is SQL NULL.
    var parameters: [String?] { get }

    /// Reads the answer from a result whose columns are ``columns``.
    static func answer(from rows: QueryRows) throws(QueryShapeError) -> Answer
}

extension DatabaseQuery {
    /// The statement to send.
    var statement: PostgresStatement { PostgresStatement(Self.sql, parameters, preparedName: Self.preparedName) }

    /// The answer in `result`, once its columns are checked against ``columns``.
    ///
    /// The check is one comparison of a few short names per result (the result's names are
    /// built per result anyway); the reads then find each name among those few.
    static func decode(_ result: PostgresResult) throws(QueryShapeError) -> Answer {
        guard result.columns == columns else {
            throw QueryShapeError(query: logName, problem: .columns(expected: columns, found: result.columns))
        }
        return try answer(from: QueryRows(result: result, query: Self.self))
    }

    /// The answer of a statement's outcome, or why there is none.
    static func decode(_ outcome: Result<PostgresResult, PostgresError>) -> Result<Answer, QueryFailure> {
        switch outcome {
        case .success(let result):
            do throws(QueryShapeError) {
                return .success(try decode(result))
            } catch {
                return .failure(.shape(error))
            }
        case .failure(let error):
            return .failure(.database(error))
        }
    }

    /// The statement's name in logs and errors: its prepared name, else its SQL.
    static var logName: String { preparedName ?? sql }
}

/// A query whose answer is its result's one row.
protocol SingleRowQuery: DatabaseQuery where Answer: QueryRowDecodable {}

extension SingleRowQuery {
    static func answer(from rows: QueryRows) throws(QueryShapeError) -> Answer {
        try Answer(rows.single())
    }
}

/// A value read from one row of a query's result.
protocol QueryRowDecodable {
    init(_ row: QueryRow) throws(QueryShapeError)
}

/// Why a query has no answer: the database failed, or answered in a shape the query does
/// not read.
enum QueryFailure: Error, CustomStringConvertible {
    case database(PostgresError)
    case shape(QueryShapeError)

    var description: String {
        switch self {
        case .database(let error): error.description
        case .shape(let error): error.description
        }
    }
}

/// A result that is not what its query reads: the SQL and the Swift disagree (a bug, found
/// by the tests), or the database runs functions of another version.
struct QueryShapeError: Error, Equatable, CustomStringConvertible {
    /// The query's name (``DatabaseQuery/logName``).
    let query: String
    let problem: Problem

    enum Problem: Equatable {
        /// The result's columns are not the query's.
        case columns(expected: [String], found: [String])
        /// A read names a column the result does not have.
        case missingColumn(String, columns: [String])
        /// A column that must hold a value is NULL.
        case null(column: String)
        /// A column's text is not the type read (the value is not kept: it may be secret).
        case unreadable(column: String, type: String)
        /// The result has another number of rows than the query answers.
        case rows(expected: String, found: Int)
    }

    var description: String {
        switch problem {
        case .columns(let expected, let found):
            "\(query): the result's columns are \(found), the query reads \(expected)"
        case .missingColumn(let column, let columns):
            "\(query): no column \(column) in the result (columns \(columns))"
        case .null(let column):
            "\(query): column \(column) is null"
        case .unreadable(let column, let type):
            "\(query): column \(column) is not a \(type)"
        case .rows(let expected, let found):
            "\(query): \(found) rows, expected \(expected)"
        }
    }
}

/// The rows of a query's result, each read by column name.
struct QueryRows {
    fileprivate let result: PostgresResult
    /// Named in errors only (its ``DatabaseQuery/logName``): a metatype costs no copy of a
    /// string on the way that does not fail.
    fileprivate let query: any DatabaseQuery.Type

    /// The number of rows.
    var count: Int { result.count }

    /// Every row, in order.
    var all: [QueryRow] { (0..<result.count).map { QueryRow(rows: self, index: $0) } }

    /// The one row of a result that must have exactly one.
    func single() throws(QueryShapeError) -> QueryRow {
        guard result.count == 1 else { throw error(.rows(expected: "1", found: result.count)) }
        return QueryRow(rows: self, index: 0)
    }

    /// The first row of a result that must have at least one.
    func first() throws(QueryShapeError) -> QueryRow {
        guard result.count >= 1 else { throw error(.rows(expected: "1 or more", found: 0)) }
        return QueryRow(rows: self, index: 0)
    }

    fileprivate func error(_ problem: QueryShapeError.Problem) -> QueryShapeError {
        QueryShapeError(query: query.logName, problem: problem)
    }
}

/// One row of a query's result, its values read by column name.
struct QueryRow {
    fileprivate let rows: QueryRows
    fileprivate let index: Int

    /// The value of `column` as `Value`; NULL or text that is not a `Value` throws.
    func decode<Value: ColumnValue>(_ column: String, as type: Value.Type = Value.self) throws(QueryShapeError)
        -> Value
    {
        guard let value = try decodeIfPresent(column, as: type) else { throw rows.error(.null(column: column)) }
        return value
    }

    /// The value of `column` as `Value`, nil for NULL; text that is not a `Value` throws.
    func decodeIfPresent<Value: ColumnValue>(_ column: String, as type: Value.Type = Value.self)
        throws(QueryShapeError) -> Value?
    {
        guard let text = rows.result[index, try position(of: column)] else { return nil }
        guard let value = Value(columnText: text) else {
            throw rows.error(.unreadable(column: column, type: "\(Value.self)"))
        }
        return value
    }

    /// The bytes of `column` as PostgreSQL sent them (JSON it built, forwarded without a
    /// `String`); NULL throws.
    func bytes(_ column: String) throws(QueryShapeError) -> [UInt8] {
        guard let bytes = try bytesIfPresent(column) else { throw rows.error(.null(column: column)) }
        return bytes
    }

    /// The bytes of `column` as PostgreSQL sent them, nil for NULL.
    func bytesIfPresent(_ column: String) throws(QueryShapeError) -> [UInt8]? {
        rows.result.bytes(index, try position(of: column))
    }

    /// The error for `column`, whose text the caller could not read as `type`.
    func unreadable(_ column: String, as type: String) -> QueryShapeError {
        rows.error(.unreadable(column: column, type: type))
    }

    private func position(of column: String) throws(QueryShapeError) -> Int {
        guard let position = rows.result.columnIndex(column) else {
            throw rows.error(.missingColumn(column, columns: rows.result.columns))
        }
        return position
    }
}

/// A Swift type a column's text reads as.
protocol ColumnValue {
    /// The value of PostgreSQL's text form, nil when `columnText` is not one.
    init?(columnText: String)
}

extension String: ColumnValue {
    init?(columnText: String) { self = columnText }
}

extension Int: ColumnValue {
    init?(columnText: String) { self.init(columnText) }
}

extension Bool: ColumnValue {
    /// `t` or `f`, as PostgreSQL writes a boolean.
    init?(columnText: String) {
        switch columnText {
        case "t": self = true
        case "f": self = false
        default: return nil
        }
    }
}

extension UUID: ColumnValue {
    init?(columnText: String) { self.init(uuidString: columnText) }
}
