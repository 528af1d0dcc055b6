import Foundation

/// What a storm device waits for (`ferry-load storm`): `rows` distinct rows (by their
/// `id` column) of `table` whose `column` holds `value`, seen in the device's pull answers.
public struct ExpectedChange: Sendable, Equatable {
    /// The table as the pull answer names it.
    public var table: String
    /// The column whose value marks the change.
    public var column: String
    /// The value written (compared as text: a JSON string, or a number's digits).
    public var value: String
    /// How many distinct rows must have been seen.
    public var rows: Int

    /// Creates an expectation.
    public init(table: String, column: String, value: String, rows: Int) {
        self.table = table
        self.column = column
        self.value = value
        self.rows = rows
    }
}

/// The parts of a `200` answer of `GET /v1/pull` a storm device reads: the cursor,
/// `has_more`, and the upserted rows of each table (docs/PROTOCOL.md, "Pull").
public struct PullPage {
    /// The cursor to pull from next.
    public var cursor: String
    /// Whether to pull again at once.
    public var hasMore: Bool
    /// Upserted rows by table.
    private var upserts: [String: [[String: Any]]] = [:]

    /// Reads an answer; throws when it has no `changes` object or no `cursor`.
    public init(_ body: some Collection<UInt8>) throws {
        guard let object = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let changes = object["changes"] as? [String: Any], let cursor = object["cursor"] as? String
        else { throw PullPageError("pull answer without changes or cursor") }
        self.cursor = cursor
        hasMore = object["has_more"] as? Bool ?? false
        for (table, change) in changes {
            upserts[table] = (change as? [String: Any])?["upserts"] as? [[String: Any]] ?? []
        }
    }

    /// The `id`s (as text) of the upserted rows of `expected.table` whose `expected.column` is `expected.value`.
    public func keys(matching expected: ExpectedChange) -> [String] {
        (upserts[expected.table] ?? []).compactMap { row in
            guard let value = row[expected.column].flatMap(Self.text), value == expected.value else { return nil }
            return row["id"].flatMap(Self.text)
        }
    }

    /// A JSON scalar as text: a string as it is, a number's digits; nil for anything else.
    static func text(_ value: Any) -> String? {
        if let string = value as? String { return string }
        if let number = value as? NSNumber { return number.stringValue }
        return nil
    }
}

/// A pull answer a storm device could not read.
public struct PullPageError: Error, CustomStringConvertible {
    /// What was wrong.
    public let description: String
    init(_ description: String) { self.description = description }
}
