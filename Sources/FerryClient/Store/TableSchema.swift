import Foundation

/// A synced table as `GET /v1/schema` describes it: what the local store mirrors.
public struct TableSchema: Sendable, Hashable, Codable {
    /// How the server merges writes to a table (docs/TABLES.md).
    public enum Strategy: String, Sendable, Hashable, Codable {
        case lww
        case insertOnly = "insert_only"
        case set
        case deviceLock = "device_lock"
        case readonly, shared

        /// Whether clients may push to tables of this strategy.
        public var isWritable: Bool { self != .readonly && self != .shared }
    }

    /// A column and its PostgreSQL type (`format_type`), e.g. `text`, `integer`, `jsonb`, `text[]`.
    public struct Column: Sendable, Hashable, Codable {
        public var name: String
        public var type: String {
            didSet { kind = ColumnKind(postgresType: type) }
        }

        /// How the local store keeps this column's values: read from `type` once, as every
        /// local write and read asks for it.
        private(set) var kind: ColumnKind

        public init(name: String, type: String) {
            self.name = name
            self.type = type
            kind = ColumnKind(postgresType: type)
        }

        private enum CodingKeys: String, CodingKey { case name, type }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                name: try container.decode(String.self, forKey: .name),
                type: try container.decode(String.self, forKey: .type))
        }
    }

    /// The bare table name, as push and pull name it.
    public var name: String
    /// The strategy it was registered with.
    public var strategy: Strategy
    /// The primary key's columns.
    public var key: [String]
    /// The owner column (`user_id` in the examples), nil for a `shared` table.
    public var owner: String?
    /// Every column a client sees, in table order (`updated_at` among them).
    public var columns: [Column]

    /// The column named `name`.
    func column(_ name: String) -> Column? { columns.first { $0.name == name } }
}

/// How a column's values are stored in SQLite and read back as JSON.
enum ColumnKind: Sendable, Hashable {
    /// `smallint`, `integer`, `bigint`: SQLite INTEGER.
    case integer
    /// `real`, `double precision`, `numeric`: SQLite REAL.
    case real
    /// `boolean`: SQLite INTEGER 0 or 1.
    case boolean
    /// `json`, `jsonb` and arrays: the JSON text, read back as JSON.
    case json
    /// Everything else (text, uuid, dates and times as RFC 3339 text): SQLite TEXT.
    case text

    init(postgresType: String) {
        let type = postgresType.lowercased()
        if type.hasSuffix("[]") || type == "json" || type == "jsonb" {
            self = .json
        } else if ["smallint", "integer", "bigint"].contains(type) {
            self = .integer
        } else if type == "real" || type == "double precision" || type.hasPrefix("numeric") {
            self = .real
        } else if type == "boolean" {
            self = .boolean
        } else {
            self = .text
        }
    }

    /// The SQLite type a local column is declared with (its affinity).
    var declaration: String {
        switch self {
        case .integer, .boolean: "INTEGER"
        case .real: "REAL"
        case .json, .text: "TEXT"
        }
    }

    /// `value` as this column stores it.
    func sqlValue(_ value: JSONValue) -> SQLValue {
        switch (self, value) {
        case (_, .null): .null
        case (.json, _): .text(value.jsonText)
        case (.integer, .integer(let integer)): .integer(integer)
        case (.integer, .string(let string)): Int64(string).map(SQLValue.integer) ?? .text(string)
        case (.real, .integer(let integer)): .real(Double(integer))
        case (.real, .double(let double)), (.integer, .double(let double)): .real(double)
        case (.real, .string(let string)): Double(string).map(SQLValue.real) ?? .text(string)
        case (.boolean, .bool(let bool)): .integer(bool ? 1 : 0)
        case (_, .string(let string)): .text(string)
        case (_, .bool(let bool)): self == .text ? .text(bool ? "true" : "false") : .integer(bool ? 1 : 0)
        case (_, .integer(let integer)): self == .text ? .text(String(integer)) : .integer(integer)
        case (_, .double(let double)): self == .text ? .text(value.jsonText) : .real(double)
        case (_, .array), (_, .object): .text(value.jsonText)
        }
    }

    /// A stored value read back as JSON.
    func jsonValue(_ value: SQLValue) -> JSONValue {
        switch (self, value) {
        case (_, .null): .null
        case (.boolean, .integer(let integer)): .bool(integer != 0)
        case (.json, .text(let text)): (try? JSONValue(json: Data(text.utf8))) ?? .string(text)
        case (_, .integer(let integer)): .integer(integer)
        case (_, .real(let real)): .double(real)
        case (_, .text(let text)): .string(text)
        case (_, .blob(let data)): .string(data.base64EncodedString())
        }
    }
}
